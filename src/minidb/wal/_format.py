"""The on-disk encoding of minidb's data directory: file headers, record framing, checksums.

Pure code: bytes in, bytes out, no file system and no asyncio. ``docs/wal-format.md`` is the
specification; the constants below are its numbers.

A record is ``length u32 | crc u32 | type u8 | payload`` (little-endian). Its sequence number is
not stored: it is the file header's ``base`` plus the record's index in the file, and it is
covered by the checksum, so a record that lands in the wrong place fails its check.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import google_crc32c

FORMAT_VERSION = 1
MAGIC = b"minidb"

# The writer never frames a payload longer than this, so a longer length field is damage, not
# a record to wait for. 64 KiB is eight times the longest line the protocol accepts (8 KiB).
MAX_PAYLOAD_BYTES = 64 * 1024

_FILE_HEADER = struct.Struct("<6scBQ")  # magic, kind, version, base
_FILE_HEADER_CRC = struct.Struct("<I")
FILE_HEADER_SIZE = _FILE_HEADER.size + _FILE_HEADER_CRC.size  # 20 bytes

_RECORD_HEADER = struct.Struct("<IIB")  # length, crc, type
RECORD_HEADER_SIZE = _RECORD_HEADER.size  # 9 bytes
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


def encode_header(kind: FileKind, base: int) -> bytes:
    """The 20-byte header that starts every file of the data directory."""
    head = _FILE_HEADER.pack(MAGIC, kind.value, FORMAT_VERSION, base)
    return head + _FILE_HEADER_CRC.pack(crc32c(head))


@dataclass(frozen=True, slots=True)
class FileHeader:
    """A decoded file header."""

    kind: FileKind
    base: int


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
    if version != FORMAT_VERSION:
        raise Malformed(f"unsupported format version {version}", offset=0)
    if raw_kind != kind.value:
        raise Malformed(f"file kind {raw_kind!r}, expected {kind.value!r}", offset=0)
    return FileHeader(kind, base)


def encode_record(number: int, payload: bytes, rtype: RecordType = RecordType.DATA) -> bytes:
    """Frame one record; ``number`` is its sequence number (covered by the checksum, not stored)."""
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"record payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    crc = record_checksum(number, rtype, payload)
    return _RECORD_HEADER.pack(len(payload), crc, rtype) + payload


def encode_end(number: int, count: int) -> bytes:
    """The END record that closes a snapshot or manifest holding ``count`` DATA records."""
    return encode_record(number, _COUNT.pack(count), RecordType.END)


def decode_count(payload: bytes) -> int:
    """The DATA-record count carried by an END record's payload; ``ValueError`` if malformed."""
    if len(payload) != _COUNT.size:
        raise ValueError(f"END payload of {len(payload)} bytes, expected {_COUNT.size}")
    return int(_COUNT.unpack(payload)[0])


# ``(length, crc, type)`` of the record header at an offset (the caller checks the size); the
# bound method itself, because replay calls it once per record.
unpack_record_header = _RECORD_HEADER.unpack_from


def unpack_length(buf: bytes, offset: int) -> int:
    """The length field alone, for judging a record header that was cut short."""
    return int(_LENGTH.unpack_from(buf, offset)[0])
