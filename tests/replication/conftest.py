"""Fixtures of the replication tests: servers in this process, subprocess servers, the S3 rig.

``run_server(config, body)`` starts a ``Server`` on the minidb loop, runs ``body(server)`` under
a deadline and shuts the server down. ``LineConn`` is an asyncio line-protocol client. The
``serve`` fixture (subprocess servers), the S3 rig (moto behind the fault proxy) and ``store``
(parametrised over both backends) are the server and object-store tests' own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import minidb.runtime
from minidb.server import Server, ServerConfig
from tests.objstore.conftest import file_store, proxy, s3_store, s3rig, store  # noqa: F401
from tests.server.conftest import serve  # noqa: F401  (fixture)

TEST_DEADLINE_S = 60.0
"""Longest an in-process server test body may run before it fails."""


class LineConn:
    """An asyncio line-protocol client."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> LineConn:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def request(self, line: str) -> str:
        self.writer.write(line.encode() + b"\n")
        return (await self.reader.readline()).decode().rstrip("\n")

    async def close(self) -> None:
        self.writer.close()


def run_server(config: ServerConfig, body: Callable[[Server], Awaitable[Any]]) -> Any:
    """Start a server on ``config``, await ``body(server)`` within the deadline, shut it down."""

    async def main() -> Any:
        server = Server(config)
        await server.start()
        serving = asyncio.create_task(server.serve())
        try:
            async with asyncio.timeout(TEST_DEADLINE_S):
                return await body(server)
        finally:
            server.request_shutdown()
            async with asyncio.timeout(TEST_DEADLINE_S):
                await serving

    return minidb.runtime.run(main())
