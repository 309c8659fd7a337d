"""Decoding a file's records, and judging how a file that ends badly ended.

Pure code over a bytes-like buffer (``bytes`` or an ``mmap``); it opens nothing. The one
judgement that lives here is *torn versus damaged* (``docs/wal-format.md``, "Torn tail versus
corruption"): the reader reports the first problem as ``Malformed`` with ``torn`` set when a
crash in the middle of an append could have produced it. Whether that is forgiven (only at the
end of the newest segment) is decided by the caller, which knows which file this is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple, NoReturn

from minidb.wal._format import (
    FILE_HEADER_SIZE,
    MAX_PAYLOAD_BYTES,
    RECORD_HEADER_SIZE,
    FileKind,
    Malformed,
    RecordType,
    decode_count,
    decode_header,
    record_checksum,
    unpack_length,
    unpack_record_header,
)

_LENGTH_FIELD_BYTES = 4
_TYPES = {int(t): t for t in RecordType}


class Record(NamedTuple):
    """One decoded record: its sequence number, where it starts in its file, type and payload."""

    number: int
    offset: int
    type: RecordType
    payload: bytes


def _all_zero(buf: bytes, start: int) -> bool:
    # Slicing an mmap copies, so compare in bounded chunks rather than materialising the rest.
    chunk = 1 << 20
    for pos in range(start, len(buf), chunk):
        piece = bytes(buf[pos : pos + chunk])
        if piece.count(0) != len(piece):
            return False
    return True


class RecordReader:
    """Iterate the records of one file, from ``start``, numbering them from ``base``.

    After the iteration stops (normally or with ``Malformed``), ``good_offset`` is the end of the
    last good record and ``count`` the number of good records: exactly what a truncation to the
    last good record keeps.
    """

    def __init__(self, buf: bytes, base: int, start: int = FILE_HEADER_SIZE) -> None:
        self._buf = buf
        self.base = base
        self.good_offset = start
        self.count = 0

    def __iter__(self) -> Iterator[Record]:
        buf = self._buf
        size = len(buf)
        pos = self.good_offset
        number = self.base + self.count
        while pos < size:
            remaining = size - pos
            if remaining < RECORD_HEADER_SIZE:
                if remaining >= _LENGTH_FIELD_BYTES and unpack_length(buf, pos) > MAX_PAYLOAD_BYTES:
                    self._damaged(pos, f"record length {unpack_length(buf, pos)} out of range")
                raise Malformed(
                    f"record header cut short ({remaining} bytes)", offset=pos, torn=True
                )
            length, crc, rtype = unpack_record_header(buf, pos)
            if length > MAX_PAYLOAD_BYTES:
                self._damaged(pos, f"record length {length} out of range")
            known = _TYPES.get(rtype)
            if known is None:
                # The type is the header's last byte: zero there and after is a header whose
                # sector was not written while the file's size was (zeros from inside it).
                self._damaged(pos, f"unknown record type {rtype}", pos + RECORD_HEADER_SIZE - 1)
            end = pos + RECORD_HEADER_SIZE + length
            if end > size:
                raise Malformed(
                    f"record of {length} bytes runs {end - size} bytes past the end of the file",
                    offset=pos,
                    torn=True,
                )
            payload = bytes(buf[pos + RECORD_HEADER_SIZE : end])
            if record_checksum(number, rtype, payload) != crc:
                # A final record failing its check is what an interrupted write leaves; one
                # followed by real data is damage the writer could not have produced.
                torn = _all_zero(buf, end)
                raise Malformed(f"checksum mismatch in record {number}", offset=pos, torn=torn)
            yield Record(number, pos, known, payload)
            pos = end
            number += 1
            self.good_offset = pos
            self.count += 1

    def _damaged(self, pos: int, reason: str, zeros_from: int | None = None) -> NoReturn:
        # Zero-filled space is what a file system leaves when it extended a file before a crash;
        # it may begin inside the record (``zeros_from``) when the header was torn at a sector.
        if _all_zero(self._buf, pos if zeros_from is None else zeros_from):
            raise Malformed("zero-filled tail", offset=pos, torn=True)
        raise Malformed(reason, offset=pos)


def segment_records(buf: bytes, base: int) -> tuple[RecordReader, Iterator[Record]]:
    """The reader and the DATA records of a log segment whose header is checked against ``base``.

    Raises ``Malformed`` for a bad header (torn if the file is shorter than one or all zero
    bytes), an END record (segments have none), or whatever the reader finds.
    """
    if len(buf) >= FILE_HEADER_SIZE and _all_zero(buf, 0):
        # The header is fsynced before any record is written, so a segment holding nothing but
        # zeros is one whose creation was cut short on a file system that extended the file
        # before writing it (its size reached the disk, its header did not): no records.
        raise Malformed("zero-filled segment", offset=0, torn=True)
    header = decode_header(buf, FileKind.SEGMENT)
    if header.base != base:
        raise Malformed(
            f"header base {header.base} does not match the file name's {base}", offset=0
        )
    reader = RecordReader(buf, base)

    def records() -> Iterator[Record]:
        for record in reader:
            if record.type is not RecordType.DATA:
                raise Malformed("END record in a log segment", offset=record.offset)
            yield record

    return reader, records()


def closed_records(buf: bytes, kind: FileKind, base: int | None = None) -> Iterator[Record]:
    """The DATA records of a file that must end with END (a snapshot or a manifest).

    Every problem is fatal here, so ``Malformed`` is raised with ``torn`` cleared: a snapshot or
    manifest is only ever renamed into place complete, so an incomplete one is damage.
    """
    try:
        header = decode_header(buf, kind)
        if base is not None and header.base != base:
            raise Malformed(
                f"header base {header.base} does not match the file name's {base}", offset=0
            )
        # Records of a closed file are numbered from 0: only segments continue the log's count.
        reader = RecordReader(buf, 0)
        for record in reader:
            if record.type is RecordType.END:
                try:
                    expected = decode_count(record.payload)
                except ValueError as exc:
                    raise Malformed(str(exc), offset=record.offset) from None
                # The reader counts a record after handing it out: here, the records before END.
                if expected != reader.count:
                    raise Malformed(
                        f"END says {expected} records, file has {reader.count}",
                        offset=record.offset,
                    )
                end = record.offset + RECORD_HEADER_SIZE + len(record.payload)
                if end != len(buf):
                    raise Malformed("bytes after the END record", offset=end)
                return
            yield record
        raise Malformed("no END record: the file is incomplete", offset=reader.good_offset)
    except Malformed as exc:
        exc.torn = False
        raise
