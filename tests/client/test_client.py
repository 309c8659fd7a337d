"""The async client and its retry, against an in-process server; retry timing on a loop
whose clock only moves when the loop would otherwise sleep (tests/server/_clock.py)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import minidb.runtime
from minidb.client import Backoff, Client, SyncClient, retry
from minidb.errors import ProtocolError
from minidb.protocol import Error, Ok, Value
from minidb.server import Server, ServerConfig
from tests.server._clock import run_on_virtual_clock


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def test_retry_waits_the_backoff_delays_to_the_millisecond() -> None:
    """Attempts happen at 0, then after each jittered wait; none after the last failure."""
    calls: list[float] = []

    async def body() -> None:
        loop = asyncio.get_running_loop()

        async def failing() -> None:
            calls.append(loop.time())
            raise ConnectionRefusedError

        with pytest.raises(ConnectionRefusedError):
            await retry(failing, Backoff(attempts=5, base=0.1, cap=1.0), random=lambda: 0.5)
        calls.append(loop.time())

    run_on_virtual_clock(body)
    # waits 50, 100, 200, 400 ms; the final entry is when retry gave up: no trailing wait.
    assert [_ms(t) for t in calls] == [0, 50, 150, 350, 750, 750]


def test_retry_first_success_returns_without_waiting() -> None:
    """A first attempt that succeeds returns at once."""

    async def body() -> tuple[str, float]:
        async def ok() -> str:
            return "done"

        result = await retry(ok, Backoff(attempts=3), random=lambda: 0.9)
        return result, asyncio.get_running_loop().time()

    assert run_on_virtual_clock(body) == ("done", 0.0)


def test_retry_stops_at_first_success_and_respects_cap() -> None:
    """Waits grow to the cap, and a later success ends the sequence."""
    calls: list[float] = []

    async def body() -> str:
        loop = asyncio.get_running_loop()

        async def flaky() -> str:
            calls.append(loop.time())
            if len(calls) < 5:
                raise OSError("not yet")
            return "up"

        return await retry(flaky, Backoff(attempts=9, base=1.0, cap=2.5), random=lambda: 1.0)

    assert run_on_virtual_clock(body) == "up"
    assert [_ms(t) for t in calls] == [0, 1000, 3000, 5500, 8000]


def test_client_connect_retries_a_refused_port_on_the_loop_clock() -> None:
    """Connecting to a port nobody listens on fails after the backoff's waits, exactly."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before we connect: refused

    async def body() -> float:
        with pytest.raises(OSError):
            await Client.connect(
                "127.0.0.1", port, backoff=Backoff(attempts=3, base=0.2, cap=5.0),
                random=lambda: 0.25,
            )
        return asyncio.get_running_loop().time()

    assert _ms(run_on_virtual_clock(body)) == 150  # 0.25 * 200 ms + 0.25 * 400 ms


async def _with_server(data_dir: Path, body: Callable[[int], Awaitable[None]]) -> None:
    server = Server(ServerConfig(port=0, data_dir=data_dir))
    await server.start()
    assert server.line_address is not None
    try:
        await body(server.line_address[1])
    finally:
        server.request_shutdown()
        async with asyncio.timeout(5):
            assert await server.serve() == 0


def test_client_round_trips_every_verb(tmp_path: Path) -> None:
    """get/set/delete/scan/execute/pipeline work against a real server."""

    async def body(port: int) -> None:
        async with await Client.connect("127.0.0.1", port) as db:
            await db.set("users", "alice", " hi there ")
            assert await db.get("users", "alice") == " hi there "
            assert await db.get("users", "bob") is None
            for i in range(25):
                await db.set("many", f"k{i:02d}", "v")
            assert [k async for k in db.scan("many", page=7)] == [f"k{i:02d}" for i in range(25)]
            assert await db.delete("users", "alice") is True
            assert await db.delete("users", "alice") is False
            assert await db.execute("PING") == Error("unknown verb PING")
            assert await db.pipeline(["SET b k 1", "GET b k"]) == [Ok(), Value("1")]
            with pytest.raises(ProtocolError):
                await db.get("bad name", "x")

    minidb.runtime.run(_with_server(tmp_path, body))


def test_client_concurrent_callers_get_their_own_replies(tmp_path: Path) -> None:
    """Many tasks sharing one client each get the reply to their own request."""

    async def body(port: int) -> None:
        async with await Client.connect("127.0.0.1", port) as db:
            await asyncio.gather(*(db.set("b", f"k{i}", f"v{i}") for i in range(50)))
            values = await asyncio.gather(*(db.get("b", f"k{i}") for i in range(50)))
            assert values == [f"v{i}" for i in range(50)]

    minidb.runtime.run(_with_server(tmp_path, body))


def test_sync_client_wraps_the_async_one(serve: Any) -> None:
    """The blocking client sets, gets and scans against a server process."""
    server = serve()
    with SyncClient("127.0.0.1", server.port, backoff=Backoff(attempts=3)) as db:
        db.set("users", "alice", "hello")
        assert db.get("users", "alice") == "hello"
        assert db.scan("users") == ["alice"]
        assert db.delete("users", "alice")
