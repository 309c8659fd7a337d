"""Timer benchmark: stock asyncio, uvloop and minidb's wheel loop, side by side in one run.

This script owns the timer-heavy comparison behind issue 2's performance bar. Every number it
prints is a ratio measured in the same run, because this machine's run-to-run noise (up to +40%
on one run in three) makes absolute seconds from different runs meaningless.

Workloads (public asyncio APIs only; the minidb-only rows use minidb's public API):

``fire``
    ``call_later`` N timers with delays uniform in [1 ms, 251 ms] (random order), block in
    ``time.sleep`` until all are due, then run the loop until all have fired. Seconds are
    schedule + fire: the blocking sleep is excluded, so the figure is pure timer bookkeeping.
``cancel``
    ``call_at`` N timers 30-60 s ahead (a request timeout), cancel them all in a different
    random order, run two loop turns (where stock rebuilds its heap and uvloop frees its
    handles). Seconds are schedule + cancel + turns. RSS is read before scheduling, after
    scheduling, and after cancel + ``gc.collect()``, to show whether memory comes back.
``reset-timeout``
    N ``asyncio.timeout(30 s +-10%)`` scopes (one per simulated idle connection), each pushed
    out M times with ``Timeout.reschedule(now + idle)`` in a fresh random order per round, one
    loop turn per round. Stock's ``reschedule`` cancels the old handle and makes a new one, on
    every loop, ours included. Seconds are the M rounds only. Nothing expires.
``reset-minidb-timeout``
    The same, through ``minidb.runtime.timeout()`` (API-compatible; reschedules in place).
    Ours only: its peer columns are the peers' ``reset-timeout`` cells.
``reset-native``
    The same deadlines as bare handles moved with ``loop.reschedule(handle, when)``: no new
    handle, no cancel. Ours only: its peer columns are the peers' ``reset-timeout`` cells.
``reset-handle`` (not run unless asked for)
    Bare handles pushed out with ``handle.cancel()`` + ``loop.call_at()``: the cheapest way
    to move a deadline with stock asyncio's API, the like-for-like peer of ``reset-native``.
``sleep``
    N tasks in ``asyncio.sleep(delay)``, delays as in ``fire``: one loop turn starts them all,
    ``time.sleep`` until all are due, then run until every task has finished. Seconds are the
    start turn + the wake-up phase.

Method: each cell (loop x workload x N) runs in a fresh process (``_timer_workloads.py``,
which owns what each workload does and times) so that peak RSS is the
cell's own and no heap or arena state leaks between cells; repetitions are interleaved
(A B C A B C) so machine drift hits every loop alike; the cyclic GC stays on (it is part of
the real cost of allocating a handle per reset); every loop sees the same random data for a
given repetition. The table shows medians; ratios are peer seconds / ours, so >1 means ours is
faster. The last line of output is one JSON object with every median, ratio and bar.

    python bench/timers.py                       # N = 10k, 100k, 1M, --repeat 3
    python bench/timers.py --n 10k,100k --repeat 5
    python bench/timers.py --n 10k,100k,1M --n reset=10k,100k   # N per workload
    python bench/timers.py --quick               # a smoke run: small N, one repetition
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

from _timer_workloads import LOOPS, WORKLOADS, Cell

CELL_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_timer_workloads.py")

DEFAULT_RESETS = 10  # M: resets per deadline
DEFAULT_REPEAT = 3  # repetitions per cell (median); use >= 5 for a verdict
DEFAULT_SIZES: tuple[int, ...] = (10_000, 100_000, 1_000_000)
QUICK_SIZES: tuple[int, ...] = (10_000,)
DEFAULT_CELL_TIMEOUT_S = 3600.0  # stock reset at 1M alone takes ~4 min; a hung loop must not

OURS = "minidb"
REFERENCE = "asyncio"
WHEEL_LOOP_CLASS = "minidb.runtime._loop.WheelEventLoop"  # what "ours" must really run on
LOOP_TITLES = {"asyncio": "stock", "uvloop": "uvloop", "minidb": "ours"}

DEFAULT_WORKLOADS = tuple(w for w in WORKLOADS if w != "reset-handle")
# Workloads that exist only on our loop, and the peers' cell they are compared against: the
# peers' way of doing the same job through the public API (cancel + new handle).
OURS_ONLY_BASELINE = {
    "reset-minidb-timeout": "reset-timeout",
    "reset-native": "reset-timeout",
}
# Workloads interleaved together; `--n GROUP=...` sets them all.
GROUPS = {
    "fire": ("fire",),
    "cancel": ("cancel",),
    "reset": ("reset-timeout", "reset-minidb-timeout", "reset-native", "reset-handle"),
    "sleep": ("sleep",),
}
LABELS = {
    "fire": "fire: call_later, run until all fired",
    "cancel": "cancel: call_at, cancel all, 2 turns",
    "reset-timeout": "reset: asyncio.timeout().reschedule()",
    "reset-minidb-timeout": "reset: minidb.runtime.timeout().reschedule() *",
    "reset-native": "reset: loop.reschedule(handle, when) *",
    "reset-handle": "reset: handle.cancel() + loop.call_at()",
    "sleep": "sleep: N tasks in asyncio.sleep()",
}

# Issue 2's acceptance bar, as (workload, N, minimum ratio stock/ours).
BARS = (
    ("fire", 1_000_000, 3.0),
    ("reset-native", 1_000_000, 10.0),
    ("reset-minidb-timeout", 1_000_000, 5.0),
    ("cancel", 1_000_000, 1.0),
)
CANCEL_RSS_BAR = 1.10  # after cancel + gc, RSS within 10% of where it started
SMALL_N = 10_000
SMALL_N_BAR = 0.85  # no cell at 10k slower than 0.85x stock (the A/A noise band is +-12%)

MIB = 1024 * 1024


def parse_size(text: str) -> int:
    """'10k' -> 10000, '1M' -> 1000000, '2500' -> 2500."""
    text = text.strip().lower().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    number = text[:-1] if scale != 1 else text
    try:
        value = int(float(number) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value


def format_size(n: int) -> str:
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def sizes_by_workload(
    specs: Sequence[str], workloads: Sequence[str], quick: bool
) -> dict[str, tuple[int, ...]]:
    """Resolve `--n LIST` / `--n NAME=LIST` options (NAME a workload or a group) per workload."""
    default = QUICK_SIZES if quick else DEFAULT_SIZES
    chosen: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, sizes_text = spec.rpartition("=")
        sizes = tuple(sorted({parse_size(s) for s in sizes_text.split(",") if s.strip()}))
        if not sep:
            default = sizes
            continue
        targets = GROUPS.get(name, (name,))
        if any(t not in WORKLOADS for t in targets):
            raise SystemExit(f"--n: unknown workload or group {name!r}")
        for target in targets:
            chosen[target] = sizes
    return {w: chosen.get(w, default) for w in workloads}


def plan(
    sizes: dict[str, tuple[int, ...]], loops: Sequence[str]
) -> list[tuple[str, int, list[tuple[str, str]]]]:
    """Groups of (workload, loop) pairs to interleave, per (group, N), in run order.

    An ours-only workload pulls in its baseline on the peers at the same N, since its ratios
    are against that baseline.
    """
    steps = []
    for group, members in GROUPS.items():
        wanted: dict[int, list[tuple[str, str]]] = {}
        for workload in members:
            for n in sizes.get(workload, ()):
                pairs = wanted.setdefault(n, [])
                if workload in OURS_ONLY_BASELINE:
                    if OURS in loops:
                        pairs.append((workload, OURS))
                    base = OURS_ONLY_BASELINE[workload]
                    pairs.extend((base, lp) for lp in loops if lp != OURS)
                else:
                    pairs.extend((workload, lp) for lp in loops)
        for n in sorted(wanted):
            # Keep the first occurrence of each pair, ordered workload-major, loop-minor.
            unique = list(dict.fromkeys(wanted[n]))
            unique.sort(key=lambda p: (WORKLOADS.index(p[0]), loops.index(p[1])))
            steps.append((group, n, unique))
    return steps


def run_in_child(cell: Cell, timeout_s: float) -> dict[str, Any]:
    """Run one cell in a fresh interpreter; failures come back as {"error": ...}."""
    argv = [sys.executable, CELL_SCRIPT, json.dumps(dataclasses.asdict(cell))]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {proc.returncode}: {tail}"}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The median cell: seconds, peak RSS, RSS marks and phases each take their own median."""
    good = [r for r in runs if "seconds" in r]
    if not good:
        return None
    out: dict[str, Any] = {"runs": len(good)}
    for key in (
        "seconds",
        "peak_rss_bytes",
        "rss_start_bytes",
        "rss_scheduled_bytes",
        "rss_after_cancel_bytes",
    ):
        if key in good[0]:
            out[key] = statistics.median(r[key] for r in good)
    out["phases"] = {k: statistics.median(r["phases"][k] for r in good) for k in good[0]["phases"]}
    out["loop_class"] = good[0]["loop_class"]
    return out


@dataclasses.dataclass
class Report:
    """Medians per (workload, N, loop) plus what went wrong, and the ratios derived from them."""

    loops: Sequence[str]
    medians: dict[tuple[str, int, str], dict[str, Any]] = dataclasses.field(default_factory=dict)
    problems: dict[tuple[str, int, str], str] = dataclasses.field(default_factory=dict)

    def peer_cell(self, workload: str, n: int, peer: str) -> dict[str, Any] | None:
        """The peer's cell that a row of `workload` is compared with."""
        return self.medians.get((OURS_ONLY_BASELINE.get(workload, workload), n, peer))

    def ratio(self, workload: str, n: int, peer: str) -> float | None:
        ours = self.medians.get((workload, n, OURS))
        theirs = self.peer_cell(workload, n, peer)
        if ours is None or theirs is None or ours["seconds"] <= 0:
            return None
        return float(theirs["seconds"] / ours["seconds"])

    def rows(self) -> list[tuple[str, int]]:
        keys = {(w, n) for (w, n, _lp) in self.medians} | {(w, n) for (w, n, _lp) in self.problems}
        return sorted(keys, key=lambda k: (WORKLOADS.index(k[0]), k[1]))


def _seconds_text(cell: dict[str, Any] | None, problem: str | None) -> str:
    if cell is not None:
        return f"{cell['seconds']:.3f}"
    return "n/a" if problem and problem.startswith("unsupported") else ("fail" if problem else "-")


def _ratio_text(ratio: float | None) -> str:
    return f"{ratio:.2f}x" if ratio is not None else "-"


def render_table(report: Report) -> str:
    loops = report.loops
    peers = [lp for lp in loops if lp != OURS]
    headers = ["workload", "N"]
    headers += [f"{LOOP_TITLES[lp]} s" for lp in loops]
    headers += ["peak RSS MiB " + "/".join(LOOP_TITLES[lp] for lp in loops)]
    if OURS in loops:
        headers += [f"{LOOP_TITLES[p]}/ours" for p in peers]
    lines = [headers]
    for workload, n in report.rows():
        row = [LABELS[workload], format_size(n)]
        rss = []
        for lp in loops:
            cell = report.medians.get((workload, n, lp))
            if cell is None and lp != OURS and workload in OURS_ONLY_BASELINE:
                cell = report.peer_cell(workload, n, lp)
            row.append(_seconds_text(cell, report.problems.get((workload, n, lp))))
            rss.append(f"{cell['peak_rss_bytes'] / MIB:.0f}" if cell else "-")
        row.append("/".join(rss))
        if OURS in loops:
            row += [_ratio_text(report.ratio(workload, n, p)) for p in peers]
        lines.append(row)
    widths = [max(len(r[i]) for r in lines) for i in range(len(headers))]
    out = []
    for k, r in enumerate(lines):
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        out.append("  ".join(cells))
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def render_phases(report: Report) -> str:
    """Median seconds per phase, per cell: where each loop spends its time."""
    lines = ["phases (median seconds):"]
    for workload, n in report.rows():
        parts = []
        for lp in report.loops:
            cell = report.medians.get((workload, n, lp))
            if cell:
                phases = " ".join(f"{k} {v:.3f}" for k, v in cell["phases"].items())
                parts.append(f"{LOOP_TITLES[lp]}: {phases}")
        if parts:
            lines.append(f"  {workload} N={format_size(n)}: " + " | ".join(parts))
    return "\n".join(lines)


def render_cancel_memory(report: Report) -> str:
    lines = ["cancel memory (MiB): start -> after schedule -> after cancel + gc"]
    for workload, n in report.rows():
        if workload != "cancel":
            continue
        parts = []
        for lp in report.loops:
            cell = report.medians.get((workload, n, lp))
            if cell:
                parts.append(
                    f"{LOOP_TITLES[lp]} {cell['rss_start_bytes'] / MIB:.0f} -> "
                    f"{cell['rss_scheduled_bytes'] / MIB:.0f} -> "
                    f"{cell['rss_after_cancel_bytes'] / MIB:.0f}"
                )
        lines.append(f"  N={format_size(n)}: " + "; ".join(parts))
    return "\n".join(lines) if len(lines) > 1 else ""


def acceptance(report: Report) -> list[dict[str, Any]]:
    """Issue 2's bar, judged on this run's ratios; a cell not measured is 'not measured'."""
    checks: list[dict[str, Any]] = []
    for workload, n, bar in BARS:
        ratio = report.ratio(workload, n, REFERENCE)
        checks.append(
            {
                "check": f"{workload}@{format_size(n)} stock/ours >= {bar}",
                "value": ratio,
                "passed": None if ratio is None else ratio >= bar,
            }
        )
    back = _rss_back(report.medians.get(("cancel", 1_000_000, OURS)))
    checks.append(
        {
            "check": f"cancel@1M ours RSS after cancel+gc <= {CANCEL_RSS_BAR} x start",
            "value": back,
            "stock": _rss_back(report.medians.get(("cancel", 1_000_000, REFERENCE))),
            "passed": None if back is None else back <= CANCEL_RSS_BAR,
        }
    )
    small = [(w, report.ratio(w, n, REFERENCE)) for (w, n) in report.rows() if n == SMALL_N]
    measured = [(w, r) for w, r in small if r is not None]
    worst = min(measured, key=lambda wr: wr[1]) if measured else None
    checks.append(
        {
            "check": f"every cell at {format_size(SMALL_N)} stock/ours >= {SMALL_N_BAR}",
            "value": worst[1] if worst else None,
            "worst": worst[0] if worst else None,
            "passed": None if worst is None else worst[1] >= SMALL_N_BAR,
        }
    )
    return checks


def _rss_back(cell: dict[str, Any] | None) -> float | None:
    """RSS after cancel + gc as a multiple of RSS before the workload made anything."""
    if cell is None:
        return None
    return float(cell["rss_after_cancel_bytes"] / cell["rss_start_bytes"])


def render_acceptance(checks: Iterable[dict[str, Any]]) -> str:
    lines = ["acceptance (issue 2, judged on this run's ratios):"]
    for c in checks:
        verdict = {True: "PASS", False: "FAIL", None: "not measured"}[c["passed"]]
        value = "" if c["value"] is None else f" = {c['value']:.2f}"
        note = f" (worst: {c['worst']})" if c.get("worst") else ""
        if c.get("stock") is not None:
            note = f" (stock: {c['stock']:.2f})"
        lines.append(f"  {verdict:12} {c['check']}{value}{note}")
    return "\n".join(lines)


def summary_json(report: Report, args: argparse.Namespace, checks: list[dict[str, Any]]) -> str:
    cells = []
    for (workload, n, lp), cell in sorted(report.medians.items()):
        ops = n * args.m if workload.startswith("reset") else n
        cells.append(
            {
                "workload": workload,
                "n": n,
                "loop": lp,
                "ns_per_op": cell["seconds"] / ops * 1e9,
                **cell,
            }
        )
    ratios = [
        {
            "workload": w,
            "n": n,
            "peer": p,
            "baseline": OURS_ONLY_BASELINE.get(w, w),
            "peer_over_ours": report.ratio(w, n, p),
        }
        for (w, n) in report.rows()
        for p in report.loops
        if p != OURS
    ]
    return json.dumps(
        {
            "summary": "bench/timers.py",
            "python": platform.python_version(),
            "repeat": args.repeat,
            "resets_per_deadline": args.m,
            "gc": not args.no_gc,
            "cells": cells,
            "ratios": ratios,
            "failures": [
                {"workload": w, "n": n, "loop": lp, "error": e}
                for (w, n, lp), e in sorted(report.problems.items())
            ],
            "acceptance": checks,
        }
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Timer benchmark: stock asyncio vs uvloop vs minidb's wheel loop.",
        epilog="Workloads: "
        + ", ".join(WORKLOADS)
        + ". Groups for --n: "
        + ", ".join(GROUPS)
        + ". Rows marked * run on ours only and are compared with the peers' "
        "asyncio.timeout().reschedule() (cancel + new handle).",
    )
    parser.add_argument(
        "--n",
        action="append",
        default=[],
        metavar="[NAME=]LIST",
        help="sizes, e.g. 10k,100k,1M (default); NAME=LIST sets one workload "
        "or group, e.g. --n reset=10k,100k. Repeatable.",
    )
    parser.add_argument(
        "--workloads",
        default=",".join(DEFAULT_WORKLOADS),
        help="comma-separated workloads (default: all but reset-handle)",
    )
    parser.add_argument(
        "--loops",
        default=",".join(LOOPS),
        help="comma-separated loops out of asyncio,uvloop,minidb (default: all)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help=f"runs per cell, median reported (default {DEFAULT_REPEAT}; use >= 5 for a verdict)",
    )
    parser.add_argument(
        "--m",
        type=int,
        default=DEFAULT_RESETS,
        help=f"resets per deadline in reset workloads (default {DEFAULT_RESETS})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: N = 10k unless --n says otherwise, one repetition "
        "unless --repeat says otherwise",
    )
    parser.add_argument("--seed", type=int, default=1, help="base random seed")
    parser.add_argument("--no-gc", action="store_true", help="disable the cyclic GC (diagnosis)")
    parser.add_argument(
        "--phases", action="store_true", help="also print each cell's phase times (profiling)"
    )
    parser.add_argument(
        "--cell-timeout",
        type=float,
        default=DEFAULT_CELL_TIMEOUT_S,
        help="seconds before a cell's process is killed",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    loops = [lp.strip() for lp in args.loops.split(",") if lp.strip()]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for name, known in (("loop", LOOPS), ("workload", WORKLOADS)):
        bad = [x for x in (loops if name == "loop" else workloads) if x not in known]
        if bad:
            raise SystemExit(f"unknown {name}(s): {', '.join(bad)}")
    if "uvloop" in loops:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            print(
                "uvloop is not installed (pip install -e '.[bench]'); skipping it", file=sys.stderr
            )
            loops.remove("uvloop")
    loops.sort(key=LOOPS.index)
    if args.repeat is None:
        args.repeat = 1 if args.quick else DEFAULT_REPEAT

    report = Report(loops=loops)
    runs: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    steps = plan(sizes_by_workload(args.n, workloads, args.quick), loops)
    total = sum(len(pairs) for _g, _n, pairs in steps) * args.repeat
    done = 0
    for group, n, pairs in steps:
        for rep in range(args.repeat):
            for workload, lp in pairs:
                cell = Cell(
                    loop=lp,
                    workload=workload,
                    n=n,
                    resets=args.m,
                    seed=args.seed * 1_000_003 + rep,
                    gc_enabled=not args.no_gc,
                )
                started = time.perf_counter()
                result = run_in_child(cell, args.cell_timeout)
                done += 1
                status = (
                    f"{result['seconds']:.3f} s"
                    if "seconds" in result
                    else result.get("unsupported") or result.get("error")
                )
                print(
                    f"[{done}/{total}] {group} N={format_size(n)} rep {rep + 1} "
                    f"{workload} on {lp}: {status} "
                    f"({time.perf_counter() - started:.1f} s wall)",
                    file=sys.stderr,
                    flush=True,
                )
                key = (workload, n, lp)
                runs.setdefault(key, []).append(result)
                if "unsupported" in result:
                    report.problems[key] = f"unsupported: {result['unsupported']}"
                elif "error" in result:
                    report.problems[key] = result["error"]

    for key, results in runs.items():
        med = median_of(results)
        if med is not None:
            report.medians[key] = med
            report.problems.pop(key, None)

    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, median of {args.repeat}, "
        f"M = {args.m} resets per deadline, GC {'off' if args.no_gc else 'on'}; "
        "ratios are peer seconds / ours (>1 = ours faster)"
    )
    ours_classes = {c["loop_class"] for (_w, _n, lp), c in report.medians.items() if lp == OURS}
    if ours_classes and ours_classes != {WHEEL_LOOP_CLASS}:
        print(
            f"warning: 'ours' ran on {', '.join(sorted(ours_classes))}, expected {WHEEL_LOOP_CLASS}"
        )
    print()
    print(render_table(report))
    if any(w in OURS_ONLY_BASELINE for w, _n in report.rows()):
        print(
            "* ours only; the peer columns repeat the peers' asyncio.timeout().reschedule() "
            "(cancel + new handle)"
        )
    memory = render_cancel_memory(report)
    if memory:
        print()
        print(memory)
    if args.phases:
        print()
        print(render_phases(report))
    if report.problems:
        print()
        print("cells that did not run:")
        for (w, n, lp), problem in sorted(report.problems.items()):
            print(f"  {w} N={format_size(n)} on {lp}: {problem}")
    checks = acceptance(report)
    print()
    print(render_acceptance(checks))
    print(summary_json(report, args, checks))
    failed = any(
        problem and not problem.startswith("unsupported") for problem in report.problems.values()
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
