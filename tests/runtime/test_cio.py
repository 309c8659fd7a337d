"""The loop's I/O turn in C (``runtime._cio``: the epoll poll, the socket transport's read,
write and buffer size, the loop over the ready callbacks) against its Python twins and the
stock loop: each scenario runs on the stock
``SelectorEventLoop`` and on the ``WheelEventLoop`` with each twin, and must give the same
protocol events, the same bytes at the peer and the same errors."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import signal
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.runtime._sockets import Recorder, WrappedSocket

from minidb.runtime import WheelEventLoop, _accel
from minidb.runtime import _loop as loop_module

Transport = loop_module._SocketTransport

TWINS = [
    pytest.param("python"),
    pytest.param(
        "c",
        marks=[
            pytest.mark.accelerator,
            pytest.mark.skipif(_accel.io_methods is None, reason="runtime._cio not built"),
        ],
    ),
]


@pytest.fixture(params=TWINS)
def twin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The wheel loop's I/O turn on one twin: "python" puts the Python methods back."""
    if request.param == "python":
        monkeypatch.setattr(loop_module, "_C_POLL", None)
        monkeypatch.setattr(loop_module, "_C_RUN_READY", None)
        monkeypatch.setattr(Transport, "_read_ready", Transport._read_ready_py, raising=False)
        monkeypatch.setattr(Transport, "write", Transport._write_py, raising=False)
        monkeypatch.setattr(
            Transport, "get_write_buffer_size", Transport._get_write_buffer_size_py,
            raising=False,
        )
    else:
        # The C methods are the class's own (not the inherited Python ones).
        assert type(Transport.__dict__["write"]).__name__ == "method_descriptor"
        assert type(Transport.__dict__["_read_ready"]).__name__ == "method_descriptor"
        assert type(Transport.__dict__["get_write_buffer_size"]).__name__ == "method_descriptor"
        assert loop_module._C_POLL is not None and loop_module._C_RUN_READY is not None
    return str(request.param)


Scenario = Callable[[asyncio.AbstractEventLoop, Any, Recorder, socket.socket], Awaitable[object]]


Outcome = tuple[object, list[object], list[str]]


def _run(make: Any, scenario: Scenario, fail: bool = False) -> Outcome:
    """Run ``scenario(loop, transport, protocol, peer)`` on a new loop of ``make`` over a
    socketpair: what it returns, the protocol's events and the exception handler's messages."""
    loop = make()
    a, b = socket.socketpair()
    messages: list[str] = []
    loop.set_exception_handler(lambda _loop, context: messages.append(context["message"]))
    try:
        protocol = Recorder(fail)

        async def go() -> object:
            transport, _ = await loop.create_connection(lambda: protocol, sock=a)
            if make is WheelEventLoop:
                assert type(transport) is Transport
            return await scenario(loop, transport, protocol, b)

        result = loop.run_until_complete(asyncio.wait_for(go(), 20))
        return result, protocol.events, messages
    finally:
        b.close()
        loop.close()


def _same_on_every_loop(scenario: Scenario, fail: bool = False) -> tuple[object, list[object]]:
    stock = _run(asyncio.SelectorEventLoop, scenario, fail)
    wheel = _run(WheelEventLoop, scenario, fail)
    assert wheel == stock
    return stock[0], stock[1]


async def _turns(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _received(peer: socket.socket, size: int, got: bytes = b"") -> bytes:
    """``got`` and what the peer receives after it, until ``size`` bytes in all."""
    peer.setblocking(False)
    while len(got) < size:
        try:
            got += peer.recv(1 << 20)
        except BlockingIOError:
            await asyncio.sleep(0)
    return got


async def _until(condition: Callable[[], bool]) -> None:
    """Yield to the loop until ``condition()`` (the caller's wait_for bounds it)."""
    while not condition():
        await asyncio.sleep(0)


# -- reading ------------------------------------------------------------------------------


@pytest.mark.parametrize("fail", [False, True])
def test_read_delivers_data_then_end_of_stream(twin: str, fail: bool) -> None:
    async def scenario(loop: Any, transport: Any, protocol: Recorder, peer: socket.socket) -> None:
        peer.sendall(b"one")
        await _until(lambda: bool(protocol.events))
        peer.close()
        await asyncio.wait_for(protocol.lost.wait(), 10)

    _, events = _same_on_every_loop(scenario, fail)
    assert events[0] == b"one"
    assert events[-1] == (("lost", "RuntimeError") if fail else ("lost", None))


def test_read_honours_max_size(twin: str) -> None:
    async def scenario(loop: Any, transport: Any, protocol: Recorder, peer: socket.socket) -> None:
        transport.max_size = 4
        peer.sendall(b"abcdefghij")
        await _until(lambda: sum(map(len, protocol.events)) == 10)  # type: ignore[arg-type]
        transport.close()
        await protocol.lost.wait()

    _, events = _same_on_every_loop(scenario)
    assert events[:3] == [b"abcd", b"efgh", b"ij"]


def test_read_of_a_reset_connection_is_a_fatal_error(twin: str) -> None:
    async def scenario(loop: Any, transport: Any, protocol: Recorder, peer: socket.socket) -> None:
        # Data the transport never read, then a close: the reader sees ECONNRESET (AF_UNIX
        # has no RST; an abortive TCP close is the way to it).
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()
        await asyncio.wait_for(protocol.lost.wait(), 10)

    loop_events = []
    for make in (asyncio.SelectorEventLoop, WheelEventLoop):
        loop = make()
        listener = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(listener.getsockname())
        peer, _ = listener.accept()
        listener.close()
        try:
            protocol = Recorder()

            async def go(loop: Any = loop, client: socket.socket = client,
                         peer: socket.socket = peer, protocol: Recorder = protocol) -> None:
                transport, _ = await loop.create_connection(lambda: protocol, sock=client)
                client.send(b"unread")  # the peer never reads it: its close resets
                await scenario(loop, transport, protocol, peer)

            loop.run_until_complete(asyncio.wait_for(go(), 20))
            loop_events.append(protocol.events)
        finally:
            peer.close()
            loop.close()
    assert loop_events[0] == loop_events[1] == [("lost", "ConnectionResetError")]


def test_read_with_nothing_to_read_waits(twin: str) -> None:
    """A reader callback that finds nothing (a spurious wake-up) leaves the connection be."""

    async def scenario(loop: Any, transport: Any, protocol: Recorder, peer: socket.socket) -> None:
        transport._read_ready()
        peer.sendall(b"later")
        await _until(lambda: bool(protocol.events))
        peer.sendall(b"not read")
        transport._conn_lost = 1  # as after a fatal error: the reader reads no more
        transport._read_ready()
        transport._conn_lost = 0
        transport.close()
        await protocol.lost.wait()

    _, events = _same_on_every_loop(scenario)
    assert events == [b"later", ("lost", None)]


def test_read_of_a_socket_that_is_not_a_socket_object_goes_the_python_way(twin: str) -> None:
    """A transport whose ``_sock`` was replaced (as tests of asyncio do) reads through it."""

    async def scenario(loop: Any, transport: Any, protocol: Recorder, peer: socket.socket) -> int:
        wrapped = WrappedSocket(transport._sock)
        transport._sock = wrapped
        peer.sendall(b"via recv")
        await _until(lambda: bool(protocol.events))
        transport._sock = wrapped.sock
        transport.close()
        await protocol.lost.wait()
        return wrapped.calls

    reads, events = _same_on_every_loop(scenario)
    assert reads == 1 and events[0] == b"via recv"


# -- writing ------------------------------------------------------------------------------


def test_write_sends_at_once_and_buffers_what_the_socket_does_not_take(twin: str) -> None:
    big = bytes(range(256)) * 16384  # 4 MiB: more than the socket takes at once

    async def scenario(loop: Any, transport: Any, protocol: Recorder, peer: Any) -> object:
        transport.write(b"small")
        at_once = transport.get_write_buffer_size()
        transport.write(big)
        # What is buffered, as the stock method counts it too.
        buffered = transport.get_write_buffer_size()
        buffered = 0 < buffered == Transport._get_write_buffer_size_py(transport)
        peer.setblocking(False)
        got = bytearray()
        with contextlib.suppress(BlockingIOError):
            while True:  # room in the socket again, the loop not told yet
                got += peer.recv(1 << 20)
        transport.write(b"tail")  # behind the buffer all the same
        got = await _received(peer, 5 + len(big) + 4, bytes(got))
        transport.close()
        await protocol.lost.wait()
        return at_once, buffered, got == b"small" + big + b"tail"

    result, events = _same_on_every_loop(scenario)
    assert result == (0, True, True)
    assert events[:2] == ["pause", "resume"]


def test_write_refuses_what_the_stock_write_refuses(twin: str) -> None:
    async def scenario(loop: Any, transport: Any, protocol: Recorder, peer: Any) -> object:
        errors = []
        for data in ("text", None, 5):
            try:
                transport.write(data)
            except TypeError as exc:
                errors.append(str(exc))
        transport.write(b"")  # nothing
        transport.write(bytearray(b"ba"))
        transport.write(memoryview(b"mv"))
        transport._empty_waiter = loop.create_future()  # as sendfile does
        try:
            transport.write(b"during sendfile")
        except RuntimeError as exc:
            errors.append(str(exc))
        transport._empty_waiter = None
        transport.write_eof()
        try:
            transport.write(b"after eof")
        except RuntimeError as exc:
            errors.append(str(exc))
        got = await _received(peer, 4)
        transport.close()
        await protocol.lost.wait()
        return errors, got

    (errors, got), _ = _same_on_every_loop(scenario)
    assert got == b"bamv"
    assert len(errors) == 5 and "sendfile" in errors[-2] and "write_eof" in errors[-1]


def test_write_after_the_connection_is_lost_is_counted_and_dropped(twin: str) -> None:
    async def scenario(loop: Any, transport: Any, protocol: Recorder, peer: Any) -> object:
        transport.close()
        counts = []
        for _ in range(7):
            transport.write(b"dropped")
            counts.append(transport._conn_lost)
        await protocol.lost.wait()
        peer.setblocking(False)
        return counts, peer.recv(100)

    (counts, got), _ = _same_on_every_loop(scenario)
    assert counts == [2, 3, 4, 5, 6, 7, 8] and got == b""


def test_write_to_a_closed_peer_is_a_fatal_error(twin: str) -> None:
    async def scenario(loop: Any, transport: Any, protocol: Recorder, peer: socket.socket) -> None:
        peer.close()
        transport.write(b"into the void")  # before the loop has seen the end of stream
        await asyncio.wait_for(protocol.lost.wait(), 10)

    _, events = _same_on_every_loop(scenario)
    assert events[-1] == ("lost", "BrokenPipeError")


def test_write_of_a_socket_that_is_not_a_socket_object_goes_the_stock_way(twin: str) -> None:
    async def scenario(loop: Any, transport: Any, protocol: Recorder, peer: Any) -> object:
        wrapped = WrappedSocket(transport._sock)
        transport._sock = wrapped
        transport.write(b"via send")
        transport._sock = wrapped.sock
        got = await _received(peer, 8)
        transport.close()
        await protocol.lost.wait()
        return wrapped.calls, got

    (sends, got), _ = _same_on_every_loop(scenario)
    assert (sends, got) == (1, b"via send")


# -- the poll -----------------------------------------------------------------------------


def test_poll_serves_more_ready_descriptors_than_its_stack_holds(twin: str) -> None:
    """100 ready sockets (the C poll's own array holds 64) all run in one turn."""
    loop = WheelEventLoop()
    pairs = [socket.socketpair() for _ in range(100)]
    try:
        seen: list[int] = []
        for i, (a, b) in enumerate(pairs):
            loop.add_reader(a.fileno(), seen.append, i)
            b.send(b"x")
        loop._run_once()  # type: ignore[attr-defined]
        assert sorted(seen) == list(range(100))
    finally:
        for a, b in pairs:
            a.close()
            b.close()
        loop.close()


def test_poll_raises_what_a_signal_handler_raises(twin: str) -> None:
    """A signal that interrupts the wait runs its handler, whose exception leaves the turn (as
    ``epoll.poll`` lets it, PEP 475), on both twins."""

    class Interrupted(Exception):
        pass

    def handler(signum: int, frame: object) -> None:
        raise Interrupted

    loop = WheelEventLoop()
    a, b = socket.socketpair()
    previous = signal.signal(signal.SIGALRM, handler)
    try:
        loop.add_reader(a.fileno(), lambda: None)  # never ready: the poll waits
        loop.call_later(30, lambda: None)  # the wait's bound (the test's deadline)
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(Interrupted):
            loop._run_once()  # type: ignore[attr-defined]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        a.close()
        b.close()
        loop.close()


# -- the ready callbacks ----------------------------------------------------------------------

_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("_VAR", default="-")


class OwnRun(asyncio.Handle):
    """A handle whose ``_run`` is not asyncio's: the C loop hands it (and what follows) to
    the Python loop."""

    def _run(self) -> None:
        self._callback("own", *self._args)


def _turn_of_callbacks(make: Any) -> tuple[list[object], list[str]]:
    """One loop turn of callbacks of every kind, run on a new loop of ``make``: what they
    recorded, in order, and the exception handler's messages."""
    loop = make()
    seen: list[object] = []
    messages: list[str] = []
    loop.set_exception_handler(lambda _loop, context: messages.append(context["message"]))

    def record(*what: object) -> None:
        seen.append((*what, _VAR.get()))

    def fail() -> None:
        seen.append("fail")
        raise ValueError("boom")

    try:
        context = contextvars.copy_context()
        context.run(_VAR.set, "in context")
        loop.call_soon(record, 1)
        loop.call_soon(record, 2, context=context)
        loop.call_soon(record, "cancelled").cancel()
        loop.call_soon(fail)
        loop.call_soon(lambda: loop.call_soon(record, "next turn"))
        odd = loop.call_soon(record, 3)
        odd._args = [3, "list"]  # type: ignore[attr-defined]  (``*args`` takes any iterable)
        loop.call_soon(record, 4)
        loop._ready.append(OwnRun(record, ("a",), loop))  # type: ignore[attr-defined]
        loop.call_soon(record, 5)
        loop.call_soon(loop.stop)
        loop.run_forever()
        seen.append(("queued after the turn", len(loop._ready)))  # type: ignore[attr-defined]
        loop.call_soon(loop.stop)
        loop.run_forever()
        return seen, messages
    finally:
        loop.close()


def test_ready_callbacks_run_as_the_stock_loop_runs_them(twin: str) -> None:
    """In order, the cancelled one skipped, each in its context, a failure to the exception
    handler (the others still run), what a callback schedules in the next turn; a handle of
    another kind and arguments of another shape too (the C loop gives way to Python)."""
    stock = _turn_of_callbacks(asyncio.SelectorEventLoop)
    assert _turn_of_callbacks(WheelEventLoop) == stock
    assert stock[0] == [
        (1, "-"), (2, "in context"), "fail", (3, "list", "-"), (4, "-"), ("own", "a", "-"),
        (5, "-"), ("queued after the turn", 1), ("next turn", "-"),
    ]
    assert len(stock[1]) == 1 and stock[1][0].startswith("Exception in callback")


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_leaves_the_rest_queued(twin: str, error: type[BaseException]) -> None:
    """KeyboardInterrupt and SystemExit leave the turn; the callbacks after the one that
    raised stay queued and run in the next."""
    loop = WheelEventLoop()
    seen: list[int] = []

    def interrupt() -> None:
        raise error

    try:
        loop.call_soon(seen.append, 1)
        loop.call_soon(interrupt)
        loop.call_soon(seen.append, 2)
        loop.call_soon(loop.stop)  # (a build that swallowed the interrupt stops here)
        with pytest.raises(error):
            loop.run_forever()
        assert seen == [1] and len(loop._ready) == 2  # type: ignore[attr-defined]
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert seen == [1, 2]
    finally:
        loop.close()


@pytest.mark.accelerator
@pytest.mark.skipif(_accel.io_methods is None, reason="runtime._cio not built")
def test_c_methods_refuse_bad_arguments() -> None:
    from minidb.runtime import _cio  # type: ignore[attr-defined]

    with pytest.raises(RuntimeError, match="one transport class"):
        _cio.io_methods(
            Transport, Transport._read_ready_py, Transport._write_py,
            Transport._get_write_buffer_size_py,
        )
    with pytest.raises(TypeError):
        _cio.io_methods(1, 2)
    with pytest.raises(TypeError, match="dict"):
        _cio.poll(None, 0, 0, [], list.append)
    with pytest.raises(TypeError):
        _cio.run_ready(collections.deque(), 0, [], print)
    with pytest.raises(AttributeError):  # not a deque: no popleft
        _cio.run_ready([], 1, (), print)
    with pytest.raises(ValueError, match="epfd"):
        _cio.poll(None, -1, 0, {}, list.append)
    with pytest.raises(OSError):  # not an epoll descriptor
        _cio.poll(None, 2**30, 0, {}, list.append)
