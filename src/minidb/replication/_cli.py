"""``minidb restore`` and ``minidb promote``: the command-line contract of restore and replicas.

``minidb restore --from URL --data-dir DIR [--at RFC3339 | --at-seq N]`` rebuilds a data
directory from what a primary shipped (exit 0 and one summary line), or refuses (exit 1, one
line on stderr naming the object: a gap, a damaged object, a truncated upload, a directory
that already holds a store). ``minidb promote --pid PID`` asks a running replica
(``minidb serve --replica-of``) to become a primary, by sending it ``PROMOTE_SIGNAL``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import signal
import sys
from typing import Any

PROMOTE_SIGNAL = signal.SIGUSR1
"""The signal that promotes a replica (``minidb promote`` sends it; so can ``kill -USR1``)."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "restore", help="rebuild a data directory from a shipped log",
        description="Rebuild a data directory from the objects a primary shipped "
        "(minidb serve --replicate-to): the newest snapshot at or before the point, "
        "then the log after it, every checksum verified.",
    )
    parser.add_argument("--from", dest="source", required=True, metavar="URL",
                        help="where the log was shipped: s3://BUCKET/PREFIX or file:DIR")
    parser.add_argument("--data-dir", required=True, help="the directory to create (empty)")
    point = parser.add_mutually_exclusive_group()
    point.add_argument("--at", default=None, metavar="RFC3339",
                       help="restore the state as of this time (e.g. 2026-12-01T12:00:00Z)")
    point.add_argument("--at-seq", type=int, default=None, metavar="N",
                       help="restore the state after record N (inclusive)")
    parser.add_argument("--s3-endpoint", default=None, metavar="URL",
                        help="S3-compatible endpoint (MinIO, moto, R2)")
    parser.set_defaults(handler=_restore)

    promote = subparsers.add_parser(
        "promote", help="turn a running replica into a primary",
        description="Turn a running replica (minidb serve --replica-of) into a primary that "
        f"takes writes and ships under a new generation (sends it SIG{PROMOTE_SIGNAL.name[3:]}).",
    )
    promote.add_argument("--pid", type=int, required=True, help="the replica's process id")
    promote.set_defaults(handler=_promote)


def parse_time_ms(text: str) -> int:
    """An RFC 3339 time (with its offset, or ``Z``) as unix milliseconds."""
    try:
        when = datetime.datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise ValueError(f"--at must be an RFC 3339 time, not {text!r}") from None
    if when.tzinfo is None:
        raise ValueError(f"--at needs a UTC offset or Z: {text!r}")
    return int(when.timestamp() * 1000)


def _restore(args: argparse.Namespace) -> int:
    at_ms = None
    if args.at is not None:
        try:
            at_ms = parse_time_ms(args.at)
        except ValueError as exc:
            sys.stderr.write(f"minidb restore: error: {exc}\n")
            return 2
    if args.at_seq is not None and args.at_seq < -1:
        sys.stderr.write("minidb restore: error: --at-seq must be at least -1\n")
        return 2
    return asyncio.run(_main(args, at_ms))


async def _main(args: argparse.Namespace, at_ms: int | None) -> int:
    from minidb.errors import ConfigError, MinidbError
    from minidb.objstore import ObjectStoreError, open_store
    from minidb.replication._restore import restore

    options = {} if args.s3_endpoint is None else {"endpoint_url": args.s3_endpoint}
    try:
        store = open_store(args.source, **options)
    except ConfigError as exc:
        sys.stderr.write(f"minidb restore: error: {exc}\n")
        return 2
    try:
        result = await restore(store, args.data_dir, at_seq=args.at_seq, at_time_ms=at_ms)
    except (MinidbError, ObjectStoreError) as exc:
        sys.stderr.write(f"minidb restore: error: refusing to restore: {exc}\n")
        return 1
    finally:
        await store.close()
    plan = result.plan
    when = datetime.datetime.fromtimestamp(plan.time_ms / 1000, datetime.UTC)
    sys.stdout.write(
        f"restored {args.data_dir}: generation {plan.generation}, records {plan.first_seq}.."
        f"{plan.last_seq} (snapshot {plan.snapshot.key if plan.snapshot else 'none'}"
        f" of {result.snapshot_records} keys, then {result.records} log records from"
        f" {len(plan.chunks)} chunks), as of {when.isoformat(timespec='milliseconds')};"
        f" {result.bytes_read} bytes in {result.seconds:.3f} s\n"
    )
    return 0


def _promote(args: argparse.Namespace) -> int:
    try:
        os.kill(args.pid, PROMOTE_SIGNAL)
    except ProcessLookupError:
        sys.stderr.write(f"minidb promote: error: no process {args.pid}\n")
        return 1
    except PermissionError:
        sys.stderr.write(f"minidb promote: error: not allowed to signal process {args.pid}\n")
        return 1
    sys.stdout.write(f"asked process {args.pid} to promote itself (SIGUSR1)\n")
    return 0
