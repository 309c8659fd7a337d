"""``minidb wal check`` and ``minidb wal dump``: a data directory explained, read-only.

Both read the directory exactly as opening the log would (``_recovery``), but never write, lock
or cut anything, so they are safe next to a running server. ``check`` prints one line per file
(size, how far it is good, the first problem), like redis-check-aof; ``dump`` prints each
record's operations as words, binary-safely escaped (``_payload.describe``), so the output reads
like a session transcript whatever bytes the keys and values hold.
"""

from __future__ import annotations

import os
from typing import TextIO

from minidb.errors import CorruptionError
from minidb.wal._files import MANIFEST_NAME, list_dir
from minidb.wal._payload import describe
from minidb.wal._recovery import FileReport, Recovery

EXIT_OK = 0
EXIT_CORRUPT = 1


def _describe(report: FileReport) -> str:
    if report.problem is None:
        verdict = "ok"
    elif report.torn:
        verdict = f"torn tail at offset {report.problem_offset}: {report.problem} (cut on open)"
    else:
        verdict = f"CORRUPT at offset {report.problem_offset}: {report.problem}"
    return (
        f"{report.name:<32} size={report.size:<10} ok_up_to={report.good_offset:<10} "
        f"records={report.records:<8} v{report.version if report.version is not None else '?'} "
        f"{verdict}"
    )


def _unchecked(recovery: Recovery) -> list[str]:
    """The directory's minidb files the recovery did not read, described."""
    seen = {r.name for r in recovery.reports}
    manifest = recovery.manifest
    lines = []
    for base, name in sorted(
        [*recovery.listing.snapshots.items(), *recovery.listing.segments.items()]
    ):
        if name in seen:
            continue
        size = os.path.getsize(os.path.join(recovery.directory, name))
        # With a readable manifest, snapshots it does not name and segments below its first
        # one are leftovers of a checkpoint; anything else was skipped after a problem.
        is_snapshot = name.startswith("snapshot-")
        stale = manifest is not None and (is_snapshot or base < manifest.segment)
        why = "stale (removed on open)" if stale else "not checked (after the first problem)"
        lines.append(f"{name:<32} size={size:<10} {why}")
    return lines


def check(data_dir: str, out: TextIO, err: TextIO) -> int:
    """Check every file of ``data_dir``; return 1 if opening it would refuse to start."""
    if not os.path.isdir(data_dir):
        err.write(f"minidb wal check: {data_dir}: no such directory\n")
        return EXIT_CORRUPT
    listing = list_dir(data_dir)
    if listing.is_empty():
        out.write(f"{data_dir}: empty, a fresh store\n")
        return EXIT_OK
    recovery = Recovery(data_dir)
    total = 0
    failure: CorruptionError | None = None
    try:
        for _record in recovery.records():
            total += 1
    except CorruptionError as exc:
        failure = exc
    for report in recovery.reports:
        out.write(_describe(report) + "\n")
    for line in _unchecked(recovery):
        out.write(line + "\n")
    if failure is not None:
        err.write(f"minidb wal check: corrupt: {failure}\n")
        return EXIT_CORRUPT
    torn = recovery.tail.torn if recovery.tail is not None else None
    note = f"; a torn tail of {torn.size - torn.good_offset} bytes is cut on open" if torn else ""
    out.write(f"{data_dir}: ok, {total} records{note}\n")
    return EXIT_OK


def dump(data_dir: str, out: TextIO, err: TextIO, *, numbers: bool = False) -> int:
    """Print every live record, snapshot first; return 1 on damage (after the good records)."""
    if not os.path.isdir(data_dir):
        err.write(f"minidb wal dump: {data_dir}: no such directory\n")
        return EXIT_CORRUPT
    if list_dir(data_dir).is_empty():
        return EXIT_OK
    recovery = Recovery(data_dir)
    current = MANIFEST_NAME
    try:
        for entry in recovery.records():
            name = recovery.reports[-1].name
            if name != current:
                out.write(f"# {name}\n")
                current = name
            text = describe(entry.ops)
            out.write(f"{entry.number} {text}\n" if numbers else f"{text}\n")
    except CorruptionError as exc:
        err.write(f"minidb wal dump: corrupt: {exc}\n")
        return EXIT_CORRUPT
    return EXIT_OK
