"""Fixtures of the replication tests: servers in this process, subprocess servers, the S3 rig.

``run_server(config, body)`` starts a ``Server`` on the minidb loop, runs ``body(server)`` under
a deadline and shuts the server down. ``LineConn`` is an asyncio line-protocol client. ``target``
runs a test once per backend (``file:``, and S3 on moto behind the fault proxy); ``served`` does
the same for subprocess servers. The ``serve``
fixture (subprocess servers), the S3 rig and ``store`` (one per backend) are the server and
object-store tests' own.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

import minidb.runtime
from minidb.objstore import FileStore, ObjectStore
from minidb.server import Server, ServerConfig
from tests.objstore.conftest import file_store, proxy, s3_store, s3rig, store  # noqa: F401
from tests.objstore.s3rig import ACCESS_KEY, REGION, SECRET_KEY
from tests.server.conftest import serve  # noqa: F401  (fixture)

T = TypeVar("T")

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


SERVED_DEADLINE_S = 30.0
"""Deadline of one store call made by a test around subprocess servers (seconds)."""


@dataclasses.dataclass
class Served:
    """A store as ``minidb serve`` subprocesses are pointed at it (``url``, extra ``args`` and
    ``env``), and as the test reads and writes it (``store``, through ``run``)."""

    backend: str
    url: str
    args: tuple[str, ...]
    env: dict[str, str]
    store: ObjectStore
    loop: asyncio.AbstractEventLoop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one store call to completion on the test's loop, within the deadline."""
        return self.loop.run_until_complete(asyncio.wait_for(coro, SERVED_DEADLINE_S))


@pytest.fixture(params=["file", "s3"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    """Each backend in turn, for subprocess servers: a ``file:`` directory, or a fresh moto
    bucket behind the fault proxy (credentials in ``env``, the endpoint in ``args``)."""
    loop = asyncio.new_event_loop()
    if request.param == "file":
        root = tmp_path / "objects"
        store: ObjectStore = FileStore(str(root))
        served = Served("file", f"file:{root}", (), {}, store, loop)
    else:
        rig = request.getfixturevalue("s3rig")
        request.getfixturevalue("proxy")
        bucket = rig.server.new_bucket()
        env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
               "AWS_REGION": REGION}
        store = rig.store(bucket, "db")
        served = Served("s3", f"s3://{bucket}/db", ("--s3-endpoint", rig.proxy.endpoint), env,
                        store, loop)
    yield served
    loop.run_until_complete(store.close())
    loop.close()
