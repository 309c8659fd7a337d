"""Older data directories: still read byte for byte, then continued in the current version.

The version-1 files are written here with the format module's legacy encoder (the log itself
never writes version 1), exactly as the first release of the format laid them out. The
version-2 directory (``data/v2``) was written by minidb before typed values (commit 46845e0):
a snapshot, a segment closed by END, an open newest segment, every string operation.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from minidb.errors import CorruptionError
from minidb.wal import (
    KIND_HASH,
    KIND_SET,
    AddElements,
    Expire,
    Flush,
    ListPop,
    ListPush,
    Put,
    PutContainer,
    Remove,
    Rename,
    encode_ops,
    open_log,
)
from minidb.wal._files import MANIFEST_NAME, segment_name, snapshot_name
from minidb.wal._format import (
    FILE_HEADER_SIZE,
    FORMAT_VERSION,
    LEGACY_VERSION,
    STRINGS_VERSION,
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


def test_compat_v1_directory_continues_in_a_new_segment(data_dir: pathlib.Path) -> None:
    """Appends after opening a version-1 log go to a fresh segment of the current version; the
    old one is left as it was, and both replay in order."""
    write_v1_dir(data_dir, {0: TEXT})
    old = (data_dir / segment_name(0)).read_bytes()
    log, replay = open_log(data_dir)
    assert len(list(replay)) == 4
    log.append(rec(b"SET users d after"))
    log.sync()
    log.close()
    assert (data_dir / segment_name(0)).read_bytes() == old
    assert _version(data_dir / segment_name(4)) == FORMAT_VERSION
    assert _replay(data_dir) == [*OPS, [Put(b"users", b"d", b"after")]]


def test_compat_v1_checkpoint_writes_current_snapshot_and_manifest(data_dir: pathlib.Path) -> None:
    """The first checkpoint replaces the version-1 files by a current snapshot and manifest."""
    write_v1_dir(data_dir, {0: TEXT[:2]}, snapshot=[b"SET users z 1"])
    log, replay = open_log(data_dir)
    assert [list(ops) for ops in replay] == [[Put(b"users", b"z", b"1")], *OPS[:2]]
    log.checkpoint([rec(b"SET users z 1"), rec(b"SET users a abc\r")])
    log.close()
    assert {_version(p) for p in data_dir.iterdir() if p.name != "LOCK"} == {FORMAT_VERSION}
    assert _replay(data_dir) == [[Put(b"users", b"z", b"1")], [Put(b"users", b"a", b"abc\r")]]


def test_compat_v1_torn_tail_is_cut_before_the_new_segment_starts(data_dir: pathlib.Path) -> None:
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


def test_compat_v1_empty_newest_segment_is_rewritten_in_the_current_version(
    data_dir: pathlib.Path,
) -> None:
    """A version-1 segment holding no record is written again, in the current version, under its
    name."""
    write_v1_dir(data_dir, {0: []})
    log, replay = open_log(data_dir)
    assert list(replay) == []
    log.append(rec(b"SET b k v"))
    log.sync()
    log.close()
    assert _version(data_dir / segment_name(0)) == FORMAT_VERSION
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


# -- version 2 (strings only), as minidb wrote it before typed values --------------------------

V2_DIR = pathlib.Path(__file__).parent / "data" / "v2"
FAR = 4102444800000  # 2100-01-01, in ms
V2_OPS = [
    [Put(b"0", b"a", b"1")],
    [Put(b"0", b"b", b"two words\r\n"), Put(b"0", b"c", b"3", FAR)],
    [Remove(b"0", b"a")],
    [Put(b"users", b"\x00\xff", b"bin\x00")],
    [Expire(b"0", b"b", FAR)],
    [Put(b"tmp", b"x", b"y")],
    [Flush(b"tmp")],
    [Expire(b"0", b"c", None)],
]
"""What the version-2 directory replays: its snapshot's two records, then its segments'."""
TYPED = [
    PutContainer(b"0", b"h", KIND_HASH, (b"f", b"v"), FAR),
    AddElements(b"0", b"s", KIND_SET, (b"m",)),
    Rename(b"0", b"h", b"h2"),
    ListPush(b"0", b"l", True, (b"a", b"b")),
    ListPop(b"0", b"l", False, 1),
]


def _v2_copy(data_dir: pathlib.Path) -> None:
    data_dir.mkdir(parents=True)
    for source in V2_DIR.iterdir():
        name = MANIFEST_NAME if source.name == "MANIFEST.v2" else source.name
        (data_dir / name).write_bytes(source.read_bytes())


def test_compat_v2_directory_written_before_typed_values_replays(data_dir: pathlib.Path) -> None:
    """The directory minidb wrote in version 2 replays every operation exactly, and its files
    say version 2."""
    _v2_copy(data_dir)
    assert {_version(p) for p in data_dir.iterdir()} == {STRINGS_VERSION}
    assert _replay(data_dir) == V2_OPS


def test_compat_v2_directory_continues_in_version_3_with_typed_values(
    data_dir: pathlib.Path,
) -> None:
    """Opening a version-2 directory closes its open segment with END (so it reads as closed,
    not cut, once another follows), appends typed values to a version-3 segment, and every
    later open replays both in order."""
    _v2_copy(data_dir)
    newest = data_dir / segment_name(5)
    before = newest.read_bytes()
    log, replay = open_log(data_dir)
    assert len(list(replay)) == len(V2_OPS)
    log.append(encode_ops(TYPED))
    log.sync()
    log.close()
    assert newest.read_bytes().startswith(before) and newest.stat().st_size > len(before)
    assert _version(newest) == STRINGS_VERSION
    assert _version(data_dir / segment_name(8)) == FORMAT_VERSION
    for _ in range(2):  # a second open must not take the closed version-2 segment for cut
        assert _replay(data_dir) == [*V2_OPS, TYPED]


def test_compat_v2_checkpoint_replaces_the_files_by_version_3(data_dir: pathlib.Path) -> None:
    """The first checkpoint after a version-2 directory writes a version-3 snapshot and
    manifest, and the version-2 files go."""
    _v2_copy(data_dir)
    log, replay = open_log(data_dir)
    list(replay)
    log.checkpoint([encode_ops(TYPED)])
    log.close()
    assert {_version(p) for p in data_dir.iterdir() if p.name != "LOCK"} == {FORMAT_VERSION}
    assert _replay(data_dir) == [TYPED]


def test_compat_v2_payload_holding_a_typed_operation_refuses(data_dir: pathlib.Path) -> None:
    """A version-2 segment whose checksummed record holds a version-3 tag is corruption: no
    version-2 writer wrote one."""
    data_dir.mkdir(parents=True)
    (data_dir / MANIFEST_NAME).write_bytes(
        encode_header(FileKind.MANIFEST, 0, STRINGS_VERSION)
        + encode_record(0, b"snapshot none\nsegment 0000000000000000\n", version=STRINGS_VERSION)
        + encode_end(1, 1, version=STRINGS_VERSION)
    )
    (data_dir / segment_name(0)).write_bytes(
        encode_header(FileKind.SEGMENT, 0, STRINGS_VERSION)
        + encode_record(0, encode_ops([Put(b"0", b"k", b"v")]), version=STRINGS_VERSION)
        + encode_record(1, encode_ops(TYPED[:1]), version=STRINGS_VERSION)
    )
    with pytest.raises(CorruptionError, match="unknown operation tag 6") as info:
        _replay(data_dir)
    assert info.value.path is not None and info.value.path.endswith(segment_name(0))
