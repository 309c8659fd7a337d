"""Start a ``minidb serve`` subprocess from a given source tree (for before/after runs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Served:
    proc: subprocess.Popen[str]
    port: int
    data_dir: tempfile.TemporaryDirectory[str]

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.data_dir.cleanup()


def serve(src: str | None, *args: str) -> Served:
    """``minidb serve --port 0`` on a fresh data dir, importing minidb from ``src`` (default:
    whatever ``PYTHONPATH`` says)."""
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
    match = re.search(r":(\d+) \(line\)", proc.stdout.readline())
    if not match:
        proc.kill()
        raise SystemExit("server did not start")
    return Served(proc, int(match.group(1)), data_dir)
