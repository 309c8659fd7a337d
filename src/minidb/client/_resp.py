"""``RespClient``: an async client of the RESP listener, for what only RESP carries.

The line protocol cannot carry a binary key or value, a key outside ``[A-Za-z0-9_.:/-]``,
``INFO``, ``TYPE`` or the hash-order ``SCAN`` cursor; tools inside minidb that show the store
as it is (the batch API's store browser) speak RESP2 with this client instead of depending
on redis-py at run time. It is small on purpose: one connection, requests pipelined, no
pub/sub, no RESP3, no cluster.

Replies are the vocabulary of ``minidb.protocol`` (``RespReplyDecoder``): ``bytes`` for a bulk
string, ``int``, ``list``, ``None`` for a null, ``Simple`` for a status, ``ErrorReply`` for an
error. ``pipeline`` returns error replies in their place; ``command`` raises them as
``RespError``.

Cancel-safety: a pipeline interrupted between its write and its last reply (a timeout, a
cancel, a dropped connection) leaves replies on the wire that nobody will read, so the
client marks itself ``broken`` and refuses further use; callers drop it and connect again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from minidb.client._backoff import Backoff
from minidb.client._client import ONE_ATTEMPT, retry
from minidb.errors import ProtocolError
from minidb.protocol import ErrorReply, RespProtocolError, RespReplyDecoder, encode_command

READ_CHUNK_BYTES = 64 * 1024
"""Bytes asked of the socket per read."""
MAX_REPLY_BYTES = 80 * 1024 * 1024
"""Most bytes one reply may take before it is complete (the server's largest value is 16 MiB
by default, ``--max-value-bytes``, plus framing); a longer one breaks the connection rather
than filling memory."""

Arg = bytes | str | int


class RespError(ProtocolError):
    """The server answered a command with an error; ``reason`` is its text (``ERR ...``)."""

    @property
    def code(self) -> str:
        """The first word of the reply (``ERR``, ``WRONGTYPE``, ``NOAUTH``, ``READONLY`` ...)."""
        return self.reason.split(" ", 1)[0]


class RespClient:
    """One RESP2 connection; concurrent callers take turns (a lock), in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._decoder = RespReplyDecoder()
        self._lock = asyncio.Lock()
        self.broken = False
        """Set once a pipeline did not read all its replies: the connection is unusable."""

    @classmethod
    async def connect(
        cls, host: str, port: int, *, password: str | None = None,
        backoff: Backoff = ONE_ATTEMPT,
    ) -> RespClient:
        """Connect (retrying as ``backoff`` says) and ``AUTH`` when a password is given."""

        async def attempt() -> RespClient:
            reader, writer = await asyncio.open_connection(host, port)
            return cls(reader, writer)

        client = await retry(attempt, backoff)
        if password is not None:
            try:
                await client.command("AUTH", password)
            except BaseException:
                await client.close()
                raise
        return client

    async def pipeline(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Send ``commands`` in one write and return their replies in order (an error reply
        is an ``ErrorReply`` in its place). ``ConnectionError`` if the server goes away."""
        if not commands:
            return []
        async with self._lock:
            if self.broken:
                raise ConnectionError("the connection was left in an unknown state")
            self.broken = True  # until every reply is read
            self._writer.write(b"".join(encode_command(args) for args in commands))
            await self._writer.drain()
            replies: list[Any] = []
            pending = 0
            while len(replies) < len(commands):
                chunk = await self._reader.read(READ_CHUNK_BYTES)
                if not chunk:
                    raise ConnectionError("the server closed the connection")
                pending += len(chunk)
                try:
                    done = self._decoder.feed(chunk)
                except RespProtocolError as exc:
                    raise ConnectionError(f"not a RESP reply: {exc}") from None
                if done:
                    pending = 0
                elif pending > MAX_REPLY_BYTES:
                    raise ConnectionError(f"a reply is longer than {MAX_REPLY_BYTES} bytes")
                replies.extend(done)
            if len(replies) != len(commands):
                raise ConnectionError("the server sent replies nobody asked for")
            self.broken = False
            return replies

    @property
    def closed_by_peer(self) -> bool:
        """Whether the server has closed its side (an idle timeout, a restart): a connection
        kept for later use should be dropped, not used."""
        return self._reader.at_eof() or self._writer.is_closing()

    async def command(self, *args: Arg) -> Any:
        """One command's reply; an error reply raises ``RespError``."""
        (reply,) = await self.pipeline([args])
        if isinstance(reply, ErrorReply):
            raise RespError(reply.message)
        return reply

    async def close(self) -> None:
        self.broken = True
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()

    async def __aenter__(self) -> RespClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
