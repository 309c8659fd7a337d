"""Reading a data directory back: the manifest, its snapshot, then the chain of segments.

This module applies the replay rules of ``docs/wal-format.md`` and never writes: ``DurableLog``
uses it to replay and then cuts the torn tail it reports; ``minidb wal check`` and ``minidb wal
dump`` use it to inspect a directory, even one a server has open. Every ``Malformed`` from the
pure decoders is translated here, the one place, into ``CorruptionError`` with path and offset.

Payloads are decoded here too (with the decoder of each file's format version), so a record that
passed its checksum but does not decode is refused like any other damage, by replay and by
``wal check`` alike.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from minidb.errors import CorruptionError
from minidb.wal._checkpoint import snapshot_reader
from minidb.wal._files import MANIFEST_NAME, Listing, list_dir, mapped, segment_name, snapshot_name
from minidb.wal._format import FORMAT_VERSION, STRINGS_VERSION, Malformed, peek_version
from minidb.wal._manifest import Manifest, decode_manifest
from minidb.wal._ops import Expire, Flush, Op, Put, Remove
from minidb.wal._payload import PayloadError, decode_ops
from minidb.wal._reader import Record, RecordReader, segment_records


class Entry(NamedTuple):
    """One live record, decoded: its sequence number, where it starts, and its operations."""

    number: int
    offset: int
    ops: list[Op]


PLAIN_RUN_RECORDS = 128
"""Records decoded in C per call (``RecordReader.decode_plain``) while replaying: enough that
the call costs nothing a record, few enough that a run's objects stay small."""


@functools.cache
def _decode_spec(version: int) -> tuple[Any, ...]:
    """What ``decode_plain`` builds records of a file of ``version`` with, and the decoder it
    hands the payloads it does not decode (operations C does not know, damage)."""
    decode = functools.partial(decode_ops, version=version)
    return (Entry, Put, Remove, Expire, Flush, decode, PayloadError)


@dataclass
class FileReport:
    """What reading one file found: its size, how far it is good, and the first problem."""

    name: str
    size: int
    good_offset: int = 0
    records: int = 0
    problem: str | None = None
    problem_offset: int | None = None
    torn: bool = False  # the problem is a torn tail that opening the log cuts off
    version: int | None = None  # the format version its header claims (None: too short)
    sealed: bool = False  # a segment closed by its END record when the log moved on from it


@dataclass(frozen=True)
class Tail:
    """Where appending resumes: the newest segment, cut to its last good record."""

    base: int
    good_offset: int  # 0 when the segment's header itself was torn
    next_number: int
    torn: FileReport | None  # set when bytes past good_offset are a torn tail to cut
    version: int = FORMAT_VERSION  # the segment's format version (a torn header counts as new)
    sealed: bool = False  # closed by an END record: appending continues in a new segment


def _unsealed(report: FileReport) -> bool:
    """A segment of version 2 or later that another follows but that was not closed: it was
    cut (version 1 closed nothing)."""
    return report.version in (STRINGS_VERSION, FORMAT_VERSION) and not report.sealed


class Recovery:
    """One read of a data directory; ``records()`` yields the live log, snapshot first."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.listing: Listing = list_dir(directory)
        self.reports: list[FileReport] = []
        self.manifest: Manifest | None = None
        self.tail: Tail | None = None
        self.log_bytes = 0  # bytes of live segments, i.e. of log since the last checkpoint

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def _corrupt(self, report: FileReport, exc: Malformed) -> CorruptionError:
        # Everything before the first bad record checked out (closed files included).
        report.problem, report.problem_offset = exc.reason, exc.offset
        report.good_offset = exc.offset
        return CorruptionError(
            f"{report.name}: offset {exc.offset}: {exc.reason}",
            path=self._path(report.name),
            offset=exc.offset,
        )

    def _missing(self, name: str, detail: str = "") -> CorruptionError:
        self.reports.append(FileReport(name, 0, problem="missing", problem_offset=0))
        return CorruptionError(
            f"{name}: offset 0: missing{detail}", path=self._path(name), offset=0
        )

    def read_manifest(self) -> Manifest:
        """Decode ``MANIFEST``; a missing or damaged one is ``CorruptionError``."""
        if not self.listing.manifest:
            raise self._missing(MANIFEST_NAME)
        report = FileReport(MANIFEST_NAME, 0)
        self.reports.append(report)
        with mapped(self._path(MANIFEST_NAME)) as buf:
            report.size, report.version = len(buf), peek_version(buf)
            try:
                self.manifest = decode_manifest(buf)
            except Malformed as exc:
                raise self._corrupt(report, exc) from None
        report.good_offset, report.records = report.size, 1
        return self.manifest

    def stale_files(self) -> list[str]:
        """Files the manifest no longer refers to: leftovers of a checkpoint or a crash."""
        assert self.manifest is not None, "read_manifest() first"
        keep = self.manifest.snapshot
        stale = [n for base, n in self.listing.snapshots.items() if base != keep]
        stale += [n for base, n in self.listing.segments.items() if base < self.manifest.segment]
        return stale + self.listing.temporaries

    def records(self) -> Iterator[Entry]:
        """Every DATA record of the live log in order, decoded; sets ``tail`` when it finishes.

        Raises ``CorruptionError`` where the directory must refuse to start.
        """
        manifest = self.manifest if self.manifest is not None else self.read_manifest()
        if manifest.snapshot is not None:
            yield from self._snapshot(manifest.snapshot)
        chain = sorted(base for base in self.listing.segments if base >= manifest.segment)
        expected = manifest.segment
        previous: FileReport | None = None
        for index, base in enumerate(chain):
            if previous is None and base != expected:
                raise self._missing(
                    segment_name(expected), f" (the next segment is {segment_name(base)})"
                )
            if previous is not None and (base != expected or _unsealed(previous)):
                raise self._broken_chain(previous, expected, base)
            newest = index == len(chain) - 1
            previous = yield from self._segment(base, newest)
            expected = base + previous.records
        if not chain:
            raise self._missing(segment_name(manifest.segment))

    def _broken_chain(self, previous: FileReport, expected: int, base: int) -> CorruptionError:
        """Segments that do not continue each other's count (``docs/wal-format.md``, step 4)."""
        if previous.sealed and base > expected:
            # The older segment is whole (its END says how many records it holds): the
            # segment that continued it is gone.
            return self._missing(
                segment_name(expected),
                f" ({previous.name} closed at record {expected}, the next segment is "
                f"{segment_name(base)})",
            )
        if _unsealed(previous):
            # A version-2 segment is closed with END before the next one is created, so an
            # older one without it was cut, at a record boundary or inside its END.
            lost = "no record lost"
            if base > expected:
                lost = f"records {expected}..{base - 1} are missing"
            reason = (
                f"an older segment without its closing END record: it was cut short ({lost}; "
                f"the next segment is {segment_name(base)})"
            )
            return self._corrupt(previous, Malformed(reason, offset=previous.good_offset))
        if base > expected:
            # Version 1 closes nothing: a cut at a record boundary and a deleted segment leave
            # the same bytes. The older segment's end is the place provably wrong.
            reason = (
                f"its records end before number {expected} but the next segment is "
                f"{segment_name(base)}: records {expected}..{base - 1} are missing (this segment "
                f"was cut short, or {segment_name(expected)} is missing)"
            )
            return self._corrupt(previous, Malformed(reason, offset=previous.good_offset))
        name = segment_name(base)
        report = FileReport(name, os.path.getsize(self._path(name)))
        self.reports.append(report)
        reason = f"starts at record {base}, inside the previous segment (which ends at {expected})"
        return self._corrupt(report, Malformed(reason, offset=0))

    def _decoded(self, report: FileReport, record: Record) -> Entry:
        """The record's operations; a payload that passed its checksum but does not decode is
        corruption at the record (it is what the writer wrote: never guess what it meant)."""
        try:
            return Entry(record.number, record.offset, decode_ops(record.payload, record.version))
        except PayloadError as exc:
            reason = f"record {record.number} does not decode: {exc}"
            raise self._corrupt(report, Malformed(reason, offset=record.offset)) from None

    def _plain_entries(self, report: FileReport, reader: RecordReader) -> Iterator[Entry]:
        """The records from where ``reader`` stands that are plainly valid, decoded in C (none
        without the accelerator): what ``_decoded`` makes of them. The reference loop after it
        reads the rest of the file, from the first record C left (an END, damage, a payload that
        does not decode), so every refusal is the Python reader's."""
        spec = _decode_spec(reader.version)
        while entries := reader.decode_plain(PLAIN_RUN_RECORDS, spec):
            report.records += len(entries)
            yield from entries

    def _snapshot(self, base: int) -> Iterator[Entry]:
        name = snapshot_name(base)
        if base not in self.listing.snapshots:
            raise self._missing(name)
        report = FileReport(name, 0)
        self.reports.append(report)
        with mapped(self._path(name)) as buf:
            report.size, report.version = len(buf), peek_version(buf)
            try:
                reader, records = snapshot_reader(buf, base)
                yield from self._plain_entries(report, reader)
                for record in records:
                    entry = self._decoded(report, record)
                    report.records += 1
                    yield entry
            except Malformed as exc:
                raise self._corrupt(report, exc) from None
        report.good_offset = report.size

    def _segment(self, base: int, newest: bool) -> Generator[Entry, None, FileReport]:
        # A generator that returns its report when done (``yield from`` hands it back).
        name = segment_name(base)
        report = FileReport(name, 0)
        self.reports.append(report)
        version = FORMAT_VERSION
        with mapped(self._path(name)) as buf:
            report.size, report.version = len(buf), peek_version(buf)
            reader = None
            try:
                reader, records = segment_records(buf, base)
                version = reader.version
                yield from self._plain_entries(report, reader)
                for record in records:
                    entry = self._decoded(report, record)
                    report.records += 1
                    yield entry
            except Malformed as exc:
                if not (newest and exc.torn):
                    raise self._corrupt(report, exc) from None
                report.problem, report.problem_offset, report.torn = exc.reason, exc.offset, True
            good = reader.good_offset if reader is not None else 0
            report.good_offset = good
            report.sealed = reader is not None and reader.sealed
        self.log_bytes += report.good_offset
        if newest:
            torn = report if report.torn else None
            self.tail = Tail(
                base, report.good_offset, base + report.records, torn, version, report.sealed
            )
        return report
