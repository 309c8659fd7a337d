"""A server that can be killed -9 and restarted on the same port and data: minidb or Redis.

The worker under test keeps the address it was given, so the restarted server must listen on
the same port: a free port is chosen first and passed explicitly (``--resp-port N`` to minidb,
``--port N`` to redis-server). minidb runs as the issue says, ``--fsync always``; Redis with
its nearest equivalent, ``--appendonly yes --appendfsync always`` (no RDB snapshots), so an
acknowledged write survives the kill on both.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests._listening import LineReader
from tests.compat.queues._servers import die_with_parent, free_port

STARTUP_TIMEOUT_S = 30.0
"""How long a (re)started server may take to listen; minidb replays its WAL first."""
STOP_TIMEOUT_S = 10.0
PORT_RETRY_S = 0.05
"""Between connection attempts while a server starts."""


class KillableServer:
    """One server process at a time on ``port`` over ``directory``; ``kill9_and_restart``."""

    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[str] | None = None
        self.restarts = 0

    def command(self) -> list[str]:
        if self.kind == "minidb":
            return [sys.executable, "-m", "minidb", "serve", "--port", "0",
                    "--resp-port", str(self.port), "--fsync", "always",
                    "--data-dir", str(self.directory / "data")]  # fmt: skip
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        return [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "yes", "--appendfsync", "always",
                "--dir", str(self.directory)]  # fmt: skip

    def start(self) -> None:
        log = open(self.directory / f"{self.kind}-{self.restarts}.log", "w")  # noqa: SIM115
        with log:
            self.proc = subprocess.Popen(
                self.command(), stdout=subprocess.PIPE if self.kind == "minidb" else log,
                stderr=log, text=True, preexec_fn=die_with_parent,
            )  # fmt: skip
        if self.kind == "minidb":
            LineReader(self.proc).listening({"resp"}, STARTUP_TIMEOUT_S)
        self._wait_accepting()

    def kill9_and_restart(self) -> float:
        """SIGKILL, wait for the exit, start again on the same port; seconds it was down."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.kill()
        self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.restarts += 1
        self.start()
        return time.monotonic() - started

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(timeout=STOP_TIMEOUT_S)

    def _wait_accepting(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited {self.proc.returncode} "
                                   f"(port {self.port} taken?)")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1.0).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.kind} not accepting on {self.port}") from None
                time.sleep(PORT_RETRY_S)


@contextmanager
def killable_server(kind: str, directory: Path) -> Iterator[KillableServer]:
    server = KillableServer(kind, directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
