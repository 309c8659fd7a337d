"""What introspection costs: bench/timers.py's ``sleep`` workload with it off and on.

Each run is one cell of ``_timer_workloads.py`` (N concurrent ``asyncio.sleep`` tasks on the
wheel loop) in a fresh process, with ``MINIDB_INTROSPECTION`` set so the loop is built
instrumented (watchdog thread included): ``off``; ``loop`` (loop-wide figures and blocking
detection); ``tasks`` (per-task counters too). The modes alternate so that machine noise hits
them alike; the table gives the median of each and its overhead over ``off``. Issue 3's bar:
under 5 %. A second, in-process figure is the worst case: steps that do nothing.

    python bench/introspection.py                 # N = 100k, 5 runs each
    python bench/introspection.py --n 10000 --runs 3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _timer_workloads import Cell

CELL_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_timer_workloads.py")
CELL_TIMEOUT_S = 600.0
"""A cell taking longer than this (seconds) is reported as an error."""

EMPTY_TASKS = 1000
EMPTY_YIELDS = 100
"""The worst-case run: this many tasks each yielding this many times with nothing to do."""

OVERHEAD_BAR = 0.05
"""Issue 3: introspection may cost at most 5 % on the sleep workload."""


MODES = {"off": "0", "loop": "loop", "tasks": "1"}
"""Introspection modes by MINIDB_INTROSPECTION value: off, loop-wide only, per-task too."""


def run_cell(n: int, seed: int, mode: str) -> dict[str, Any]:
    """One sleep cell in a fresh interpreter, with introspection in ``mode``."""
    cell = Cell(loop="minidb", workload="sleep", n=n, resets=0, seed=seed, gc_enabled=True)
    env = dict(os.environ, MINIDB_INTROSPECTION=MODES[mode])
    argv = [sys.executable, CELL_SCRIPT, json.dumps(dataclasses.asdict(cell))]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=CELL_TIMEOUT_S, env=env, check=True
    )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def empty_steps_per_second(tasks: int, yields: int, introspection: bool) -> float:
    """Worst case: task steps that do nothing but yield, so the per-step cost is all there is."""
    import asyncio
    import time

    import minidb.runtime

    async def spinner() -> None:
        for _ in range(yields):
            await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(*(spinner() for _ in range(tasks)))

    loop = minidb.runtime.new_event_loop()
    if introspection:
        minidb.runtime.enable_introspection(loop)
    try:
        start = time.perf_counter()
        loop.run_until_complete(main())
        elapsed = time.perf_counter() - start
    finally:
        loop.close()
    return tasks * (yields + 1) / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="sleeping tasks per run")
    parser.add_argument("--runs", type=int, default=5, help="runs of each (median reported)")
    args = parser.parse_args(argv)
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    for rep in range(args.runs):
        order = list(MODES) if rep % 2 == 0 else list(reversed(MODES))
        for mode in order:
            seconds[mode].append(run_cell(args.n, seed=1_000_003 + rep, mode=mode)["seconds"])
    off_s = statistics.median(seconds["off"])
    print(f"sleep workload (bench/timers.py workload 4), N={args.n}, median of {args.runs} runs")
    for mode in MODES:
        median = statistics.median(seconds[mode])
        spread = f"{min(seconds[mode]):.3f}-{max(seconds[mode]):.3f}"
        overhead = median / off_s - 1
        verdict = "" if mode == "off" else (
            f"  {overhead:+.1%} ({'within' if overhead < OVERHEAD_BAR else 'OVER'} the "
            f"{OVERHEAD_BAR:.0%} bar)"
        )
        print(f"  {mode:<6} {median:.3f} s (runs {spread}){verdict}")
    rates: dict[bool, list[float]] = {False: [], True: []}
    for rep in range(args.runs):
        for on in (False, True) if rep % 2 == 0 else (True, False):
            rates[on].append(empty_steps_per_second(EMPTY_TASKS, EMPTY_YIELDS, on))
    off_rate, on_rate = statistics.median(rates[False]), statistics.median(rates[True])
    per_step_ns = (1 / on_rate - 1 / off_rate) * 1e9
    print(f"empty task steps ({EMPTY_TASKS} tasks x {EMPTY_YIELDS + 1} steps, worst case)")
    print(f"  off: {off_rate / 1e3:.0f}k steps/s, on: {on_rate / 1e3:.0f}k steps/s "
          f"({on_rate / off_rate - 1:+.1%}, {per_step_ns:+.0f} ns per step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
