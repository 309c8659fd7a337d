"""The on-disk encoding of minidb's data directory: file headers, record framing, checksums.

Pure code: bytes in, bytes out, no file system and no asyncio. ``docs/wal-format.md`` is the
specification; the constants below are its numbers.

A record of versions 2 and 3 is ``length u32 | type u8 | header_crc u32 | crc u32 | payload``
(little-endian): the header checksum lets a reader recognise a damaged length before trusting
it. Version 3 differs from version 2 only in what its payloads may hold (typed values, see
``_payload``). Version 1 (read, and written only by tests) is ``length u32 | crc u32 | type u8 |
payload``.
A record's sequence number is not stored: it is the file header's ``base`` plus the record's
index in the file, and it is covered by ``crc``, so a record in the wrong place fails its check.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import google_crc32c

FORMAT_VERSION = 3
"""The version every new file is written in: version 2's framing, payloads of typed values."""
STRINGS_VERSION = 2
"""The format before typed values: the same framing, payloads of string operations only (still
read; tests write it to check compatibility)."""
LEGACY_VERSION = 1
"""The first format, still read (``docs/wal-format.md``, "Version 1 (legacy)")."""
READABLE_VERSIONS = (LEGACY_VERSION, STRINGS_VERSION, FORMAT_VERSION)
MAGIC = b"minidb"

# The writer never frames a payload longer than this, so a longer (verified) length is damage.
# A record must hold one atomic group of writes: a 16 MiB value with a 64 KiB key, or an MSET or
# transaction of many; 1 GiB - 1 holds about 60 maximal keys and keeps the length's top two bits
# zero, which the damage scan uses as a cheap filter.
MAX_PAYLOAD_BYTES = (1 << 30) - 1
# Version 1's limit: eight times the longest line its protocol accepted (8 KiB).
V1_MAX_PAYLOAD_BYTES = 64 * 1024

_FILE_HEADER = struct.Struct("<6scBQ")  # magic, kind, version, base
_FILE_HEADER_CRC = struct.Struct("<I")
FILE_HEADER_SIZE = _FILE_HEADER.size + _FILE_HEADER_CRC.size  # 20 bytes

_RECORD_HEADER = struct.Struct("<IBII")  # length, type, header_crc, crc
RECORD_HEADER_SIZE = _RECORD_HEADER.size  # 13 bytes
_LENGTH_AND_TYPE = struct.Struct("<IB")  # what header_crc covers
_CRCS = struct.Struct("<II")  # header_crc, crc
_V1_RECORD_HEADER = struct.Struct("<IIB")  # length, crc, type
V1_RECORD_HEADER_SIZE = _V1_RECORD_HEADER.size  # 9 bytes
_LENGTH = struct.Struct("<I")
_NUMBER_AND_TYPE = struct.Struct("<QB")
_COUNT = struct.Struct("<Q")


class FileKind(enum.Enum):
    """The one-byte kind in a file header: which of the data directory's files this is."""

    SEGMENT = b"L"
    SNAPSHOT = b"S"
    MANIFEST = b"M"


class RecordType(enum.IntEnum):
    """The type byte of a record; zero is deliberately invalid so zero-filled space never parses."""

    DATA = 1
    END = 2


class Malformed(Exception):
    """Bytes that are not what the format says, at ``offset`` of the file being decoded.

    ``torn`` says whether a crash in the middle of an append could have produced these bytes
    (an incomplete final record, or a final record failing its checksum); whether a torn
    record is forgiven depends on which file it is in, which only the caller knows. Translated
    into ``CorruptionError`` (with the path) at the file-system boundary.
    """

    def __init__(self, reason: str, *, offset: int, torn: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.offset = offset
        self.torn = torn


_crc32c_extend = google_crc32c.extend


def crc32c(data: bytes, initial: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data``, continuing from ``initial``."""
    return int(google_crc32c.extend(initial, data))


def record_checksum(number: int, rtype: int, payload: bytes) -> int:
    """The checksum of a record: CRC32C over its sequence number, its type and its payload."""
    # One call over a joined buffer: replay runs this per record and call overhead dominates.
    return int(_crc32c_extend(0, _NUMBER_AND_TYPE.pack(number, rtype) + payload))


def header_checksum(length: int, rtype: int) -> int:
    """The checksum of a version-2 record header: CRC32C over its length and type fields."""
    return int(_crc32c_extend(0, _LENGTH_AND_TYPE.pack(length, rtype)))


def encode_header(kind: FileKind, base: int, version: int = FORMAT_VERSION) -> bytes:
    """The 20-byte header that starts every file of the data directory.

    ``version`` is for tests that write legacy files; the log itself writes only the current.
    """
    head = _FILE_HEADER.pack(MAGIC, kind.value, version, base)
    return head + _FILE_HEADER_CRC.pack(crc32c(head))


@dataclass(frozen=True, slots=True)
class FileHeader:
    """A decoded file header."""

    kind: FileKind
    base: int
    version: int


_VERSION_AT = 7


def peek_version(buf: bytes) -> int | None:
    """The version byte of a file header, unchecked (for reports), or None if there is none."""
    return buf[_VERSION_AT] if len(buf) > _VERSION_AT else None


def decode_header(buf: bytes, kind: FileKind) -> FileHeader:
    """Decode and check the header at the start of ``buf``; raise ``Malformed`` at offset 0.

    A file shorter than a header is reported as torn: a crash while creating it can leave that.
    """
    if len(buf) < FILE_HEADER_SIZE:
        raise Malformed(
            f"file shorter than its {FILE_HEADER_SIZE}-byte header", offset=0, torn=True
        )
    head = bytes(buf[: _FILE_HEADER.size])
    (stored,) = _FILE_HEADER_CRC.unpack_from(buf, _FILE_HEADER.size)
    magic, raw_kind, version, base = _FILE_HEADER.unpack(head)
    if magic != MAGIC:
        raise Malformed(f"bad magic {magic!r}", offset=0)
    if crc32c(head) != stored:
        raise Malformed("file header checksum mismatch", offset=0)
    if version not in READABLE_VERSIONS:
        raise Malformed(f"unsupported format version {version}", offset=0)
    if raw_kind != kind.value:
        raise Malformed(f"file kind {raw_kind!r}, expected {kind.value!r}", offset=0)
    return FileHeader(kind, base, version)


_pack_length_and_type = _LENGTH_AND_TYPE.pack
_pack_crcs = _CRCS.pack
_pack_number_and_type = _NUMBER_AND_TYPE.pack


def encode_record(
    number: int,
    payload: bytes,
    rtype: RecordType = RecordType.DATA,
    version: int = FORMAT_VERSION,
) -> bytes:
    """Frame one record; ``number`` is its sequence number (covered by ``crc``, not stored).

    ``version`` 1 or 2 is for tests that write older files. Raises ``ValueError`` for a payload
    over the version's maximum.
    """
    length = len(payload)
    if version in (FORMAT_VERSION, STRINGS_VERSION):
        if length > MAX_PAYLOAD_BYTES:
            raise ValueError(f"record payload of {length} bytes exceeds {MAX_PAYLOAD_BYTES}")
        # Inlined checksums: this runs once per appended record.
        head = _pack_length_and_type(length, rtype)
        crc = _crc32c_extend(0, _pack_number_and_type(number, rtype) + payload)
        return head + _pack_crcs(_crc32c_extend(0, head), crc) + payload
    if version != LEGACY_VERSION:
        raise ValueError(f"cannot write format version {version}")
    if length > V1_MAX_PAYLOAD_BYTES:
        raise ValueError(f"record payload of {length} bytes exceeds {V1_MAX_PAYLOAD_BYTES}")
    crc = record_checksum(number, rtype, payload)
    return _V1_RECORD_HEADER.pack(length, crc, rtype) + payload


def encode_records(first_number: int, payloads: list[bytes]) -> list[bytes]:
    """Frame ``payloads`` as DATA records numbered from ``first_number``, in order: what
    ``encode_record`` gives for each, in one call (the owner frames a whole group at once, so
    the per-record cost is only the packing and checksums, not a call and its checks).

    Raises ``ValueError`` if a payload is over ``MAX_PAYLOAD_BYTES`` (nothing is returned).
    """
    rtype = int(RecordType.DATA)  # a plain int packs faster than the enum member
    pack_head, pack_number, pack_crcs, extend = (
        _pack_length_and_type, _pack_number_and_type, _pack_crcs, _crc32c_extend,
    )  # fmt: skip
    framed = []
    number = first_number
    for payload in payloads:
        length = len(payload)
        if length > MAX_PAYLOAD_BYTES:
            raise ValueError(f"record payload of {length} bytes exceeds {MAX_PAYLOAD_BYTES}")
        head = pack_head(length, rtype)
        crc = extend(0, pack_number(number, rtype) + payload)
        framed.append(head + pack_crcs(extend(0, head), crc) + payload)
        number += 1
    return framed


def encode_end(number: int, count: int, version: int = FORMAT_VERSION) -> bytes:
    """The END record that closes a snapshot, a manifest or a (version-2 or later) segment
    the log moved on from, holding ``count`` DATA records."""
    return encode_record(number, _COUNT.pack(count), RecordType.END, version)


def record_header_size(version: int) -> int:
    """The size of a record header in a file of ``version``."""
    return V1_RECORD_HEADER_SIZE if version == LEGACY_VERSION else RECORD_HEADER_SIZE


def decode_count(payload: bytes) -> int:
    """The DATA-record count carried by an END record's payload; ``ValueError`` if malformed."""
    if len(payload) != _COUNT.size:
        raise ValueError(f"END payload of {len(payload)} bytes, expected {_COUNT.size}")
    return int(_COUNT.unpack(payload)[0])


# ``(length, type, header_crc, crc)`` of a version-2 record header at an offset (the caller
# checks the size); the bound method itself, because replay calls it once per record.
unpack_record_header = _RECORD_HEADER.unpack_from
# ``(length, crc, type)`` of a version-1 record header.
unpack_v1_record_header = _V1_RECORD_HEADER.unpack_from


def unpack_length(buf: bytes, offset: int) -> int:
    """The length field alone, for judging a record header that was cut short."""
    return int(_LENGTH.unpack_from(buf, offset)[0])
