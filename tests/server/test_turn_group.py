"""The loop turn's group: plain runs a RESP connection runs in its own callback while the data
owner is idle, logged once per loop turn before any of their replies leaves (see "Writes of the
turn" in ``store._actor``).

The owner does not run as a task here: the test makes it idle (``waiting``), gives it the loop
a running owner has, and ends the turn by hand where the loop would (``_turn_over``), except in
the last test, where the owner task runs on a real loop.
"""

from __future__ import annotations

import asyncio
import errno

import pytest

from minidb.protocol import _resp
from minidb.store import MemoryLog, StoreOwner, StoreState, _plainrun
from tests.server.test_connection import RecordingLoop
from tests.server.test_pubsub_hold import _connection, _wire

# tests/sanitizers/run.py runs these under ASan and UBSan. The turn takes a connection's runs
# from its express lane, which needs the C scan: without it (MINIDB_PURE_PYTHON=1) writes go
# to the owner's mailbox as before, which the rest of the suite covers.
pytestmark = [
    pytest.mark.accelerator,
    pytest.mark.skipif(
        not _plainrun.ACCELERATED or _resp._scan_raw is None, reason="C twins not built"
    ),
]


def _idle_owner(loop: RecordingLoop, fsync: str = "no") -> tuple[StoreOwner, MemoryLog]:
    log = MemoryLog()
    owner = StoreOwner(StoreState(), log, mailbox=100, fsync=fsync)
    owner._loop, owner._running = loop, True  # as run() sets them
    owner._update_turns()
    owner.waiting = True  # awaiting the mailbox: idle
    return owner, log


def _value(owner: StoreOwner, key: bytes) -> bytes | None:
    """``key``'s value in bucket 0 (RESP's), or None."""
    for item in owner.state.keyspace.items():
        if (item.bucket, item.key) == (b"0", key):
            return item.value  # type: ignore[no-any-return]
    return None


def _scheduled(loop: RecordingLoop) -> list[object]:
    return [(h._callback, *h._args) for h in loop._ready]  # type: ignore[attr-defined]


def _turn_over(owner: StoreOwner) -> None:
    """What the loop calls at the end of the turn that opened the group."""
    owner._turn_over(owner._turn_number)


def test_a_set_runs_in_the_turn_and_is_answered_only_once_logged(loop: RecordingLoop) -> None:
    owner, log = _idle_owner(loop)
    conn, transport, _ = _connection(loop, owner)
    conn.data_received(_wire((b"SET", b"k", b"v")))
    # Ran: the keyspace has it, nothing went to the mailbox; not logged, so not answered.
    assert _value(owner, b"k") == b"v"
    assert not owner.mailbox.queued and transport.writes == [] and log.appended == []
    # Scheduled once per turn, by its first run:
    assert _scheduled(loop) == [(owner._turn_over, owner._turn_number)]
    _turn_over(owner)
    assert len(log.written) == 1 and transport.writes == [b"+OK\r\n"]
    assert owner.turn == [] and not conn._in_turn
    assert owner.statistics().inline_requests == 1


def test_no_reply_leaves_before_the_turns_sync_under_always(loop: RecordingLoop) -> None:
    """Under ``always`` a reply waits for the fdatasync, and so does a read of another
    connection in the same turn (it would show a value not yet durable): it runs in the turn
    too, instead of being served at once."""
    owner, log = _idle_owner(loop, fsync="always")
    writer, wrote, _ = _connection(loop, owner)
    reader, read, _ = _connection(loop, owner)
    seen_at_sync: list[list[bytes]] = []
    sync = log.sync

    def watched_sync() -> None:
        seen_at_sync.extend([list(wrote.writes), list(read.writes)])
        sync()

    log.sync = watched_sync  # type: ignore[method-assign]
    writer.data_received(_wire((b"SET", b"k", b"v")))
    reader.data_received(_wire((b"GET", b"k")))
    assert wrote.writes == [] and read.writes == [] and log.syncs == 0
    assert owner.idle is False  # a turn is open: nothing is served at once
    owner.end_turn()
    assert seen_at_sync == [[], []]  # nothing had left when the sync ran
    assert log.syncs == 1 and wrote.writes == [b"+OK\r\n"] and read.writes == [b"$1\r\nv\r\n"]


def test_the_turn_gathers_while_polls_bring_more_under_always(loop: RecordingLoop) -> None:
    """Under ``always`` (loop sync) the turn's end waits one more loop poll while the last
    one brought more runs, as the owner's own groups gather before their sync."""
    owner, log = _idle_owner(loop, fsync="always")
    first, _, _ = _connection(loop, owner)
    second, _, _ = _connection(loop, owner)
    first.data_received(_wire((b"SET", b"a", b"1")))
    loop._ready.clear()  # type: ignore[attr-defined]
    _turn_over(owner)  # the poll brought a run: wait one more
    assert log.syncs == 0 and _scheduled(loop) == [(owner._turn_over, owner._turn_number)]
    second.data_received(_wire((b"SET", b"b", b"2")))
    loop._ready.clear()  # type: ignore[attr-defined]
    _turn_over(owner)  # it brought one more: wait again
    assert log.syncs == 0 and _scheduled(loop) == [(owner._turn_over, owner._turn_number)]
    _turn_over(owner)  # nothing new: sync now, one sync for both
    assert log.syncs == 1 and len(log.synced) == 2


def test_the_turn_ends_without_gathering_under_no(loop: RecordingLoop) -> None:
    owner, log = _idle_owner(loop, fsync="no")
    conn, transport, _ = _connection(loop, owner)
    conn.data_received(_wire((b"SET", b"a", b"1")))
    _turn_over(owner)
    assert transport.writes == [b"+OK\r\n"] and log.syncs == 0 and len(log.written) == 1


def test_a_group_of_the_owner_ends_the_turn_first(loop: RecordingLoop) -> None:
    """A batch the owner runs (here: MULTI's, which no run takes) comes after the turn's
    writes in the log and on the wire, whoever sent it."""
    owner, log = _idle_owner(loop)
    conn, transport, _ = _connection(loop, owner)
    other, other_transport, _ = _connection(loop, owner)
    conn.data_received(_wire((b"SET", b"k", b"1")))
    other.data_received(_wire((b"MULTI",), (b"INCR", b"k"), (b"EXEC",)))
    assert owner.mailbox.queued  # the transaction goes to the owner
    owner.commit(owner.mailbox.take(100))
    assert transport.writes == [b"+OK\r\n"]
    assert other_transport.writes[-1].endswith(b"*1\r\n:2\r\n")  # it saw the turn's SET
    assert len(log.written) == 2


def test_the_end_of_a_turn_an_owner_group_ended_leaves_the_next_turn_alone(
    loop: RecordingLoop,
) -> None:
    """An owner's group ended the turn early; that turn's scheduled end, when it comes, must
    not end the next turn before its own gather polls."""
    owner, log = _idle_owner(loop, fsync="always")
    conn, _, _ = _connection(loop, owner)
    other, other_transport, _ = _connection(loop, owner)
    conn.data_received(_wire((b"SET", b"a", b"1")))
    stale = owner._turn_number
    owner.commit([])  # a group: ends the turn
    conn.data_received(_wire((b"SET", b"a", b"2")))  # the next turn
    assert owner._turn_number != stale
    owner._turn_over(stale)
    assert owner.turn and log.syncs == 1  # still open, its sync not paid yet
    other.data_received(_wire((b"SET", b"b", b"2")))
    _turn_over(owner)  # its own end, which gathers the run that came
    _turn_over(owner)
    assert log.syncs == 2 and other_transport.writes == [b"+OK\r\n"]


def test_a_failed_log_write_rolls_the_turn_back_and_refuses_its_writes(
    loop: RecordingLoop,
) -> None:
    """As for any group: the writes are undone and answered ``not logged``, reads are run
    again from the rolled-back state, and the store turns read-only (so no further turn)."""
    owner, log = _idle_owner(loop, fsync="always")
    conn, transport, _ = _connection(loop, owner)
    other, other_transport, _ = _connection(loop, owner)
    conn.data_received(_wire((b"SET", b"k", b"v")))
    other.data_received(_wire((b"GET", b"k")))
    log.fail_sync = errno.EIO
    owner.end_turn()
    assert _value(owner, b"k") is None
    assert transport.writes == [b"-ERR not logged: Input/output error\r\n"]
    assert other_transport.writes == [b"$-1\r\n"]  # the value never was durable
    assert owner.read_only is not None
    conn.data_received(_wire((b"SET", b"k", b"w")))
    assert owner.turn == [] and owner.mailbox.queued  # refused the usual way, by the owner


def test_a_run_out_of_output_room_runs_the_rest_after_its_replies(loop: RecordingLoop) -> None:
    """The turn runs a read only as far as the connection's output room goes; the rest goes
    to the owner and runs after the turn's replies are written, in order."""
    owner, _ = _idle_owner(loop)
    conn, transport, _ = _connection(loop, owner)
    big = b"x" * 4096
    conn.data_received(_wire((b"SET", b"a", big), (b"SET", b"b", big)))
    owner.end_turn()
    transport.writes.clear()
    transport.unsent = conn._soft_limit - 1  # room for one reply
    conn.data_received(_wire((b"SET", b"c", b"1"), (b"GET", b"a"), (b"GET", b"b")))
    assert owner.turn and owner.mailbox.queued == 2  # the GETs wait for the owner
    transport.unsent = 0
    owner.commit(owner.mailbox.take(100))  # the turn's replies first, then the GET's
    assert b"".join(transport.writes) == b"+OK\r\n" + (b"$4096\r\n" + big + b"\r\n") * 2


def test_the_python_run_of_the_turn_stops_at_the_room_and_the_rest_goes_after(
    loop: RecordingLoop,
) -> None:
    """What the C run leaves to Python (a GET of a list: the wrong type) runs in the turn
    through the executor, as far as the room goes; the rest goes to the owner and is
    answered after the turn's replies, in order."""
    owner, _ = _idle_owner(loop)
    conn, transport, _ = _connection(loop, owner)
    conn.data_received(_wire((b"RPUSH", b"l", b"x")))  # not plain: through the owner
    owner.commit(owner.mailbox.take(100))
    conn.data_received(_wire((b"SET", b"a", b"big")))
    owner.end_turn()
    transport.writes.clear()
    transport.unsent = conn._soft_limit - 20  # room for +OK, and for the error to cross it
    conn.data_received(_wire((b"SET", b"c", b"1"), (b"GET", b"l"), (b"GET", b"a")))
    assert len(owner.turn) == 2 and owner.mailbox.queued == 1  # C's run, Python's; the GET
    transport.unsent = 0
    owner.commit(owner.mailbox.take(100))
    wrongtype = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    assert b"".join(transport.writes) == b"+OK\r\n" + wrongtype + b"$3\r\nbig\r\n"


def test_an_owner_stopped_with_a_turn_open_refuses_it_and_rolls_it_back() -> None:
    """The owner task ends (cancelled) while a turn it never logged is open: the turn's
    writes are undone and its connections answered ``store unavailable``."""

    async def main() -> tuple[list[bytes], object]:
        loop = asyncio.get_running_loop()
        owner = StoreOwner(StoreState(), MemoryLog(), mailbox=100, fsync="no")
        task = loop.create_task(owner.run())
        for _ in range(3):
            await asyncio.sleep(0)
        assert owner.waiting
        conn, transport, _ = _connection(loop, owner)  # type: ignore[arg-type]
        task.cancel()  # its step is queued ahead of the turn's end
        conn.data_received(_wire((b"SET", b"k", b"v")))
        assert owner.turn
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=10)
        return transport.writes, _value(owner, b"k")

    writes, value = asyncio.run(main())
    assert writes == [b"-ERR store unavailable\r\n"] and value is None
