"""The record and header encoding: round trips, checksums that cover the number, limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.wal._format import (
    FILE_HEADER_SIZE,
    LEGACY_VERSION,
    MAX_PAYLOAD_BYTES,
    RECORD_HEADER_SIZE,
    V1_RECORD_HEADER_SIZE,
    FileKind,
    Malformed,
    RecordType,
    crc32c,
    decode_count,
    decode_header,
    encode_end,
    encode_header,
    encode_record,
    encode_records,
)
from minidb.wal._reader import RecordReader


def test_crc32c_matches_the_castagnoli_check_value() -> None:
    """CRC32C of "123456789" is the published check value 0xE3069283."""
    assert crc32c(b"123456789") == 0xE3069283


def test_encode_header_round_trips() -> None:
    """A header decodes to the kind and base it was encoded with."""
    header = decode_header(encode_header(FileKind.SEGMENT, 0x1F40), FileKind.SEGMENT)
    assert (header.kind, header.base) == (FileKind.SEGMENT, 0x1F40)
    assert len(encode_header(FileKind.SNAPSHOT, 0)) == FILE_HEADER_SIZE


def test_decode_header_rejects_the_wrong_kind() -> None:
    """A snapshot header is not accepted where a segment is expected."""
    with pytest.raises(Malformed, match="kind"):
        decode_header(encode_header(FileKind.SNAPSHOT, 0), FileKind.SEGMENT)


def test_decode_header_reports_a_short_file_as_torn() -> None:
    """A file cut inside its header is torn (a crash while creating it), not damaged."""
    with pytest.raises(Malformed) as info:
        decode_header(encode_header(FileKind.SEGMENT, 0)[:7], FileKind.SEGMENT)
    assert info.value.torn


def test_decode_header_rejects_a_flipped_bit() -> None:
    """Any changed bit of the header fails its checksum or its magic."""
    raw = bytearray(encode_header(FileKind.SEGMENT, 5))
    raw[10] ^= 1
    with pytest.raises(Malformed) as info:
        decode_header(bytes(raw), FileKind.SEGMENT)
    assert not info.value.torn


def test_encode_record_layout() -> None:
    """A record is a 13-byte header (length, type, header crc, crc) and then the payload."""
    framed = encode_record(7, b"SET b k v")
    assert len(framed) == RECORD_HEADER_SIZE + 9 == 22
    assert framed[:4] == (9).to_bytes(4, "little")
    assert framed[4] == RecordType.DATA
    assert framed[5:9] == crc32c(framed[:5]).to_bytes(4, "little")
    assert framed[RECORD_HEADER_SIZE:] == b"SET b k v"


def test_encode_record_checksum_covers_the_sequence_number() -> None:
    """The same payload at another position has another checksum, so a moved record fails."""
    assert encode_record(1, b"DEL b k")[9:13] != encode_record(2, b"DEL b k")[9:13]


def test_encode_record_header_checksum_covers_length_and_type() -> None:
    """The header checksum changes with the length and with the type, never with the number."""
    assert encode_record(1, b"ab")[5:9] != encode_record(1, b"abc")[5:9]
    assert encode_record(1, b"ab")[5:9] != encode_record(1, b"ab", RecordType.END)[5:9]
    assert encode_record(1, b"ab")[5:9] == encode_record(2, b"xy")[5:9]


def test_encode_record_writes_the_legacy_layout_for_version_1() -> None:
    """Version 1 (for compatibility tests) is the 9-byte header: length, crc, type."""
    framed = encode_record(7, b"SET b k v", version=LEGACY_VERSION)
    assert len(framed) == V1_RECORD_HEADER_SIZE + 9
    assert framed[8] == RecordType.DATA
    assert decode_header(encode_header(FileKind.SEGMENT, 3, 1), FileKind.SEGMENT).version == 1


def test_max_payload_holds_a_16_mib_value_with_a_64_kib_key_many_times() -> None:
    """The maximum payload fits an MSET of dozens of maximal values, and a u32 length."""
    assert MAX_PAYLOAD_BYTES >= 32 * (16 * 1024 * 1024 + 64 * 1024)
    assert MAX_PAYLOAD_BYTES < 1 << 30


def test_encode_record_refuses_an_oversized_payload() -> None:
    """The writer never frames a payload longer than the maximum the reader accepts."""

    class Huge(bytes):  # claims a length without allocating a gigabyte
        def __len__(self) -> int:
            return MAX_PAYLOAD_BYTES + 1

    with pytest.raises(ValueError):
        encode_record(0, Huge())
    with pytest.raises(ValueError):
        encode_record(0, b"x" * (64 * 1024 + 1), version=LEGACY_VERSION)


def test_encode_end_round_trips_the_count() -> None:
    """An END record carries the count of records before it."""
    end = encode_end(3, 3)
    assert decode_count(end[RECORD_HEADER_SIZE:]) == 3


@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(
    base=st.integers(min_value=0, max_value=2**63),
    payloads=st.lists(st.binary(max_size=300), max_size=40),
)
def test_encode_record_round_trips_through_the_reader(base: int, payloads: list[bytes]) -> None:
    """Whatever is framed, numbered from any base, reads back identical and in order."""
    buf = encode_header(FileKind.SEGMENT, base) + b"".join(
        encode_record(base + i, p) for i, p in enumerate(payloads)
    )
    reader = RecordReader(buf, base)
    records = list(reader)
    assert [r.payload for r in records] == payloads
    assert [r.number for r in records] == [base + i for i in range(len(payloads))]
    assert reader.good_offset == len(buf)


@given(st.integers(0, 1 << 40), st.lists(st.binary(max_size=64), max_size=8))
@settings(max_examples=100, deadline=None)
def test_encode_records_frames_each_payload_as_encode_record_does(
    first: int, payloads: list[bytes]
) -> None:
    """Framing a group at once gives, record for record, what ``encode_record`` gives."""
    assert encode_records(first, payloads) == [
        encode_record(first + i, payload) for i, payload in enumerate(payloads)
    ]


def test_encode_records_refuses_an_over_long_payload(monkeypatch: pytest.MonkeyPatch) -> None:
    """A payload over the maximum refuses the whole group, as ``encode_record`` refuses one."""
    from minidb.wal import _format

    monkeypatch.setattr(_format, "MAX_PAYLOAD_BYTES", 4)
    with pytest.raises(ValueError, match="exceeds 4"):
        encode_records(0, [b"ok", b"too long"])
