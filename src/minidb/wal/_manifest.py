"""The manifest: which snapshot and which first segment make up the live log.

Pure encoding and decoding; ``_files.write_atomically`` puts it on disk. The manifest is the one
file whose replacement (an atomic rename) is the moment a checkpoint takes effect.
"""

from __future__ import annotations

from dataclasses import dataclass

from minidb.wal._format import FileKind, Malformed, encode_end, encode_header, encode_record
from minidb.wal._reader import closed_records

_NONE = "none"


@dataclass(frozen=True, slots=True)
class Manifest:
    """The live log: the snapshot to load first (``None`` for none) and the first live segment."""

    snapshot: int | None
    segment: int

    def encode(self) -> bytes:
        """The whole manifest file: header, one DATA record, END."""
        snapshot = _NONE if self.snapshot is None else f"{self.snapshot:016x}"
        text = f"snapshot {snapshot}\nsegment {self.segment:016x}\n"
        return (
            encode_header(FileKind.MANIFEST, 0)
            + encode_record(0, text.encode("ascii"))
            + encode_end(1, 1)
        )


def decode_manifest(buf: bytes) -> Manifest:
    """Decode a manifest file; raise ``Malformed`` if anything about it is wrong."""
    records = list(closed_records(buf, FileKind.MANIFEST))
    if len(records) != 1:
        raise Malformed(f"manifest holds {len(records)} records, expected 1", offset=0)
    record = records[0]
    fields: dict[str, str] = {}
    try:
        for line in record.payload.decode("ascii").splitlines():
            name, value = line.split(" ")
            fields[name] = value
        snapshot = None if fields["snapshot"] == _NONE else int(fields["snapshot"], 16)
        segment = int(fields["segment"], 16)
    except (UnicodeDecodeError, ValueError, KeyError):
        raise Malformed(
            f"unreadable manifest text {record.payload!r}", offset=record.offset
        ) from None
    # A snapshot covers every record below its number and the log resumes right there; with no
    # snapshot the log must start at the beginning. Anything else would skip records.
    if segment != (snapshot or 0):
        raise Malformed(
            f"first segment {segment:x} does not follow snapshot {snapshot}", offset=record.offset
        )
    return Manifest(snapshot, segment)
