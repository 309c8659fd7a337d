"""``minidb top HOST:PORT``: arguments only; the view (and rich) load inside the handler."""

from __future__ import annotations

import argparse
from typing import Any

from minidb.runtime._top import DEFAULT_INTERVAL_S, DEFAULT_LIMIT


def register(subparsers: Any) -> None:
    """Add ``minidb top``."""
    top = subparsers.add_parser(
        "top",
        help="live view of a process's event loop: tasks by busy time, blocking steps",
        description="Poll http://HOST:PORT/debug/tasks (a minidb server's metrics port, or "
        "anything serving minidb.runtime.snapshot_json()) and show its tasks, busiest first.",
    )
    top.add_argument("address", metavar="HOST:PORT", help="where /debug/tasks is served")
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    top.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        help=f"seconds between refreshes (default {DEFAULT_INTERVAL_S:g})",
    )
    top.add_argument(
        "--limit", type=int, default=DEFAULT_LIMIT, help=f"rows shown (default {DEFAULT_LIMIT})"
    )
    top.set_defaults(handler=_top)


def _top(args: argparse.Namespace) -> int:
    from minidb.runtime._top import run_top

    if args.interval <= 0 or args.limit <= 0:
        import sys

        sys.stderr.write("minidb top: error: --interval and --limit must be positive\n")
        return 2
    return run_top(args.address, once=args.once, interval=args.interval, limit=args.limit)
