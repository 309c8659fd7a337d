"""``restore``: a data directory rebuilt from shipped objects, exactly, or refused naming the
object (both backends)."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from minidb.errors import WalError
from minidb.objstore import ObjectStore
from minidb.replication._errors import DamagedObject, GapError
from minidb.replication._restore import restore
from minidb.wal import Put, Remove, open_log
from tests.replication.handshipped import BUCKET, Model, chunk_bytes, ship_model

T = TypeVar("T")

RESTORE_TIMEOUT_S = 30.0
"""Deadline of one restore in these tests (seconds): a hang fails instead of blocking CI."""


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a fresh loop within the test's deadline."""

    async def bounded() -> T:
        async with asyncio.timeout(RESTORE_TIMEOUT_S):
            return await coro

    return asyncio.run(bounded())


def state_of(data_dir: pathlib.Path) -> tuple[dict[bytes, bytes], int]:
    """The keys a restored directory replays to, and how many records its log holds."""
    log, replay = open_log(data_dir)
    state: dict[bytes, bytes] = {}
    for ops in replay:
        for op in ops:
            assert op.bucket == BUCKET
            if isinstance(op, Put):
                state[op.key] = op.value
            elif isinstance(op, Remove):
                state.pop(op.key, None)
    replayed = log.statistics().replayed
    log.close()
    return state, replayed


def test_restore_newest_state_from_snapshot_and_log(
    store: ObjectStore, tmp_path: pathlib.Path
) -> None:
    """The newest snapshot plus every chunk after it replays to the model's final state."""
    model = Model.random(95)
    run(ship_model(store, model, per_chunk=10, snapshot_at=(30, 60)))
    result = run(restore(store, tmp_path / "data"))
    assert result.plan.first_seq == 60 and result.plan.last_seq == 94
    state, _ = state_of(tmp_path / "data")
    assert state == model.state_after(94)


@pytest.mark.parametrize("at_seq", [-1, 0, 29, 30, 31, 47, 59, 60, 94])
def test_restore_at_seq_gives_exactly_that_moment(
    store: ObjectStore, tmp_path: pathlib.Path, at_seq: int
) -> None:
    """Restoring to record N (inclusive), across snapshot and chunk boundaries, is the model
    after N: nothing later, nothing missing."""
    model = Model.random(95, seed=at_seq + 7)
    run(ship_model(store, model, per_chunk=10, snapshot_at=(30, 60)))
    run(restore(store, tmp_path / "data", at_seq=at_seq))
    state, _ = state_of(tmp_path / "data")
    assert state == model.state_after(at_seq)


def test_restore_at_time_gives_the_last_chunk_at_or_before_it(
    store: ObjectStore, tmp_path: pathlib.Path
) -> None:
    """Restoring to a time is the state of the newest chunk durable by then (its boundary)."""
    model = Model.random(50)
    shipped = run(ship_model(store, model, per_chunk=10, snapshot_at=(20,)))
    t = shipped.time_of(29)
    for at, expect in ((t, 29), (t + 999, 29), (t - 1, 19)):
        target = tmp_path / f"data-{at}"
        run(restore(store, target, at_time_ms=at))
        assert state_of(target)[0] == model.state_after(expect), (at, expect)


def test_restore_refuses_a_gap_naming_the_objects_around_it(
    store: ObjectStore, tmp_path: pathlib.Path
) -> None:
    """A chunk missing from the middle of the log is a GapError naming its neighbours, and the
    directory is left without a store."""
    model = Model.random(50)
    shipped = run(ship_model(store, model, per_chunk=10))
    gone, after, before = (shipped.chunks[i][0] for i in (2, 1, 3))
    run(store.delete(gone))
    with pytest.raises(GapError) as info:
        run(restore(store, tmp_path / "data"))
    assert (info.value.missing_first, info.value.missing_last) == (20, 29)
    assert (info.value.after, info.value.before) == (after, before)
    assert after in str(info.value) and before in str(info.value)
    assert not (tmp_path / "data" / "MANIFEST").exists()


def test_restore_refuses_a_flipped_byte_naming_the_object(
    store: ObjectStore, tmp_path: pathlib.Path
) -> None:
    """One flipped byte in a chunk fails its whole-object checksum: DamagedObject names it."""
    model = Model.random(30)
    shipped = run(ship_model(store, model, per_chunk=10))
    key = shipped.chunks[1][0]
    data = bytearray(run(store.get(key)).data)
    data[40] ^= 0x10
    run(store.put(key, bytes(data)))
    with pytest.raises(DamagedObject) as info:
        run(restore(store, tmp_path / "data"))
    assert info.value.key == key and info.value.reason == "checksum"
    assert key in str(info.value)


def test_restore_refuses_a_truncated_upload_naming_the_object(
    store: ObjectStore, tmp_path: pathlib.Path
) -> None:
    """An object shorter than its name says (a cut upload) is refused from the listing."""
    model = Model.random(30)
    shipped = run(ship_model(store, model, per_chunk=10, snapshot_at=(10,)))
    key = shipped.snapshots[0][0]
    data = run(store.get(key)).data
    run(store.put(key, data[: len(data) // 2]))
    with pytest.raises(DamagedObject) as info:
        run(restore(store, tmp_path / "data"))
    assert info.value.key == key and info.value.reason == "size"


def test_restore_refuses_a_chunk_whose_records_do_not_check(
    store: ObjectStore, tmp_path: pathlib.Path
) -> None:
    """A chunk whose name matches its bytes but whose records are not the ones named (here:
    numbered from elsewhere, so their checksums fail) is refused by the WAL's own checks."""
    from minidb.replication._layout import chunk_for

    model = Model.random(30)
    shipped = run(ship_model(store, model, per_chunk=10))
    key, first, last, t = shipped.chunks[1]
    run(store.delete(key))
    forged = chunk_bytes(first, model.payloads[first : last + 1])
    forged = forged[:20] + chunk_bytes(first + 1, model.payloads[first : last + 1])[20:]
    chunk = chunk_for(shipped.generation, first, last, t, forged)
    run(store.put_if_absent(chunk.key, forged))
    with pytest.raises(DamagedObject) as info:
        run(restore(store, tmp_path / "data"))
    assert info.value.key == chunk.key and info.value.reason == "contents"
    assert "checksum mismatch" in str(info.value)


def test_restore_refuses_a_directory_holding_a_store(
    store: ObjectStore, tmp_path: pathlib.Path
) -> None:
    """A restore never writes over an existing store."""
    model = Model.random(10)
    run(ship_model(store, model, per_chunk=5))
    log, _ = open_log(tmp_path / "data")
    log.close()
    with pytest.raises(WalError, match="not empty"):
        run(restore(store, tmp_path / "data"))
