"""``RespClient`` against an in-process server's RESP listener: pipelines, binary values,
error replies, AUTH, and a connection left broken by an interrupted pipeline."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import minidb.runtime
from minidb.client import RespClient, RespError
from minidb.protocol import ErrorReply, Simple
from minidb.server import Server, ServerConfig


async def _with_resp(
    data_dir: Path, body: Callable[[int], Awaitable[None]], password: bytes | None = None
) -> None:
    server = Server(ServerConfig(port=0, resp_port=0, data_dir=data_dir, password=password))
    await server.start()
    assert server.resp_address is not None
    try:
        await body(server.resp_address[1])
    finally:
        server.request_shutdown()
        async with asyncio.timeout(5):
            assert await server.serve() == 0


def test_resp_client_pipelines_binary_values_and_errors_in_place(tmp_path: Path) -> None:
    """One pipeline: a binary SET and GET in a named bucket, an error reply in its place."""

    async def body(port: int) -> None:
        async with await RespClient.connect("127.0.0.1", port) as db:
            value = bytes(range(256)) + b"\r\n"
            replies = await db.pipeline([
                ("SELECT", "users"), (b"SET", b"\xff<k>", value), ("GET", b"\xff<k>"),
                ("INCR", b"\xff<k>"), ("STRLEN", b"\xff<k>"),
            ])
            assert replies[0] == Simple("OK") and replies[1] == Simple("OK")
            assert replies[2] == value
            assert isinstance(replies[3], ErrorReply)
            assert replies[4] == len(value)
            assert await db.command("GET", "absent") is None
            with pytest.raises(RespError) as refused:
                await db.command("NOSUCHCOMMAND")
            assert refused.value.code == "ERR"
            assert await db.pipeline([]) == []

    minidb.runtime.run(_with_resp(tmp_path / "data", body))


def test_resp_client_authenticates_with_a_password(tmp_path: Path) -> None:
    """``password=`` sends AUTH first; a wrong one is a RespError and the socket is closed."""

    async def body(port: int) -> None:
        async with await RespClient.connect("127.0.0.1", port, password="s3cret") as db:
            assert await db.command("PING") == Simple("PONG")
        with pytest.raises(RespError):
            await RespClient.connect("127.0.0.1", port, password="wrong")

    minidb.runtime.run(_with_resp(tmp_path / "data", body, password=b"s3cret"))


def test_resp_client_is_broken_after_an_interrupted_pipeline(tmp_path: Path) -> None:
    """A pipeline cancelled before its replies were read marks the client broken: the next
    call refuses instead of reading the previous call's replies."""

    async def body(port: int) -> None:
        async with await RespClient.connect("127.0.0.1", port) as db:
            task = asyncio.ensure_future(db.pipeline([("PING",)] * 1000))
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert db.broken
            with pytest.raises(ConnectionError):
                await db.command("PING")

    minidb.runtime.run(_with_resp(tmp_path / "data", body))
