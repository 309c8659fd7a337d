"""The ``minidb wal`` subcommands: ``check`` and ``dump`` of a data directory.

Arguments only; the machinery is imported inside the handlers so ``minidb --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

DEFAULT_DATA_DIR = "./minidb-data"  # the same default as ``minidb serve``


def register(subparsers: Any) -> None:
    """Add ``minidb wal check`` and ``minidb wal dump``."""
    wal = subparsers.add_parser("wal", help="inspect a data directory's write-ahead log")
    commands = wal.add_subparsers(dest="wal_command", metavar="COMMAND", required=True)

    check = commands.add_parser(
        "check", help="check every file: size, how far it is good, the first problem"
    )
    check.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="the data directory")
    check.set_defaults(handler=_check)

    dump = commands.add_parser("dump", help="print the live records, snapshot first")
    dump.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="the data directory")
    dump.add_argument(
        "--numbers", action="store_true", help="prefix each record with its sequence number"
    )
    dump.set_defaults(handler=_dump)


def _check(args: argparse.Namespace) -> int:
    from minidb.wal._inspect import check

    return check(args.data_dir, sys.stdout, sys.stderr)


def _dump(args: argparse.Namespace) -> int:
    from minidb.wal._inspect import dump

    return dump(args.data_dir, sys.stdout, sys.stderr, numbers=args.numbers)
