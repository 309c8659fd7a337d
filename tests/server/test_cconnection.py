"""The C ``RespConnection.data_received``, ``turn_answered`` and ``output_room``
(``server.resp._cconnection``) at their edges.

``test_express_lane.py`` holds it to the Python method over random reads; these are the cases
random reads do not reach: a subclass or an unset field (the Python method, wholesale), an
error from inside the lane (contained as the Python method contains it), a ``BaseException``
(not contained), the output limit reached by the reply it writes, and bad arguments. Each runs
on both twins (the ``twin`` fixture), which must agree.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from minidb.protocol import RespDecoder, encode_command
from minidb.server.resp import _connection as connection_module
from minidb.server.resp._connection import RespConnection
from minidb.store import MemoryLog, StoreOwner, StoreState
from tests.server._connection_twins import python_connection_methods
from tests.server.test_connection import FakeTransport, RecordingLoop
from tests.server.test_pubsub_hold import _connection

pytestmark = [
    pytest.mark.accelerator,  # tests/sanitizers/run.py runs these under ASan and UBSan
    pytest.mark.skipif(
        connection_module._cconnection is None, reason="the C data_received is not built"
    ),
]

SET = encode_command([b"SET", b"k", b"w"])
GET = encode_command([b"GET", b"k"])
NOW_MS = 1_700_000_000_000


@pytest.fixture(params=["c", "python"])
def twin(request: pytest.FixtureRequest) -> Iterator[str]:
    """``RespConnection``'s C methods, or their Python twins."""
    if request.param == "c":
        yield "c"
        return
    with python_connection_methods():
        yield "python"


def _idle_owner(loop: RecordingLoop, fsync: str = "no") -> tuple[StoreOwner, MemoryLog]:
    """An owner waiting for work, whose loop turn's group may take runs, with ``k`` = ``v``
    in RESP's bucket (the C run writes to a bucket that exists; the first write of a bucket
    is Python's)."""
    log = MemoryLog()
    owner = StoreOwner(StoreState(), log, mailbox=100, clock=lambda: NOW_MS, fsync=fsync)
    owner._loop, owner._running = loop, True
    owner._update_turns()
    owner.waiting = True
    owner.state.keyspace.put(b"0", b"k", b"v", None, None)
    return owner, log


def _spied(conn: RespConnection) -> list[object]:
    """The calls of ``conn._express_taken`` (the Python rest of the lane), from now on."""
    calls: list[object] = []
    express_taken = conn._express_taken

    def spy(taken: Any, turn: Any) -> None:
        calls.append(taken)
        express_taken(taken, turn)

    conn._express_taken = spy  # type: ignore[method-assign]
    return calls


class Recording(RespConnection):
    """A subclass (the C method hands it to Python as it is): records ``_express_taken``."""

    taken: list[object]

    def _express_taken(self, taken: Any, turn: Any) -> None:
        self.__dict__.setdefault("taken", []).append(taken)
        super()._express_taken(taken, turn)


def test_a_set_runs_in_the_turn_and_a_get_is_served(loop: RecordingLoop, twin: str) -> None:
    """-P 1's two shapes, end to end on each twin (the C one without the Python rest): the
    SET's reply after the turn's log, the GET's at once."""
    owner, log = _idle_owner(loop)
    conn, transport, _ = _connection(loop, owner)
    rest = _spied(conn)
    conn.data_received(SET)
    assert transport.writes == [] and conn._in_turn and len(owner.turn) == 1
    assert owner._turn_requests == 1
    # The SET opened the turn: its end is the next callback of the loop.
    (turn_over,) = loop._ready  # type: ignore[attr-defined]
    assert turn_over._callback == owner._turn_over and owner._turn_number == 1
    turn_over._run()
    assert transport.writes == [b"+OK\r\n"] and not conn._in_turn and len(log.appended) == 1
    conn.session.last_interaction = 0.0  # set again by each read
    conn.data_received(GET)
    assert transport.writes == [b"+OK\r\n", b"$1\r\nw\r\n"]
    assert (conn.requests, owner.inline, conn.session.plain_taken) == (2, 2, 2)
    assert conn.session.last_command == "get" and conn.session.last_interaction > 0
    assert conn.requests_decoder.runs
    assert len(rest) == (0 if twin == "c" else 2)


def test_a_read_then_a_write_in_one_read(loop: RecordingLoop, twin: str) -> None:
    """GET then SET: the GET served at once, the SET in the turn (its run starts after the
    GET: a failed log refuses the SET alone)."""
    owner, log = _idle_owner(loop, fsync="always")
    conn, transport, _ = _connection(loop, owner)
    rest = _spied(conn)
    conn.data_received(GET + SET)
    assert transport.writes == [b"$1\r\nv\r\n"] and conn._in_turn
    assert (conn.requests, owner.inline, owner._turn_requests) == (2, 2, 1)
    log.fail_sync = errno.EIO
    owner.end_turn()
    assert transport.writes == [b"$1\r\nv\r\n", b"-ERR not logged: Input/output error\r\n"]
    assert len(rest) == (0 if twin == "c" else 1)


def test_a_read_waits_for_an_open_turn(loop: RecordingLoop, twin: str) -> None:
    """Another connection's SET opened the turn: a GET is not served at once (it would
    answer ahead of a write it may see), it runs in the turn and is answered with it."""
    owner, _ = _idle_owner(loop)
    writer, _, _ = _connection(loop, owner)
    reader, transport, _ = _connection(loop, owner)
    writer.data_received(SET)
    reader.data_received(GET)
    assert transport.writes == [] and reader._in_turn
    owner.end_turn()
    assert transport.writes == [b"$1\r\nw\r\n"]


def test_a_read_waits_for_the_mailbox(loop: RecordingLoop, twin: str) -> None:
    """The owner waits, yet a batch is queued for it: not idle, so nothing is served at once
    (it would overtake the queued batch); the GET goes to the mailbox behind it."""
    owner, _ = _idle_owner(loop)
    owner.waiting = False
    first, first_transport, _ = _connection(loop, owner)
    first.data_received(SET)
    assert owner.mailbox.queued == 1
    owner.waiting = True
    reader, transport, _ = _connection(loop, owner)
    reader.data_received(GET)
    assert transport.writes == [] and owner.mailbox.queued == 2
    owner.commit(owner.mailbox.take(100))
    assert (first_transport.writes, transport.writes) == ([b"+OK\r\n"], [b"$1\r\nw\r\n"])


_GATE: list[tuple[str, Callable[[RespConnection], None]]] = [
    ("_pending", lambda conn: conn._pending.append(None)),  # type: ignore[arg-type]
    ("_deferred", lambda conn: conn._deferred.append(None)),
    ("_backlog", lambda conn: setattr(conn, "_backlog", True)),
    ("_draining", lambda conn: setattr(conn, "_draining", True)),
    ("_closed", lambda conn: setattr(conn, "_closed", True)),
    ("_in_turn", lambda conn: setattr(conn, "_in_turn", True)),
    ("requests.closing", lambda conn: setattr(conn.requests_decoder, "closing", True)),
    ("requests.held", lambda conn: conn.requests_decoder.held.append([b"PING"])),
    ("session.closing", lambda conn: setattr(conn.session, "closing", True)),
    ("session.restricted", lambda conn: setattr(conn.session, "restricted", True)),
    ("session.authenticated", lambda conn: setattr(conn.session, "authenticated", False)),
    ("session._queue", lambda conn: setattr(conn.session, "_queue", [])),
]


@pytest.mark.parametrize("close", [close for _, close in _GATE], ids=[n for n, _ in _GATE])
def test_each_gate_closes_the_lane(
    loop: RecordingLoop, twin: str, close: Callable[[RespConnection], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With any one of the gate's conditions, the read goes the general way: the lane's
    ``take_whole`` is not asked (while a connection without it is)."""
    owner, _ = _idle_owner(loop)
    conn, _, _ = _connection(loop, owner)
    asked: list[bytes] = []
    monkeypatch.setattr(RespDecoder, "take_whole", lambda self, data, *_: asked.append(data))
    close(conn)
    conn.data_received(GET)  # (the general way contains what it objects to)
    assert asked == []
    _connection(loop, owner)[0].data_received(GET)
    assert asked == [GET]


@pytest.mark.parametrize("start", [2**63 - 1, 2**70, -5])
def test_counters_past_a_machine_word(loop: RecordingLoop, twin: str, start: int) -> None:
    """The counters are Python ints: past a C long long they go on counting."""
    owner, _ = _idle_owner(loop)
    conn, transport, _ = _connection(loop, owner)
    conn.requests = owner.inline = start
    conn.data_received(GET)
    assert transport.writes == [b"$1\r\nv\r\n"] and conn.requests == owner.inline == start + 1


def test_a_subclass_goes_to_the_python_method(loop: RecordingLoop, twin: str) -> None:
    """The exact class's common outcomes are done in C (no ``_express_taken``, see above); a
    subclass gets the Python method, which always calls it; the replies are the same."""
    owner, _ = _idle_owner(loop)
    conn, transport, _ = _connection(loop, owner)
    conn.__class__ = Recording
    conn.data_received(SET)
    owner.end_turn()
    conn.data_received(GET)
    assert transport.writes == [b"+OK\r\n", b"$1\r\nw\r\n"] and len(conn.taken) == 2


def test_an_unset_field_fails_the_connection_as_python_does(
    loop: RecordingLoop, twin: str
) -> None:
    owner, _ = _idle_owner(loop)
    conn, transport, _ = _connection(loop, owner)
    del conn.session.bucket
    conn.data_received(SET)
    assert transport.aborted and conn._closed and conn._hub.errors == 1
    assert transport.writes == [] and len(list(owner.state.keyspace.items())) == 1


class Failing(FakeTransport):
    """A transport whose ``write`` raises ``error``."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error

    def write(self, data: bytes | bytearray | memoryview) -> None:
        raise self.error


def _over(loop: RecordingLoop, transport: FakeTransport) -> tuple[RespConnection, StoreOwner]:
    owner, _ = _idle_owner(loop)
    conn, _, _ = _connection(loop, owner)
    conn.connection_made(transport)
    return conn, owner


def test_an_error_in_the_lane_fails_the_connection(loop: RecordingLoop, twin: str) -> None:
    """The served GET's write raises: ``_fail("data_received", ...)``, as the Python
    method's ``except Exception``."""
    transport = Failing(RuntimeError("boom"))
    conn, owner = _over(loop, transport)
    conn.data_received(GET)
    assert transport.aborted and conn._closed and conn._hub.errors == 1
    assert owner.inline == 1  # counted before the write, as in Python


def test_a_base_exception_is_not_contained(loop: RecordingLoop, twin: str) -> None:
    transport = Failing(KeyboardInterrupt())
    conn, _ = _over(loop, transport)
    with pytest.raises(KeyboardInterrupt):
        conn.data_received(GET)
    assert not transport.aborted and conn._hub.errors == 0


class Filling(FakeTransport):
    """A transport whose ``write`` leaves ``unsent`` bytes buffered and pauses the writer."""

    def __init__(self, unsent: int) -> None:
        super().__init__()
        self.fill = unsent
        self.protocol: RespConnection | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        super().write(data)
        self.unsent = self.fill
        assert self.protocol is not None
        self.protocol.pause_writing()


@pytest.mark.parametrize("over", [True, False])
def test_the_reply_it_writes_may_pass_the_hard_limit(
    loop: RecordingLoop, twin: str, over: bool
) -> None:
    """The GET's reply pauses the transport: past the hard output limit the connection is
    dropped (counted), at it not."""
    transport = Filling(0)
    conn, _ = _over(loop, transport)
    transport.protocol = conn
    transport.fill = conn._hard_limit + (1 if over else 0)
    conn.data_received(GET)
    assert transport.writes == [b"$1\r\nv\r\n"]
    assert (transport.aborted, conn._hub.output_dropped) == ((True, 1) if over else (False, 0))


@pytest.mark.parametrize(
    "owed", [(), ("_pending",), ("_backlog",), ("_draining",), ("_pending", "_backlog")]
)
def test_turn_answered_writes_then_flushes_once(
    loop: RecordingLoop, twin: str, owed: tuple[str, ...]
) -> None:
    """The turn's replies are written; then, if anything is owed or waiting, one flush."""
    conn, transport, _ = _connection(loop)
    flushes: list[None] = []
    conn.flush = lambda: flushes.append(None)  # type: ignore[method-assign]
    for name in owed:
        setattr(conn, name, True)
    conn._in_turn = True
    conn.turn_answered(b"+OK\r\n")
    assert transport.writes == [b"+OK\r\n"] and not conn._in_turn
    assert len(flushes) == (1 if owed else 0)


def test_turn_answered_writes_nothing_once_closed(loop: RecordingLoop, twin: str) -> None:
    conn, transport, _ = _connection(loop)
    conn._closed = True
    conn.turn_answered(b"+OK\r\n")
    assert transport.writes == []


def test_turn_answered_contains_an_error(loop: RecordingLoop, twin: str) -> None:
    """A failing flush fails the connection, named as ``turn_answered``'s."""
    conn, transport, _ = _connection(loop)
    failed: list[str] = []
    conn._backlog = True
    conn.flush = lambda: 1 / 0  # type: ignore[method-assign]
    conn._fail = lambda where, exc: failed.append(where)  # type: ignore[method-assign]
    conn.turn_answered(b"+OK\r\n")
    assert failed == ["turn_answered"] and transport.writes == [b"+OK\r\n"]


@pytest.mark.parametrize("state", ["open", "unsent", "cut", "closed", "no transport"])
def test_output_room(loop: RecordingLoop, twin: str, state: str) -> None:
    """The soft output limit less what is unsent; -1 once cut, closed or without a
    transport."""
    conn, transport, _ = _connection(loop)
    transport.unsent = 100 if state == "unsent" else 0
    if state == "cut":
        conn._cut = True
    elif state == "closed":
        conn._closed = True
    elif state == "no transport":
        conn._transport = None
    room = conn.output_room()
    assert room == {"open": conn._soft_limit, "unsent": conn._soft_limit - 100}.get(state, -1)


def test_bad_arguments(loop: RecordingLoop) -> None:
    conn, _, _ = _connection(loop)
    c_method = connection_module._cconnection
    assert c_method is not None
    with pytest.raises(TypeError):
        conn.data_received()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        conn.data_received(GET, GET)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        conn.turn_answered()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        conn.turn_answered(b"", b"")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        conn.output_room(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        c_method.methods(RespConnection)
    with pytest.raises(TypeError):
        c_method.methods((RespConnection,) * 5, [], print)
    with pytest.raises(RuntimeError):  # one connection class, installed at import
        c_method.methods((RespConnection,) * 5, {}, print)
