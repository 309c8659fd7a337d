"""The servers ``bench/vs_redis.py`` and ``bench/instructions.py`` compare, started one way.

Each starts on a free port with a fresh data dir, in one of the durability policies:

=============  ==========================================  =================================
policy         redis-server                                minidb serve
=============  ==========================================  =================================
always         ``--appendonly yes --appendfsync always``   ``--fsync always`` (the default)
everysec       ``--appendonly yes --appendfsync everysec`` ``--fsync everysec``
no             ``--appendonly yes --appendfsync no``       ``--fsync no``
=============  ==========================================  =================================

(``--save ''`` for Redis throughout: no RDB snapshots.) ``asyncio`` and ``uvloop`` are the
naive RESP server of ``bench/_naive_resp.py`` in the same policy. minidb is
``sys.executable -m minidb serve`` as ``bench/_serverproc.py`` starts it (``PYTHONPATH`` says
which tree), with a metrics listener for the WAL figures. ``wrapper`` puts a command in front
of any of them (``valgrind --tool=callgrind ...``).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

POLICIES = ("always", "everysec", "no")
PEERS = ("redis", "minidb", "asyncio", "uvloop")
START_TIMEOUT_S = 30.0
NAIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_naive_resp.py")
PURE_PYTHON_ENV = "MINIDB_PURE_PYTHON"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Peer:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    data_dir: tempfile.TemporaryDirectory[str]
    metrics_port: int | None = None

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (each server's clean shutdown), SIGKILL after ``timeout`` seconds."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.data_dir.cleanup()

    def wal_figures(self) -> tuple[float, float]:
        """(appends, syncs) from minidb's /metrics."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        appends = float(re.search(r"^minidb_wal_appends_total (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
        syncs = float(re.search(r"^minidb_wal_syncs_total (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
        return appends, syncs

    def accelerators(self) -> list[str]:
        """minidb's C extension modules mapped into the process now (under valgrind too)."""
        maps = Path(f"/proc/{self.proc.pid}/maps").read_text().splitlines()
        # A file rebuilt in the tree while the server runs stays mapped, shown as
        # "<path> (deleted)": it is still loaded (the build before the rebuild).
        paths = (line.removesuffix(" (deleted)").split()[-1] for line in maps)
        return sorted({module for path in paths if (module := _minidb_extension(path))})


def _minidb_extension(path: str) -> str | None:
    """``minidb.protocol._cresp`` for ``.../src/minidb/protocol/_cresp.cpython-311-....so``."""
    parts = path.split("/")
    if not path.endswith(".so") or "minidb" not in parts:
        return None
    top = len(parts) - 1 - parts[::-1].index("minidb")
    return ".".join([*parts[top:-1], parts[-1].split(".")[0]])


def built_accelerators() -> list[str]:
    """minidb's C extension modules built in the tree this process imports minidb from."""
    import importlib.util

    spec = importlib.util.find_spec("minidb")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(next(iter(spec.submodule_search_locations)))
    return sorted(filter(None, (_minidb_extension(str(p)) for p in root.rglob("*.so"))))


def accelerators_line(loaded: list[str]) -> str:
    """The header line naming the C accelerators a minidb server had loaded (and any built
    that it had not: ``MINIDB_PURE_PYTHON``, a stale build, a module not imported yet)."""
    missing = [m for m in built_accelerators() if m not in loaded]
    return (f"# minidb's accelerators loaded in the server: {', '.join(loaded) or 'NONE'}"
            + (f" (built but not loaded: {', '.join(missing)})" if missing else ""))  # fmt: skip


def machine() -> str:
    """The system, CPUs, Python and redis-server version, for a header line."""
    model = "unknown CPU"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    redis = subprocess.run([shutil.which("redis-server") or "redis-server", "--version"],
                           capture_output=True, text=True, check=False).stdout.split()  # fmt: skip
    version = next((w[2:] for w in redis if w.startswith("v=")), "?")
    return (f"{os.uname().sysname} {os.uname().machine}, {os.cpu_count()} CPUs ({model}), "
            f"Python {sys.version.split()[0]}, redis-server {version}")  # fmt: skip


def unset_pure_python() -> bool:
    """Drop ``MINIDB_PURE_PYTHON`` from the environment the servers inherit; True if it was set."""
    return os.environ.pop(PURE_PYTHON_ENV, None) is not None


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("server did not start in time")


def _popen(command: list[str], wrapper: Sequence[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*wrapper, *command],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def start_redis(policy: str, wrapper: Sequence[str] = (), timeout: float = START_TIMEOUT_S,
                appendonly: bool = True) -> Peer:  # fmt: skip
    """redis-server in ``policy``; without ``appendonly``, no persistence at all (no AOF and
    its buffers: ``bench/memory.py`` weighs the data alone)."""
    data = tempfile.TemporaryDirectory(prefix="vs-redis-")
    port = free_port()
    args = ["--port", str(port), "--bind", "127.0.0.1", "--dir", data.name, "--save", "",
            "--appendonly", "yes" if appendonly else "no", "--appendfsync", policy,
            "--daemonize", "no"]  # fmt: skip
    proc = _popen([shutil.which("redis-server") or "redis-server", *args], wrapper)
    wait_port(port, proc, timeout)
    return Peer("redis", proc, port, data)


def start_naive(policy: str, flavour: str, wrapper: Sequence[str] = (),
                timeout: float = START_TIMEOUT_S) -> Peer:  # fmt: skip
    data = tempfile.TemporaryDirectory(prefix=f"vs-{flavour}-")
    port = free_port()
    proc = _popen([sys.executable, NAIVE, str(port), data.name, policy, flavour], wrapper)
    wait_port(port, proc, timeout)
    return Peer(flavour, proc, port, data)


def minidb_has_fsync() -> bool:
    command = [sys.executable, "-m", "minidb", "serve", "--help"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    return "--fsync" in done.stdout


def start_minidb(policy: str, with_fsync: bool = True, wrapper: Sequence[str] = (),
                 timeout: float = START_TIMEOUT_S) -> Peer:  # fmt: skip
    data = tempfile.TemporaryDirectory(prefix="vs-minidb-")
    port, metrics = free_port(), free_port()
    args = ["serve", "--port", "0", "--resp-port", str(port), "--metrics-port", str(metrics),
            "--data-dir", data.name]  # fmt: skip
    if with_fsync:
        args += ["--fsync", policy]
    proc = _popen([sys.executable, "-m", "minidb", *args], wrapper)
    wait_port(port, proc, timeout)
    wait_port(metrics, proc, timeout)  # it may open after the RESP listener on a loaded machine
    return Peer("minidb", proc, port, data, metrics)


def start_peer(name: str, policy: str, with_fsync: bool = True, wrapper: Sequence[str] = (),
               timeout: float = START_TIMEOUT_S) -> Peer:  # fmt: skip
    if name == "redis":
        return start_redis(policy, wrapper, timeout)
    if name == "minidb":
        return start_minidb(policy, with_fsync, wrapper, timeout)
    return start_naive(policy, name, wrapper, timeout)
