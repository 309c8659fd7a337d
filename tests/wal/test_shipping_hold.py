"""The log's shipping hooks: the published position, and checkpoints that wait for shipping."""

from __future__ import annotations

import os
import pathlib

from minidb.wal import FILE_HEADER_SIZE, LogPosition, open_log

from .conftest import RECORDS


def _names(data_dir: pathlib.Path) -> set[str]:
    return {n for n in os.listdir(data_dir) if n.startswith(("wal-", "snapshot-"))}


def test_observer_sees_each_write_roll_and_checkpoint_with_consistent_sizes(
    tmp_path: pathlib.Path,
) -> None:
    """Each position names a segment whose first ``segment_size`` bytes are exactly the
    records below ``next_number`` in it, and a checkpoint publishes its snapshot."""
    log, replay = open_log(tmp_path)
    list(replay)
    seen: list[LogPosition] = []
    log.set_observer(seen.append)
    log.append(RECORDS[0])
    log.sync()
    assert seen[-1].next_number == 1 and seen[-1].segment_base == 0
    written = (tmp_path / "wal-0000000000000000.log").read_bytes()  # records, then zeros
    assert len(written) > seen[-1].segment_size
    assert not written[seen[-1].segment_size :].strip(b"\0")
    base = log.begin_checkpoint()
    assert seen[-1] == LogPosition(base, FILE_HEADER_SIZE, 1, None)
    log.finish_checkpoint(base, [RECORDS[1]])
    assert seen[-1].snapshot_base == base
    assert log.position() == seen[-1]
    log.close()


def test_hold_keeps_covered_files_until_released(tmp_path: pathlib.Path) -> None:
    """With a hold, a checkpoint keeps the segments and the snapshot not yet shipped, and
    ``release_shipped`` deletes exactly those that are shipped now."""
    log, replay = open_log(tmp_path)
    list(replay)
    log.hold_for_shipping()
    for record in RECORDS[:3]:
        log.append(record)
        log.sync()
    first = log.begin_checkpoint()  # 3: segment 0 holds records 0..2
    log.finish_checkpoint(first, RECORDS[:3])
    log.append(RECORDS[3])
    log.sync()
    second = log.begin_checkpoint()  # 4
    log.finish_checkpoint(second, RECORDS[:4])
    held = {"wal-0000000000000000.log", "wal-0000000000000003.log", "wal-0000000000000004.log",
            "snapshot-0000000000000003.snap", "snapshot-0000000000000004.snap"}
    assert _names(tmp_path) == held
    log.release_shipped(2, None)  # segment 0 is not wholly shipped: nothing goes
    assert _names(tmp_path) == held
    log.release_shipped(3, None)  # segment 0 is; the snapshot at 3 is not
    assert _names(tmp_path) == held - {"wal-0000000000000000.log"}
    log.release_shipped(4, 3)
    assert _names(tmp_path) == {"wal-0000000000000004.log", "snapshot-0000000000000004.snap"}
    log.close()


def test_without_a_hold_a_checkpoint_deletes_what_it_covers(tmp_path: pathlib.Path) -> None:
    """No hold (no shipping): the checkpoint deletes older segments and snapshots at once."""
    log, replay = open_log(tmp_path)
    list(replay)
    log.append(RECORDS[0])
    log.sync()
    base = log.begin_checkpoint()
    log.finish_checkpoint(base, RECORDS[:1])
    assert _names(tmp_path) == {"wal-0000000000000001.log", "snapshot-0000000000000001.snap"}
    log.close()
