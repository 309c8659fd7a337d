"""Instructions per request in the server process, under callgrind: minidb beside redis-server.

Each server (``minidb serve`` with its C accelerators, redis-server, and the naive asyncio RESP
server of ``bench/_naive_resp.py``) is started by ``bench/_peers.py`` exactly as
``bench/vs_redis.py`` starts it, in one fsync policy (``--policy``, default ``no``: this
counts CPU, not the disk), but under ``valgrind --tool=callgrind``. ``callgrind_control`` then
zeroes the counters before each window and dumps them after it, so start-up and shutdown
never count:

1. warm-up, not counted: ``redis-benchmark -t set,get -n 1000`` at each depth (first-use
   costs: imports, caches, the key's first SET);
2. once the warm-up's connections are closed, the baseline, a window with no requests:
   ``--idle-seconds`` of nothing, the server's instructions per second when idle (its timers,
   Redis's cron);
3. per depth (16, then 1) SET then GET (so the GETs hit): ``redis-benchmark -t TEST -n N
   -c 50 -P depth``, and on until the server has closed its side of every connection (read
   from ``/proc/PID/net/tcp``), so that no window is charged for another's clients;
   instructions per request = (the window's Ir - idle rate x the window's seconds) / N.

Ir is callgrind's ``summary:`` of the dump: every thread of the server process, user space
only. A window includes what ``redis-benchmark`` itself makes the server do besides the
requests (its 50 connections opened and closed, the ``CONFIG GET`` probe), as the throughput
run does; that share shrinks as ``-n`` grows. The counts depend far less than requests/s on
what else runs on the machine (the idle rate and the timing of a loaded machine still move
them by a few per cent). valgrind makes the servers ~50x slower, hence the modest request
counts.

    PYTHONPATH=src python bench/instructions.py [--policy no] [--requests-16 20000]
        [--requests-1 5000] [--servers redis,minidb,asyncio]

``--servers`` also takes ``uvloop`` (the naive server on uvloop) and ``floor``: a protocol on
the runtime's loop that answers each command of a read with a constant reply, unparsed
(``bench/_naive_resp.py``). Its count is what the event loop's turn and the transport cost a
request in Python, which every asyncio server pays; what a server adds to it is its own.

``bench/vs_redis.py --instructions`` runs the same and judges the goal (minidb at most 2x
Redis's instructions per request at ``-P 16``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from _peers import Peer, accelerators_line, machine, start_peer, unset_pure_python

SERVERS = ("redis", "minidb", "asyncio")
DEPTHS = (16, 1)
TESTS = ("SET", "GET")
CLIENTS = 50
WARMUP_REQUESTS = 1000
START_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 300.0
BENCH_TIMEOUT_S = 3600.0
DUMP_TIMEOUT_S = 120.0
SETTLE_TIMEOUT_S = 300.0
SETTLE_S = 0.5


@dataclass
class Counts:
    """Instructions per request by (server, depth, test), and what else a reader needs."""

    policy: str
    requests: dict[int, int]  # depth -> requests per window
    per_request: dict[tuple[str, int, str], float]
    idle_per_second: dict[str, float]
    accelerators: list[str]

    def ratio(self, server: str, depth: int, test: str) -> float:
        """``server``'s instructions per request over Redis's."""
        return self.per_request[server, depth, test] / self.per_request["redis", depth, test]


class Callgrind:
    """Servers under callgrind, their output in one temporary directory."""

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="callgrind-")
        self.dumps: dict[int, int] = {}

    def wrapper(self) -> list[str]:
        return ["valgrind", "--tool=callgrind",
                f"--callgrind-out-file={self.dir.name}/callgrind.out.%p",
                f"--log-file={self.dir.name}/valgrind.%p.log"]  # fmt: skip

    def zero(self, pid: int) -> None:
        _control("--zero", pid)

    def dump(self, pid: int) -> int:
        """Dump the counters since the last zero (or dump) and return their Ir."""
        _control("--dump", pid)
        self.dumps[pid] = self.dumps.get(pid, 0) + 1
        path = Path(self.dir.name, f"callgrind.out.{pid}.{self.dumps[pid]}")
        deadline = time.monotonic() + DUMP_TIMEOUT_S
        while time.monotonic() < deadline:
            if path.exists():
                for line in path.read_text().splitlines():
                    if line.startswith("summary:"):
                        return int(line.split()[1])  # the first event, Ir
            time.sleep(0.1)
        raise SystemExit(f"no complete callgrind dump at {path}")

    def cleanup(self) -> None:
        self.dir.cleanup()


def _control(option: str, pid: int) -> None:
    done = subprocess.run(["callgrind_control", option, str(pid)], capture_output=True,
                          text=True, timeout=DUMP_TIMEOUT_S, check=False)  # fmt: skip
    if done.returncode != 0 or "OK." not in done.stdout:
        raise SystemExit(f"callgrind_control {option} {pid} failed: {done.stdout}{done.stderr}")


def redis_benchmark(port: int, tests: str, depth: int, requests: int) -> None:
    done = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", tests, "-n", str(requests),
         "-c", str(CLIENTS), "-P", str(depth), "--csv"],
        capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"redis-benchmark failed: {done.stderr or done.stdout}")


def wait_settled(port: int, pid: int) -> None:
    """Until the server has closed every connection to ``port`` (none ESTABLISHED or CLOSE_WAIT
    on its side), then a moment more: a window's clients are torn down inside the window."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        open_ = False
        for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
            for line in Path(table).read_text().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                open_ = open_ or (int(local.rsplit(":", 1)[1], 16) == port
                                  and state in ("01", "08"))  # fmt: skip
        if not open_:
            time.sleep(SETTLE_S)
            return
        time.sleep(0.1)
    raise SystemExit(f"the server on port {port} still holds connections after "
                     f"{SETTLE_TIMEOUT_S} s")  # fmt: skip


def count_one(
    peer: Peer, callgrind: Callgrind, requests: dict[int, int], idle_seconds: float
) -> tuple[dict[tuple[int, str], float], float]:
    """(instructions per request by (depth, test), idle instructions per second) of one server."""
    pid = peer.proc.pid
    for depth in DEPTHS:
        redis_benchmark(peer.port, "set,get", depth, WARMUP_REQUESTS)
    wait_settled(peer.port, pid)
    callgrind.zero(pid)
    started = time.monotonic()
    time.sleep(idle_seconds)
    idle = callgrind.dump(pid) / (time.monotonic() - started)
    per_request: dict[tuple[int, str], float] = {}
    for depth in DEPTHS:
        for test in TESTS:
            callgrind.zero(pid)
            started = time.monotonic()
            redis_benchmark(peer.port, test.lower(), depth, requests[depth])
            wait_settled(peer.port, pid)
            seconds = time.monotonic() - started
            window = callgrind.dump(pid)
            per_request[depth, test] = (window - idle * seconds) / requests[depth]
    return per_request, idle


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def measure(
    servers: list[str],
    policy: str,
    requests: dict[int, int],
    idle_seconds: float = 5.0,
    log: Callable[[str], None] = _progress,
) -> Counts:
    """Start each server under callgrind in turn, count, stop it cleanly."""
    for tool in ("valgrind", "callgrind_control", "redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (Debian: valgrind, redis-server, "
                             "redis-tools)")  # fmt: skip
    if "redis" not in servers:
        servers = ["redis", *servers]
    counts = Counts(policy, requests, {}, {}, [])
    callgrind = Callgrind()
    try:
        for name in servers:
            log(f"# callgrind: {name} ...")
            peer = start_peer(name, policy, wrapper=callgrind.wrapper(), timeout=START_TIMEOUT_S)
            try:
                per_request, counts.idle_per_second[name] = count_one(
                    peer, callgrind, requests, idle_seconds)  # fmt: skip
                if name == "minidb":
                    counts.accelerators = peer.accelerators()
            finally:
                peer.stop(timeout=STOP_TIMEOUT_S)
            for (depth, test), value in per_request.items():
                counts.per_request[name, depth, test] = value
    finally:
        callgrind.cleanup()
    return counts


def print_counts(counts: Counts, goal: float | None = None) -> None:
    """The table: instructions per request of each server, and each one's ratio to Redis."""
    servers = [s for s in dict.fromkeys(s for s, _, _ in counts.per_request) if s != "redis"]
    print(f"# valgrind --tool=callgrind, fsync policy {counts.policy}, redis-benchmark -c {CLIENTS}"
          f" -n {counts.requests[16]} at -P 16 and -n {counts.requests[1]} at -P 1; instructions"
          " per request in the server process, less its idle rate")  # fmt: skip
    if "minidb" in servers:
        print(accelerators_line(counts.accelerators))
    print(f"{'depth':>5} {'test':<4} {'redis':>9}"
          + "".join(f" {s:>9} {s[:6] + '/r':>8}" for s in servers)
          + (f" {'goal':>8}" if goal is not None and "minidb" in servers else ""))  # fmt: skip
    for depth in DEPTHS:
        for test in TESTS:
            redis = counts.per_request["redis", depth, test]
            row = f"{depth:>5} {test:<4} {redis:>9,.0f}"
            for server in servers:
                row += (f" {counts.per_request[server, depth, test]:>9,.0f}"
                        f" {counts.ratio(server, depth, test):>8.2f}")  # fmt: skip
            if goal is not None and "minidb" in servers and depth == 16:
                row += f" {'<= ' + format(goal, '.1f'):>8}"
            print(row)
    print("# idle instructions/s (the baseline): "
          + ", ".join(f"{s} {v:,.0f}" for s, v in counts.idle_per_second.items()))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", default="no", choices=("always", "everysec", "no"))
    parser.add_argument("--requests-16", type=int, default=20_000, help="per window at -P 16")
    parser.add_argument("--requests-1", type=int, default=5_000, help="per window at -P 1")
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--servers", default=",".join(SERVERS))
    args = parser.parse_args()
    if unset_pure_python():
        print("# MINIDB_PURE_PYTHON was set: unset for the servers")
    print(f"# {machine()}")
    counts = measure(args.servers.split(","), args.policy,
                     {16: args.requests_16, 1: args.requests_1}, args.idle_seconds)  # fmt: skip
    print_counts(counts, goal=2.0)


if __name__ == "__main__":
    main()
