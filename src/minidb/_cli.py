"""The ``minidb`` command line: one parser, subcommands registered by the layer that owns them.

Each subcommand lives next to its code in a small ``_cli`` module exposing
``register(subparsers)``; it defines arguments only and imports its heavy machinery inside
the handler, so ``minidb --help`` and one-shot commands start fast.

argparse (stdlib) is used rather than click/typer: it costs no dependency or import time, and
its ``error()`` hook lets us keep the contract "bad options exit 2 with a one-line message".
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules that contribute subcommands, in the order ``--help`` lists them. A module that does
# not exist yet is skipped, so layers can land independently.
SUBCOMMAND_MODULES = (
    "minidb.server._cli",
    "minidb.client._cli",
    "minidb.wal._cli",
    "minidb.runtime._cli",
    "minidb.batch._cli",
    "minidb.up._cli",
    "minidb.replication._cli",
)


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    from minidb import __version__

    parser = OneLineParser(prog="minidb", description="minidb: a durable key-value store")
    parser.add_argument("--version", action="version", version=f"minidb {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and name.startswith(exc.name):
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    # Checked here, once for every command, rather than where failpoints are hit: a typo in
    # the variable is a usage error of the whole invocation, not a crash deep in one layer.
    from minidb import _failpoints

    if _failpoints.ENV_ERROR is not None:
        sys.stderr.write(f"minidb: error: {_failpoints.ENV_VAR}: {_failpoints.ENV_ERROR}\n")
        return 2
    result = handler(args)
    return int(result or 0)
