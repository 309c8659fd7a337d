"""Seeding a data directory from records kept elsewhere: a snapshot and the log after it.

``minidb restore`` (and a replica's first start) rebuild a data directory from a shipped
snapshot and shipped records; this module is the one place that lays those out as the files
``docs/wal-format.md`` describes, so that ``DurableLog`` opens the result as it opens any
directory it wrote itself: ``snapshot-<base>.snap`` (checked whole, then renamed into place),
one segment ``wal-<base>.log`` holding the records from ``base`` on with their own numbers, and
last the ``MANIFEST`` naming both. Until the manifest exists the directory is not a store (a
crash leaves only files that opening removes or a restore refuses), so a half-done seed is
never served.

The records keep the sequence numbers they had in the log they came from: the segment's base
is the snapshot's, and each record's checksum covers its number, so a record in the wrong place
fails its check at replay exactly as it would have in the original log.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from minidb.errors import CorruptionError, WalError
from minidb.wal._checkpoint import snapshot_count
from minidb.wal._files import (
    MANIFEST_NAME,
    TMP_SUFFIX,
    list_dir,
    lock_dir,
    mapped,
    remove,
    snapshot_name,
    write_atomically,
)
from minidb.wal._format import Malformed, encode_record
from minidb.wal._fs import active
from minidb.wal._manifest import Manifest
from minidb.wal._reader import Record, segment_records
from minidb.wal._writer import SegmentWriter

SEED_WRITE_BYTES = 1 << 20
"""Framed records buffered before one write to the seeded segment (bounds the seed's memory)."""


def holds_store(directory: str | os.PathLike[str]) -> bool:
    """Whether ``directory`` exists and holds any file of a store (``LOCK`` and foreign files
    do not count)."""
    path = os.fspath(directory)
    return os.path.isdir(path) and not list_dir(path).is_empty()


def segment_copy_records(buf: bytes, base: int, source: str) -> Iterator[Record]:
    """The DATA records of a copy of a log segment (a shipped chunk) whose first is ``base``.

    Unlike the newest segment of a data directory, a copy is never forgiven a torn tail: it was
    written whole, so anything that does not check (a header, a record, its count) is damage,
    raised as ``CorruptionError`` naming ``source`` and the offset.
    """
    try:
        _, records = segment_records(buf, base)
        yield from records
    except Malformed as exc:
        raise CorruptionError(
            f"{source}: offset {exc.offset}: {exc.reason}", path=source, offset=exc.offset
        ) from None


def segment_copy_offsets(buf: bytes, base: int, numbers: Sequence[int]) -> list[int] | None:
    """Where each of records ``numbers`` (ascending, ``base`` or later) starts in a copy of a
    log segment from ``base`` (the end of the last record for the number after it), when the
    copy is plainly valid throughout: its header checks and every record from ``base`` to the
    end of ``buf`` is a whole DATA record whose checksums are right, checked in C.

    None whenever that is not so (a record beyond the copy asked for, an END record, damage),
    and always without the accelerator: then ``segment_copy_records`` reads the copy and says
    what, if anything, is wrong. A restore locates its range of each chunk this way without a
    Python step per record.
    """
    try:
        reader, _ = segment_records(buf, base)
    except Malformed:
        return None
    if not reader.reads_plain():
        return None
    offsets = []
    for number in numbers:
        wanted = number - base - reader.count
        if wanted < 0 or reader.skip_plain(wanted) != wanted:
            return None
        offsets.append(reader.good_offset)
    reader.skip_plain()
    return offsets if reader.good_offset == len(buf) else None


class Seed:
    """Writes one fresh data directory whose log starts at record ``base``.

    Use: ``snapshot_file()`` (only if ``base`` > 0) and write the snapshot's bytes to it, then
    ``seal_snapshot()``; ``append(number, payload)`` for every record from ``base`` on, in
    order; ``finish()``. ``close()`` (or the context manager) releases the directory's lock;
    without ``finish()`` the directory holds no manifest and is not a store.
    """

    def __init__(self, directory: str | os.PathLike[str], base: int) -> None:
        self.directory = os.fspath(directory)
        self.base = base
        active().makedirs(self.directory)
        if not list_dir(self.directory).is_empty():
            raise WalError(
                f"data dir {self.directory} is not empty: restore only into a new directory",
                path=self.directory,
            )
        self._lock_fd = lock_dir(self.directory)
        self._snapshot: BinaryIO | None = None
        self._has_snapshot = False
        self._writer: SegmentWriter | None = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self.next_number = base
        self.records = 0

    @property
    def _snapshot_path(self) -> str:
        return os.path.join(self.directory, snapshot_name(self.base) + TMP_SUFFIX)

    def snapshot_file(self) -> BinaryIO:
        """The file to write the snapshot's bytes into (a temp file until sealed)."""
        if self._snapshot is None:
            self._snapshot = open(self._snapshot_path, "wb")  # noqa: SIM115 (closed by seal)
        return self._snapshot

    def seal_snapshot(self, source: str) -> int:
        """Check the snapshot written (every record's checksum, END and its count, the base),
        make it durable and put it in place; its record count. ``source`` names where the
        bytes came from, for the ``CorruptionError`` that refuses a damaged one."""
        assert self._snapshot is not None, "snapshot_file() first"
        f, self._snapshot = self._snapshot, None
        try:
            f.flush()
            os.fsync(f.fileno())
        finally:
            f.close()
        with mapped(self._snapshot_path) as buf:
            try:
                count = snapshot_count(buf, self.base)
            except Malformed as exc:
                raise CorruptionError(
                    f"{source}: offset {exc.offset}: {exc.reason}", path=source, offset=exc.offset
                ) from None
        fs = active()
        fs.rename(self._snapshot_path, os.path.join(self.directory, snapshot_name(self.base)))
        fs.fsync_dir(self.directory)
        self._has_snapshot = True
        return count

    def append(self, number: int, payload: bytes) -> None:
        """Add record ``number`` (the next one: numbers continue without a gap)."""
        if number != self.next_number:
            raise ValueError(f"record {number} does not follow {self.next_number - 1}")
        if self._writer is None:
            self._writer = SegmentWriter.create(self.directory, self.base, zero_ahead=0)
        framed = encode_record(number, payload)
        self._pending.append(framed)
        self._pending_bytes += len(framed)
        self.next_number += 1
        self.records += 1
        if self._pending_bytes >= SEED_WRITE_BYTES:
            self._flush()

    def append_framed(self, first: int, last: int, framed: bytes) -> None:
        """Add records ``first..last`` already framed with those numbers (a byte range of a
        segment or a chunk that its reader checked): copied as they are, not framed again."""
        if first != self.next_number:
            raise ValueError(f"record {first} does not follow {self.next_number - 1}")
        if self._writer is None:
            self._writer = SegmentWriter.create(self.directory, self.base, zero_ahead=0)
        self._flush()
        self._writer.write(framed)
        self.next_number = last + 1
        self.records += last - first + 1

    def _flush(self) -> None:
        if self._pending and self._writer is not None:
            self._writer.write(b"".join(self._pending))
        self._pending, self._pending_bytes = [], 0

    def finish(self) -> None:
        """Make the records durable and write the manifest: the directory is a store now."""
        if self.base and not self._has_snapshot:
            raise ValueError(f"a log starting at record {self.base} needs its snapshot")
        if self._writer is None:
            self._writer = SegmentWriter.create(self.directory, self.base, zero_ahead=0)
        self._flush()
        self._writer.datasync()
        self._writer.close()
        manifest = Manifest(self.base if self._has_snapshot else None, self.base)
        write_atomically(self.directory, MANIFEST_NAME, [manifest.encode()])

    def abandon(self) -> None:
        """Remove every file the seed wrote (the directory was empty of them), then close."""
        self.close()
        listing = list_dir(self.directory)
        names = [*listing.segments.values(), *listing.snapshots.values(), *listing.temporaries]
        remove(self.directory, names + ([MANIFEST_NAME] if listing.manifest else []))

    def close(self) -> None:
        """Release the files and the lock (idempotent)."""
        if self._snapshot is not None:
            self._snapshot.close()
            self._snapshot = None
        if self._writer is not None:
            self._writer.close()
        if self._lock_fd >= 0:
            active().close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> Seed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
