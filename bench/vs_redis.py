"""minidb's RESP listener against Debian's redis-server, with the same redis-benchmark matrix.

Both servers start on free ports with fresh data dirs, in matching durability policies:

=============  ==========================================  =================================
policy         redis-server                                minidb serve
=============  ==========================================  =================================
always         ``--appendonly yes --appendfsync always``   ``--fsync always`` (the default)
everysec       ``--appendonly yes --appendfsync everysec`` ``--fsync everysec``
no             ``--appendonly yes --appendfsync no``       ``--fsync no``
=============  ==========================================  =================================

(``--save ''`` for Redis throughout: no RDB snapshots.) Two more peers run the same matrix
in the same policies, interleaved with the others: ``asyncio`` and ``uvloop``, a naive RESP
server (``bench/_naive_resp.py``: a ``Protocol``, a dict, one write per read, a per-turn group
commit) on stock asyncio and on uvloop. They are the ceiling of CPython on this machine: what
a server without minidb's data owner, admission control, timeouts, metrics and log format
reaches, so the table shows how far each Redis ratio is from what Python can do at all.

If this minidb has no ``--fsync`` flag, only the ``always`` row is run, since minidb's default
syncs every group, and the table says so. Each cell is ``redis-benchmark -t set,get -n N -c 50
-P depth --csv``; the servers are run interleaved (Redis, minidb, asyncio, uvloop, Redis ...)
for ``--rounds`` rounds and the median is printed with the ratio to Redis, plus WAL appends per
fdatasync from minidb's /metrics.

Run: ``PYTHONPATH=src python bench/vs_redis.py [--requests 100000] [--rounds 3]`` (build the C
accelerators first: ``python setup.py build_ext --inplace``).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass

POLICIES = ("always", "everysec", "no")
DEPTHS = (1, 16)
TESTS = ("SET", "GET")
CLIENTS = 50
START_TIMEOUT_S = 30.0
BENCH_TIMEOUT_S = 300.0


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

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
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


def wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("server did not start in time")


def start_redis(policy: str) -> Peer:
    data = tempfile.TemporaryDirectory(prefix="vs-redis-")
    port = free_port()
    args = ["--port", str(port), "--bind", "127.0.0.1", "--dir", data.name, "--save", "",
            "--appendonly", "yes", "--appendfsync", policy, "--daemonize", "no"]  # fmt: skip
    proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    wait_port(port, proc)
    return Peer("redis", proc, port, data)


NAIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_naive_resp.py")
PEERS = ("redis", "minidb", "asyncio", "uvloop")


def start_naive(policy: str, flavour: str) -> Peer:
    data = tempfile.TemporaryDirectory(prefix=f"vs-{flavour}-")
    port = free_port()
    proc = subprocess.Popen([sys.executable, NAIVE, str(port), data.name, policy, flavour],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    wait_port(port, proc)
    return Peer(flavour, proc, port, data)


def start_peer(name: str, policy: str, with_fsync: bool) -> Peer:
    if name == "redis":
        return start_redis(policy)
    if name == "minidb":
        return start_minidb(policy, with_fsync)
    return start_naive(policy, name)


def minidb_has_fsync() -> bool:
    command = [sys.executable, "-m", "minidb", "serve", "--help"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    return "--fsync" in done.stdout


def start_minidb(policy: str, with_fsync: bool) -> Peer:
    data = tempfile.TemporaryDirectory(prefix="vs-minidb-")
    port, metrics = free_port(), free_port()
    args = ["serve", "--port", "0", "--resp-port", str(port), "--metrics-port", str(metrics),
            "--data-dir", data.name]  # fmt: skip
    if with_fsync:
        args += ["--fsync", policy]
    proc = subprocess.Popen([sys.executable, "-m", "minidb", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    wait_port(port, proc)
    wait_port(metrics, proc)  # it may open after the RESP listener on a loaded machine
    return Peer("minidb", proc, port, data, metrics)


def run_benchmark(port: int, depth: int, requests: int) -> dict[str, float]:
    done = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", "set,get", "-n", str(requests),
         "-c", str(CLIENTS), "-P", str(depth), "--csv"],
        capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"redis-benchmark failed: {done.stderr or done.stdout}")
    rows = list(csv.reader(io.StringIO(done.stdout)))
    return {row[0]: float(row[1]) for row in rows[1:] if row and row[0] in TESTS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--peers", default=",".join(PEERS),
                        help="servers to run (redis and minidb always)")  # fmt: skip
    args = parser.parse_args()
    peers = ["redis", "minidb", *(p for p in args.peers.split(",") if p not in ("redis", "minidb"))]
    if "uvloop" in peers:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            print("# uvloop is not installed (pip install '.[bench]'): its column is left out")
            peers.remove("uvloop")
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (Debian: redis-server, redis-tools)")
    with_fsync = minidb_has_fsync()
    policies = args.policies.split(",") if with_fsync else ["always"]
    # (policy, depth, test) -> server -> [requests/s per round]
    results: dict[tuple[str, int, str], dict[str, list[float]]] = {}
    per_sync: dict[tuple[str, int], list[float]] = {}
    for policy in policies:
        for _ in range(args.rounds):
            for name in peers:
                peer = start_peer(name, policy, with_fsync)
                try:
                    for depth in DEPTHS:
                        before = peer.wal_figures() if peer.metrics_port else (0.0, 0.0)
                        for test, rps in run_benchmark(peer.port, depth, args.requests).items():
                            results.setdefault((policy, depth, test), {}).setdefault(
                                name, []).append(rps)  # fmt: skip
                        if peer.metrics_port:
                            after = peer.wal_figures()
                            syncs = after[1] - before[1]
                            ratio = (after[0] - before[0]) / syncs if syncs else float("nan")
                            per_sync.setdefault((policy, depth), []).append(ratio)
                finally:
                    peer.stop()
    print(f"# {os.uname().sysname} {os.uname().machine}, {os.cpu_count()} CPUs, "
          f"Python {sys.version.split()[0]}; redis-benchmark -t set,get -n {args.requests} "
          f"-c {CLIENTS}; median of {args.rounds} interleaved rounds, requests/s")  # fmt: skip
    if not with_fsync:
        print("# this minidb has no --fsync flag: its default (sync every group) vs "
              "appendfsync always only")
    naive = peers[2:]
    print(f"{'policy':<9} {'depth':>5} {'test':<4} {'redis':>10} {'minidb':>10} {'ratio':>6}"
          + "".join(f" {n:>9} {n[:5] + '/r':>7}" for n in naive)
          + f" {'appends/sync':>12}")  # fmt: skip
    for (policy, depth, test), by in sorted(results.items()):
        redis_rps = statistics.median(by["redis"])
        minidb_rps = statistics.median(by["minidb"])
        appends = statistics.median(per_sync.get((policy, depth), [float("nan")]))
        others = "".join(
            f" {statistics.median(by[n]):>9.0f} {statistics.median(by[n]) / redis_rps:>7.2f}"
            for n in naive
        )
        print(f"{policy:<9} {depth:>5} {test:<4} {redis_rps:>10.0f} {minidb_rps:>10.0f} "
              f"{minidb_rps / redis_rps:>6.2f}{others} {appends:>12.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
