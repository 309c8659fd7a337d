"""One supervised child process of ``minidb up``: spawned tied to us, read, stopped.

Theory of operation. "No child outlives ``minidb up``" has three cases, one mechanism each:

* a graceful stop (SIGINT/SIGTERM to ``up``): ``stop()`` sends SIGTERM to the child's process
  group, waits ``grace_s`` for it to exit, then SIGKILLs the group;
* ``up`` exits any other way but by SIGKILL (an exception, a failed start): the same ``stop()``
  runs in the supervisor's ``finally``;
* ``up`` is SIGKILLed or crashes hard, so no code of ours runs: the kernel sends the child
  ``DEATH_SIGNAL`` (``prctl(PR_SET_PDEATHSIG)``, Linux), which it handles as a graceful stop.

Each child gets its own session (``start_new_session``): Ctrl-C in the terminal then reaches
only ``up``, which stops the children in order (the API before the server it writes to) rather
than all at once. PDEATHSIG fires when the *thread* that forked the child exits, so children
are spawned from the main thread only. Between ``fork`` and ``prctl`` the parent may already
have died; the child checks ``getppid()`` after arming and exits if it has been re-parented.

The child's stdout is read by one thread: the ``minidb listening on HOST:PORT (KIND)`` lines
go to a queue that ``wait_listening`` reads with a deadline; later lines are passed through to
our stdout, so the pipe never fills. stderr (logs) is inherited.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

from minidb.errors import MinidbError

DEATH_SIGNAL: Final = signal.SIGTERM
"""What the kernel sends a child when ``up`` dies: a graceful stop (the server syncs and
closes, the API's worker releases its lease); the server's own grace bounds how long it takes."""
PR_SET_PDEATHSIG: Final = 1
"""From <linux/prctl.h>."""
POLL_S: Final = 0.1
"""How often a wait re-checks whether to give up (a stop was asked, the child exited)."""

_LISTENING = re.compile(r"^minidb listening on (\S+):(\d+) \((\w+)\)$")


class ChildError(MinidbError):
    """A child did not start as expected; ``name`` says which, ``status`` its exit status."""

    def __init__(self, message: str, *, name: str, status: int | None = None) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.status = status


def _arm_death_signal(parent_pid: int) -> Callable[[], None]:
    """The ``preexec_fn`` that ties a child's life to ``parent_pid`` (Linux; no-op elsewhere)."""

    def arm() -> None:
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before the signal was armed
            os._exit(1)

    return arm


class Child:
    """A child process started by ``Child.spawn``; ``listening`` its addresses by kind."""

    def __init__(self, name: str, proc: subprocess.Popen[str]) -> None:
        self.name = name
        self.proc = proc
        self.listening: dict[str, tuple[str, int]] = {}
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True)
        self._reader.start()

    @classmethod
    def spawn(cls, name: str, argv: Sequence[str]) -> Child:
        """Start ``argv`` as a child tied to this process (see the module docstring)."""
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
            start_new_session=True, preexec_fn=_arm_death_signal(os.getpid()),
        )
        return cls(name, proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if _LISTENING.match(line.strip()):
                self._lines.put(line.strip())
            else:
                sys.stdout.write(line)
                sys.stdout.flush()
        self._lines.put(None)

    def wait_listening(
        self, kinds: set[str], deadline: float, stopping: threading.Event
    ) -> dict[str, tuple[str, int]]:
        """Read the child's listening lines until every kind in ``kinds`` is there.

        Raises ``ChildError`` if the child exits first or ``deadline`` (``time.monotonic()``)
        passes; returns early (with what it has) once ``stopping`` is set.
        """
        while not kinds <= set(self.listening):
            if stopping.is_set():
                break
            if time.monotonic() > deadline:
                raise ChildError("did not print its listening lines in time", name=self.name)
            try:
                line = self._lines.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if line is None:
                status = self.proc.wait()
                raise ChildError(f"exited with status {status} while starting",
                                 name=self.name, status=status)
            match = _LISTENING.match(line)
            assert match is not None
            self.listening[match.group(3)] = (match.group(1), int(match.group(2)))
        return self.listening

    def exited(self) -> int | None:
        """The exit status if the child has exited, else None."""
        return self.proc.poll()

    def stop(self, grace_s: float) -> int:
        """SIGTERM the child's group, SIGKILL it after ``grace_s``; the child's exit status."""
        self._signal_group(signal.SIGTERM)
        try:
            status = self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            status = self.proc.wait()
        # Anything the child left in its group (it starts none today) goes with it.
        self._signal_group(signal.SIGKILL)
        self._reader.join(timeout=1.0)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return status

    def _signal_group(self, signum: signal.Signals) -> None:
        # The group id is the child's pid (its own session); once the group is empty the
        # kernel answers ESRCH, which is what "already gone" means here.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)
