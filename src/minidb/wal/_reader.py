"""Decoding a file's records, and judging how a file that ends badly ended.

Pure code over a bytes-like buffer (``bytes`` or an ``mmap``); it opens nothing. The one
judgement that lives here is *torn versus damaged* (``docs/wal-format.md``, "Torn tail versus
corruption"): the reader reports the first problem as ``Malformed`` with ``torn`` set when a
crash in the middle of an append could have produced it. Whether that is forgiven (only at the
end of the newest segment) is decided by the caller, which knows which file this is.

Version 2 judges by scanning: a bad record is torn only if no record header that verifies
(``record_header_after``) follows it. Version 1 has no header checksum, so it keeps its
zero-bytes rule and adds one scan: a length that runs past the end of the file is damage if an
intact record for a following sequence number starts later (``v1_record_after``).

The plainly valid common case (whole DATA records whose checksums are right, of a file framed as
version 2 and later) is read in C when the accelerator ``minidb.wal._creader`` is built:
``RecordReader.skip_plain`` and ``decode_plain`` move the reader past such a run, and the
iteration (the reference) reads whatever follows it, so every judgement stays in Python.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, NoReturn

import google_crc32c

from minidb._accelerators import load
from minidb.wal._format import (
    FILE_HEADER_SIZE,
    FORMAT_VERSION,
    LEGACY_VERSION,
    MAX_PAYLOAD_BYTES,
    RECORD_HEADER_SIZE,
    V1_MAX_PAYLOAD_BYTES,
    V1_RECORD_HEADER_SIZE,
    FileKind,
    Malformed,
    RecordType,
    decode_count,
    decode_header,
    header_checksum,
    record_checksum,
    record_header_size,
    unpack_length,
    unpack_record_header,
    unpack_v1_record_header,
)

_LENGTH_FIELD_BYTES = 4
_HEADER_CRC_SPAN = 5  # length u32 and type u8: what a version-2 header checksum covers
_extend = google_crc32c.extend
_pack_number_and_type = struct.Struct("<QB").pack
_TYPES = {int(t): t for t in RecordType}

# A version-2 header can only start where the type byte (offset 4) is DATA or END and the top
# byte of the length (offset 3) is below 0x40 (lengths are under 2^30): found with bytes.find
# (memchr), so bytes that hold neither type cost almost nothing to scan.
_TYPE_BYTES = (bytes([RecordType.DATA]), bytes([RecordType.END]))
_TYPE_AT = 4
_LENGTH_TOP_AT = 3
_LENGTH_TOP_LIMIT = (MAX_PAYLOAD_BYTES >> 24) + 1  # 0x40
# A version-1 record header has its type at offset 8; only DATA records follow a damaged one.
_V1_DATA_TYPE = bytes([RecordType.DATA])
_V1_TYPE_OFFSET = 8
V1_SCAN_NUMBERS = 16
"""How many following sequence numbers a version-1 candidate record is checked against: damage
swallowing more records than this before the next intact one looks torn (a documented limit)."""


_creader = load("minidb.wal._creader")
_ScanRun = Callable[[bytes, int, int, int], tuple[int, int]]
_DecodeRun = Callable[[bytes, int, int, int, tuple[Any, ...]], tuple[list[Any], int]]
ACCELERATED = _creader is not None
"""Whether ``RecordReader.skip_plain`` and ``decode_plain`` run (in C); without the accelerator
they take nothing and the iteration reads every record."""


class Record(NamedTuple):
    """One decoded record: its sequence number, where it starts in its file, type and payload,
    and its file's format version (which says how to decode the payload)."""

    number: int
    offset: int
    type: RecordType
    payload: bytes
    version: int = FORMAT_VERSION


def _all_zero(buf: bytes, start: int) -> bool:
    # Slicing an mmap copies, so compare in bounded chunks rather than materialising the rest.
    chunk = 1 << 20
    for pos in range(start, len(buf), chunk):
        piece = bytes(buf[pos : pos + chunk])
        if piece.count(0) != len(piece):
            return False
    return True


SCAN_MAX_CANDIDATES = 1 << 19
"""Offsets holding a DATA or END byte that the version-2 damage scan looks at before it gives up.
Past this it cannot rule out a record after the damage and judges as if it had found one: a
refusal, never a silent cut. About half a second of Python at worst; random bytes hold this
many in about 64 MiB (four default segments), so only long stretches of 0x01 or 0x02 bytes (a
large value made of them) exhaust it."""
V1_SCAN_BUDGET_BYTES = 64 * 1024 * 1024
"""Payload bytes the version-1 scan may checksum (it checksums a candidate once per number)."""


class Sighting(NamedTuple):
    """What the damage scan saw after a bad record: a header that verifies at ``offset``, or
    (``verified`` false) the place where its budget ran out with records not ruled out."""

    offset: int
    verified: bool


def _type_bytes(buf: bytes, start: int) -> Iterator[int]:
    """Every offset at or after ``start`` whose byte is DATA or END, in order."""
    data, end = (buf.find(t, start) for t in _TYPE_BYTES)
    while data >= 0 or end >= 0:
        if end < 0 or 0 <= data < end:
            yield data
            data = buf.find(_TYPE_BYTES[0], data + 1)
        else:
            yield end
            end = buf.find(_TYPE_BYTES[1], end + 1)


def record_header_after(buf: bytes, start: int) -> Sighting | None:
    """The first offset at or after ``start`` holding a version-2 record header that verifies,
    or ``None`` if no record can start after ``start``.

    "Could a valid record start here": a DATA or END type, a length in range and a matching
    header checksum; the payload need not be complete. Linear in the bytes after ``start``:
    only offsets whose type byte fits are looked at (at most ``SCAN_MAX_CANDIDATES``), and only
    those whose length fits too are checksummed.
    """
    last = len(buf) - RECORD_HEADER_SIZE  # the last offset with room for a whole header
    for seen, at in enumerate(_type_bytes(buf, start + _TYPE_AT), 1):
        q = at - _TYPE_AT
        if q > last:
            return None
        if buf[q + _LENGTH_TOP_AT] < _LENGTH_TOP_LIMIT:
            length, rtype, stored, _ = unpack_record_header(buf, q)
            if header_checksum(length, rtype) == stored:
                return Sighting(q, True)
        if seen >= SCAN_MAX_CANDIDATES:
            return Sighting(q, False)
    return None


def v1_record_after(buf: bytes, start: int, number: int) -> Sighting | None:
    """The first offset at or after ``start`` holding a whole version-1 DATA record that checks
    for one of the ``V1_SCAN_NUMBERS`` sequence numbers from ``number`` on (or where the scan's
    budget ran out), ``None`` if there is none."""
    size = len(buf)
    budget = V1_SCAN_BUDGET_BYTES
    q = buf.find(_V1_DATA_TYPE, start + _V1_TYPE_OFFSET) - _V1_TYPE_OFFSET
    while q >= start:
        if q + V1_RECORD_HEADER_SIZE > size:
            return None
        length, crc, rtype = unpack_v1_record_header(buf, q)
        end = q + V1_RECORD_HEADER_SIZE + length
        if length <= V1_MAX_PAYLOAD_BYTES and end <= size:
            payload = bytes(buf[q + V1_RECORD_HEADER_SIZE : end])
            for candidate in range(number, number + V1_SCAN_NUMBERS):
                if record_checksum(candidate, rtype, payload) == crc:
                    return Sighting(q, True)
            budget -= V1_SCAN_NUMBERS * (length + 1)
            if budget <= 0:
                return Sighting(q, False)
        q = buf.find(_V1_DATA_TYPE, q + _V1_TYPE_OFFSET + 1) - _V1_TYPE_OFFSET
    return None


def _followed(reason: str, sighting: Sighting) -> str:
    if sighting.verified:
        return f"{reason}, and a record follows at offset {sighting.offset}"
    return (
        f"{reason}, and records after it cannot be ruled out (the damage scan stopped at "
        f"offset {sighting.offset})"
    )


class RecordReader:
    """Iterate the records of one file of format ``version``, from ``start``, numbering them
    from ``base``.

    After the iteration stops (normally or with ``Malformed``), ``good_offset`` is the end of the
    last good record and ``count`` the number of good records: exactly what a truncation to the
    last good record keeps.
    """

    def __init__(
        self, buf: bytes, base: int, start: int = FILE_HEADER_SIZE, version: int = FORMAT_VERSION
    ) -> None:
        self._buf = buf
        self.base = base
        self.version = version
        self.good_offset = start
        self.count = 0
        self.sealed = False  # a segment closed by its END record (set by ``segment_records``)

    def __iter__(self) -> Iterator[Record]:
        return self._iter_v1() if self.version == LEGACY_VERSION else self._iter_v2()

    def _iter_v2(self) -> Iterator[Record]:
        # The checksums are computed inline (the same as ``header_checksum`` and
        # ``record_checksum``): replay time is mostly this loop, and calls dominate it.
        buf = self._buf
        size = len(buf)
        pos = self.good_offset
        number = self.base + self.count
        while pos < size:
            if size - pos < RECORD_HEADER_SIZE:
                raise Malformed(
                    f"record header cut short ({size - pos} bytes)", offset=pos, torn=True
                )
            length, rtype, header_crc, crc = unpack_record_header(buf, pos)
            if _extend(0, buf[pos : pos + _HEADER_CRC_SPAN]) != header_crc:
                # Nothing about this header can be trusted, its length least of all: torn only
                # if no record could start anywhere after it.
                self._judge(pos, pos + 1, f"record header checksum mismatch at record {number}")
            # The header is what the writer wrote, so these are damage, never a torn write.
            known = _TYPES.get(rtype)
            if known is None:
                raise Malformed(f"unknown record type {rtype}", offset=pos)
            if length > MAX_PAYLOAD_BYTES:
                raise Malformed(f"record length {length} out of range", offset=pos)
            end = pos + RECORD_HEADER_SIZE + length
            if end > size:
                raise Malformed(
                    f"record of {length} bytes runs {end - size} bytes past the end of the file",
                    offset=pos,
                    torn=True,
                )
            payload = bytes(buf[pos + RECORD_HEADER_SIZE : end])
            if _extend(0, _pack_number_and_type(number, rtype) + payload) != crc:
                self._judge(pos, end, f"checksum mismatch in record {number}")
            yield Record(number, pos, known, payload, self.version)
            pos = end
            number += 1
            self.good_offset = pos
            self.count += 1

    def _judge(self, pos: int, scan_from: int, reason: str) -> NoReturn:
        # A tear leaves nothing valid after it; a record that could start later means the bad
        # one is damage in the middle of the log.
        later = record_header_after(self._buf, scan_from)
        if later is None:
            if not bytes(self._buf[pos:]).strip(b"\0"):
                # What the writer writes ahead of its records (docs/wal-format.md, "Writing"),
                # or a file system that made a new size durable before its data.
                reason = "zeros after the last record"
            raise Malformed(reason, offset=pos, torn=True)
        raise Malformed(_followed(reason, later), offset=pos)

    def _iter_v1(self) -> Iterator[Record]:
        buf = self._buf
        size = len(buf)
        pos = self.good_offset
        number = self.base + self.count
        while pos < size:
            remaining = size - pos
            if remaining < V1_RECORD_HEADER_SIZE:
                if (
                    remaining >= _LENGTH_FIELD_BYTES
                    and unpack_length(buf, pos) > V1_MAX_PAYLOAD_BYTES
                ):
                    self._damaged_v1(pos, f"record length {unpack_length(buf, pos)} out of range")
                raise Malformed(
                    f"record header cut short ({remaining} bytes)", offset=pos, torn=True
                )
            length, crc, rtype = unpack_v1_record_header(buf, pos)
            if length > V1_MAX_PAYLOAD_BYTES:
                self._damaged_v1(pos, f"record length {length} out of range")
            known = _TYPES.get(rtype)
            if known is None:
                self._damaged_v1(pos, f"unknown record type {rtype}")
            end = pos + V1_RECORD_HEADER_SIZE + length
            if end > size:
                reason = f"record of {length} bytes runs {end - size} bytes past the end"
                # Without a header checksum the length may be damaged: intact records after it
                # mean it is (the classic flipped length bit), not a write cut short.
                later = v1_record_after(buf, pos + 1, number + 1)
                if later is not None:
                    raise Malformed(_followed(reason, later), offset=pos)
                raise Malformed(reason, offset=pos, torn=True)
            payload = bytes(buf[pos + V1_RECORD_HEADER_SIZE : end])
            if record_checksum(number, rtype, payload) != crc:
                # A final record failing its check is what an interrupted write leaves; one
                # followed by real data is damage the writer could not have produced.
                torn = _all_zero(buf, end)
                raise Malformed(f"checksum mismatch in record {number}", offset=pos, torn=torn)
            yield Record(number, pos, known, payload, self.version)
            pos = end
            number += 1
            self.good_offset = pos
            self.count += 1

    def _damaged_v1(self, pos: int, reason: str) -> NoReturn:
        # Zero-filled space is what a file system leaves when it extended a file before a crash.
        if _all_zero(self._buf, pos):
            raise Malformed("zero-filled tail", offset=pos, torn=True)
        raise Malformed(reason, offset=pos)

    def reads_plain(self) -> bool:
        """Whether ``skip_plain`` and ``decode_plain`` read here: the accelerator is built and
        the file is framed as versions 2 and later frame records (13-byte headers)."""
        return _creader is not None and record_header_size(self.version) == RECORD_HEADER_SIZE

    def skip_plain(self, limit: int | None = None) -> int:
        """Move past up to ``limit`` (default: all) DATA records that are plainly valid (whole,
        header and record checksums right) from where the reader stands, in C, as iterating
        would, without handing them out; how many. It stops before anything else (an END
        record, damage, a record cut short), which the iteration then reads and judges; without
        the accelerator, or in a version-1 file, it takes nothing."""
        if _creader is None or not self.reads_plain():
            return 0
        scan: _ScanRun = _creader.scan_run
        size = len(self._buf)
        self.good_offset, taken = scan(
            self._buf, self.good_offset, self.base + self.count, size if limit is None else limit
        )
        self.count += taken
        return taken

    def decode_plain(self, limit: int, spec: tuple[Any, ...]) -> list[Any]:
        """``skip_plain``, handing out the records passed, each decoded: ``entry(number, offset,
        ops)`` (``spec`` is ``(entry, put, remove, expire, flush, decode, decode_error)``: the
        named tuples to build, and the payload decoder of this file's version with the error it
        raises). Payloads C does not decode go to ``decode``; if it raises ``decode_error`` the
        run stops before that record, for the iteration to read and refuse. [] without the
        accelerator, in a version-1 file, or when the next record is not plainly valid."""
        if _creader is None or not self.reads_plain():
            return []
        decode: _DecodeRun = _creader.decode_run
        entries, self.good_offset = decode(
            self._buf, self.good_offset, self.base + self.count, limit, spec
        )
        self.count += len(entries)
        return entries


def segment_records(buf: bytes, base: int) -> tuple[RecordReader, Iterator[Record]]:
    """The reader and the DATA records of a log segment whose header is checked against ``base``.

    A version-2 segment may end with an END record (the log closes a segment before it starts
    the next one): its count must match, nothing may follow it, and the reader's ``sealed`` is
    then set (``good_offset`` includes it, ``count`` does not). Raises ``Malformed`` for a bad
    header (torn if the file is shorter than one or all zero bytes), an END in a version-1
    segment, or whatever the reader finds.
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
    reader = RecordReader(buf, base, version=header.version)

    def records() -> Iterator[Record]:
        for record in reader:
            if record.type is RecordType.DATA:
                yield record
                continue
            if header.version == LEGACY_VERSION:
                raise Malformed("END record in a version-1 log segment", offset=record.offset)
            _check_end(record, reader.count)
            end = record.offset + RECORD_HEADER_SIZE + len(record.payload)
            if end != len(buf):
                raise Malformed("bytes after the END record that closed the segment", offset=end)
            reader.good_offset, reader.sealed = end, True
            return

    return reader, records()


def _check_end(record: Record, count: int) -> None:
    """An END record must carry the count of DATA records before it."""
    try:
        expected = decode_count(record.payload)
    except ValueError as exc:
        raise Malformed(str(exc), offset=record.offset) from None
    if expected != count:
        raise Malformed(f"END says {expected} records, file has {count}", offset=record.offset)


def closed_records(buf: bytes, kind: FileKind, base: int | None = None) -> Iterator[Record]:
    """The DATA records of a file that must end with END (a snapshot or a manifest).

    Every problem is fatal here, so ``Malformed`` is raised with ``torn`` cleared: a snapshot or
    manifest is only ever renamed into place complete, so an incomplete one is damage.
    """
    _, records = closed_reader(buf, kind, base)
    yield from records


def closed_reader(
    buf: bytes, kind: FileKind, base: int | None = None
) -> tuple[RecordReader, Iterator[Record]]:
    """``closed_records`` with its reader, which may be moved on (``skip_plain``) before the
    records are taken: the header is checked here, the rest as the records are read."""
    try:
        header = decode_header(buf, kind)
        if base is not None and header.base != base:
            raise Malformed(
                f"header base {header.base} does not match the file name's {base}", offset=0
            )
    except Malformed as exc:
        exc.torn = False
        raise
    # Records of a closed file are numbered from 0: only segments continue the log's count.
    reader = RecordReader(buf, 0, version=header.version)
    return reader, _closed_data(reader, header.version, len(buf))


def _closed_data(reader: RecordReader, version: int, size: int) -> Iterator[Record]:
    try:
        for record in reader:
            if record.type is RecordType.END:
                # The reader counts a record after handing it out: here, the records before END.
                _check_end(record, reader.count)
                end = record.offset + record_header_size(version) + len(record.payload)
                if end != size:
                    raise Malformed("bytes after the END record", offset=end)
                return
            yield record
        raise Malformed("no END record: the file is incomplete", offset=reader.good_offset)
    except Malformed as exc:
        exc.torn = False
        raise
