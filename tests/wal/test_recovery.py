"""Replay of a damaged data directory: one named test per corruption case of the format spec.

A torn tail of the newest segment is cut and the log stays appendable; every other problem
refuses to open with ``CorruptionError`` naming the file and the byte offset.
"""

from __future__ import annotations

import os
import pathlib
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minidb.errors import CorruptionError
from minidb.wal import open_log
from minidb.wal._format import RECORD_HEADER_SIZE, FileKind, encode_header, encode_record

from .conftest import (
    RECORDS,
    flip,
    flip_bit,
    patch,
    rec,
    record_offsets,
    replay_all,
    segments,
    write_log,
)

LAST = record_offsets(RECORDS)[-1]
MIDDLE = record_offsets(RECORDS)[2]


def _expect_corruption(data_dir: pathlib.Path, name: str, offset: int) -> CorruptionError:
    with pytest.raises(CorruptionError) as info:
        log, replay = open_log(data_dir)
        try:
            list(replay)
        finally:
            log.close()
    err = info.value
    assert err.path is not None and os.path.basename(err.path) == name, err
    assert err.offset == offset, err
    assert name in str(err) and f"offset {offset}" in str(err)
    return err


def _expect_torn_cut(data_dir: pathlib.Path, cut_at: int) -> None:
    """Replay drops only the last record, cuts the file there, and the log stays appendable."""
    segment = segments(data_dir)[-1]
    log, got = replay_all(data_dir)
    assert got == RECORDS[:-1]
    assert log.torn_tail is not None and log.torn_tail.good_offset == cut_at
    assert os.path.getsize(segment) == cut_at
    log.append(rec(b"SET users after cut"))
    log.sync()
    log.close()
    log, got = replay_all(data_dir)
    log.close()
    assert got == [*RECORDS[:-1], rec(b"SET users after cut")]


def test_recovery_torn_header_is_cut(five_records: pathlib.Path) -> None:
    """A last record cut inside its 9-byte header is a torn tail."""
    os.truncate(segments(five_records)[0], LAST + 5)
    _expect_torn_cut(five_records, LAST)


def test_recovery_torn_payload_is_cut(five_records: pathlib.Path) -> None:
    """A last record cut inside its payload is a torn tail."""
    os.truncate(segments(five_records)[0], LAST + RECORD_HEADER_SIZE + 3)
    _expect_torn_cut(five_records, LAST)


def test_recovery_bad_checksum_in_last_record_is_cut(five_records: pathlib.Path) -> None:
    """A complete last record failing its checksum is what an interrupted write leaves."""
    flip(segments(five_records)[0], LAST + RECORD_HEADER_SIZE + 1)
    _expect_torn_cut(five_records, LAST)


def test_recovery_zero_filled_tail_is_cut(five_records: pathlib.Path) -> None:
    """Zeros after the last good record are torn, whatever their length."""
    segment = segments(five_records)[0]
    with open(segment, "ab") as f:
        f.write(bytes(4096))
    log, got = replay_all(five_records)
    log.close()
    assert got == RECORDS
    assert log.statistics().torn_bytes_cut == 4096


def test_recovery_bad_checksum_mid_file_refuses(five_records: pathlib.Path) -> None:
    """A record failing its checksum with good records after it is corruption."""
    flip(segments(five_records)[0], MIDDLE + RECORD_HEADER_SIZE + 2)
    err = _expect_corruption(five_records, segments(five_records)[0].name, MIDDLE)
    assert "checksum" in str(err)


def test_recovery_bad_length_refuses(five_records: pathlib.Path) -> None:
    """A damaged length mid-file fails its header checksum; the records after it refuse."""
    patch(segments(five_records)[0], MIDDLE, b"\xff\xff\xff\x7f")
    err = _expect_corruption(five_records, segments(five_records)[0].name, MIDDLE)
    assert "header checksum" in str(err)


def test_recovery_bad_length_in_last_record_is_cut(five_records: pathlib.Path) -> None:
    """A damaged header with nothing that could be a record after it is a torn write."""
    patch(segments(five_records)[0], LAST, b"\x00\x00\x10\x00")
    _expect_torn_cut(five_records, LAST)


def test_recovery_flipped_length_bit_in_first_record_refuses(five_records: pathlib.Path) -> None:
    """The classic flipped length bit (byte 21) no longer hides the four records after it."""
    flip_bit(segments(five_records)[0], 21, 0x80)
    err = _expect_corruption(five_records, segments(five_records)[0].name, 20)
    assert "header checksum" in str(err)


def test_recovery_bad_payload_checksum_with_a_header_after_refuses(
    five_records: pathlib.Path,
) -> None:
    """A complete record failing its checksum is damage when a record header verifies later."""
    segment = segments(five_records)[0]
    flip(segment, LAST + RECORD_HEADER_SIZE + 1)
    with open(segment, "ab") as f:
        f.write(b"\x00" * 7 + encode_record(99, b"stray")[:RECORD_HEADER_SIZE])
    _expect_corruption(five_records, segment.name, LAST)


def test_recovery_garbage_after_valid_tail_is_cut(five_records: pathlib.Path) -> None:
    """Non-zero bytes after the last record in which no header verifies are a torn tail."""
    segment = segments(five_records)[0]
    end = os.path.getsize(segment)
    with open(segment, "ab") as f:
        f.write(b"\xde\xad\xbe\xef" * 8)
    log, got = replay_all(five_records)
    log.close()
    assert got == RECORDS and os.path.getsize(segment) == end


def test_recovery_garbage_holding_a_record_header_refuses(five_records: pathlib.Path) -> None:
    """Garbage after the last record that contains a verifying header is corruption."""
    segment = segments(five_records)[0]
    end = os.path.getsize(segment)
    with open(segment, "ab") as f:
        f.write(b"\xde\xad\xbe\xef" + encode_record(5, rec(b"SET users x y")))
    _expect_corruption(five_records, segment.name, end)


def test_recovery_undecodable_payload_refuses(data_dir: pathlib.Path) -> None:
    """A record whose checksum holds but whose payload is no operation list is corruption."""
    write_log(data_dir, [RECORDS[0], b"\x09not an operation", RECORDS[1]])
    second = record_offsets([RECORDS[0]])[0] + RECORD_HEADER_SIZE + len(RECORDS[0])
    err = _expect_corruption(data_dir, "wal-0000000000000000.log", second)
    assert "does not decode" in str(err)


def test_recovery_torn_tail_in_older_segment_refuses(data_dir: pathlib.Path) -> None:
    """Only the newest segment may be torn: a cut older one lost acknowledged records."""
    write_log(data_dir, RECORDS, segment_bytes=60)
    first = segments(data_dir)[0]
    assert len(segments(data_dir)) >= 2
    os.truncate(first, os.path.getsize(first) - 3)
    with pytest.raises(CorruptionError) as info:
        replay_all(data_dir)
    assert info.value.path is not None and info.value.path.endswith(first.name)


def test_recovery_missing_segment_refuses(data_dir: pathlib.Path) -> None:
    """A gap after a segment closed by its END record is a missing segment, named in the error."""
    write_log(data_dir, RECORDS, segment_bytes=60)
    files = segments(data_dir)
    assert len(files) >= 3
    files[1].unlink()
    err = _expect_corruption(data_dir, files[1].name, 0)
    assert "missing" in str(err) and files[0].name in str(err)


def test_recovery_older_segment_cut_at_a_record_boundary_refuses(data_dir: pathlib.Path) -> None:
    """An older segment that lost its last record whole is named, at its new end."""
    write_log(data_dir, RECORDS, segment_bytes=100)  # two records per segment
    first, second = segments(data_dir)[:2]
    records_in_first = int(second.name[4:20], 16)
    assert records_in_first >= 2
    cut = record_offsets(RECORDS[:records_in_first])[-1]
    os.truncate(first, cut)
    err = _expect_corruption(data_dir, first.name, cut)
    assert "cut short" in str(err)


def test_recovery_older_segment_missing_only_its_end_refuses(data_dir: pathlib.Path) -> None:
    """An older segment cut exactly before its closing END lost no record, but is still damage."""
    write_log(data_dir, RECORDS, segment_bytes=100)
    first = segments(data_dir)[0]
    end_record = RECORD_HEADER_SIZE + 8
    os.truncate(first, os.path.getsize(first) - end_record)
    err = _expect_corruption(data_dir, first.name, os.path.getsize(first))
    assert "END" in str(err)


def test_recovery_newest_segment_closed_by_end_continues_in_a_new_one(
    data_dir: pathlib.Path,
) -> None:
    """A crash between closing a segment and creating the next leaves the newest closed: the
    log starts the next segment and appends there."""
    write_log(data_dir, RECORDS, segment_bytes=100)
    newest = segments(data_dir)[-1]
    newest.unlink()  # the segment whose creation the crash prevented
    log, got = replay_all(data_dir)
    log.append(rec(b"SET users after 1"))
    log.sync()
    log.close()
    assert got == RECORDS[: int(newest.name[4:20], 16)]
    assert replay_all(data_dir)[1] == [*got, rec(b"SET users after 1")]


def test_recovery_v1_gap_names_the_older_segment_and_the_missing_one(
    data_dir: pathlib.Path,
) -> None:
    """Version 1 closed no segment: a gap names the older segment and the possibly missing one."""
    from .test_compat import write_v1_dir

    write_v1_dir(data_dir, {0: [b"SET b a 1", b"SET b b 2"], 3: [b"SET b c 3"]})
    err = _expect_corruption(data_dir, "wal-0000000000000000.log", os.path.getsize(
        data_dir / "wal-0000000000000000.log"
    ))
    assert "cut short" in str(err) and "wal-0000000000000002.log is missing" in str(err)


def test_recovery_overlapping_segments_refuse(data_dir: pathlib.Path) -> None:
    """A segment starting inside the previous one's records is refused, naming it."""
    write_log(data_dir, RECORDS, segment_bytes=100)  # two records per segment: 0, 2, 4
    second = segments(data_dir)[2]
    base = int(second.name[4:20], 16)
    moved = second.with_name(f"wal-{base - 1:016x}.log")
    raw = bytearray(second.read_bytes())
    raw[:20] = encode_header(FileKind.SEGMENT, base - 1)
    moved.write_bytes(bytes(raw))
    second.unlink()
    _expect_corruption(data_dir, moved.name, 0)


def test_recovery_missing_first_segment_refuses(data_dir: pathlib.Path) -> None:
    """The segment the manifest names must exist."""
    write_log(data_dir, RECORDS)
    segments(data_dir)[0].unlink()
    _expect_corruption(data_dir, "wal-0000000000000000.log", 0)


def _checkpointed(data_dir: pathlib.Path) -> pathlib.Path:
    log, _ = replay_all(data_dir) if data_dir.exists() else open_log(data_dir)
    for record in RECORDS:
        log.append(record)
    log.sync()
    log.checkpoint([rec(b"SET users a 1"), rec(b"SET users b 2")])
    log.append(rec(b"DEL users a"))
    log.sync()
    log.close()
    (snapshot,) = data_dir.glob("snapshot-*.snap")
    return snapshot


def test_recovery_corrupt_snapshot_refuses(data_dir: pathlib.Path) -> None:
    """A flipped byte in the snapshot refuses to start: a snapshot is never partly trusted."""
    snapshot = _checkpointed(data_dir)
    flip(snapshot, 20 + RECORD_HEADER_SIZE + 4)
    _expect_corruption(data_dir, snapshot.name, 20)


def test_recovery_truncated_snapshot_refuses(data_dir: pathlib.Path) -> None:
    """A snapshot without its END record is incomplete even if it ends on a record boundary."""
    snapshot = _checkpointed(data_dir)
    end_record = RECORD_HEADER_SIZE + 8
    os.truncate(snapshot, os.path.getsize(snapshot) - end_record)
    err = _expect_corruption(data_dir, snapshot.name, os.path.getsize(snapshot))
    assert "END" in str(err)


def test_recovery_corrupt_manifest_refuses(data_dir: pathlib.Path) -> None:
    """A damaged manifest refuses at open, before any record is read."""
    _checkpointed(data_dir)
    flip(data_dir / "MANIFEST", 40)
    with pytest.raises(CorruptionError) as info:
        open_log(data_dir)
    assert info.value.path is not None and info.value.path.endswith("MANIFEST")
    assert info.value.offset is not None


def test_recovery_missing_manifest_refuses(five_records: pathlib.Path) -> None:
    """Segments without a manifest are not mistaken for a fresh store."""
    (five_records / "MANIFEST").unlink()
    with pytest.raises(CorruptionError, match="MANIFEST"):
        open_log(five_records)


def test_recovery_interrupted_creation_is_a_fresh_store(data_dir: pathlib.Path) -> None:
    """A directory holding only an empty first segment (no manifest yet) starts fresh."""
    write_log(data_dir, [])
    (data_dir / "MANIFEST").unlink()
    log, got = replay_all(data_dir)
    log.append(rec(b"SET b k v"))
    log.sync()
    log.close()
    assert got == []
    assert replay_all(data_dir)[1] == [rec(b"SET b k v")]


def test_recovery_torn_segment_header_is_recreated(data_dir: pathlib.Path) -> None:
    """A newest segment cut inside its header (crash while rolling) is written again."""
    write_log(data_dir, RECORDS, segment_bytes=60)
    newest = segments(data_dir)[-1]
    os.truncate(newest, 7)
    log, got = replay_all(data_dir)
    log.append(rec(b"SET b after roll"))
    log.sync()
    log.close()
    assert got == RECORDS[:-1]
    assert replay_all(data_dir)[1] == [*RECORDS[:-1], rec(b"SET b after roll")]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_recovery_random_segment_bytes_replay_or_refuse_cleanly(raw: bytes) -> None:
    """Any bytes as the newest segment either replay (maybe cut) or raise ``CorruptionError``."""
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = pathlib.Path(tmp) / "data"
        write_log(data_dir, [])
        segment = segments(data_dir)[0]
        with open(segment, "ab") as f:
            f.write(raw)
        try:
            log, _ = replay_all(data_dir)
        except CorruptionError as exc:
            assert exc.path is not None and exc.offset is not None
        else:
            log.close()
            assert os.path.getsize(segment) <= 20 + len(raw)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_recovery_any_cut_after_the_last_sync_keeps_every_synced_record(
    data: st.DataObject,
) -> None:
    """A crash that loses any part of the unsynced bytes still replays every synced record."""
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = pathlib.Path(tmp) / "data"
        log, _ = open_log(data_dir)
        synced: list[bytes] = []
        for i in range(data.draw(st.integers(min_value=0, max_value=6))):
            record = rec(f"SET b k{i} {'x' * i}".encode())
            log.append(record)
            log.sync()
            synced.append(record)
        synced_size = log.position().segment_size  # (the file also holds zeros after it)
        unsynced = [rec(f"DEL b k{i}".encode()) for i in range(3)]
        for record in unsynced:
            log.append(record)
        log.sync()  # stands for bytes that reached the file but whose sync never returned
        log.close()
        segment = segments(data_dir)[0]
        cut = data.draw(st.integers(min_value=synced_size, max_value=os.path.getsize(segment)))
        os.truncate(segment, cut)
        log, got = replay_all(data_dir)
        log.close()
        assert got[: len(synced)] == synced
        assert got[len(synced) :] == unsynced[: len(got) - len(synced)]
