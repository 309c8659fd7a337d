"""Fixtures for black-box server tests: a ``minidb serve`` subprocess and line-socket clients.

``serve(*args, env=...)`` starts ``python -m minidb serve --port 0 --data-dir <tmp> ...``,
reads the ``minidb listening on HOST:PORT (line)`` line to learn the port, and returns a
``ServerProcess``; every process is killed at teardown. The WAL tests reuse it: ``kill()``
sends SIGKILL, and ``serve(data_dir=same_dir)`` restarts on the same data dir. ``launcher``
replaces ``-m minidb`` (e.g. ``["-c", script]`` to run the CLI inside a prepared process) and
``preexec_fn`` runs in the child before it starts (e.g. to lower its resource limits).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.server.test_connection import RecordingLoop

STARTUP_TIMEOUT_S = 10.0
"""How long a test waits for the server to print its listening lines."""
IO_TIMEOUT_S = 5.0
"""How long a test client waits on a socket before failing the test."""

_LISTENING = re.compile(r"^minidb listening on (\S+):(\d+) \((\w+)\)$")


class LineClient:
    """A blocking line-protocol client with a deadline on every socket call."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = IO_TIMEOUT_S):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self._buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_line(self) -> bytes:
        while b"\n" not in self._buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def request(self, line: str | bytes) -> str:
        raw = line.encode() if isinstance(line, str) else line
        self.send(raw + b"\n")
        return self.read_line().decode()

    def pipeline(self, lines: list[str]) -> list[str]:
        self.send("".join(line + "\n" for line in lines).encode())
        return [self.read_line().decode() for _ in lines]

    def at_eof(self) -> bool:
        """True if the server closed the connection (waits up to the socket timeout)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def non_reader(port: int, payload: bytes) -> socket.socket:
    """A client that sends ``payload`` and never reads (a small receive buffer, so the
    kernel holds little of what the server sends it)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(IO_TIMEOUT_S)
    sock.connect(("127.0.0.1", port))
    sock.sendall(payload)
    return sock


def rss_bytes(server: ServerProcess, field: str = "VmRSS") -> int:
    """The server's resident set size now (``VmHWM``: its peak so far)."""
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field}")


def rss_peak_bytes(server: ServerProcess) -> int:
    """The server's peak resident set size so far (the kernel's high-water mark)."""
    return rss_bytes(server, "VmHWM")


def rss_when_settled(server: ServerProcess, seconds: float = 3.0) -> int:
    """RSS once it stopped growing for 0.5 s (or after ``seconds``)."""
    deadline = time.monotonic() + seconds
    last, stable_since = rss_bytes(server), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = rss_bytes(server)
        if now != last:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since >= 0.5:
            break
    return last


@dataclass
class ServerProcess:
    """A running ``minidb serve`` subprocess."""

    proc: subprocess.Popen[str]
    port: int
    data_dir: Path
    metrics_port: int | None = None
    resp_port: int | None = None
    clients: list[LineClient] = field(default_factory=list)

    def client(self) -> LineClient:
        conn = LineClient(self.port)
        self.clients.append(conn)
        return conn

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=IO_TIMEOUT_S)

    def wait(self, timeout: float = IO_TIMEOUT_S) -> int:
        return self.proc.wait(timeout=timeout)

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


ServeFactory = Callable[..., ServerProcess]


@pytest.fixture
def loop() -> Iterator[RecordingLoop]:
    """A loop that records what a connection schedules (``test_connection.RecordingLoop``),
    closed after the test."""
    loop = RecordingLoop()
    yield loop
    loop.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeFactory]:
    """Start ``minidb serve`` subprocesses on port 0; all are killed at teardown."""
    started: list[ServerProcess] = []

    def start(
        *args: str,
        data_dir: Path | None = None,
        env: dict[str, str] | None = None,
        launcher: tuple[str, ...] = ("-m", "minidb"),
        preexec_fn: Callable[[], None] | None = None,
    ) -> ServerProcess:
        data = data_dir if data_dir is not None else tmp_path / "data"
        command = [sys.executable, *launcher, "serve", "--port", "0", "--data-dir", str(data)]
        full_env = {**os.environ, **(env or {})}
        proc = subprocess.Popen(
            [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=full_env, preexec_fn=preexec_fn,
        )
        ports: dict[str, int] = {}
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        assert proc.stdout is not None
        want = {"line"} | {name for flag, name in (("--metrics-port", "metrics"),
                                                   ("--resp-port", "resp")) if flag in args}
        while set(ports) != want:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail("server did not print its listening lines in time")
            line = proc.stdout.readline()
            if not line:
                proc.wait(timeout=IO_TIMEOUT_S)
                pytest.fail(f"server exited {proc.returncode}: {proc.stderr.read()}")  # type: ignore[union-attr]
            match = _LISTENING.match(line.strip())
            if match:
                ports[match.group(3)] = int(match.group(2))
        server = ServerProcess(proc, ports["line"], data, ports.get("metrics"), ports.get("resp"))
        started.append(server)
        return server

    yield start
    for server in started:
        for conn in server.clients:
            conn.close()
        if server.proc.poll() is None:
            server.proc.kill()
        server.proc.wait(timeout=IO_TIMEOUT_S)
        for stream in (server.proc.stdout, server.proc.stderr):
            if stream is not None:
                stream.close()
