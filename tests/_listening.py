"""Reading a child's ``minidb listening on HOST:PORT (KIND)`` lines with a real deadline.

A thread reads the child's stdout into a queue, so a child that hangs without printing fails
the test at the deadline instead of blocking ``readline`` forever. The thread keeps draining
after the lines are found, so the child never blocks on a full pipe.
"""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time

LISTENING = re.compile(r"^minidb listening on (\S+):(\d+) \((\w+)\)$")


class LineReader:
    """Every stdout line of ``proc``, in order, to ``next_line(deadline)``."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.seen: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def next_line(self, deadline: float) -> str | None:
        """The next line; None at end of output; ``TimeoutError`` past ``deadline``."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no line in time; seen {self.seen}")
        try:
            line = self._lines.get(timeout=left)
        except queue.Empty:
            raise TimeoutError(f"no line in time; seen {self.seen}") from None
        if line is not None:
            self.seen.append(line)
        return line

    def until(self, done: str | re.Pattern[str], timeout: float) -> str:
        """Lines until one matching ``done`` (a prefix or a pattern); that line."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.next_line(deadline)
            if line is None:
                raise EOFError(f"output ended before {done!r}; seen {self.seen}")
            if (line.startswith(done) if isinstance(done, str) else done.match(line)):
                return line

    def listening(self, kinds: set[str], timeout: float) -> dict[str, tuple[str, int]]:
        """The addresses of the listeners of ``kinds``, from the child's listening lines."""
        deadline = time.monotonic() + timeout
        found: dict[str, tuple[str, int]] = {}
        while not kinds <= set(found):
            line = self.next_line(deadline)
            if line is None:
                raise EOFError(f"output ended before {kinds - set(found)}; seen {self.seen}")
            match = LISTENING.match(line)
            if match:
                found[match.group(3)] = (match.group(1), int(match.group(2)))
        return found
