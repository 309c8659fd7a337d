"""The servers the compat suites run against: a real ``redis-server`` and ``minidb serve``.

One mechanism for all of them (``ServerProcess``): a subprocess on 127.0.0.1 over a directory,
started and waited for with a deadline, killed on exit whatever the suite left running, and
able to be killed -9 and started again on the same port and data (the worker suites: a worker
keeps the address it was given). What the suites differ in is a parameter: the directory
(their own, or a throwaway one) and the server's options, durability above all:

- the redis-py suite runs minidb as it ships (``fsync`` by default) and Redis without
  persistence, to learn which of its tests a correct server passes;
- the job-queue suites run minidb as their issue says, ``MINIDB_DURABLE`` (``--fsync
  always``), and Redis without persistence;
- the worker suites kill the server mid-run, so both are durable: minidb ``--fsync always``,
  Redis its nearest equivalent, ``REDIS_DURABLE`` (``--appendonly yes --appendfsync always``,
  no RDB snapshots), and an acknowledged write survives the kill on both.

minidb is started with ``--resp-port 0`` and says its port on stdout (``LineReader``); a
restart asks for that same port again. ``redis-server`` cannot be told port 0 (it turns its
TCP listener off), so a free port is picked first. Each start writes the server's stderr to
``<kind>-<n>.log`` in the directory, whose tail a server that does not come up is reported
with.
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from tests._listening import LineReader

STARTUP_TIMEOUT_S = 30.0
"""How long a (re)started server may take to accept connections: minidb imports its C twins
and replays its WAL first, and the machine may be shared."""
STOP_TIMEOUT_S = 10.0
"""How long a killed server may take to exit."""
PORT_RETRY_S = 0.05
"""Between connection attempts while a server starts."""
LOG_TAIL_CHARS = 2000
"""How much of a failed server's stderr its error carries."""
PR_SET_PDEATHSIG = 1
"""prctl(2)'s option: the signal a child gets when its parent dies."""

MINIDB_DURABLE = ("--fsync", "always")
"""minidb as the queue and worker issues run it: each acknowledged write is on disk."""
REDIS_EPHEMERAL = ("--appendonly", "no")
"""Redis without persistence (``--save ""`` is always given: no RDB snapshots)."""
REDIS_DURABLE = ("--appendonly", "yes", "--appendfsync", "always")
"""Redis's nearest equivalent of ``MINIDB_DURABLE``."""
DURABLE = {"minidb": MINIDB_DURABLE, "redis": REDIS_DURABLE}
"""Each kind's durable options, for a suite that kills the server."""


def die_with_parent() -> None:
    """``preexec_fn``: the child is killed when the process that started it dies, so a test
    run stopped by SIGTERM or pytest-timeout leaves no server or suite behind (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the context managers still clean up
        pass


def free_port() -> int:
    """A TCP port nobody listens on now (for ``redis-server``, which cannot be told port 0)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServerProcess:
    """One ``kind`` server ("minidb" or "redis") process at a time over ``directory``, with
    ``options`` added to its command line; ``port`` is its RESP port once started."""

    def __init__(self, kind: str, directory: Path, options: Sequence[str] = ()) -> None:
        if kind not in ("minidb", "redis"):
            raise ValueError(f"no such server kind: {kind!r}")
        self.kind = kind
        self.directory = directory
        self.options = tuple(options)
        self.port = 0 if kind == "minidb" else free_port()
        self.proc: subprocess.Popen[str] | None = None
        self.restarts = 0

    def command(self) -> list[str]:
        if self.kind == "minidb":
            return [sys.executable, "-m", "minidb", "serve", "--port", "0",
                    "--resp-port", str(self.port), "--data-dir", str(self.directory / "data"),
                    *self.options]  # fmt: skip
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server is not installed (apt-get install redis-server)")
        return [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--dir", str(self.directory), *self.options]  # fmt: skip

    def start(self) -> None:
        """Start the server and wait until it accepts connections on ``port``."""
        log_path = self.directory / f"{self.kind}-{self.restarts}.log"
        with open(log_path, "w") as log:
            # minidb says its port on stdout, which LineReader keeps draining, so the server
            # never blocks on a full pipe; Redis's goes to the log with its stderr.
            self.proc = subprocess.Popen(
                self.command(), stdout=subprocess.PIPE if self.kind == "minidb" else log,
                stderr=log, text=True, preexec_fn=die_with_parent,
            )  # fmt: skip
        try:
            if self.kind == "minidb":
                found = LineReader(self.proc).listening({"resp"}, STARTUP_TIMEOUT_S)
                self.port = found["resp"][1]
            self._wait_accepting()
        except (EOFError, TimeoutError, RuntimeError) as failed:
            self.stop()
            tail = log_path.read_text()[-LOG_TAIL_CHARS:]
            raise RuntimeError(f"{self.kind} did not start: {failed}\n{tail}") from None

    def kill9_and_restart(self) -> float:
        """SIGKILL, wait for the exit, start again on the same port; seconds it was down."""
        started = time.monotonic()
        self.stop()
        self.restarts += 1
        self.start()
        return time.monotonic() - started

    def stop(self) -> None:
        """SIGKILL the server (if it still runs) and wait for it to exit."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)
        if proc.stdout is not None:
            proc.stdout.close()

    def _wait_accepting(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited {self.proc.returncode} "
                                   f"(port {self.port} taken?)")  # fmt: skip
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1.0).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.kind} not accepting on {self.port}") from None
                time.sleep(PORT_RETRY_S)


@contextmanager
def serving(
    kind: str, directory: Path | None = None, options: Sequence[str] = ()
) -> Iterator[ServerProcess]:
    """A started ``ServerProcess`` over ``directory`` (None: a throwaway one), killed on exit."""
    with ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="compat-")))
        server = ServerProcess(kind, directory, options)
        server.start()
        try:
            yield server
        finally:
            server.stop()


@contextmanager
def redis_server(
    directory: Path | None = None, options: Sequence[str] = REDIS_EPHEMERAL
) -> Iterator[int]:
    """A ``redis-server`` (by default without persistence); its port."""
    with serving("redis", directory, options) as server:
        yield server.port


@contextmanager
def minidb_server(directory: Path | None = None, options: Sequence[str] = ()) -> Iterator[int]:
    """``minidb serve --resp-port 0`` with its data in ``directory / "data"``; its RESP port."""
    with serving("minidb", directory, options) as server:
        yield server.port
