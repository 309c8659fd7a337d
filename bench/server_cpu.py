"""Where a request's time goes: each server's user and system CPU per request beside its
throughput, for one redis-benchmark test.

The servers and their policies are ``bench/_peers.py``'s, started as ``bench/vs_redis.py``
starts them, and run interleaved for ``--rounds`` rounds (each round in a rotated order). Each
run is ``redis-benchmark -t TEST -n N -c 50 -P depth``; the server's CPU is read from
``/proc/PID/stat`` (``utime`` and ``stime``, every thread of the process) before and after it.
Per server, the medians: requests/s, user and system microseconds per request, the wall time
per request, how busy the server was (its CPU over the run's wall time; a server that
waits for its fdatasync, or for its clients, is less than 100% busy), and the requests per
flush of the disk that holds its data directory (the flush requests the block device completed
over the run, from ``/sys/dev/block/MAJ:MIN/stat``, Linux 5.5 and later): with ``--fsync
always`` / ``appendfsync always`` each fdatasync is one flush on this machine's disk, so that
column is the group commit's size for Redis too, which has no counter of its own (other
processes' flushes in the same seconds count too; on an idle machine they are few).

Why: under ``--fsync always`` at ``-P 1`` (the durable SET goal of issue 18) the kernel's
share (the sockets' reads and writes, the log's write and fdatasync) is the same for every
server, so the difference between two servers' wall time per request is about the
difference of their user CPU per request: this shows how much of it there is to win.

    PYTHONPATH=src python bench/server_cpu.py                      # SET -P 1 under always
    PYTHONPATH=src python bench/server_cpu.py --policy no --test get --depth 16
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass, field

from _peers import PEERS, POLICIES, machine, start_peer, unset_pure_python
from vs_redis import GOAL_CLIENTS, GOAL_REQUESTS, run_benchmark

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def disk_flushes(path: str) -> int | None:
    """Flush requests completed so far by the block device holding ``path``, or None where
    the kernel does not count them (before 5.5) or there is no such device (tmpfs)."""
    device = os.stat(path).st_dev
    try:
        with open(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}/stat") as stat:
            fields = stat.read().split()
    except OSError:
        return None
    return int(fields[15]) if len(fields) > 15 else None


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process ``pid`` so far, all its threads."""
    with open(f"/proc/{pid}/stat") as stat:
        # The command name (field 2) may hold spaces: count from after its ")".
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS_PER_S, int(fields[12]) / TICKS_PER_S


@dataclass
class Runs:
    """One server's runs: requests/s, and user, system and wall seconds per request."""

    rps: list[float] = field(default_factory=list)
    user: list[float] = field(default_factory=list)
    system: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    per_flush: list[float] = field(default_factory=list)
    """Requests per disk flush, where the disk counts them."""

    def row(self, name: str, redis: Runs | None) -> str:
        rps, user, system, wall = (statistics.median(v) for v in
                                   (self.rps, self.user, self.system, self.wall))  # fmt: skip
        ratio = f"{rps / statistics.median(redis.rps):>6.2f}" if redis else f"{'-':>6}"
        flush = f"{statistics.median(self.per_flush):>9.1f}" if self.per_flush else f"{'-':>9}"
        return (f"{name:<8} {rps:>10.0f} {ratio} {user * 1e6:>10.2f} {system * 1e6:>10.2f} "
                f"{wall * 1e6:>9.2f} {100 * (user + system) / wall:>5.0f}% {flush}")  # fmt: skip


def measure(peers: list[str], policy: str, test: str, depth: int, rounds: int,
            requests: int, clients: int) -> dict[str, Runs]:  # fmt: skip
    runs = {name: Runs() for name in peers}
    for round_ in range(rounds):
        turn = round_ % len(peers)
        for name in peers[turn:] + peers[:turn]:
            peer = start_peer(name, policy)
            try:
                pid = peer.proc.pid
                flushes0 = disk_flushes(peer.data_dir.name)
                user0, system0 = cpu_seconds(pid)
                started = time.monotonic()
                rps = run_benchmark(peer.port, depth, requests, clients, test)[test.upper()]
                seconds = time.monotonic() - started
                user1, system1 = cpu_seconds(pid)
                flushes1 = disk_flushes(peer.data_dir.name)
            finally:
                peer.stop()
            run = runs[name]
            run.rps.append(rps)
            run.user.append((user1 - user0) / requests)
            run.system.append((system1 - system0) / requests)
            run.wall.append(seconds / requests)
            if flushes0 is not None and flushes1 is not None and flushes1 > flushes0:
                run.per_flush.append(requests / (flushes1 - flushes0))
            print(f"# round {round_ + 1} {name}: {rps:.0f}/s, user {run.user[-1] * 1e6:.2f} us, "
                  f"system {run.system[-1] * 1e6:.2f} us per request", flush=True)  # fmt: skip
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", default="always", choices=POLICIES)
    parser.add_argument("--test", default="set", help="one redis-benchmark test (-t)")
    parser.add_argument("--depth", type=int, default=1, help="redis-benchmark's -P")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=GOAL_REQUESTS)
    parser.add_argument("--clients", type=int, default=GOAL_CLIENTS)
    parser.add_argument("--peers", default="redis,minidb",
                        help=f"servers to run, of {','.join(PEERS)} (redis and minidb always)")
    args = parser.parse_args()
    if "," in args.test:
        raise SystemExit("--test takes one test: its CPU is the whole run's")
    peers = ["redis", "minidb", *(p for p in args.peers.split(",") if p not in ("redis", "minidb"))]
    if unset_pure_python():
        print("# MINIDB_PURE_PYTHON was set: unset for the servers")
    print(f"# {machine()}")
    runs = measure(peers, args.policy, args.test, args.depth, args.rounds, args.requests,
                   args.clients)  # fmt: skip
    print(f"# redis-benchmark -t {args.test} -n {args.requests} -c {args.clients} -P "
          f"{args.depth}, policy {args.policy}; medians of {args.rounds} interleaved rounds; "
          f"CPU from /proc/PID/stat (every thread), per request")  # fmt: skip
    print(f"{'server':<8} {'req/s':>10} {'/redis':>6} {'user us':>10} {'system us':>10} "
          f"{'wall us':>9} {'busy':>6} {'per flush':>9}")  # fmt: skip
    for name in peers:
        print(runs[name].row(name, runs["redis"] if name != "redis" else None))


if __name__ == "__main__":
    main()
