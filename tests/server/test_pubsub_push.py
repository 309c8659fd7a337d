"""Where pub/sub messages meet the machinery: the owner releases them only after the group is
logged (and drops them when the log fails), a connection's messages follow the reply of its own
request that published to it, and ``Connection.push`` writes them after every reply already
owed, bounded by the hard output limit. No sockets: the owner's ``commit`` and the fake
transport of ``test_connection``."""

from __future__ import annotations

import errno

import pytest

from minidb.server import ServerConfig
from minidb.server._connection import Hub, LineConnection
from minidb.store import MemoryLog, OpJournal, Session, StoreOwner, StoreState, execute
from minidb.store._mailbox import UNBOUNDED_OUTPUT, Batch
from minidb.store._pubsub import Message
from tests.server.test_connection import FakeTransport, RecordingLoop


class Sink:
    """A reply sink that notes its flushes, and a receiver that notes when it got messages."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def flush(self) -> None:
        self.log.append("flush")

    def output_room(self) -> int:
        return UNBOUNDED_OUTPUT

    def receive(self, messages: list[tuple[Message, bytes | None]]) -> None:
        self.log += [f"message {m.data.decode()}" for m, _ in messages]

    def frames(self, messages: list[tuple[Message, bytes | None]]) -> bytes:
        """Its messages as they follow one of its replies: ``<data pattern>`` each."""
        return b"".join(b"<%s %r>" % (m.data, pattern) for m, pattern in messages)


class Argv:
    """An executor over the command engine (requests are argv lists, replies their repr)."""

    def __init__(self) -> None:
        self.session = Session()

    def execute(
        self, state: StoreState, request: list[bytes], journal: OpJournal | None, now_ms: int,
        room: int = 0,
    ) -> bytes:
        if journal is None:
            if self.is_write(request):
                return b"-ERR not logged"
            journal = OpJournal()
        return b"%r" % (execute(state.keyspace, self.session, request, journal, now_ms),)

    def is_write(self, request: list[bytes]) -> bool:
        return request[0].upper() == b"SET"

    def refusal(self, request: list[bytes], reason: str) -> bytes:
        return b"-ERR " + reason.encode()

    def remainder(self, request: list[bytes]) -> None:
        return None

    def expand(self, request: list[bytes]) -> list[list[bytes]]:
        return [request]


def _noted_log(events: list[str]) -> MemoryLog:
    """A log that notes each sync in ``events``."""
    log = MemoryLog()
    sync = log.sync

    def noted_sync() -> None:
        events.append("sync")
        sync()

    log.sync = noted_sync  # type: ignore[method-assign]
    return log


def test_owner_delivers_after_the_sync_and_after_the_replies() -> None:
    """SET then PUBLISH in one group: the sync, the replies' flush, then the message."""
    events: list[str] = []
    owner = StoreOwner(StoreState(), _noted_log(events), mailbox=10)
    subscriber = Sink(events)
    owner.pubsub.subscribe(subscriber, b"jobs")
    batch = Batch(
        [[b"SET", b"k", b"v"], [b"PUBLISH", b"jobs", b"k"]], Sink(events), 0.0, executor=Argv()
    )
    owner.commit([batch])
    assert batch.replies == [b"Simple('OK')", b"1"]
    assert events == ["sync", "flush", "message k"]


@pytest.mark.parametrize("failure", ["append", "sync"])
def test_owner_drops_a_failed_groups_messages_and_publishes_again(failure: str) -> None:
    """A group whose log write fails: its SET is refused, its PUBLISH (a read) runs again, so
    the message goes out once, after the failed group's replies."""
    events: list[str] = []
    log = MemoryLog()
    owner = StoreOwner(StoreState(), log, mailbox=10)
    subscriber = Sink(events)
    owner.pubsub.subscribe(subscriber, b"jobs")
    setattr(log, f"fail_{failure}", errno.EIO)
    batch = Batch(
        [[b"SET", b"k", b"v"], [b"PUBLISH", b"jobs", b"k"]], Sink(events), 0.0, executor=Argv()
    )
    owner.commit([batch])
    assert batch.replies is not None and batch.replies[0].startswith(b"-ERR")
    assert batch.replies[1] == b"1"
    assert events == ["flush", "message k"]


def test_own_messages_follow_the_publishing_reply_before_the_next() -> None:
    """A subscriber's PUBLISH to its own channel: the message right after that reply, before
    the reply of its next request (Redis 7.2), released with the replies after the sync; a
    message another client published to it earlier in the group comes first (publish
    order), and the others' messages leave after the replies, as before."""
    events: list[str] = []
    owner = StoreOwner(StoreState(), _noted_log(events), mailbox=10)
    me, other = Sink(events), Sink([])
    owner.pubsub.subscribe(me, b"ch")
    owner.pubsub.psubscribe(me, b"c*")
    owner.pubsub.subscribe(other, b"ch")
    first = Batch([[b"PUBLISH", b"ch", b"b"]], Sink([]), 0.0, executor=Argv())
    mine = Batch(
        [[b"SET", b"k", b"v"], [b"PUBLISH", b"ch", b"a"], [b"GET", b"k"]], me, 0.0,
        executor=Argv(),
    )
    owner.commit([first, mine])
    assert first.replies == [b"3"]
    assert mine.replies == [
        b"Simple('OK')", b"3<b None><b b'c*'><a None><a b'c*'>", b"b'v'",
    ]  # fmt: skip
    assert events == ["sync", "flush"]  # replies (its messages with them) after the sync
    assert other.log == ["message b", "message a"]  # the others: released after the replies
    owner.commit([Batch([[b"PUBLISH", b"ch", b"c"]], Sink([]), 0.0, executor=Argv())])
    assert events[-1] == "message c"  # not its own: delivered the usual way


def test_own_messages_are_not_taken_twice_or_by_who_did_not_publish() -> None:
    """Two publishing requests of one connection each get only the messages since the last;
    a request that publishes to others takes nothing for a subscriber it is not."""
    owner = StoreOwner(StoreState(), MemoryLog(), mailbox=10)
    me = Sink([])
    owner.pubsub.subscribe(me, b"ch")
    lone = Sink([])  # not subscribed: publishes to ``me`` only
    batches = [
        Batch([[b"PUBLISH", b"ch", b"1"], [b"PUBLISH", b"ch", b"2"]], me, 0.0, executor=Argv()),
        Batch([[b"PUBLISH", b"ch", b"3"]], lone, 0.0, executor=Argv()),
    ]
    owner.commit(batches)
    assert batches[0].replies == [b"1<1 None>", b"1<2 None>"]
    assert batches[1].replies == [b"1"]
    assert me.log == ["flush", "message 3"]


@pytest.mark.parametrize("failure", ["append", "sync"])
def test_own_messages_of_a_failed_group_follow_the_reply_once(failure: str) -> None:
    """The log fails: the group's first run's messages are dropped, its PUBLISH runs again
    and its own message follows that reply once; so it does once the store is read-only."""
    log = MemoryLog()
    owner = StoreOwner(StoreState(), log, mailbox=10)
    me = Sink([])
    owner.pubsub.subscribe(me, b"jobs")
    setattr(log, f"fail_{failure}", errno.EIO)
    batch = Batch(
        [[b"SET", b"k", b"v"], [b"PUBLISH", b"jobs", b"k"]], me, 0.0, executor=Argv()
    )
    owner.commit([batch])
    assert batch.replies is not None and batch.replies[0].startswith(b"-ERR")
    assert batch.replies[1] == b"1<k None>"
    assert owner.read_only is not None
    again = Batch([[b"PUBLISH", b"jobs", b"x"], [b"GET", b"k"]], me, 0.0, executor=Argv())
    owner.commit([again])
    assert again.replies == [b"1<x None>", b"None"]
    assert me.log == ["flush", "flush"]  # nothing left over for release


def _connection(
    loop: RecordingLoop, **config: int
) -> tuple[LineConnection, FakeTransport, StoreOwner]:
    owner = StoreOwner(StoreState(), MemoryLog(), mailbox=100)
    conn = LineConnection(Hub(ServerConfig(**config), owner), loop)  # type: ignore[arg-type]
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport, owner


def test_push_with_nothing_owed_is_written_at_once(loop: RecordingLoop) -> None:
    conn, transport, _ = _connection(loop)
    conn.push(b"frame")
    assert transport.writes == [b"frame"]


def test_push_waits_behind_replies_owed(loop: RecordingLoop) -> None:
    """Pushed output never overtakes a reply the connection owes; pushes made meanwhile go in
    one batch, written with the reply in one write."""
    conn, transport, owner = _connection(loop)
    conn.data_received(b"SET b k v\n")
    conn.push(b"one,")
    conn.push(b"two")
    assert transport.writes == []
    owner.commit(owner.mailbox.take(100))
    assert transport.writes == [b"OK\none,two"]
    assert conn._pushed == 0
    conn.push(b"three")
    assert transport.writes[-1] == b"three"


def test_push_queued_past_the_hard_limit_drops_the_connection(loop: RecordingLoop) -> None:
    """What waits in line counts with what is unsent: past the hard limit, dropped."""
    conn, transport, _ = _connection(loop, output_soft_limit=1000, output_hard_limit=5000)
    conn.data_received(b"GET b k\n")
    transport.unsent = 3000
    conn.push(b"x" * 1500)
    assert not transport.aborted
    conn.push(b"x" * 600)
    assert transport.aborted and conn._hub.output_dropped == 1
    conn.push(b"more")  # closed: nothing more is held
    assert conn._pushed == 2100
