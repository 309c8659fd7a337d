"""The owner's replica role: shipped records applied and logged, client writes refused."""

from __future__ import annotations

from minidb.protocol import Delete, Get, Set
from minidb.store import (
    APPLIED,
    UNBOUNDED_OUTPUT,
    Batch,
    FollowExecutor,
    MemoryLog,
    ShippedRecord,
    StoreOwner,
    StoreState,
)
from minidb.wal import Put, Remove, decode_ops


class Sink:
    """Collects flushes the way a connection would."""

    def flush(self) -> None:
        pass

    def output_room(self) -> int:
        return UNBOUNDED_OUTPUT


def _shipped(*records: ShippedRecord) -> Batch:
    return Batch(list(records), Sink(), deadline=0.0, executor=FollowExecutor())


def test_replica_applies_shipped_records_one_log_record_each() -> None:
    """Each shipped record is applied whole and becomes exactly one record of the replica's log."""
    log = MemoryLog()
    owner = StoreOwner(StoreState(), log, mailbox=100, replica=True)
    batch = _shipped(
        ShippedRecord(0, [Put(b"u", b"a", b"1", None), Put(b"u", b"b", b"2", None)]),
        ShippedRecord(1, [Remove(b"u", b"missing")]),  # a no-op still keeps its number
        ShippedRecord(2, [Remove(b"u", b"a")]),
    )
    owner.commit([batch])
    assert batch.replies == [APPLIED] * 3
    assert [decode_ops(r) for r in log.synced] == [r.ops for r in batch.requests]
    assert log.syncs == 1
    reads = Batch([Get(b"u", b"a"), Get(b"u", b"b")], Sink(), deadline=0.0)
    owner.commit([reads])
    assert reads.replies == [b"NIL\n", b"VALUE 2\n"]


def test_replica_refuses_client_writes_and_serves_reads() -> None:
    """A client's writes on a replica answer ERR read-only replica and change nothing."""
    log = MemoryLog()
    owner = StoreOwner(StoreState(), log, mailbox=100, replica=True)
    owner.commit([_shipped(ShippedRecord(0, [Put(b"u", b"k", b"v", None)]))])
    client = Batch([Set(b"u", b"k", b"w"), Delete(b"u", b"k"), Get(b"u", b"k")], Sink(), 0.0)
    owner.commit([client])
    assert client.replies == [b"ERR read-only replica\n"] * 2 + [b"VALUE v\n"]
    assert len(log.synced) == 1
    assert owner.statistics().refused == {("SET", "replica"): 1, ("DEL", "replica"): 1}


def test_promoted_replica_takes_writes_after_the_last_applied_record() -> None:
    """After promote() client writes are applied and logged after the shipped records."""
    log = MemoryLog()
    owner = StoreOwner(StoreState(), log, mailbox=100, replica=True)
    owner.commit([_shipped(ShippedRecord(0, [Put(b"u", b"k", b"v", None)]))])
    owner.promote()
    assert not owner.replica and not owner.statistics().replica
    client = Batch([Set(b"u", b"k", b"w"), Get(b"u", b"k")], Sink(), 0.0)
    owner.commit([client])
    assert client.replies == [b"OK\n", b"VALUE w\n"]
    assert len(log.synced) == 2


def test_replica_whose_log_fails_answers_the_follower_with_an_error() -> None:
    """A failed sync of the replica's own log is reported to the follower (it must stop)."""
    log = MemoryLog(fail_sync=5)
    owner = StoreOwner(StoreState(), log, mailbox=100, replica=True)
    batch = _shipped(ShippedRecord(0, [Put(b"u", b"k", b"v", None)]))
    owner.commit([batch])
    assert batch.replies is not None and batch.replies[0].startswith(b"ERR ")
    assert owner.read_only is not None
    again = _shipped(ShippedRecord(1, [Put(b"u", b"k", b"w", None)]))
    owner.commit([again])
    assert again.replies is not None and again.replies[0].startswith(b"ERR read-only")
