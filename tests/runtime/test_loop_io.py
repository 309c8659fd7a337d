"""The loop's I/O turn spelled out (``WheelEventLoop._poll_epoll``, the inlined
``Handle._run``, ``_SocketTransport._read_ready``) behaves as the stock loop's: the same
callbacks in the same order, the same exception context, the same transport events."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from tests.runtime._sockets import Recorder

from minidb.runtime import WheelEventLoop
from minidb.runtime import _loop as loop_module

LOOPS = [asyncio.SelectorEventLoop, WheelEventLoop]


def _turn(loop: asyncio.AbstractEventLoop) -> None:
    loop._run_once()  # type: ignore[attr-defined]


@pytest.mark.parametrize("make", LOOPS)
def test_io_turn_runs_ready_readers_and_writers_and_drops_cancelled_ones(make: Any) -> None:
    loop = make()
    pairs = [socket.socketpair() for _ in range(3)]
    try:
        seen: list[str] = []
        for i, (a, b) in enumerate(pairs):
            a.setblocking(False)
            loop.add_reader(a.fileno(), seen.append, f"read{i}")
            b.send(b"x")
        loop.add_writer(pairs[0][1].fileno(), seen.append, "write0")
        cancelled = loop._selector.get_key(pairs[1][0].fileno()).data[0]
        cancelled.cancel()
        _turn(loop)
        assert sorted(seen) == ["read0", "read2", "write0"], seen
        with pytest.raises(KeyError):  # the cancelled reader's registration is gone
            loop._selector.get_key(pairs[1][0].fileno())
    finally:
        for a, b in pairs:
            a.close()
            b.close()
        loop.close()


def test_io_turn_takes_the_spelled_out_poll_only_for_the_stock_process_events() -> None:
    loop = WheelEventLoop()
    a, b = socket.socketpair()
    try:
        calls: list[object] = []
        loop.add_reader(a.fileno(), calls.append, "read")
        b.send(b"x")
        stock = loop._process_events
        loop._process_events = lambda events: (calls.append("process"), stock(events))
        _turn(loop)
        assert calls == ["process", "read"]  # a replaced _process_events is still called
    finally:
        a.close()
        b.close()
        loop.close()


@pytest.mark.parametrize("make", LOOPS)
def test_io_turn_reports_a_failing_callback_as_the_stock_handle_does(make: Any) -> None:
    loop = make()
    try:
        contexts: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: contexts.append(context))

        def boom(x: int) -> None:
            raise ValueError(x)

        handle = loop.call_soon(boom, 7)
        _turn(loop)
        (context,) = contexts
        assert context["message"].startswith("Exception in callback ")
        # The callback's name; its arguments too before 3.13 (since, in debug mode only).
        assert ".boom(" in context["message"], context["message"]
        assert type(context["exception"]) is ValueError and context["handle"] is handle
    finally:
        loop.close()


def test_io_turn_message_equals_the_stock_loops() -> None:
    messages = []
    for make in LOOPS:
        loop = make()
        try:
            got: list[str] = []
            loop.set_exception_handler(
                lambda _loop, context, got=got: got.append(context["message"])
            )
            loop.call_soon(int, "not a number")
            _turn(loop)
            messages.append(got)
        finally:
            loop.close()
    assert messages[0] == messages[1] and len(messages[0]) == 1


class _Buffered(asyncio.BufferedProtocol):
    def __init__(self) -> None:
        self.buffer = bytearray(64)
        self.got = b""

    def get_buffer(self, sizehint: int) -> bytearray:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.got += bytes(self.buffer[:nbytes])


def _transport_events(make: Any, fail: bool) -> list[object]:
    loop = make()
    a, b = socket.socketpair()
    try:
        protocol = Recorder(fail)
        loop.set_exception_handler(lambda _loop, _context: None)

        async def go() -> None:
            transport, _ = await loop.create_connection(lambda: protocol, sock=a)
            b.sendall(b"one")
            for _ in range(20):
                await asyncio.sleep(0)
            b.close()
            for _ in range(20):
                await asyncio.sleep(0)
            transport.close()
            await asyncio.sleep(0)

        loop.run_until_complete(asyncio.wait_for(go(), 10))
        return protocol.events
    finally:
        b.close()
        loop.close()


@pytest.mark.parametrize("fail", [False, True])
def test_socket_transport_reads_as_the_stock_one(fail: bool) -> None:
    """Data, end of stream and a data_received that raises (a fatal error: connection
    lost with it) give the same protocol events on both loops."""
    stock, wheel = (_transport_events(make, fail) for make in LOOPS)
    assert stock == wheel
    assert stock[0] == b"one"


def test_socket_transport_of_the_wheel_loop_still_serves_buffered_protocols() -> None:
    loop = WheelEventLoop()
    a, b = socket.socketpair()
    try:
        protocol = _Buffered()

        async def go() -> bytes:
            transport, _ = await loop.create_connection(lambda: protocol, sock=a)
            assert type(transport) is loop_module._SocketTransport
            b.sendall(b"buffered bytes")
            for _ in range(50):
                if protocol.got == b"buffered bytes":
                    break
                await asyncio.sleep(0)
            transport.close()
            return protocol.got

        assert loop.run_until_complete(asyncio.wait_for(go(), 10)) == b"buffered bytes"
    finally:
        b.close()
        loop.close()
