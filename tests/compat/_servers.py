"""The two servers a compat suite is run against: a real ``redis-server`` and ``minidb serve``.

Both are subprocesses on 127.0.0.1 that a context manager starts, waits for (with a deadline)
and kills. The library's suite learns its URL, ``redis://127.0.0.1:<port>/0``; running it first
against ``redis-server`` tells which of its tests a correct server passes.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests._listening import LineReader

STARTUP_TIMEOUT_S = 15.0
"""How long a server may take to accept connections (minidb imports its C twins first)."""
STOP_TIMEOUT_S = 10.0
"""How long a killed server may take to exit."""

def redis_server_binary() -> str | None:
    """Debian's ``redis-server``, or None when it is not installed."""
    return shutil.which("redis-server")


def free_port() -> int:
    """A TCP port nobody listens on now (``redis-server`` cannot be told port 0)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def redis_server() -> Iterator[int]:
    """A throwaway ``redis-server`` (no RDB, no AOF) on a free port; yields the port."""
    binary = redis_server_binary()
    if binary is None:
        raise FileNotFoundError("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="compat-redis-") as directory:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", directory],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait_accepting(proc, port)
            yield port
        finally:
            _stop(proc)


@contextmanager
def minidb_server(*extra_args: str) -> Iterator[int]:
    """``minidb serve --resp-port 0`` on a fresh data dir; yields the RESP port."""
    with tempfile.TemporaryDirectory(prefix="compat-minidb-") as directory:
        command = [sys.executable, "-m", "minidb", "serve", "--port", "0", "--resp-port", "0",
                   "--data-dir", str(Path(directory) / "data"), *extra_args]
        log_path = Path(directory) / "stderr.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            # LineReader keeps draining stdout, so the server never blocks on a full pipe.
            try:
                port = LineReader(proc).listening({"resp"}, STARTUP_TIMEOUT_S)["resp"][1]
            except (EOFError, TimeoutError) as failed:
                tail = log_path.read_text()[-2000:]
                raise RuntimeError(f"minidb serve did not start: {failed}\n{tail}") from None
            yield port
        finally:
            _stop(proc)


def _wait_accepting(proc: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode} (port {port} taken?)")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"redis-server not accepting on {port} in time") from None
            time.sleep(0.05)


def _stop(proc: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=STOP_TIMEOUT_S)
    if proc.stdout is not None:
        proc.stdout.close()
