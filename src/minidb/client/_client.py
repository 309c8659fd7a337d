"""The async client for the line protocol, its connect-with-retry, and a small sync wrapper.

``Client`` sends requests and reads replies in order over one connection (a lock keeps
concurrent callers from interleaving); ``pipeline`` sends many requests in one write and reads
their replies back, which is where the server's batching pays off. Waits between connection
attempts are ``asyncio.sleep`` on the running loop, so a virtual clock controls them.

Error replies become exceptions of the one hierarchy in the convenience methods: ``ERR busy``
-> ``BusyError`` (retry later), ``ERR store unavailable`` -> ``UnavailableError`` (the server
is going away), ``ERR not logged`` / ``ERR read-only`` -> ``StoreError``, anything else ->
``ProtocolError`` (the request was wrong). ``execute`` returns the raw ``Reply`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import random as _random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import minidb.runtime
from minidb.client._backoff import Backoff
from minidb.errors import BusyError, ProtocolError, StoreError, UnavailableError
from minidb.protocol import Error, Keys, Ok, Reply, Value, parse_reply

T = TypeVar("T")

READ_LIMIT_BYTES = 1 << 20
"""Longest reply line the client accepts (a full SCAN page is about 65 KiB)."""
ONE_ATTEMPT = Backoff(attempts=1)
"""The default: connect once, no retry."""
DEFAULT_TIMEOUT_S = 10.0
"""How long the sync client waits for one call before raising ``TimeoutError``."""


def raise_for_error(reply: Reply) -> Reply:
    """Return ``reply`` unless it is ``ERR``; then raise the matching ``MinidbError``."""
    if not isinstance(reply, Error):
        return reply
    reason = reply.reason
    if reason == "busy":
        raise BusyError(reason)
    if reason == "store unavailable":
        raise UnavailableError(reason)
    if reason.startswith(("not logged", "read-only")):
        raise StoreError(reason)
    raise ProtocolError(reason)


async def retry(
    operation: Callable[[], Awaitable[T]],
    backoff: Backoff,
    *,
    retry_on: tuple[type[BaseException], ...] = (OSError,),
    random: Callable[[], float] = _random.random,
) -> T:
    """Await ``operation()`` up to ``backoff.attempts`` times, sleeping the backoff's delays
    on the loop clock in between; the last failure propagates."""
    delays = backoff.delays(random)
    for attempt in range(1, backoff.attempts + 1):
        try:
            return await operation()
        except retry_on:
            if attempt == backoff.attempts:
                raise
        await asyncio.sleep(next(delays))
    raise AssertionError("unreachable")  # pragma: no cover


def _line(text: str) -> bytes:
    if "\n" in text or "\r" in text:
        raise ValueError("a request cannot contain a line break")
    return text.encode() + b"\n"


class Client:
    """One connection to a minidb server."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        backoff: Backoff = ONE_ATTEMPT,
        random: Callable[[], float] = _random.random,
    ) -> Client:
        """Connect, retrying refused or failed connects as ``backoff`` says."""

        async def attempt() -> Client:
            reader, writer = await asyncio.open_connection(host, port, limit=READ_LIMIT_BYTES)
            return cls(reader, writer)

        return await retry(attempt, backoff, random=random)

    async def _read_reply(self) -> Reply:
        line = await self._reader.readline()
        if not line.endswith(b"\n"):
            raise ConnectionError("server closed the connection")
        return parse_reply(line)

    async def execute(self, request: str) -> Reply:
        """Send one request line; return its reply (``Error`` replies are returned, not raised)."""
        async with self._lock:
            self._writer.write(_line(request))
            await self._writer.drain()
            return await self._read_reply()

    async def pipeline(self, requests: Sequence[str]) -> list[Reply]:
        """Send many requests in one write and return their replies in order."""
        async with self._lock:
            self._writer.write(b"".join(_line(r) for r in requests))
            await self._writer.drain()
            return [await self._read_reply() for _ in requests]

    async def get(self, bucket: str, key: str) -> str | None:
        reply = raise_for_error(await self.execute(f"GET {bucket} {key}"))
        return reply.value if isinstance(reply, Value) else None

    async def set(self, bucket: str, key: str, value: str) -> None:
        raise_for_error(await self.execute(f"SET {bucket} {key} {value}"))

    async def delete(self, bucket: str, key: str) -> bool:
        """Delete a key; True if it existed."""
        return isinstance(raise_for_error(await self.execute(f"DEL {bucket} {key}")), Ok)

    async def scan_page(self, bucket: str, cursor: str, page: int) -> Keys:
        """One page of a scan of ``bucket`` from ``cursor`` (``"0"`` starts; a reply cursor of
        ``"0"`` says it is done)."""
        reply = raise_for_error(await self.execute(f"SCAN {bucket} {cursor} {page}"))
        if not isinstance(reply, Keys):
            raise ProtocolError(f"unexpected reply to SCAN: {reply!r}")
        return reply

    async def scan(self, bucket: str, page: int = 100) -> AsyncIterator[str]:
        """Every key of ``bucket``, page by page."""
        cursor = "0"
        while True:
            reply = await self.scan_page(bucket, cursor, page)
            for key in reply.keys:
                yield key
            if reply.cursor == "0":
                return
            cursor = reply.cursor

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class SyncClient:
    """A blocking wrapper: its own event loop (minidb.runtime's), one ``Client`` on it."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        backoff: Backoff = ONE_ATTEMPT,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.timeout = timeout
        self._runner = asyncio.Runner(loop_factory=minidb.runtime.new_event_loop)
        try:
            self._client = self._run(Client.connect(host, port, backoff=backoff), None)
        except BaseException:
            self._runner.close()
            raise

    def _run(self, awaitable: Awaitable[T], timeout: float | None = -1.0) -> T:
        limit = self.timeout if timeout == -1.0 else timeout

        async def bounded() -> T:
            async with asyncio.timeout(limit):
                return await awaitable

        return self._runner.run(bounded())

    def execute(self, request: str) -> Reply:
        return self._run(self._client.execute(request))

    def pipeline(self, requests: Sequence[str]) -> list[Reply]:
        return self._run(self._client.pipeline(requests))

    def get(self, bucket: str, key: str) -> str | None:
        return self._run(self._client.get(bucket, key))

    def set(self, bucket: str, key: str, value: str) -> None:
        self._run(self._client.set(bucket, key, value))

    def delete(self, bucket: str, key: str) -> bool:
        return self._run(self._client.delete(bucket, key))

    def scan(self, bucket: str, page: int = 100) -> list[str]:
        async def collect() -> list[str]:
            return [key async for key in self._client.scan(bucket, page)]

        return self._run(collect())

    def close(self) -> None:
        try:
            self._run(self._client.close())
        finally:
            self._runner.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


