"""Fixtures of the replication tests: servers in this process, subprocess servers, the S3 rig.

``run_server(config, body)`` starts a ``Server`` on the minidb loop, runs ``body(server)`` under
a deadline and shuts the server down. ``LineConn`` is an asyncio line-protocol client. ``target``
runs a test once per backend (``file:``, and S3 on moto behind the fault proxy). The ``serve``
fixture (subprocess servers), the S3 rig and ``store`` (one per backend) are the server and
object-store tests' own.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import minidb.runtime
from minidb.objstore import FileStore, ObjectStore
from minidb.server import Server, ServerConfig
from tests.objstore.conftest import file_store, proxy, s3_store, s3rig, store  # noqa: F401
from tests.objstore.s3rig import ACCESS_KEY, REGION, SECRET_KEY
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


@dataclasses.dataclass
class Target:
    """Where a test's server ships to: ``url`` plus the server settings it needs, and a way to
    open the same store for reading back."""

    backend: str
    url: str
    settings: dict[str, object]
    open: Callable[[], ObjectStore]


@pytest.fixture(params=["file", "s3"])
def target(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Target:
    """Each backend in turn: a ``file:`` directory, or a fresh moto bucket behind the proxy."""
    if request.param == "file":
        root = str(tmp_path / "objects")
        return Target("file", f"file:{root}", {}, lambda: FileStore(root))
    rig = request.getfixturevalue("s3rig")
    request.getfixturevalue("proxy")
    for name, value in (("AWS_ACCESS_KEY_ID", ACCESS_KEY), ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
                        ("AWS_REGION", REGION)):
        monkeypatch.setenv(name, value)
    bucket = rig.server.new_bucket()
    return Target("s3", f"s3://{bucket}/db", {"s3_endpoint": rig.proxy.endpoint},
                  lambda: rig.store(bucket, "db"))
