"""Version-1 data directories: still read byte for byte, then continued in version 2.

The version-1 files are written here with the format module's legacy encoder (the log itself
never writes version 1), exactly as the first release of the format laid them out.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from minidb.errors import CorruptionError
from minidb.wal import Put, Remove, open_log
from minidb.wal._files import MANIFEST_NAME, segment_name, snapshot_name
from minidb.wal._format import (
    FILE_HEADER_SIZE,
    LEGACY_VERSION,
    V1_RECORD_HEADER_SIZE,
    FileKind,
    encode_end,
    encode_header,
    encode_record,
)

from .conftest import flip_bit, rec

V1 = LEGACY_VERSION
TEXT = [b"SET users a abc\r", b"SET users b two  spaces ", b"DEL users a", b"SET users c "]
OPS = [
    [Put(b"users", b"a", b"abc\r")],
    [Put(b"users", b"b", b"two  spaces ")],
    [Remove(b"users", b"a")],
    [Put(b"users", b"c", b"")],
]


def _v1_file(kind: FileKind, base: int, payloads: list[bytes], *, numbered_from: int) -> bytes:
    body = b"".join(
        encode_record(numbered_from + i, p, version=V1) for i, p in enumerate(payloads)
    )
    return encode_header(kind, base, V1) + body


def _v1_manifest(snapshot: int | None, segment: int) -> bytes:
    name = "none" if snapshot is None else f"{snapshot:016x}"
    text = f"snapshot {name}\nsegment {segment:016x}\n".encode()
    return (
        encode_header(FileKind.MANIFEST, 0, V1)
        + encode_record(0, text, version=V1)
        + encode_end(1, 1, version=V1)
    )


def write_v1_dir(
    data_dir: pathlib.Path, segments: dict[int, list[bytes]], snapshot: list[bytes] | None = None
) -> None:
    """A version-1 data directory: optional snapshot at the first segment's base, segments."""
    data_dir.mkdir(parents=True)
    first = min(segments)
    if snapshot is not None:
        raw = _v1_file(FileKind.SNAPSHOT, first, snapshot, numbered_from=0)
        raw += encode_end(len(snapshot), len(snapshot), version=V1)
        (data_dir / snapshot_name(first)).write_bytes(raw)
    (data_dir / MANIFEST_NAME).write_bytes(
        _v1_manifest(first if snapshot is not None else None, first)
    )
    for base, payloads in segments.items():
        raw = _v1_file(FileKind.SEGMENT, base, payloads, numbered_from=base)
        (data_dir / segment_name(base)).write_bytes(raw)


def _replay(data_dir: pathlib.Path) -> list[list[object]]:
    log, replay = open_log(data_dir)
    got: list[list[object]] = [list(ops) for ops in replay]
    log.close()
    return got


def _version(path: pathlib.Path) -> int:
    return path.read_bytes()[7]


def test_compat_v1_directory_replays_the_same_values_byte_for_byte(
    data_dir: pathlib.Path,
) -> None:
    """A version-1 log replays every write exactly, a value's trailing CR included."""
    write_v1_dir(data_dir, {0: TEXT})
    assert _replay(data_dir) == OPS


def test_compat_v1_directory_continues_in_a_new_v2_segment(data_dir: pathlib.Path) -> None:
    """Appends after opening a version-1 log go to a fresh version-2 segment; the old one
    is left as it was, and both replay in order."""
    write_v1_dir(data_dir, {0: TEXT})
    old = (data_dir / segment_name(0)).read_bytes()
    log, replay = open_log(data_dir)
    assert len(list(replay)) == 4
    log.append(rec(b"SET users d after"))
    log.sync()
    log.close()
    assert (data_dir / segment_name(0)).read_bytes() == old
    assert _version(data_dir / segment_name(4)) == 2
    assert _replay(data_dir) == [*OPS, [Put(b"users", b"d", b"after")]]


def test_compat_v1_checkpoint_writes_v2_snapshot_and_manifest(data_dir: pathlib.Path) -> None:
    """The first checkpoint replaces the version-1 files by a version-2 snapshot and manifest."""
    write_v1_dir(data_dir, {0: TEXT[:2]}, snapshot=[b"SET users z 1"])
    log, replay = open_log(data_dir)
    assert [list(ops) for ops in replay] == [[Put(b"users", b"z", b"1")], *OPS[:2]]
    log.checkpoint([rec(b"SET users z 1"), rec(b"SET users a abc\r")])
    log.close()
    assert {_version(p) for p in data_dir.iterdir() if p.name != "LOCK"} == {2}
    assert _replay(data_dir) == [[Put(b"users", b"z", b"1")], [Put(b"users", b"a", b"abc\r")]]


def test_compat_v1_torn_tail_is_cut_before_the_v2_segment_starts(data_dir: pathlib.Path) -> None:
    """A torn version-1 tail is cut, so the old segment is whole once it is no longer newest."""
    write_v1_dir(data_dir, {0: TEXT})
    segment = data_dir / segment_name(0)
    os.truncate(segment, segment.stat().st_size - 2)
    log, replay = open_log(data_dir)
    assert [list(ops) for ops in replay] == OPS[:3]
    log.append(rec(b"SET users e 5"))
    log.sync()
    log.close()
    assert _replay(data_dir) == [*OPS[:3], [Put(b"users", b"e", b"5")]]


def test_compat_v1_empty_newest_segment_is_rewritten_as_v2(data_dir: pathlib.Path) -> None:
    """A version-1 segment holding no record is written again, in version 2, under its name."""
    write_v1_dir(data_dir, {0: []})
    log, replay = open_log(data_dir)
    assert list(replay) == []
    log.append(rec(b"SET b k v"))
    log.sync()
    log.close()
    assert _version(data_dir / segment_name(0)) == 2
    assert _replay(data_dir) == [[Put(b"b", b"k", b"v")]]


def test_compat_v1_flipped_length_bit_refuses(data_dir: pathlib.Path) -> None:
    """Version 1 without a header checksum: XOR 0x80 into byte 21 (the first length) makes the
    record claim 32 KiB more, but the intact records after it make it corruption, not a tear."""
    write_v1_dir(data_dir, {0: [b"SET b k1 one", b"SET b k2 two", b"SET b k3 three"]})
    flip_bit(data_dir / segment_name(0), 21, 0x80)
    with pytest.raises(CorruptionError) as info:
        _replay(data_dir)
    assert info.value.offset == FILE_HEADER_SIZE
    assert info.value.path is not None and info.value.path.endswith(segment_name(0))


def test_compat_v1_cut_last_record_is_still_torn(data_dir: pathlib.Path) -> None:
    """Version 1: a last record cut inside its payload stays a torn tail (no false refusal)."""
    write_v1_dir(data_dir, {0: TEXT})
    segment = data_dir / segment_name(0)
    last = segment.stat().st_size - V1_RECORD_HEADER_SIZE - len(TEXT[-1])
    os.truncate(segment, last + V1_RECORD_HEADER_SIZE + 1)
    assert _replay(data_dir) == OPS[:3]
    assert segment.stat().st_size == last


def test_compat_v1_non_write_payload_refuses(data_dir: pathlib.Path) -> None:
    """A version-1 record that passed its checksum but is not SET or DEL is corruption."""
    write_v1_dir(data_dir, {0: [b"SET b k v", b"GET b k"]})
    with pytest.raises(CorruptionError, match="does not decode") as info:
        _replay(data_dir)
    assert info.value.offset == FILE_HEADER_SIZE + V1_RECORD_HEADER_SIZE + len(b"SET b k v")
