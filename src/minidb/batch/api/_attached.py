"""The minidb server this API is attached to: a few RESP connections and its metrics URL.

``minidb batch serve --minidb-resp HOST:PORT [--minidb-metrics HOST:PORT]`` names the server's
RESP listener (the store browser, ``INFO``) and its Prometheus listener (the charts' counters
of commands, WAL appends and syncs, replication lag); ``minidb up`` passes both. Without
``--minidb-resp`` the store and server endpoints answer 503 ``not_attached``.

Theory of operation. RESP connections (``minidb.client.RespClient``) are made on demand, at
most ``MAX_CONNECTIONS`` at once (a request waits for one), and kept while idle for the next
request, for ``IDLE_KEEP_S`` at most and only while the server has not closed it (it drops
idle clients); each request selects its bucket in the same pipeline as its commands, so a
kept connection carries no state that matters. Every call has a deadline (``SERVER_DEADLINE_S``);
a connection that failed, timed out or was cancelled mid-pipeline is closed, never reused.
This module is the one boundary where the outside world's errors (``OSError``,
``ConnectionError``, ``TimeoutError``, httpx's) become ``ServerUnavailable`` (503); an error
*reply* of the server stays a ``RespError`` for the route to judge.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx

from minidb.client import RespClient, RespError
from minidb.errors import MinidbError
from minidb.protocol import ErrorReply

MAX_CONNECTIONS = 4
"""RESP connections to the server at most (the page's requests are small and short)."""
IDLE_KEEP_S = 10.0
"""How long an idle connection is kept for the next request, in seconds: well under the
server's idle timeout (``minidb serve --idle-timeout``, 30 s by default), which closes it."""
SERVER_DEADLINE_S = 5.0
"""Longest one request waits on the attached server (connect, commands, metrics), seconds."""
PROBE_KEY = b"minidb:api:probe"
"""The key the latency probe asks ``EXISTS`` of (in bucket 0; it need not exist)."""
PROBES_PER_READING = 3
"""Round trips measured per ``GET /server/stats`` (the page polls it every second or two)."""


class NotAttached(MinidbError):
    """The API was started without the server's RESP address (``--minidb-resp``): 503."""


class ServerUnavailable(MinidbError):
    """The attached server did not answer in time, refused the connection or broke it: 503."""


@dataclasses.dataclass(frozen=True)
class ServerLink:
    """Where the attached server listens; None: not known to this API."""

    resp: tuple[str, int] | None = None
    metrics: tuple[str, int] | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    """``MINIDB_PASSWORD`` of a server started with ``--requirepass``: sent with ``AUTH``."""


@dataclasses.dataclass(frozen=True)
class AttachedStatistics:
    """What this API asked of the attached server since it started."""

    requests: int
    """Calls on the server (a pipeline, an INFO, a probe, a metrics read)."""
    failures: int
    """Calls that ended in ``ServerUnavailable``."""
    connects: int
    """RESP connections made (each kept while it works, so this grows only after failures)."""


class AttachedServer:
    """The API's link to its server (see the module docstring)."""

    def __init__(self, link: ServerLink, *, deadline_s: float = SERVER_DEADLINE_S) -> None:
        self.link = link
        self.deadline_s = deadline_s
        self._idle: list[tuple[RespClient, float]] = []
        """Connections free for the next request, with the loop time they became free."""
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self._connects = 0
        self._requests = 0
        self._failures = 0

    @property
    def attached(self) -> bool:
        return self.link.resp is not None

    def statistics(self) -> AttachedStatistics:
        return AttachedStatistics(self._requests, self._failures, self._connects)

    @contextlib.asynccontextmanager
    async def _deadline(self) -> AsyncIterator[None]:
        self._requests += 1
        try:
            async with asyncio.timeout(self.deadline_s):
                yield
        except (OSError, TimeoutError, httpx.HTTPError) as exc:
            # ConnectionError is an OSError: refused, reset, closed mid-reply.
            self._failures += 1
            raise ServerUnavailable(f"the minidb server did not answer: {exc!r}"[:300]) from None

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[RespClient]:
        if self.link.resp is None:
            raise NotAttached("this API is not attached to a minidb server (--minidb-resp)")
        async with self._slots:
            client = await self._kept()
            if client is None:
                host, port = self.link.resp
                client = await RespClient.connect(host, port, password=self.link.password)
                self._connects += 1
            try:
                yield client
            finally:
                if client.broken or client.closed_by_peer:
                    await client.close()
                else:
                    self._idle.append((client, asyncio.get_running_loop().time()))

    async def _kept(self) -> RespClient | None:
        """The most recently freed idle connection still fit to use (the others are closed)."""
        now = asyncio.get_running_loop().time()
        while self._idle:
            client, since = self._idle.pop()
            if now - since < IDLE_KEEP_S and not client.closed_by_peer:
                return client
            await client.close()
        return None

    async def run(self, bucket: bytes | None, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """The replies of ``commands`` (error replies in place), run after ``SELECT bucket``
        in one pipeline when a bucket is given."""
        selecting = [("SELECT", bucket)] if bucket is not None else []
        async with self._deadline(), self._connection() as client:
            replies = await client.pipeline([*selecting, *commands])
        if selecting and isinstance(replies[0], ErrorReply):
            raise RespError(replies[0].message)
        return replies[len(selecting):]

    async def info(self, *sections: str) -> str:
        """The text of ``INFO sections...``."""
        (reply,) = await self.run(None, [("INFO", *sections)])
        if isinstance(reply, ErrorReply):
            raise RespError(reply.message)
        return bytes(reply).decode("utf-8", "replace")

    async def probe(self, count: int = PROBES_PER_READING) -> list[float]:
        """Round trips of ``count`` ``EXISTS`` commands one after another, in ms (the loop's
        clock)."""
        loop = asyncio.get_running_loop()
        took = []
        async with self._deadline(), self._connection() as client:
            for _ in range(count):
                start = loop.time()
                await client.pipeline([("EXISTS", PROBE_KEY)])
                took.append(round((loop.time() - start) * 1000, 3))
        return took

    async def metrics_text(self) -> str | None:
        """The server's Prometheus text, or None when its metrics listener is not known."""
        if self.link.metrics is None:
            return None
        host, port = self.link.metrics
        shown = f"[{host}]" if ":" in host else host
        async with self._deadline(), httpx.AsyncClient(timeout=self.deadline_s) as http:
            answer = await http.get(f"http://{shown}:{port}/metrics")
            answer.raise_for_status()
            return answer.text

    async def close(self) -> None:
        """Close the idle connections (those in use close when their request ends)."""
        idle, self._idle = self._idle, []
        for client, _since in idle:
            await client.close()
