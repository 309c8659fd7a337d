"""A subscription change waits for the owner's replies before it (``RespRequests.hold``), also
when what came before was in an earlier read or was answered at once. No sockets: a
``RespConnection`` on the fake transport of ``test_connection``, its owner's groups run by
hand, so that "still with the owner" is a state the test holds, not a race."""

from __future__ import annotations

import itertools

import pytest

from minidb.protocol import encode_command
from minidb.server import ServerConfig
from minidb.server._connection import Hub
from minidb.server.resp._connection import RespConnection, RespContext
from minidb.server.resp._executor import RespExecutor
from minidb.server.resp._info import ServerFacts
from minidb.server.resp._session import SessionConfig
from minidb.store import MemoryLog, StoreOwner, StoreState
from minidb.store._plainrun import ACCELERATED
from tests.server.test_connection import FakeTransport, RecordingLoop
from tests.server.test_resp_executor import Env

SUBSCRIBED = b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"


def _connection(
    loop: RecordingLoop, owner: StoreOwner | None = None
) -> tuple[RespConnection, FakeTransport, StoreOwner]:
    """A RESP connection over a fake transport; its owner (by default a fresh one over a
    MemoryLog) runs only when the test commits its mailbox."""
    if owner is None:
        owner = StoreOwner(StoreState(), MemoryLog(), mailbox=100)
    ids = itertools.count(1)
    context = RespContext(
        SessionConfig(ServerFacts(minidb_version="0")), RespExecutor(), Env(),
        max_bulk_bytes=1 << 20, next_id=lambda: next(ids),
    )  # fmt: skip
    conn = RespConnection(Hub(ServerConfig(), owner), loop, context)
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport, owner


def _wire(*commands: tuple[bytes, ...]) -> bytes:
    return b"".join(encode_command(list(argv)) for argv in commands)


def _run_owner(owner: StoreOwner) -> None:
    owner.commit(owner.mailbox.take(100))


def test_subscribe_in_a_later_read_waits_for_the_publish_still_with_the_owner(
    loop: RecordingLoop,
) -> None:
    """PUBLISH sent, not run yet; SUBSCRIBE arrives in the next read: it is not applied (the
    connection stops reading) until PUBLISH has answered 0, and no message follows."""
    conn, transport, owner = _connection(loop)
    conn.data_received(_wire((b"PUBLISH", b"ch", b"x")))
    conn.data_received(_wire((b"SUBSCRIBE", b"ch")))
    assert not owner.pubsub.subscribed(conn)
    assert transport.writes == [] and conn.requests_decoder.hold
    _run_owner(owner)
    assert b"".join(transport.writes) == b":0\r\n" + SUBSCRIBED
    assert owner.pubsub.subscribed(conn) and not conn.requests_decoder.hold


def test_unsubscribe_in_a_later_read_waits_so_the_publish_still_delivers(
    loop: RecordingLoop,
) -> None:
    """Subscribed in RESP3, PUBLISH to itself sent, then UNSUBSCRIBE: PUBLISH counts it, and
    its message follows its reply, before the confirmation."""
    conn, transport, owner = _connection(loop)
    conn.data_received(_wire((b"HELLO", b"3"), (b"SUBSCRIBE", b"ch")))
    del transport.writes[:]
    conn.data_received(_wire((b"PUBLISH", b"ch", b"x")))
    conn.data_received(_wire((b"UNSUBSCRIBE", b"ch")))
    assert owner.pubsub.subscribed(conn)
    _run_owner(owner)
    assert b"".join(transport.writes) == (
        b":1\r\n>3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n"
        b">3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n"
    )
    assert not owner.pubsub.subscribed(conn)


@pytest.mark.skipif(not ACCELERATED, reason="inline reads run in C only")
def test_subscribe_after_reads_served_inline_goes_on_at_once(loop: RecordingLoop) -> None:
    """GET served in the connection's own callback (the owner idle) leaves nothing with the
    owner: the SUBSCRIBE held behind it is applied in the same callback, and what follows
    too; nothing waits for a flush that would never come."""
    conn, transport, owner = _connection(loop)
    owner.waiting = True  # idle: waiting for work, nothing queued (see StoreOwner.idle)
    assert owner.idle
    conn.data_received(_wire((b"GET", b"k"), (b"SUBSCRIBE", b"ch"), (b"PING",)))
    assert b"".join(transport.writes) == (
        b"$-1\r\n" + SUBSCRIBED + b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
    )
    assert not conn.requests_decoder.hold and transport.reading


def test_subscribe_with_nothing_in_flight_is_applied_as_it_is_read(loop: RecordingLoop) -> None:
    """The usual SUBSCRIBE: answered in the read's own callback, no owner involved."""
    conn, transport, owner = _connection(loop)
    conn.data_received(_wire((b"SUBSCRIBE", b"ch")))
    assert transport.writes == [SUBSCRIBED] and owner.mailbox.queued == 0
