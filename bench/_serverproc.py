"""Start a ``minidb serve`` subprocess from a given source tree (for before/after runs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


def rss_of(pid: int, field: str = "VmRSS") -> int:
    """A process's resident set size now (``VmHWM``: its peak so far), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field}")


@dataclass
class Served:
    proc: subprocess.Popen[str]
    port: int
    data_dir: tempfile.TemporaryDirectory[str]
    resp_port: int | None = None

    def rss_bytes(self, field: str = "VmRSS") -> int:
        return rss_of(self.proc.pid, field)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.data_dir.cleanup()


def serve(src: str | None, *args: str) -> Served:
    """``minidb serve --port 0`` on a fresh data dir, importing minidb from ``src`` (default:
    whatever ``PYTHONPATH`` says); with ``--resp-port`` among ``args``, its port too."""
    data_dir = tempfile.TemporaryDirectory(prefix="minidb-bench-")
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    proc = subprocess.Popen(
        [sys.executable, "-m", "minidb", "serve", "--port", "0", "--data-dir", data_dir.name,
         *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    assert proc.stdout is not None
    ports: dict[str, int] = {}
    want = {"line", "resp"} if "--resp-port" in args else {"line"}
    while set(ports) != want:
        match = re.search(r":(\d+) \((\w+)\)", proc.stdout.readline())
        if not match:
            proc.kill()
            raise SystemExit("server did not start")
        ports[match.group(2)] = int(match.group(1))
    return Served(proc, ports["line"], data_dir, ports.get("resp"))
