"""StoreOwner: group commit through the mailbox, the never-ahead-of-the-log rule, fail-stop."""

from __future__ import annotations

import asyncio
import errno
import pathlib

import pytest

import minidb.runtime
from minidb.errors import UnavailableError
from minidb.protocol import Bulk, Delete, Get, Request, Set
from minidb.store import (
    UNBOUNDED_OUTPUT,
    Batch,
    MemoryLog,
    OpJournal,
    Session,
    StoreOwner,
    StoreState,
    execute,
)
from minidb.wal import Put, Remove, decode_ops, encode_ops, encode_put, encode_remove, open_log


class Sink:
    """Collects flushes the way a connection would; ``room``: its output room."""

    def __init__(self, room: int = UNBOUNDED_OUTPUT) -> None:
        self.flushes = 0
        self.room = room

    def flush(self) -> None:
        self.flushes += 1

    def output_room(self) -> int:
        return self.room


def _batch(sink: Sink, *requests: Request) -> Batch:
    return Batch(list(requests), sink, deadline=0.0)


def test_owner_group_syncs_once_and_answers_in_order() -> None:
    """One group of several batches appends every write and syncs once, then answers."""
    log = MemoryLog()
    owner = StoreOwner(StoreState(), log, mailbox=100)
    a, b = Sink(), Sink()
    first = _batch(a, Set(b"u", b"x", b"1"), Get(b"u", b"x"))
    second = _batch(b, Set(b"u", b"y", b"2"), Delete(b"u", b"nope"))
    third = _batch(a, Delete(b"u", b"x"))
    owner.commit([first, second, third])
    assert log.syncs == 1
    assert log.synced == [
        encode_put(b"u", b"x", b"1"), encode_put(b"u", b"y", b"2"), encode_remove(b"u", b"x"),
    ]
    assert first.replies == [b"OK\n", b"VALUE 1\n"]
    assert second.replies == [b"OK\n", b"NIL\n"]
    assert third.replies == [b"OK\n"]
    assert (a.flushes, b.flushes) == (1, 1)


def test_owner_reads_only_sync_nothing() -> None:
    """A group of reads (and no-op deletes) costs no sync."""
    log = MemoryLog()
    owner = StoreOwner(StoreState(), log, mailbox=10)
    owner.commit([_batch(Sink(), Get(b"u", b"x"), Delete(b"u", b"x"))])
    assert log.syncs == 0 and log.appended == []


@pytest.mark.parametrize("failure", ["append", "sync"])
def test_owner_log_failure_acknowledges_nothing_and_turns_read_only(failure: str) -> None:
    """If append or sync fails, the group's writes get ERR not logged and are undone."""
    log = MemoryLog()
    state = StoreState()
    owner = StoreOwner(state, log, mailbox=10)
    owner.commit([_batch(Sink(), Set(b"u", b"x", b"old"))])
    setattr(log, f"fail_{failure}", errno.ENOSPC)
    batch = _batch(Sink(), Set(b"u", b"x", b"new"), Get(b"u", b"x"), Set(b"u", b"y", b"1"))
    owner.commit([batch])
    not_logged = b"ERR not logged: No space left on device\n"
    # The read is answered from the rolled-back state: it never shows the unlogged value.
    assert batch.replies == [not_logged, b"VALUE old\n", not_logged]
    assert state.apply(Get(b"u", b"x")) == b"VALUE old\n"
    assert state.apply(Get(b"u", b"y")) == b"NIL\n"
    assert owner.read_only == "No space left on device"
    later = _batch(Sink(), Set(b"u", b"z", b"1"), Get(b"u", b"x"))
    owner.commit([later])
    assert later.replies == [b"ERR read-only: No space left on device\n", b"VALUE old\n"]
    assert owner.statistics().not_logged == 2
    assert owner.statistics().refused == {("SET", "not_logged"): 2, ("SET", "read_only"): 1}


def test_owner_checkpoints_when_log_asks() -> None:
    """When the log wants a checkpoint it gets the whole store as Put records."""
    log = MemoryLog(checkpoint_every=3)
    owner = StoreOwner(StoreState(), log, mailbox=10)
    owner.commit([_batch(Sink(), Set(b"u", b"x", b"1"), Set(b"u", b"x", b"2"))])
    owner.commit([_batch(Sink(), Set(b"u", b"y", b"3"))])
    assert log.checkpoints == 1
    # One Put per key, packed into as few records as 64 KiB allows (here one).
    assert len(log.synced) == 1
    assert sorted(decode_ops(log.synced[0])) == [Put(b"u", b"x", b"2"), Put(b"u", b"y", b"3")]


def test_owner_timed_out_batch_keeps_its_busy_replies_but_write_lands() -> None:
    """A batch already answered (timed out) keeps that answer; its write still applies."""
    state = StoreState()
    owner = StoreOwner(state, MemoryLog(), mailbox=10)
    batch = _batch(Sink(), Set(b"u", b"x", b"late"))
    batch.replies = [b"ERR busy\n"]
    owner.commit([batch])
    assert batch.replies == [b"ERR busy\n"]
    assert state.apply(Get(b"u", b"x")) == b"VALUE late\n"


def test_owner_task_drains_everything_waiting_per_wakeup() -> None:
    """Batches queued before the owner wakes are committed as one group."""
    minidb.runtime.run(_drains_everything())


async def _drains_everything() -> None:
    log = MemoryLog()
    owner = StoreOwner(StoreState(), log, mailbox=100)
    task = asyncio.create_task(owner.run())
    batches = [_batch(Sink(), Set(b"u", b"k%d" % i, b"v")) for i in range(16)]
    for batch in batches:
        owner.mailbox.put_nowait(batch)
    owner.close()
    async with asyncio.timeout(5):
        await task
    assert all(b.replies == [b"OK\n"] for b in batches)
    assert log.syncs == 1
    assert owner.statistics().batch_size_sum == 16


def test_owner_writing_group_takes_in_what_arrives_in_the_next_poll() -> None:
    """A write arriving while a writing group is applied shares its sync (fsync always)."""
    minidb.runtime.run(_gathers_the_next_poll())


async def _gathers_the_next_poll() -> None:
    log = MemoryLog()
    owner = StoreOwner(StoreState(), log, mailbox=100)
    task = asyncio.create_task(owner.run())
    first, second = _batch(Sink(), Set(b"u", b"a", b"1")), _batch(Sink(), Set(b"u", b"b", b"2"))
    owner.mailbox.put_nowait(first)
    await asyncio.sleep(0)  # the owner takes and applies the first, then polls once
    owner.mailbox.put_nowait(second)  # as a connection's read in that poll would
    owner.close()
    async with asyncio.timeout(5):
        await task
    assert first.replies == second.replies == [b"OK\n"]
    assert log.syncs == 1 and len(log.synced) == 2
    assert owner.statistics().groups == 1


def test_owner_death_answers_waiters_unavailable() -> None:
    """When the owner task dies, queued batches get ERR store unavailable and sends fail."""
    minidb.runtime.run(_death_answers_unavailable())


async def _death_answers_unavailable() -> None:
    owner = StoreOwner(StoreState(), MemoryLog(), mailbox=100)

    def explode(batches: list[Batch], now_ms: int) -> list[list[bytes]]:
        raise RuntimeError("boom")

    owner._apply = explode  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(owner.run())
    first, second = _batch(Sink(), Get(b"u", b"x")), _batch(Sink(), Get(b"u", b"y"))
    third = _exec_batch(Sink(), ArgvExecutor(), [b"GET", b"x"])
    owner.mailbox.put_nowait(first)
    owner.mailbox.put_nowait(second)
    owner.mailbox.put_nowait(third)
    async with asyncio.timeout(5):
        with pytest.raises(RuntimeError):
            await task
    assert first.replies == second.replies == [b"ERR store unavailable\n"]
    assert third.replies == [b"-ERR store unavailable"]
    with pytest.raises(UnavailableError):
        owner.mailbox.put_nowait(_batch(Sink(), Get(b"u", b"z")))


def test_mailbox_room_counts_requests() -> None:
    """Capacity is counted in requests, not in batches."""
    owner = StoreOwner(StoreState(), MemoryLog(), mailbox=5)
    owner.mailbox.put_nowait(_batch(Sink(), *[Get(b"u", b"x")] * 3))
    assert owner.mailbox.room() == 2
    assert owner.statistics().mailbox_depth == 3


class ArgvExecutor:
    """An ``Executor`` over the command engine: requests are argv lists, replies their repr."""

    def __init__(self) -> None:
        self.session = Session()
        self.times: list[int] = []

    def execute(
        self,
        state: StoreState,
        request: list[bytes],
        journal: OpJournal | None,
        now_ms: int,
        room: int = 0,
    ) -> bytes:
        self.times.append(now_ms)
        if journal is None:
            if self.is_write(request):
                return self.refusal(request, "read-only: store")
            journal = OpJournal()  # a read's lazy expiry has nowhere to go: dropped
        result = execute(state.keyspace, self.session, request, journal, now_ms)
        return b"R " + repr(result).encode()

    def is_write(self, request: list[bytes]) -> bool:
        return request[0].upper() in (b"SET", b"DEL")

    def refusal(self, request: list[bytes], reason: str) -> bytes:
        return b"-ERR " + reason.encode()

    def remainder(self, request: list[bytes]) -> None:
        return None

    def expand(self, request: list[bytes]) -> list[list[bytes]]:
        return [request]


def _exec_batch(sink: Sink, executor: ArgvExecutor, *argvs: list[bytes]) -> Batch:
    return Batch(list(argvs), sink, deadline=0.0, executor=executor)


def test_owner_runs_executor_batches_in_order_with_line_batches() -> None:
    """Line and executor batches of one group run in order on one keyspace, share one sync,
    and each journal group becomes one record."""
    log = MemoryLog()
    executor = ArgvExecutor()
    owner = StoreOwner(StoreState(), log, mailbox=100, clock=lambda: 1234)
    line_first = _batch(Sink(), Set(b"0", b"a", b"line"))
    resp = _exec_batch(Sink(), executor, [b"GET", b"a"], [b"SET", b"b", b"resp"])
    line_last = _batch(Sink(), Get(b"0", b"b"))
    owner.commit([line_first, resp, line_last])
    assert resp.replies == [b"R b'line'", b"R Simple('OK')"]
    assert line_last.replies == [b"VALUE resp\n"]
    assert log.syncs == 1
    assert log.synced == [encode_put(b"0", b"a", b"line"), encode_put(b"0", b"b", b"resp")]
    assert executor.times == [1234, 1234]


def test_owner_executor_writes_are_logged_with_their_expiry() -> None:
    """An executor's write with a deadline is logged as one record carrying it."""
    log = MemoryLog()
    owner = StoreOwner(StoreState(), log, mailbox=100, clock=lambda: 1_000)
    owner.commit([_exec_batch(Sink(), ArgvExecutor(), [b"SET", b"k", b"v", b"PX", b"50"])])
    assert log.synced == [encode_ops([Put(b"0", b"k", b"v", 1_050)])]


@pytest.mark.parametrize("failure", ["append", "sync"])
def test_owner_log_failure_rolls_back_executor_writes_like_line_writes(failure: str) -> None:
    """A failed append or sync rolls back both protocols' writes; the executor refuses its
    writes with "not logged", its reads see the rolled-back state; then it is read-only."""
    log = MemoryLog()
    state = StoreState()
    owner = StoreOwner(state, log, mailbox=100)
    executor = ArgvExecutor()
    owner.commit([_exec_batch(Sink(), executor, [b"SET", b"k", b"old"])])
    setattr(log, f"fail_{failure}", errno.EIO)
    line = _batch(Sink(), Set(b"0", b"k", b"line"), Get(b"0", b"k"))
    resp = _exec_batch(Sink(), executor, [b"SET", b"k", b"new"], [b"GET", b"k"])
    owner.commit([line, resp])
    assert line.replies == [b"ERR not logged: Input/output error\n", b"VALUE old\n"]
    assert resp.replies == [b"-ERR not logged: Input/output error", b"R b'old'"]
    assert state.apply(Get(b"0", b"k")) == b"VALUE old\n"
    later = _exec_batch(Sink(), executor, [b"SET", b"k", b"x"], [b"GET", b"k"])
    owner.commit([later])
    assert later.replies == [b"-ERR read-only: store", b"R b'old'"]
    stats = owner.statistics()
    assert stats.refused[("COMMAND", "not_logged")] == 1
    assert stats.refused[("COMMAND", "read_only")] == 1
    assert stats.refused[("SET", "not_logged")] == 1


def _frame(sink: Sink, *rows: Set | Delete) -> Batch:
    return Batch([Bulk(list(rows))], sink, deadline=0.0, size=len(rows))


def test_owner_bulk_frame_is_one_record_and_one_reply() -> None:
    """A frame's rows are appended as ONE record (one payload of all its ops) and answered
    once, ``OK <n>``; the group's statistics count its rows."""
    log = MemoryLog()
    state = StoreState()
    owner = StoreOwner(state, log, mailbox=100)
    owner.commit([_batch(Sink(), Set(b"u", b"gone", b"x"))])
    frame = _frame(Sink(), Set(b"u", b"a", b"1"), Delete(b"u", b"gone"), Set(b"u", b"b", b"2"))
    owner.commit([frame, _batch(Sink(), Get(b"u", b"a"))])
    assert frame.replies == [b"OK 3\n"]
    assert log.synced[1:] == [
        encode_ops([Put(b"u", b"a", b"1"), Remove(b"u", b"gone"), Put(b"u", b"b", b"2")])
    ]
    stats = owner.statistics()
    assert (stats.appends, stats.syncs, stats.requests) == (2, 2, 1 + 3 + 1)


def test_owner_bulk_frame_replays_whole(tmp_path: pathlib.Path) -> None:
    """A frame logged to a real log replays as one record that restores every row."""
    log, replay = open_log(tmp_path)
    list(replay)
    state = StoreState()
    owner = StoreOwner(state, log, mailbox=100)
    rows = [Set(b"u", b"k%d" % i, b"v %d" % i) for i in range(300)]
    owner.commit([_frame(Sink(), *rows, Delete(b"u", b"k7"))])
    log.close()
    log, replay = open_log(tmp_path)
    records = list(replay)
    log.close()
    assert len(records) == 1 and len(records[0]) == 301
    copy = StoreState()
    for ops in records:
        copy.keyspace.apply_ops(ops, 0)
    assert sorted(copy.keyspace.items()) == sorted(state.keyspace.items())
    assert len(copy) == 299


_FRAMES: list[list[Set | Delete]] = [
    [Set(b"u", b"a", b"new"), Delete(b"u", b"gone"), Set(b"n", b"b", b"1")],
    # Puts only: the fast run, broken by a new bucket, the same key twice.
    [Set(b"u", b"a", b"new"), Set(b"u", b"c", b"1"), Set(b"n", b"b", b"1"),
     Set(b"u", b"c", b"2"), Set(b"u", b"gone", b"y")],
]


@pytest.mark.parametrize("rows", _FRAMES, ids=["mixed", "puts"])
@pytest.mark.parametrize("failure", ["append", "sync"])
def test_owner_bulk_frame_is_rolled_back_whole_when_the_log_fails(
    failure: str, rows: list[Set | Delete]
) -> None:
    """If the group's append or sync fails, no row of a frame stays applied and the frame
    gets one ``ERR not logged``, counted once under BULK."""
    log = MemoryLog()
    state = StoreState()
    owner = StoreOwner(state, log, mailbox=100)
    owner.commit([_batch(Sink(), Set(b"u", b"a", b"old"), Set(b"u", b"gone", b"x"))])
    before = sorted(state.keyspace.items())
    setattr(log, f"fail_{failure}", errno.EIO)
    frame = _frame(Sink(), *rows)
    owner.commit([frame])
    assert len(state) == 2
    assert frame.replies == [b"ERR not logged: Input/output error\n"]
    assert sorted(state.keyspace.items()) == before
    assert owner.statistics().refused == {("BULK", "not_logged"): 1}
    later = _frame(Sink(), Set(b"u", b"a", b"later"))
    owner.commit([later])
    assert later.replies == [b"ERR read-only: Input/output error\n"]


def test_owner_drain_and_mailbox_count_a_frame_as_its_rows() -> None:
    """The mailbox's capacity and the owner's per-wakeup drain weigh a frame by its rows:
    ``take`` leaves a frame that does not fit for the next group."""
    owner = StoreOwner(StoreState(), MemoryLog(), mailbox=10)
    mailbox = owner.mailbox
    mailbox.put_nowait(_batch(Sink(), Get(b"u", b"x")))
    mailbox.put_nowait(_frame(Sink(), *[Set(b"u", b"k", b"v")] * 4))
    assert mailbox.room() == 5
    assert [b.size for b in mailbox.take(3)] == [1]
    assert mailbox.take(3) == []
    assert [b.size for b in mailbox.take(4)] == [4]


def test_owner_stops_building_replies_for_a_sink_out_of_output_room() -> None:
    """The owner runs a sink's requests while its output room (less the replies built for it
    in this group) is not negative: it stops after the reply that crossed it, hands the rest
    back unrun with every later batch of that sink, and serves the other sinks as usual."""
    log = MemoryLog()
    state = StoreState()
    state.apply(Set(b"u", b"k", b"v" * 100))
    owner = StoreOwner(state, log, mailbox=100)
    slow, other = Sink(room=150), Sink()
    first = _batch(slow, Get(b"u", b"k"), Get(b"u", b"k"), Set(b"u", b"x", b"1"))
    second = _batch(other, Get(b"u", b"k"))
    third = _batch(slow, Set(b"u", b"y", b"1"))
    owner.commit([first, second, third])
    reply = b"VALUE " + b"v" * 100 + b"\n"
    assert first.replies == [reply, reply] and first.requests == [Get(b"u", b"k")] * 2
    assert first.leftover == [Set(b"u", b"x", b"1")]
    assert second.replies == [reply] and second.leftover is None
    assert third.replies == [] and third.requests == []
    assert third.leftover == [Set(b"u", b"y", b"1")]
    assert log.synced == []  # neither SET ran
    assert state.execute(Get(b"u", b"x"), None, 0) == b"NIL\n"
    # The next group asks the sink again: with room, the handed-back SETs run.
    slow.room = 150
    again = _batch(slow, *first.leftover, *third.leftover)
    owner.commit([again])
    assert again.replies == [b"OK\n", b"OK\n"] and again.leftover is None


def test_owner_runs_nothing_for_a_sink_without_output_room() -> None:
    """A sink whose room is negative from the start gets its whole batch back."""
    owner = StoreOwner(StoreState(), MemoryLog(), mailbox=100)
    full = Sink(room=-1)
    batch = _batch(full, Set(b"u", b"k", b"1"))
    owner.commit([batch])
    assert batch.replies == [] and batch.leftover == [Set(b"u", b"k", b"1")]
    assert len(owner.state) == 0
