"""Issue 18's "no crash, no leak (RSS flat over 10M requests)": a soak of minidb's C data path.

``minidb serve`` is started as ``bench/_peers.py`` starts it (RESP port, fresh data dir,
``--fsync no`` unless ``--policy`` says otherwise, ``MINIDB_PURE_PYTHON`` unset), and
redis-benchmark drives ``--requests`` requests at it in 20 rounds. Each round is
``-t set,get,incr,mset -P 16 -c 50`` (commands the plain C path runs) and then a run of
``-P 1`` SETs and GETs (a tenth of the round: the loop turn's group and the inline read, the
owner idle), all over ``-r 100000`` random keys, so the store
reaches its steady size early and any later growth is a leak.

A thread reads the server's VmRSS from ``/proc/PID/status`` every second; each sample is
placed at a request count by interpolating between the ends of the redis-benchmark runs.
Printed: RSS after the warm-up (the first 1M requests), at the end and at its max, the
least-squares slope in MB per million requests over the second half, the total, and a
verdict: flat if the second half grew (slope x its length) by less than 2 MB, and the
server still alive.

Run (build the C accelerators first: ``python setup.py build_ext --inplace``)::

    PYTHONPATH=src python bench/rss_soak.py                     # 10M requests, fsync no
    PYTHONPATH=src python bench/rss_soak.py --requests 1000000  # a quick check
"""

from __future__ import annotations

import argparse
import bisect
import shutil
import subprocess
import threading
import time

from _peers import POLICIES, accelerators_line, machine, start_minidb, unset_pure_python
from _serverproc import rss_of

ROUNDS = 20
P1_SHARE = 0.1  # of each round's requests, as -P 1 SETs and GETs
PIPELINED = ("set", "get", "incr", "mset")
UNPIPELINED = ("set", "get")
WARMUP = 1_000_000
FLAT_MB = 2.0
MB = 1024 * 1024


def benchmark(port: int, tests: str, requests: int, depth: int, keyspace: int) -> None:
    done = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", tests, "-n", str(requests), "-c", "50",
         "-P", str(depth), "-r", str(keyspace), "-q"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0 or "error" in (done.stdout + done.stderr).lower():
        raise SystemExit(f"redis-benchmark failed: {done.stderr or done.stdout}")


class Sampler(threading.Thread):
    """(time, VmRSS in bytes) of ``pid`` every ``interval`` seconds until stopped."""

    def __init__(self, pid: int, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, int]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while True:
            self.samples.append((time.monotonic(), rss_of(self.pid)))
            if self.stopped.wait(self.interval):
                return


def at_requests(t: float, marks: list[tuple[float, int]]) -> float:
    """The request count at time ``t``, interpolated between (time, requests done) marks."""
    i = bisect.bisect_right(marks, (t, float("inf")))
    if i == 0:
        return 0.0
    if i == len(marks):
        return float(marks[-1][1])
    (t0, n0), (t1, n1) = marks[i - 1], marks[i]
    return n0 + (n1 - n0) * (t - t0) / (t1 - t0)


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares dy/dx."""
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def soak(policy: str, requests: int, keyspace: int) -> None:
    per_round = requests // ROUNDS
    p1 = int(per_round * P1_SHARE) // len(UNPIPELINED)
    each = (per_round - p1 * len(UNPIPELINED)) // len(PIPELINED)
    peer = start_minidb(policy)
    sampler = Sampler(peer.proc.pid)
    sampler.start()
    marks, done, started = [(time.monotonic(), 0)], 0, time.monotonic()
    try:
        for _ in range(ROUNDS):
            runs = ((",".join(PIPELINED), each, 16), (",".join(UNPIPELINED), p1, 1))
            for tests, n, depth in runs:
                benchmark(peer.port, tests, n, depth, keyspace)
                done += n * len(tests.split(","))
                marks.append((time.monotonic(), done))
                if peer.proc.poll() is not None:
                    raise SystemExit(f"CRASH: the server exited {peer.proc.returncode}")
        loaded = peer.accelerators()
    finally:
        sampler.stopped.set()
        sampler.join()
        alive = peer.proc.poll() is None
        peer.stop()
    elapsed = time.monotonic() - started
    points = [(at_requests(t, marks) / 1e6, rss / MB) for t, rss in sampler.samples]
    warmup = min(WARMUP, requests // 10) / 1e6
    after_warmup = next(rss for m, rss in points if m >= warmup)
    second_half = [(m, rss) for m, rss in points if m >= done / 2e6]
    per_million = slope(second_half)
    growth = per_million * done / 2e6
    flat = growth < FLAT_MB and alive

    print(f"# {machine()}")
    print(accelerators_line(loaded))
    print(f"# minidb serve --fsync {policy}; {ROUNDS} rounds of redis-benchmark "
          f"-t {','.join(PIPELINED)} -n {each} -P 16 and -t {','.join(UNPIPELINED)} -n {p1} -P 1; "
          f"-c 50 -r {keyspace}")  # fmt: skip
    print(f"requests                {done:,} in {elapsed:.0f} s ({done / elapsed:,.0f}/s), "
          f"{len(points)} RSS samples")  # fmt: skip
    print(f"RSS after warm-up       {after_warmup:.1f} MB (first {warmup:g}M requests)")
    print(f"RSS at the end          {points[-1][1]:.1f} MB")
    print(f"RSS max                 {max(rss for _, rss in points):.1f} MB")
    print(f"second-half slope       {per_million:+.3f} MB per million requests "
          f"({growth:+.2f} MB over {done / 2e6:g}M)")  # fmt: skip
    print(f"verdict                 {'FLAT' if flat else 'NOT FLAT'}: "
          f"{'server alive' if alive else 'SERVER DIED'}, second-half growth "
          f"{growth:+.2f} MB ({'<' if growth < FLAT_MB else '>='} {FLAT_MB:g} MB)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=10_000_000)
    parser.add_argument("--policy", default="no", choices=POLICIES)
    parser.add_argument("--keyspace", type=int, default=100_000)
    args = parser.parse_args()
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (Debian: redis-server, redis-tools)")
    if unset_pure_python():
        print("# MINIDB_PURE_PYTHON was set: unset for the server (the soak is the C path's)")
    soak(args.policy, args.requests, args.keyspace)


if __name__ == "__main__":
    main()
