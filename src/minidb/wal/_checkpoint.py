"""Snapshots: the whole store as PUT records (one per key, with its expiry), closed by END.

Pure encoding and decoding; ``DurableLog.checkpoint`` writes the bytes with a temp file, fsync,
rename and directory fsync. Because a snapshot is framed like a segment, one reader and one
``minidb wal dump`` serve both. Unlike a segment, a snapshot must be complete: it only ever
appears under its final name whole, so a missing END or any bad record is damage.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from minidb.wal._format import FileKind, encode_end, encode_header, encode_record
from minidb.wal._reader import Record, RecordReader, closed_reader, closed_records


def snapshot_chunks(base: int, records: Iterable[bytes]) -> Iterator[bytes]:
    """The bytes of a snapshot consistent with the log below ``base``: header, records, END."""
    yield encode_header(FileKind.SNAPSHOT, base)
    count = 0
    for payload in records:
        yield encode_record(count, payload)  # numbered from 0, like every closed file
        count += 1
    yield encode_end(count, count)


def snapshot_records(buf: bytes, base: int) -> Iterator[Record]:
    """The records of a snapshot file named for ``base``; ``Malformed`` if it is not whole."""
    return closed_records(buf, FileKind.SNAPSHOT, base)


def snapshot_reader(buf: bytes, base: int) -> tuple[RecordReader, Iterator[Record]]:
    """``snapshot_records`` with its reader (``closed_reader``): the header is checked here."""
    return closed_reader(buf, FileKind.SNAPSHOT, base)


def snapshot_count(buf: bytes, base: int) -> int:
    """How many DATA records the snapshot file named for ``base`` holds, every record checked as
    ``snapshot_records`` checks it (``Malformed`` likewise); the plainly valid ones in C when the
    accelerator is built."""
    reader, records = snapshot_reader(buf, base)
    reader.skip_plain()
    for _ in records:  # the reference reads what C left: END, or what is wrong
        pass
    return reader.count
