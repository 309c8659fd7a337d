"""minidb's RESP listener against Debian's redis-server, with the same redis-benchmark matrix,
judged against issue 18's goals.

The servers and their durability policies are ``bench/_peers.py``'s: redis-server with
``--appendonly yes --appendfsync P --save ''`` against ``minidb serve --fsync P``, fresh data
dirs, for P in always, everysec and no. Two more peers run the same matrix in the same
policies, interleaved with the others: ``asyncio`` and ``uvloop``, a naive RESP server
(``bench/_naive_resp.py``: a ``Protocol``, a dict, one write per read, a per-turn group commit)
on stock asyncio and on uvloop. They are the ceiling of CPython on this machine: what a server
without minidb's data owner, admission control, timeouts, metrics and log format reaches, so
the table shows how far each Redis ratio is from what Python can do at all.

If this minidb has no ``--fsync`` flag, only the ``always`` row is run, since minidb's default
syncs every group, and the table says so. Each cell is ``redis-benchmark -t set,get -n N -c 50
-P depth --csv`` (depths 1 and 16); per policy the servers run interleaved for ``--rounds``
rounds, each round in a rotated order (Redis, minidb, asyncio, uvloop; then minidb, asyncio,
uvloop, Redis; ...), and the median is printed with the ratio to Redis (each run's figures
go to stderr as they come, for a run cut short), plus WAL appends per fdatasync from minidb's
/metrics. ``MINIDB_PURE_PYTHON`` is unset for the servers, and the
table's header names the C accelerators the minidb server had loaded.

The goals block at the end takes each of the issue's goals, its cells' ratios and MET or NOT
MET (a goal over "GET" or "SET" holds in every policy run; "durable" is ``always``). The
throughput goals ask for ``-n 100000`` or more and ``-c 50``; with other settings the verdicts
are printed but marked as not the goals' setting. The instructions goal (at most 2x Redis's
instructions per request at ``-P 16``) is judged from ``bench/instructions.py``'s callgrind
counts: ``--instructions`` runs only those, ``--all`` the matrix and then those.

``--tests lpush,lrange_100`` runs other tests of redis-benchmark than ``set,get``, and
``--default-tests`` its whole default list (no ``-t``: PING, SET, GET, INCR, LPUSH, RPUSH,
LPOP, RPOP, SADD, HSET, SPOP, ZADD, ZPOPMIN, LRANGE_100..600, MSET; redis and minidb only, as
the naive servers hold strings only). Each test beyond SET and GET is judged against the string
goal of its kind (issue 19): a read (PING, GET, LRANGE_*) against GET's, a write against SET's,
at the same depth; the per-test block prints its ratio, its goal and MET or NOT MET.

Run (build the C accelerators first: ``python setup.py build_ext --inplace``)::

    PYTHONPATH=src python bench/vs_redis.py                 # -n 100000 -c 50, 3 rounds
    PYTHONPATH=src python bench/vs_redis.py --instructions  # callgrind, fsync no
    PYTHONPATH=src python bench/vs_redis.py --all           # both, one goals block
    PYTHONPATH=src python bench/vs_redis.py --default-tests --policies no
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass

import instructions
from _peers import (
    PEERS,
    POLICIES,
    accelerators_line,
    machine,
    minidb_has_fsync,
    start_peer,
    unset_pure_python,
)

DEPTHS = (1, 16)
TESTS = ("SET", "GET")
READS = ("PING_INLINE", "PING_MBULK", "GET", "LRANGE_100", "LRANGE_300", "LRANGE_500",
         "LRANGE_600")  # fmt: skip
"""The tests judged against GET's goal; every other test writes and is judged against SET's."""
PRELOAD = "LPUSH (needed to benchmark LRANGE)"
"""redis-benchmark's fill before the LRANGE tests: a second LPUSH row, not a test of its own."""
BENCH_TIMEOUT_S = 600.0
"""One redis-benchmark run of two tests; a run of more gets this per two of them."""
DEFAULT_LIST_TESTS = 19
"""redis-benchmark 7.0's default list, counted for its timeout (LRANGE's fill included)."""
GOAL_REQUESTS = 100_000
GOAL_CLIENTS = 50
INSTRUCTIONS_GOAL = 2.0  # minidb's instructions per request at -P 16, at most this x Redis's

SYNCS = {"everysec": "(1 sync/s)", "no": "(no syncs)"}  # appends/sync where it means nothing
Cell = tuple[str, int, str]  # (policy, depth, test)


@dataclass(frozen=True)
class Goal:
    """minidb / Redis in requests/s at ``depth`` for ``test``, at least ``at_least`` in each
    of ``policies``."""

    depth: int
    test: str
    at_least: float
    policies: tuple[str, ...] = POLICIES
    durable: bool = False

    def label(self) -> str:
        return f"-P {self.depth:<2} {'durable ' if self.durable else ''}{self.test}"


GOALS = (
    Goal(1, "GET", 0.9),
    Goal(1, "SET", 0.9),
    Goal(1, "SET", 1.0, ("always",), durable=True),
    Goal(16, "GET", 0.6),
    Goal(16, "SET", 0.5),
    Goal(16, "SET", 0.6, ("always",), durable=True),
)


@dataclass
class Matrix:
    """Requests/s per round by cell and server, and minidb's WAL appends per sync."""

    requests: int
    clients: int
    rounds: int
    peers: list[str]
    with_fsync: bool
    results: dict[Cell, dict[str, list[float]]]
    per_sync: dict[tuple[str, int], list[float]]
    accelerators: list[str]
    tests: str | None = "set,get"
    """redis-benchmark's ``-t`` (None: its default list)."""

    def median(self, cell: Cell, server: str) -> float:
        return statistics.median(self.results[cell][server])

    def ratio(self, cell: Cell, server: str = "minidb") -> float:
        return self.median(cell, server) / self.median(cell, "redis")


def run_benchmark(port: int, depth: int, requests: int, clients: int,
                  tests: str | None = "set,get") -> dict[str, float]:  # fmt: skip
    """Requests/s by test (``LRANGE_100``, not its description) of one redis-benchmark run of
    ``tests`` (``-t``; None: its default list)."""
    selection = ["-t", tests] if tests else []
    count = len(tests.split(",")) if tests else DEFAULT_LIST_TESTS
    done = subprocess.run(
        ["redis-benchmark", "-p", str(port), *selection, "-n", str(requests),
         "-c", str(clients), "-P", str(depth), "--csv"],
        capture_output=True, text=True, timeout=BENCH_TIMEOUT_S * max(1, count / 2), check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"redis-benchmark failed: {done.stderr or done.stdout}")
    rows = list(csv.reader(io.StringIO(done.stdout)))
    return {row[0].split()[0]: float(row[1]) for row in rows[1:] if row and row[0] != PRELOAD}


def test_goal(test: str, depth: int) -> Goal:
    """The string goal a test of redis-benchmark is judged by: GET's for a read, SET's for a
    write, at ``depth`` (not the durable ones: those are SET's alone)."""
    kind = "GET" if test in READS else "SET"
    return next(g for g in GOALS if (g.depth, g.test, g.durable) == (depth, kind, False))


def run_matrix(peers: list[str], policies: list[str], rounds: int, requests: int,
               clients: int, with_fsync: bool,
               tests: str | None = "set,get") -> Matrix:  # fmt: skip
    matrix = Matrix(requests, clients, rounds, peers, with_fsync, {}, {}, [], tests)
    for policy in policies:
        for round_ in range(rounds):
            turn = round_ % len(peers)
            for name in peers[turn:] + peers[:turn]:
                peer = start_peer(name, policy, with_fsync)
                try:
                    for depth in DEPTHS:
                        before = peer.wal_figures() if peer.metrics_port else (0.0, 0.0)
                        for test, rps in run_benchmark(peer.port, depth, requests, clients,
                                                       tests).items():  # fmt: skip
                            matrix.results.setdefault((policy, depth, test), {}).setdefault(
                                name, []).append(rps)  # fmt: skip
                        print(f"# {policy} round {round_ + 1} {name} -P {depth}: " + " ".join(
                            f"{test}={runs[-1]:.0f}" for (p, d, test), by in matrix.results.items()
                            if (p, d) == (policy, depth) and (runs := by.get(name))
                        ), file=sys.stderr, flush=True)  # fmt: skip
                        if peer.metrics_port:
                            after = peer.wal_figures()
                            syncs = after[1] - before[1]
                            ratio = (after[0] - before[0]) / syncs if syncs else float("nan")
                            matrix.per_sync.setdefault((policy, depth), []).append(ratio)
                    if name == "minidb" and not matrix.accelerators:
                        matrix.accelerators = peer.accelerators()
                finally:
                    peer.stop()
    return matrix


def print_matrix(matrix: Matrix) -> None:
    selection = f"-t {matrix.tests}" if matrix.tests else "(default tests)"
    print(f"# redis-benchmark {selection} -n {matrix.requests} -c {matrix.clients}; median of "
          f"{matrix.rounds} interleaved rounds, requests/s")  # fmt: skip
    print(accelerators_line(matrix.accelerators))
    if not matrix.with_fsync:
        print("# this minidb has no --fsync flag: its default (sync every group) vs "
              "appendfsync always only")
    naive = matrix.peers[2:]
    print(f"{'policy':<9} {'depth':>5} {'test':<11} {'redis':>10} {'minidb':>10} {'ratio':>6}"
          + "".join(f" {n:>9} {n[:5] + '/r':>7}" for n in naive)
          + f" {'appends/sync':>12}")  # fmt: skip
    for cell in sorted(matrix.results):
        policy, depth, test = cell
        appends = (f"{statistics.median(matrix.per_sync[policy, depth]):.1f}"
                   if policy == "always" else SYNCS[policy])  # fmt: skip
        others = "".join(f" {matrix.median(cell, n):>9.0f} {matrix.ratio(cell, n):>7.2f}"
                         for n in naive)  # fmt: skip
        print(f"{policy:<9} {depth:>5} {test:<11} {matrix.median(cell, 'redis'):>10.0f} "
              f"{matrix.median(cell, 'minidb'):>10.0f} {matrix.ratio(cell):>6.2f}{others} "
              f"{appends:>12}")  # fmt: skip


def throughput_verdicts(matrix: Matrix | None) -> list[tuple[str, str, str]]:
    """(goal, measured, verdict) for each throughput goal."""
    rows = []
    caveats = []
    if matrix is not None:
        if matrix.requests < GOAL_REQUESTS:
            caveats.append(f"-n {matrix.requests} < {GOAL_REQUESTS}")
        if matrix.clients != GOAL_CLIENTS:
            caveats.append(f"-c {matrix.clients}, not {GOAL_CLIENTS}")
        if not matrix.with_fsync:
            caveats.append("minidb without --fsync")
    for goal in GOALS:
        label = f"{goal.label()} >= {goal.at_least:.1f}x Redis"
        if matrix is None:
            rows.append((label, "not run (--instructions: the counts only)", "-"))
            continue
        cells = [(p, goal.depth, goal.test) for p in goal.policies]
        ratios = {cell[0]: matrix.ratio(cell) for cell in cells if cell in matrix.results}
        measured = "  ".join(f"{p} {r:.2f}" for p, r in ratios.items())
        absent = [p for p in goal.policies if p not in ratios]
        if not ratios:
            rows.append((label, f"not run (policy {', '.join(absent)})", "-"))
            continue
        met = all(r >= goal.at_least for r in ratios.values())
        verdict = "MET" if met else "NOT MET"
        notes = caveats + ([f"{', '.join(absent)} not run"] if absent else [])
        if notes:
            verdict += f" (not the goals' setting: {'; '.join(notes)})"
        rows.append((label, measured, verdict))
    return rows


def per_test_verdicts(matrix: Matrix) -> list[tuple[str, str, str]]:
    """(test and its goal, measured, verdict) for each test beyond SET and GET, per policy."""
    rows = []
    for policy, depth, test in sorted(matrix.results):
        if test in TESTS:
            continue  # the goals block judges them, durable goals included
        goal = test_goal(test, depth)
        ratio = matrix.ratio((policy, depth, test))
        label = f"-P {depth:<2} {test} >= {goal.at_least:.1f}x Redis (as {goal.test})"
        verdict = "MET" if ratio >= goal.at_least else "NOT MET"
        rows.append((label, f"{policy} {ratio:.2f}", verdict))
    return rows


def print_per_test(rows: list[tuple[str, str, str]]) -> None:
    print("\n# per test (issue 19): a read against GET's goal, a write against SET's")
    width = max(len(goal) for goal, _, _ in rows)
    for goal, measured, verdict in rows:
        print(f"{goal:<{width}}  {measured:<12}  {verdict}")


def instruction_verdicts(counts: instructions.Counts | None) -> list[tuple[str, str, str]]:
    """(goal, measured, verdict) for the instructions goal, GET and SET."""
    rows = []
    for test in ("GET", "SET"):
        label = f"-P 16 {test} instructions <= {INSTRUCTIONS_GOAL:.1f}x Redis"
        if counts is None:
            rows.append((label, "not run (--instructions or --all)", "-"))
            continue
        ratio = counts.ratio("minidb", 16, test)
        minidb, redis = (counts.per_request[s, 16, test] for s in ("minidb", "redis"))
        measured = f"{ratio:.2f}x ({minidb:,.0f} vs {redis:,.0f}, fsync {counts.policy})"
        rows.append((label, measured, "MET" if ratio <= INSTRUCTIONS_GOAL else "NOT MET"))
    return rows


def print_goals(rows: list[tuple[str, str, str]]) -> None:
    print("\n# goals (issue 18): minidb against Redis in the same fsync policy")
    width = max(len(goal) for goal, _, _ in rows)
    measured_width = max(len(measured) for _, measured, _ in rows)
    for goal, measured, verdict in rows:
        print(f"{goal:<{width}}  {measured:<{measured_width}}  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=GOAL_REQUESTS)
    parser.add_argument("--clients", type=int, default=GOAL_CLIENTS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--peers", default=",".join(PEERS),
                        help="servers to run (redis and minidb always)")  # fmt: skip
    tests = parser.add_mutually_exclusive_group()
    tests.add_argument("--tests", default="set,get",
                       help="redis-benchmark's -t (default set,get)")  # fmt: skip
    tests.add_argument("--default-tests", action="store_true",
                       help="redis-benchmark's default list (no -t): redis and minidb")  # fmt: skip
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--instructions", action="store_true",
                      help="only the callgrind counts of bench/instructions.py")  # fmt: skip
    mode.add_argument("--all", action="store_true", help="the matrix, then the callgrind counts")
    parser.add_argument("--instructions-policy", default="no", choices=POLICIES)
    parser.add_argument("--instructions-requests-16", type=int, default=20_000)
    parser.add_argument("--instructions-requests-1", type=int, default=5_000)
    args = parser.parse_args()
    peers = ["redis", "minidb", *(p for p in args.peers.split(",") if p not in ("redis", "minidb"))]
    selection = None if args.default_tests else args.tests
    if selection != "set,get" and peers[2:]:
        print(f"# the naive servers hold strings only: {', '.join(peers[2:])} left out")
        peers = peers[:2]
    if "uvloop" in peers:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            print("# uvloop is not installed (pip install '.[bench]'): its column is left out")
            peers.remove("uvloop")
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (Debian: redis-server, redis-tools)")
    if unset_pure_python():
        print("# MINIDB_PURE_PYTHON was set: unset for the servers (the goals are the C path's)")
    print(f"# {machine()}")
    matrix = counts = None
    if not args.instructions:
        with_fsync = minidb_has_fsync()
        policies = args.policies.split(",") if with_fsync else ["always"]
        matrix = run_matrix(peers, policies, args.rounds, args.requests, args.clients,
                            with_fsync, selection)  # fmt: skip
        print_matrix(matrix)
        if per_test := per_test_verdicts(matrix):
            print_per_test(per_test)
    if args.instructions or args.all:
        if matrix is not None:
            print()
        requests = {16: args.instructions_requests_16, 1: args.instructions_requests_1}
        counts = instructions.measure(
            [p for p in peers if p != "uvloop"], args.instructions_policy, requests
        )
        instructions.print_counts(counts, goal=INSTRUCTIONS_GOAL)
    print_goals(throughput_verdicts(matrix) + instruction_verdicts(counts))


if __name__ == "__main__":
    main()
