"""Torn versus damaged: how the reader judges a file that ends badly, and fuzzing it."""

from __future__ import annotations

import random
import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.wal._format import (
    LEGACY_VERSION,
    MAX_PAYLOAD_BYTES,
    FileKind,
    Malformed,
    RecordType,
    crc32c,
    encode_end,
    encode_header,
    encode_record,
)
from minidb.wal._reader import (
    SCAN_MAX_CANDIDATES,
    RecordReader,
    closed_records,
    segment_records,
)

PAYLOADS = [b"SET b k1 one", b"SET b k2 two", b"DEL b k1"]


def _segment(payloads: list[bytes] = PAYLOADS) -> bytes:
    return encode_header(FileKind.SEGMENT, 0) + b"".join(
        encode_record(i, p) for i, p in enumerate(payloads)
    )


def _read(buf: bytes) -> tuple[list[bytes], Malformed | None, int]:
    reader, records = segment_records(buf, 0)
    got: list[bytes] = []
    try:
        for record in records:
            got.append(record.payload)
    except Malformed as exc:
        return got, exc, reader.good_offset
    return got, None, reader.good_offset


def test_reader_reads_a_clean_segment() -> None:
    """A segment written whole yields every record and no problem."""
    got, problem, good = _read(_segment())
    assert got == PAYLOADS and problem is None and good == len(_segment())


@pytest.mark.parametrize("cut", range(1, 13 + len(PAYLOADS[-1])))
def test_reader_reports_every_cut_inside_the_last_record_as_torn(cut: int) -> None:
    """Cutting the file anywhere inside the last record is a torn tail at that record."""
    full = _segment()
    last = len(_segment(PAYLOADS[:-1]))
    got, problem, good = _read(full[: last + cut])
    assert got == PAYLOADS[:-1]
    assert problem is not None and problem.torn and problem.offset == last == good


def test_reader_reports_a_zero_filled_tail_as_torn() -> None:
    """Zeros after the last record (a file extended before a crash) are torn, not damage."""
    got, problem, _ = _read(_segment() + bytes(100))
    assert got == PAYLOADS and problem is not None and problem.torn


def test_reader_reports_an_out_of_range_length_as_damage() -> None:
    """A verified header with a length the writer could never produce is damage, even last."""
    length = MAX_PAYLOAD_BYTES + 1
    head = struct.pack("<IB", length, 1)
    header = head + struct.pack("<II", crc32c(head), 0)
    got, problem, _ = _read(_segment() + header)
    assert got == PAYLOADS and problem is not None and not problem.torn
    assert "out of range" in problem.reason


def test_reader_reports_an_unknown_type_as_damage() -> None:
    """A type byte other than DATA and END breaks the header checksum; records follow: damage."""
    raw = bytearray(_segment())
    raw[20 + 4] = 9
    _, problem, _ = _read(bytes(raw))
    assert problem is not None and not problem.torn and problem.offset == 20


def test_reader_reports_a_verified_unknown_type_as_damage() -> None:
    """A header that verifies but names an unknown type is damage even as the last record."""
    head = struct.pack("<IB", 0, 9)
    got, problem, _ = _read(_segment() + head + struct.pack("<II", crc32c(head), 0))
    assert got == PAYLOADS and problem is not None and not problem.torn


def test_reader_reports_a_bad_header_checksum_at_the_end_as_torn() -> None:
    """A damaged header with nothing that could be a record after it is a torn write."""
    last = len(_segment(PAYLOADS[:-1]))
    raw = bytearray(_segment())
    raw[last + 1] ^= 0x80  # the last record's length
    got, problem, good = _read(bytes(raw))
    assert got == PAYLOADS[:-1] and problem is not None and problem.torn and good == last


def test_reader_reports_a_bad_header_checksum_before_records_as_damage() -> None:
    """A flipped length bit in the first record is damage: the records after it still verify."""
    raw = bytearray(_segment())
    raw[21] ^= 0x80
    got, problem, _ = _read(bytes(raw))
    assert got == [] and problem is not None and not problem.torn and problem.offset == 20


def test_reader_reports_garbage_without_a_header_as_torn() -> None:
    """Bytes after the last record in which no header verifies (stale blocks) are torn."""
    got, problem, _ = _read(_segment() + b"\xde\xad\xbe\xef" * 8)
    assert got == PAYLOADS and problem is not None and problem.torn


def test_reader_reports_a_bad_payload_followed_by_a_record_as_damage() -> None:
    """A complete record failing its payload checksum with a record after it is damage."""
    raw = bytearray(_segment())
    raw[20 + 13 + 2] ^= 1
    got, problem, _ = _read(bytes(raw))
    assert got == [] and problem is not None and not problem.torn and problem.offset == 20


def test_reader_judges_a_v1_length_flip_followed_by_records_as_damage() -> None:
    """Version 1: a length running past the end is torn, unless intact records follow it."""
    buf = encode_header(FileKind.SEGMENT, 0, LEGACY_VERSION) + b"".join(
        encode_record(i, p, version=LEGACY_VERSION) for i, p in enumerate(PAYLOADS)
    )
    raw = bytearray(buf)
    raw[21] ^= 0x80
    _, problem, _ = _read(bytes(raw))
    assert problem is not None and not problem.torn and problem.offset == 20
    cut = bytearray(buf[: len(buf) - 2])  # the last record cut short: still torn
    _, problem, _ = _read(bytes(cut))
    assert problem is not None and problem.torn


def test_reader_v2_scan_of_a_random_tail_is_torn_and_quick() -> None:
    """Megabytes of random bytes after a damaged header hold no verifying header: torn."""
    tail = random.Random(7).randbytes(4 << 20)
    reader = RecordReader(_segment() + b"\xff" * 13 + tail, 0)
    started = time.monotonic()
    with pytest.raises(Malformed) as info:
        list(reader)
    assert info.value.torn and time.monotonic() - started < 10


def test_reader_v2_scan_gives_up_on_a_tail_full_of_candidates_and_refuses() -> None:
    """A tail where every other offset could be a header exhausts the scan's budget, which
    then refuses (records cannot be ruled out) instead of cutting."""
    tail = b"\x00\x01" * (SCAN_MAX_CANDIDATES + 100)
    reader = RecordReader(_segment() + b"\xff" * 13 + tail, 0)
    started = time.monotonic()
    with pytest.raises(Malformed, match="cannot be ruled out") as info:
        list(reader)
    assert not info.value.torn and time.monotonic() - started < 20


def test_reader_accepts_an_end_record_closing_a_segment() -> None:
    """A version-2 segment may end with an END holding its count: the reader marks it sealed."""
    buf = _segment() + encode_end(3, 3)
    reader, records = segment_records(buf, 0)
    assert [r.payload for r in records] == PAYLOADS
    assert reader.sealed and reader.count == 3 and reader.good_offset == len(buf)


def test_reader_refuses_a_wrong_or_followed_end_in_a_segment() -> None:
    """An END with the wrong count, or with bytes after it, is damage, never a torn tail."""
    _, problem, _ = _read(_segment() + encode_end(3, 2))
    assert problem is not None and not problem.torn and "END says 2" in problem.reason
    _, problem, _ = _read(_segment() + encode_end(3, 3) + b"\x00")
    assert problem is not None and not problem.torn and "after the END" in problem.reason


def test_reader_refuses_an_end_record_in_a_v1_segment() -> None:
    """Version-1 segments had no END record: one there is damage."""
    buf = encode_header(FileKind.SEGMENT, 0, LEGACY_VERSION) + encode_record(
        0, b"", RecordType.END, LEGACY_VERSION
    )
    _, problem, _ = _read(buf)
    assert problem is not None and not problem.torn


def test_closed_records_require_an_end_record() -> None:
    """A snapshot cut exactly at a record boundary is still incomplete, and never torn."""
    buf = encode_header(FileKind.SNAPSHOT, 4) + encode_record(0, b"SET b k v")
    with pytest.raises(Malformed, match="no END") as info:
        list(closed_records(buf, FileKind.SNAPSHOT, 4))
    assert not info.value.torn


def test_closed_records_refuse_bytes_after_end() -> None:
    """Nothing may follow the END record of a closed file."""
    buf = encode_header(FileKind.SNAPSHOT, 0) + encode_end(0, 0) + b"x"
    with pytest.raises(Malformed, match="after the END"):
        list(closed_records(buf, FileKind.SNAPSHOT, 0))


@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(st.binary(max_size=400))
def test_reader_random_bytes_yield_records_or_a_clean_error(tail: bytes) -> None:
    """Random bytes after a valid header never crash the reader: records, or ``Malformed``."""
    buf = encode_header(FileKind.SEGMENT, 0) + tail
    reader = RecordReader(buf, 0)
    try:
        for _ in reader:
            pass
    except Malformed as exc:
        assert exc.offset == reader.good_offset
    assert 20 <= reader.good_offset <= len(buf)


@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(st.binary(max_size=200), st.integers(min_value=0, max_value=2))
def test_reader_random_bytes_in_any_file_kind_give_a_clean_error(raw: bytes, which: int) -> None:
    """Random bytes given as a whole file of any kind only ever raise ``Malformed``."""
    kind = (FileKind.SEGMENT, FileKind.SNAPSHOT, FileKind.MANIFEST)[which]
    try:
        if kind is FileKind.SEGMENT:
            list(segment_records(raw, 0)[1])
        else:
            list(closed_records(raw, kind))
    except Malformed:
        pass


@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(st.data())
def test_reader_mutated_segment_never_yields_a_changed_record(data: st.DataObject) -> None:
    """After any single-byte change, every record the reader yields is one that was written."""
    buf = bytearray(_segment())
    pos = data.draw(st.integers(min_value=20, max_value=len(buf) - 1))
    buf[pos] ^= data.draw(st.integers(min_value=1, max_value=255))
    got, _, _ = _read(bytes(buf))
    assert got == PAYLOADS[: len(got)]


@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(st.data())
def test_reader_any_damage_before_the_last_record_is_never_torn(data: st.DataObject) -> None:
    """Version 2: any changed byte in a record that has a record after it is reported as
    damage at that record, never as a torn tail that would drop the records after it."""
    payloads = data.draw(st.lists(st.binary(max_size=60), min_size=2, max_size=8))
    buf = bytearray(_segment(payloads))
    last = len(_segment(payloads[:-1]))
    pos = data.draw(st.integers(min_value=20, max_value=last - 1))
    buf[pos] ^= data.draw(st.integers(min_value=1, max_value=255))
    got, problem, good = _read(bytes(buf))
    assert problem is not None and not problem.torn, problem
    assert got == payloads[: len(got)] and problem.offset == good <= pos
