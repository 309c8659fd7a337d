"""The two servers a job queue's suite is pointed at: ``minidb serve`` and a real ``redis-server``.

Each is a context manager yielding the RESP port on 127.0.0.1; the process is killed on exit
(whatever the suite left running). minidb runs as the issue says, ``--resp-port 0 --fsync
always`` on a fresh data dir; redis-server without persistence on a free port (port 0 turns
its TCP listener off, so a free port is picked first).
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests._listening import LineReader

STARTUP_TIMEOUT_S = 20.0
"""How long a server may take to listen (the machine is shared: be generous)."""
STOP_TIMEOUT_S = 10.0
PR_SET_PDEATHSIG = 1
"""prctl(2)'s option: the signal a child gets when its parent dies."""


@contextmanager
def minidb_server(data_dir: Path) -> Iterator[int]:
    """``minidb serve --resp-port 0 --fsync always``; its RESP port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "minidb", "serve", "--port", "0", "--resp-port", "0",
         "--fsync", "always", "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, preexec_fn=die_with_parent,
    )  # fmt: skip
    try:
        found = LineReader(proc).listening({"resp"}, STARTUP_TIMEOUT_S)
        yield found["resp"][1]
    finally:
        _stop(proc)


@contextmanager
def redis_server(directory: Path) -> Iterator[int]:
    """A ``redis-server`` without persistence; its port."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(directory)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent,
    )  # fmt: skip
    try:
        _wait_for_port(proc, port)
        yield port
    finally:
        _stop(proc)


def die_with_parent() -> None:
    """``preexec_fn``: the child is killed when the process that started it dies, so a test
    run stopped by SIGTERM or pytest-timeout leaves no server or suite behind (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the context managers still clean up
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(proc: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server not listening on {port} in time") from None
            time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=STOP_TIMEOUT_S)
