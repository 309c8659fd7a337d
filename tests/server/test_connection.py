"""LineConnection in isolation: batching, reply order, shedding, timers, crash isolation."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import minidb.runtime
from minidb.protocol import MAX_BULK_ROWS, Get, RequestDecoder, Set
from minidb.server import Server, ServerConfig
from minidb.server._connection import Hub, LineConnection
from minidb.server._hub import LATENCY_BOUNDS_S
from minidb.store import MemoryLog, StoreOwner, StoreState
from tests.server._clock import run_on_virtual_clock


class FakeTransport(asyncio.Transport):
    """Records writes instead of sending them."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False
        self.reading = True
        self.unsent = 0  # what get_write_buffer_size() reports
        self.limits: tuple[int, int] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        assert high is not None and low is not None
        self.limits = (high, low)

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def abort(self) -> None:
        self.closed = self.aborted = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5555) if name == "peername" else default


class RecordingLoop(asyncio.SelectorEventLoop):
    """A loop that has ``reschedule`` and records each call to it."""

    def __init__(self) -> None:
        super().__init__()
        self.rescheduled: list[tuple[asyncio.TimerHandle, float]] = []
        self.armed = True

    def reschedule(self, handle: asyncio.TimerHandle, when: float) -> bool:
        self.rescheduled.append((handle, when))
        return self.armed


def _connection(
    loop: asyncio.AbstractEventLoop, **config: Any
) -> tuple[LineConnection, FakeTransport, StoreOwner]:
    owner = StoreOwner(StoreState(), MemoryLog(), mailbox=config.pop("mailbox", 100))
    hub = Hub(ServerConfig(**config), owner)
    conn = LineConnection(hub, loop)
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport, owner


def test_connection_one_read_is_one_batch_and_one_write(loop: RecordingLoop) -> None:
    """Everything one read delivered goes to the owner as one batch and back as one write."""
    conn, transport, owner = _connection(loop)
    conn.data_received(b"SET b k v\nGET b k\nPING\nGET b")
    batches = owner.mailbox._batches
    assert len(batches) == 1 and len(batches[0].requests) == 3
    owner.commit(list(batches))
    assert transport.writes == [b"OK\nVALUE v\nERR unknown verb PING\n"]


def test_connection_replies_stay_in_order_when_later_batch_answers_first(
    loop: RecordingLoop,
) -> None:
    """A backlog shed after waiting for room is answered at once, but waits behind the older
    batch still in the mailbox."""
    conn, transport, owner = _connection(loop, mailbox=2)
    conn.data_received(b"SET b k 1\nSET b k 2\n")
    conn.data_received(b"GET b k\n")  # mailbox full: waits for room, reading paused
    assert transport.writes == [] and not transport.reading
    conn._room_since = loop.time() - 10  # as if it had waited past the request timeout
    conn._on_request_timeout()
    assert transport.writes == []  # ERR busy, but must not overtake
    owner.commit([owner.mailbox._batches.popleft()])
    assert transport.writes == [b"OK\nOK\nERR busy\n"]
    assert conn._hub.shed == 1 and transport.reading


def test_connection_partial_room_sends_prefix_and_queues_the_rest(loop: RecordingLoop) -> None:
    """When only part of a read fits in the mailbox, the rest waits for room (reading paused)
    and is sent when the owner takes: nothing is refused."""
    conn, transport, owner = _connection(loop, mailbox=2)
    conn.data_received(b"SET b a 1\nSET b b 2\nSET b c 3\n")
    assert len(owner.mailbox) == 2 and not transport.reading
    first = owner.mailbox.take(10)  # frees room: the rest is handed in there and then
    assert len(owner.mailbox) == 1
    owner.commit(first)
    owner.commit(owner.mailbox.take(10))
    assert transport.writes == [b"OK\nOK\n", b"OK\n"]
    assert conn._hub.shed == 0 and transport.reading


def test_connection_in_flight_bound_pauses_reading_and_takes_on_flush(
    loop: RecordingLoop,
) -> None:
    """Beyond --max-in-flight a connection takes no more requests from its read and stops
    reading; every flush of replies takes the next ones, and reading resumes at the end."""
    conn, transport, owner = _connection(loop, max_in_flight=4)
    conn.data_received(b"".join(b"SET b k%d v\n" % i for i in range(10)) + b"GET b")
    sizes, reading = [], []
    while owner.mailbox._batches:
        reading.append(transport.reading)
        batches = owner.mailbox.take(100)
        sizes += [len(b.requests) for b in batches]
        owner.commit(batches)
    assert sizes == [4, 4, 2]
    assert reading == [False, False, True]  # the last two were all that was left
    assert b"".join(transport.writes) == b"OK\n" * 10
    assert transport.reading
    conn.data_received(b" k9\n")
    owner.commit(owner.mailbox.take(100))
    assert transport.writes[-1] == b"VALUE v\n"


def test_connection_quiet_client_gets_room_before_flooders(loop: RecordingLoop) -> None:
    """Room freed in the mailbox goes first to connections waiting with a fresh read, then
    round robin to the leftovers of floods, each up to its in-flight bound."""
    owner = StoreOwner(StoreState(), MemoryLog(), mailbox=4)
    hub = Hub(ServerConfig(max_in_flight=4), owner)
    conns = []
    for _ in range(3):
        conn = LineConnection(hub, loop)
        conn.connection_made(FakeTransport())
        conns.append(conn)
    flood_a, flood_b, quiet = conns
    flood_a.data_received(b"GET b a\n" * 8)  # 4 in, 4 waiting (busy: has requests in flight)
    flood_b.data_received(b"GET b b\n" * 8)  # waits (a fresh read: queued as quiet)
    quiet.data_received(b"GET b q\n")  # waits, behind flood_b only
    assert [len(b.requests) for b in owner.mailbox._batches] == [4]
    owner.commit(owner.mailbox.take(100))  # a's replies written; room handed out in order
    order = [(b.sink, len(b.requests)) for b in owner.mailbox._batches]
    assert order == [(flood_b, 4)]
    owner.commit(owner.mailbox.take(100))
    assert [(b.sink, len(b.requests)) for b in owner.mailbox._batches] == [(quiet, 1), (flood_a, 3)]
    assert hub.shed == 0


def test_connection_flood_leaves_the_quiet_reserve_free(loop: RecordingLoop) -> None:
    """A flood's leftovers fill the mailbox only up to its quiet reserve, so a client sending
    one request is admitted at once while the flood waits."""
    owner = StoreOwner(StoreState(), MemoryLog(), mailbox=16)  # reserve: 2
    hub = Hub(ServerConfig(max_in_flight=8), owner)
    floods = [LineConnection(hub, loop) for _ in range(2)]
    calm = LineConnection(hub, loop)
    for conn in (*floods, calm):
        conn.connection_made(FakeTransport())
    for conn in floods:
        conn.data_received(b"GET b a\n" * 100)  # fresh reads: 8 each (their bound), full
    assert len(owner.mailbox) == 16
    owner.commit(owner.mailbox.take(100))  # answered; the leftovers refill, up to 16 - 2
    assert [len(b.requests) for b in owner.mailbox._batches] == [8, 6]
    calm.data_received(b"GET b q\n")
    assert owner.mailbox._batches[-1].sink is calm and len(owner.mailbox) == 15
    assert hub.shed == 0


def test_connection_fresh_read_queued_for_room_keeps_its_claim_on_the_reserve(
    loop: RecordingLoop,
) -> None:
    """A quiet client that found even the reserve full is served from the reserve when its
    turn comes, although the place freed is one floods may not take."""
    owner = StoreOwner(StoreState(), MemoryLog(), mailbox=16)  # reserve: 2
    hub = Hub(ServerConfig(max_in_flight=14), owner)
    small, big, calm = (LineConnection(hub, loop) for _ in range(3))
    for conn in (small, big, calm):
        conn.connection_made(FakeTransport())
    small.data_received(b"GET b s\n" * 2)
    big.data_received(b"GET b b\n" * 14)  # the mailbox is full
    calm.data_received(b"GET b q\n")  # queues for room, as quiet
    assert len(owner.mailbox) == 16
    owner.mailbox.take(2)  # frees only reserve places: 16 - 14
    assert owner.mailbox._batches[-1].sink is calm


def test_connection_decoder_error_drops_only_that_connection(
    loop: RecordingLoop, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception from the decoder is logged once with the peer and aborts that connection;
    it never escapes data_received."""

    class Broken(RequestDecoder):
        def receive(self, data: bytes) -> None:
            raise RuntimeError("decoder bug")

    conn, transport, _ = _connection(loop)
    conn._decoder = Broken()
    with caplog.at_level("ERROR", logger="minidb.server"):
        conn.data_received(b"GET b k\n")
        conn.data_received(b"GET b k\n")
    assert transport.aborted
    errors = [r for r in caplog.records if r.getMessage() == "connection_error"]
    assert len(errors) == 1 and "127.0.0.1:5555" in str(errors[0].__dict__)
    assert conn._hub.errors == 1


def test_connection_flush_error_never_reaches_the_owner(loop: RecordingLoop) -> None:
    """A connection whose write raises is dropped; the owner's group and the other
    connections' replies are unaffected."""
    conn, transport, owner = _connection(loop)
    other = LineConnection(conn._hub, loop)
    other_transport = FakeTransport()
    other.connection_made(other_transport)

    def write(data: object) -> None:
        raise OSError("write failed")

    transport.write = write  # type: ignore[method-assign]
    conn.data_received(b"SET b k v\n")
    other.data_received(b"GET b k\n")
    owner.commit(owner.mailbox.take(100))  # must not raise
    assert transport.aborted and conn._hub.errors == 1
    assert other_transport.writes == [b"VALUE v\n"]


def test_connection_idle_with_unsent_output_is_aborted(loop: RecordingLoop) -> None:
    """An idle connection whose client does not read its replies is aborted, since close()
    would wait for them to drain forever; one with nothing unsent is closed gracefully."""
    conn, transport, _ = _connection(loop)
    transport.unsent = 4096
    conn._on_idle()
    assert transport.aborted
    conn, transport, _ = _connection(loop)
    conn._on_idle()
    assert transport.closed and not transport.aborted


def test_connection_over_soft_output_limit_takes_no_requests(loop: RecordingLoop) -> None:
    """Over the soft limit (the transport's high-water mark, which it is given) a connection
    stops reading and leaves new requests undecoded until the client reads its replies."""
    conn, transport, owner = _connection(loop, output_soft_limit=1000, output_hard_limit=5000)
    assert transport.limits == (1000, 250)
    conn.pause_writing()
    assert not transport.reading
    conn.data_received(b"GET b k\n")
    assert len(owner.mailbox) == 0
    conn.resume_writing()
    assert len(owner.mailbox) == 1 and transport.reading


def test_connection_over_hard_output_limit_is_dropped(loop: RecordingLoop) -> None:
    """A connection left holding more unsent replies than the hard limit by a write is
    aborted at once (the backstop: the owner's output room keeps it from happening)."""
    conn, transport, owner = _connection(loop, output_soft_limit=1000, output_hard_limit=5000)
    conn.data_received(b"GET b k\n")
    write = transport.write

    def write_unsent(data: bytes | bytearray | memoryview) -> None:
        write(data)
        transport.unsent = 5001
        conn.pause_writing()

    transport.write = write_unsent  # type: ignore[method-assign]
    owner.commit(owner.mailbox.take(100))
    assert transport.aborted and conn._hub.output_dropped == 1


def test_connection_over_soft_output_limit_gets_its_requests_back_unrun(
    loop: RecordingLoop,
) -> None:
    """A batch that reaches the owner while its connection is over the soft limit is handed
    back unrun (nothing is built for a client that does not read); it runs, in order, once
    the client has read."""
    conn, transport, owner = _connection(loop, output_soft_limit=1000, output_hard_limit=5000)
    owner.state.apply(Set(b"b", b"k", b"v"))
    conn.data_received(b"GET b k\nSET b k w\n")
    transport.unsent = 1001
    conn.pause_writing()
    owner.commit(owner.mailbox.take(100))
    assert transport.writes == [] and not transport.aborted
    assert owner.state.execute(Get(b"b", b"k"), None, 0) == b"VALUE v\n"  # the SET did not run
    assert len(owner.mailbox) == 0 and not transport.reading
    transport.unsent = 0
    conn.resume_writing()
    assert len(owner.mailbox) == 2
    owner.commit(owner.mailbox.take(100))
    assert transport.writes == [b"VALUE v\nOK\n"]
    assert transport.reading


def test_connection_idle_timer_is_not_touched_by_reads(loop: RecordingLoop) -> None:
    """A read that completes a request only notes when it came: the one idle timer is not
    moved (no reschedule, no new timer), whatever the loop offers."""
    conn, _, _ = _connection(loop, idle_timeout=30.0)
    first_timer = conn._idle
    before = loop.time()
    conn.data_received(b"GET b k\n")
    conn.data_received(b"GET b k\n")
    assert loop.rescheduled == [] and conn._idle is first_timer
    assert first_timer is not None and not first_timer.cancelled()
    assert before <= conn._idle_from <= loop.time()


def test_connection_idle_timer_catches_up_with_activity_when_it_fires(
    loop: RecordingLoop,
) -> None:
    """Fired after a take, the timer re-arms at that take plus the timeout and the connection
    stays; fired with no take since it was armed, the connection closes."""
    conn, transport, _ = _connection(loop, idle_timeout=30.0)
    armed_at = conn._idle_at
    conn._idle_from = armed_at - 10.0  # a take 20 s after opening
    conn._on_idle()
    assert not transport.closed and conn._idle is not None
    assert conn._idle_at == armed_at + 20.0 and conn._idle.when() == pytest.approx(armed_at + 20.0)
    conn._on_idle()  # no take since: idle for the whole timeout
    assert transport.closed


def test_connection_request_timeout_answers_busy_then_drops_late_replies(
    loop: RecordingLoop,
) -> None:
    """Past its deadline a batch is answered ERR busy; the owner's late replies are dropped."""
    conn, transport, owner = _connection(loop)
    conn.data_received(b"SET b k late\n")
    batch = owner.mailbox._batches[0]
    batch.deadline = loop.time() - 1  # as if it had waited too long
    conn._on_request_timeout()
    assert transport.writes == [b"ERR busy\n"]
    owner.commit([owner.mailbox._batches.popleft()])
    assert transport.writes == [b"ERR busy\n"]
    assert owner.state.apply(Get(b"b", b"k")) == b"VALUE late\n"
    assert conn._hub.timeouts == 1


def test_connection_request_timeout_leaves_an_applied_batch_to_the_owner(
    loop: RecordingLoop,
) -> None:
    """A batch the owner ran and holds while it polls the sockets before its group's sync
    (``applied``) is past its deadline but not answered busy: its reply is the owner's."""
    conn, transport, owner = _connection(loop)
    conn.data_received(b"SET b k ran\n")
    batch = owner.mailbox._batches[0]
    batch.deadline = loop.time() - 1
    batch.applied = True
    conn._on_request_timeout()
    assert transport.writes == [] and conn._hub.timeouts == 0
    owner.commit([owner.mailbox._batches.popleft()])
    assert transport.writes == [b"OK\n"]


def test_connection_eof_keeps_writing_until_answered(loop: RecordingLoop) -> None:
    """A client that half-closes still gets its replies, then the connection closes."""
    conn, transport, owner = _connection(loop)
    conn.data_received(b"SET b k v\n")
    assert conn.eof_received() is True
    assert not transport.closed
    owner.commit([owner.mailbox._batches.popleft()])
    assert transport.writes == [b"OK\n"] and transport.closed


def test_connection_slow_reader_stops_reading(loop: RecordingLoop) -> None:
    """When the write buffer is full the connection stops reading until it drains."""
    conn, transport, _ = _connection(loop)
    conn.pause_writing()
    assert not transport.reading
    conn.resume_writing()
    assert transport.reading


def test_connection_crash_affects_only_its_own_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler that raises loses its own connection; other clients keep being served."""
    real_receive = RequestDecoder.receive

    def receive(self: RequestDecoder, data: bytes) -> Any:
        if b"BOOM" in data:
            raise RuntimeError("handler bug")
        return real_receive(self, data)

    monkeypatch.setattr(RequestDecoder, "receive", receive)

    async def body() -> None:
        server = Server(ServerConfig(port=0, data_dir=tmp_path))
        await server.start()
        assert server.line_address is not None
        port = server.line_address[1]
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: None)
        async with asyncio.timeout(5):
            r1, w1 = await asyncio.open_connection("127.0.0.1", port)
            r2, w2 = await asyncio.open_connection("127.0.0.1", port)
            w1.write(b"BOOM\n")
            assert await r1.read() == b""  # its connection is closed
            w2.write(b"SET b k v\n")
            assert await r2.readline() == b"OK\n"
            w2.close()
            server.request_shutdown()
            assert await server.serve() == 0

    minidb.runtime.run(body())


def test_connection_idle_timeout_fires_exactly_on_the_loop_clock(tmp_path: Path) -> None:
    """With the default 30 s, a client silent after its last request is closed 30 s later
    by the loop's clock (a virtual one here: the test takes no wall time)."""

    async def body() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        server = Server(ServerConfig(port=0, data_dir=tmp_path))
        await server.start()
        assert server.line_address is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", server.line_address[1])
        await asyncio.sleep(10)
        writer.write(b"GET b k\n")
        assert await reader.readline() == b"NIL\n"
        last_request = loop.time()
        assert await reader.read() == b""
        closed = loop.time()
        writer.close()
        server.request_shutdown()
        await server.serve()
        return last_request, closed

    last_request, closed = run_on_virtual_clock(body)
    assert last_request >= 10.0
    assert closed - last_request == pytest.approx(30.0, abs=0.01)


def test_connection_request_timeout_exact_and_write_lands_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the owner delayed 5 s per batch and the default 2 s request timeout, the client
    hears ERR busy at exactly 2 s and the write is in the store at 5 s."""
    from minidb import _failpoints

    monkeypatch.setattr(_failpoints, "ACTIVE", _failpoints.parse("store.apply=delay(5)"))

    async def body() -> list[tuple[float, bytes]]:
        loop = asyncio.get_running_loop()
        server = Server(ServerConfig(port=0, data_dir=tmp_path))
        await server.start()
        assert server.line_address is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", server.line_address[1])
        started = loop.time()
        writer.write(b"SET users alice late\n")
        reply = await reader.readline()
        seen = [(loop.time() - started, reply)]
        while server.statistics().store.keys == 0:
            await asyncio.sleep(0.001)
        seen.append((loop.time() - started, b"landed"))
        writer.close()
        server.request_shutdown()
        await server.serve()
        return seen

    (busy_at, reply), (landed_at, _) = run_on_virtual_clock(body)
    assert reply == b"ERR busy\n"
    assert busy_at == pytest.approx(2.0, abs=0.01)
    assert landed_at == pytest.approx(5.0, abs=0.01)


def test_connection_request_timeout_leaves_a_write_waiting_for_its_commit_delay(
    tmp_path: Path,
) -> None:
    """A SET the owner ran and holds for its ``--commit-delay`` (0.1 s) past a 0.05 s request
    timeout is answered OK after the sync, not ERR busy: it ran (``Batch.applied``)."""

    async def body() -> tuple[float, bytes]:
        loop = asyncio.get_running_loop()
        server = Server(ServerConfig(
            port=0, data_dir=tmp_path, request_timeout=0.05, commit_delay_us=100_000,
        ))
        await server.start()
        assert server.line_address is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", server.line_address[1])
        started = loop.time()
        writer.write(b"SET users alice delayed\n")
        reply = await reader.readline()
        seen = (loop.time() - started, reply)
        writer.close()
        server.request_shutdown()
        await server.serve()
        return seen

    answered_at, reply = run_on_virtual_clock(body)
    assert reply == b"OK\n"
    assert answered_at == pytest.approx(0.1, abs=0.01)


def test_connection_room_wait_times_out_exactly_with_err_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the owner stuck 5 s per group and --mailbox 1 full, a request that finds no room is
    not refused at once: it waits, and is answered ERR busy exactly --request-timeout (2 s)
    after it was sent."""
    from minidb import _failpoints

    monkeypatch.setattr(_failpoints, "ACTIVE", _failpoints.parse("store.apply=delay(5)"))

    async def body() -> float:
        loop = asyncio.get_running_loop()
        server = Server(ServerConfig(port=0, data_dir=tmp_path, mailbox=1))
        await server.start()
        assert server.line_address is not None
        port = server.line_address[1]
        writers = []
        for line in (b"SET b a 1\n", b"SET b b 2\n"):  # taken by the owner; fills the mailbox
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(line)
            writers.append(writer)
            await asyncio.sleep(0.5)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writers.append(writer)
        started = loop.time()
        writer.write(b"SET b c 3\n")
        assert await reader.readline() == b"ERR busy\n"
        answered = loop.time() - started
        for w in writers:
            w.close()
        server.request_shutdown()
        await server.serve()
        return answered

    assert run_on_virtual_clock(body) == pytest.approx(2.0, abs=0.01)


def _frame(rows: int, key: bytes = b"k") -> bytes:
    return b"BULK %d\n" % rows + b"".join(b"SET b %b%d v\n" % (key, i) for i in range(rows))


def test_connection_frame_weighs_its_rows_and_waits_to_be_first_of_a_take(
    loop: RecordingLoop,
) -> None:
    """A frame counts its rows towards --max-in-flight and the mailbox; one heavier than what
    the connection may still have in flight waits (reading paused) to be the first request of
    the next take, so in flight stays within max_in_flight + MAX_BULK_ROWS."""
    conn, transport, owner = _connection(loop, max_in_flight=4)
    conn.data_received(b"GET b k0\n" + _frame(6) + b"GET b k5\n")
    sizes, peak, reading = [], 0, []
    while owner.mailbox._batches:
        peak = max(peak, conn._in_flight)
        reading.append(transport.reading)
        batches = owner.mailbox.take(100)
        sizes += [(len(b.requests), b.size) for b in batches]
        owner.commit(batches)
    assert sizes == [(1, 1), (1, 6), (1, 1)]
    assert peak == 6 and reading == [False, False, True]
    assert b"".join(transport.writes) == b"NIL\nOK 6\nVALUE v\n"
    assert conn._in_flight == 0 and transport.reading


def test_connection_small_max_in_flight_still_serves_the_largest_frame(
    loop: RecordingLoop,
) -> None:
    """With --max-in-flight 1 and a mailbox smaller than the frame, a MAX_BULK_ROWS-row
    frame is still taken (alone) and answered once."""
    conn, transport, owner = _connection(loop, max_in_flight=1, mailbox=16)
    conn.data_received(_frame(MAX_BULK_ROWS) + _frame(2, b"x"))
    batches = owner.mailbox.take(owner.max_drain)
    assert [b.size for b in batches] == [MAX_BULK_ROWS]
    assert conn._in_flight == MAX_BULK_ROWS and not transport.reading
    owner.commit(batches)
    owner.commit(owner.mailbox.take(owner.max_drain))
    assert transport.writes == [b"OK %d\n" % MAX_BULK_ROWS, b"OK 2\n"]
    assert owner.statistics().appends == 2


def test_connection_hostile_bulk_header_answers_then_closes(loop: RecordingLoop) -> None:
    """A frame that cannot be delimited is answered in its turn and the connection closes
    after that reply; nothing after it is run."""
    conn, transport, owner = _connection(loop)
    conn.data_received(b"SET b k v\nBULK 99999999999999999999\nSET b k w\n")
    assert not transport.reading
    conn.data_received(b"SET b k x\n")  # arrives after the refusal: never read
    owner.commit(owner.mailbox.take(100))
    assert transport.writes == [b"OK\nERR invalid bulk count 99999999999999999999\n"]
    assert transport.closed and not transport.aborted
    assert owner.state.apply(Get(b"b", b"k")) == b"VALUE v\n"


def test_connection_invalid_row_refuses_the_frame_and_keeps_the_connection(
    loop: RecordingLoop,
) -> None:
    """A frame with a bad row is answered ``ERR row <i>: <reason>``, none of its rows is
    applied, and the connection goes on."""
    conn, transport, owner = _connection(loop)
    conn.data_received(b"BULK 3\nSET b a 1\nSET b b\nSET b c 3\nGET b a\n")
    owner.commit(owner.mailbox.take(100))
    assert transport.writes == [b"ERR row 2: missing argument\nNIL\n"]
    assert not transport.closed and transport.reading
    assert owner.statistics().appends == 0


def test_connection_frame_waiting_for_room_is_shed_with_one_busy(loop: RecordingLoop) -> None:
    """A frame that waited --request-timeout for mailbox room gets one ``ERR busy``."""
    conn, transport, owner = _connection(loop, mailbox=2)
    conn.data_received(b"SET b k 1\nSET b k 2\n")
    conn.data_received(_frame(3))
    assert not transport.reading
    conn._room_since = loop.time() - 10  # as if it had waited past the request timeout
    conn._on_request_timeout()
    owner.commit([owner.mailbox._batches.popleft()])
    assert transport.writes == [b"OK\nOK\nERR busy\n"]
    assert conn._hub.shed == 1 and conn._in_flight == 0 and transport.reading


def test_connection_requests_handed_back_go_again_in_order_after_the_owner_is_done(
    loop: RecordingLoop,
) -> None:
    """Out of output room, the owner hands back the rest of one batch; a later batch of the
    same connection still in the mailbox comes back unrun too, and only then does everything
    handed back go again, oldest first: the GET sees the SET before it."""
    conn, transport, owner = _connection(loop, output_soft_limit=1000, output_hard_limit=5000)
    owner.state.apply(Set(b"b", b"k", b"v" * 600))
    conn.data_received(b"GET b k\nGET b k\nSET b a 1\n")
    conn.data_received(b"GET b a\n")
    first, second = owner.mailbox.take(3), owner.mailbox.take(1)
    owner.commit(first)  # two replies of 608 bytes use up the room: the SET comes back
    big = b"VALUE " + b"v" * 600 + b"\n"
    assert transport.writes == [big + big]
    assert len(owner.mailbox) == 0  # nothing goes again while the GET is with the owner
    owner.commit(second)  # handed back whole: the connection is cut
    assert transport.writes == [big + big]
    assert len(owner.mailbox) == 2
    owner.commit(owner.mailbox.take(2))
    assert transport.writes == [big + big, b"OK\nVALUE 1\n"]
    assert transport.reading and conn._in_flight == 0


def test_connection_batch_answered_busy_while_cut_waits_behind_what_was_handed_back(
    loop: RecordingLoop,
) -> None:
    """A batch the request timer answers busy while the owner still holds it, after an older
    one came back cut, does not overtake the requests handed back: it is held until the owner
    hands it back too, and then everything goes again in order, so each reply keeps its
    place (the GET sees the SET it was sent after)."""
    conn, transport, owner = _connection(
        loop, output_soft_limit=1000, output_hard_limit=5000, request_timeout=1.0
    )
    owner.state.apply(Set(b"b", b"k", b"v" * 600))
    conn.data_received(b"GET b k\nGET b k\nSET b a 1\n")
    conn.data_received(b"GET b a\n")
    first, second = owner.mailbox.take(3), owner.mailbox.take(1)
    owner.commit(first)  # ran the GETs, handed the SET back
    big = b"VALUE " + b"v" * 600 + b"\n"
    assert transport.writes == [big + big]
    second[0].deadline = loop.time()
    conn._on_request_timeout()  # the GET b a is answered busy while the owner holds it
    assert transport.writes == [big + big]  # ...but that reply may not overtake the SET's
    owner.commit(second)  # handed back whole: now the handed-back requests go again
    assert len(owner.mailbox) == 2
    owner.commit(owner.mailbox.take(2))
    assert transport.writes == [big + big, b"OK\nVALUE 1\n"]
    assert conn._in_flight == 0


def test_connection_counts_each_batch_latency_from_send_to_write(loop: RecordingLoop) -> None:
    """A batch's requests are counted in the latency histogram once, together, at the time
    from their send to the owner to the write of their replies."""
    now = [loop.time()]
    sent = now[0]
    loop.time = lambda: now[0]  # type: ignore[method-assign]  # (bound by the connection)
    conn, _, owner = _connection(loop)
    conn.data_received(b"SET b k v\nGET b k\n")
    now[0] = sent + 0.3
    owner.commit(owner.mailbox.take(10))
    stats = conn._hub.statistics()
    assert stats.latency_buckets[LATENCY_BOUNDS_S.index(0.5)] == 2
    assert sum(stats.latency_buckets) == 2
    assert stats.latency_sum_s == pytest.approx(0.6)


def test_hub_counts_inline_requests_as_a_latency_of_zero(loop: RecordingLoop) -> None:
    """Requests served in their read's callback (the owner's ``inline``) land where
    ``observe_latency(0.0)`` puts them."""
    inline, _, _ = _connection(loop)
    timed, _, _ = _connection(loop)
    inline._hub.owner.inline += 5
    timed._hub.observe_latency(0.0, 5)
    assert inline._hub.latency_buckets == timed._hub.latency_buckets
    assert inline._hub.latency_buckets[0] == 5 and inline._hub.latency_sum == 0.0
