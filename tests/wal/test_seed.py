"""Seeding a data directory from a snapshot's bytes and the records after it."""

from __future__ import annotations

import pathlib

import pytest

from minidb.errors import CorruptionError, WalError
from minidb.wal import Seed, open_log
from minidb.wal._checkpoint import snapshot_chunks
from tests.wal.conftest import RECORDS, rec, replay_all


def test_seed_with_snapshot_opens_as_a_log_continuing_its_numbers(tmp_path: pathlib.Path) -> None:
    """A seeded snapshot plus records replays in order, and appends continue after them."""
    snapshot = b"".join(snapshot_chunks(7, RECORDS[:2]))
    with Seed(tmp_path, 7) as seed:
        seed.snapshot_file().write(snapshot)
        assert seed.seal_snapshot("snap") == 2
        for number, payload in enumerate(RECORDS[2:], 7):
            seed.append(number, payload)
        seed.finish()
    log, payloads = replay_all(tmp_path)
    assert payloads == RECORDS
    assert log.torn_tail is None  # the seed writes no zeros ahead: a restore opens clean
    log.append(rec(b"SET users next 1"))
    log.sync()
    assert log.statistics().appends == 1
    log.close()
    log, payloads = replay_all(tmp_path)
    assert payloads == [*RECORDS, rec(b"SET users next 1")]
    log.close()


def test_seed_from_record_zero_needs_no_snapshot(tmp_path: pathlib.Path) -> None:
    """A log seeded from record 0 is the records alone."""
    with Seed(tmp_path, 0) as seed:
        for number, payload in enumerate(RECORDS):
            seed.append(number, payload)
        seed.finish()
    log, payloads = replay_all(tmp_path)
    assert payloads == RECORDS
    log.close()


def test_seed_refuses_a_damaged_snapshot_naming_its_source(tmp_path: pathlib.Path) -> None:
    """A snapshot with a flipped byte is refused with the name it came from and the offset."""
    snapshot = bytearray(b"".join(snapshot_chunks(3, RECORDS[:3])))
    snapshot[40] ^= 0x01
    with Seed(tmp_path, 3) as seed:
        seed.snapshot_file().write(bytes(snapshot))
        with pytest.raises(CorruptionError, match="objects/snap-3") as info:
            seed.seal_snapshot("objects/snap-3")
        assert info.value.offset is not None
        seed.abandon()
    assert [p.name for p in tmp_path.iterdir()] == ["LOCK"]


def test_seed_refuses_a_gap_and_a_non_empty_directory(tmp_path: pathlib.Path) -> None:
    """Records must follow each other, and a directory holding a store is never seeded."""
    with Seed(tmp_path / "a", 0) as seed:
        seed.append(0, RECORDS[0])
        with pytest.raises(ValueError, match="does not follow"):
            seed.append(2, RECORDS[1])
    log, _ = open_log(tmp_path / "b")
    log.close()
    with pytest.raises(WalError, match="not empty"):
        Seed(tmp_path / "b", 0)


def test_seed_without_its_snapshot_is_refused(tmp_path: pathlib.Path) -> None:
    """A log starting after record 0 cannot be finished without the snapshot it continues."""
    with Seed(tmp_path, 5) as seed, pytest.raises(ValueError, match="needs its snapshot"):
        seed.finish()
