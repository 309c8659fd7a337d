"""``BulkWriter``: one connection that streams many SETs/DELs with deep pipelining, for loads.

::

    async with await BulkWriter.connect("127.0.0.1", 7878) as writer:
        for number, (bucket, key, value) in enumerate(rows, 1):
            await writer.set(bucket, key, value, tag=number)
        await writer.flush()
    for failure in writer.failures:          # rows the server refused, with their tags
        print(failure.tag, failure.reason)

``Client`` builds a ``Reply`` per answer and waits for each pipeline; that is right for
interactive use and far too slow for millions of rows. Here nothing is built per row but one
encoded line and one ``(line, tag)`` entry.

Theory of operation. ``set`` encodes the request (names checked against the protocol grammar,
the value against its length and line breaks, so a request can never be split into two) and
appends it to ``_out``, a bytearray handed to the transport in one write once it holds
``FLUSH_BYTES`` or when the window is full. ``_pending`` holds ``(line, tag)`` of every request
written and not yet answered, in wire order; at most ``window`` requests are outstanding
(pending, plus ``ERR busy`` ones waiting out their backoff), so what the writer holds is bounded
by ``window`` requests whatever the input. The server reads only up to its own in-flight bound
(``--max-in-flight``, 128) and pauses reading beyond it; a larger window just waits in TCP
buffers, which keeps the server's next group full while it syncs the last one.

The reader task reads large chunks and answers whole runs of replies at the byte level: a
chunk whose complete lines are all ``OK`` (``len == 3 * count``) pops that many entries at once;
only a chunk with anything else is split into lines. ``OK`` and ``NIL`` (``DEL`` of a missing
key) are successes. ``ERR busy`` is overload, not bad data: the request is resent after a
backoff on the loop clock, up to ``BUSY_ATTEMPTS`` times (then ``BusyError``). A resent request
lands after requests queued later, so two writes of one key in one stream may reorder when one
of them was refused busy. ``ERR store unavailable``, ``ERR not logged``, ``ERR read-only`` and a
lost connection end the stream: the next ``set``/``flush`` raises ``UnavailableError`` /
``StoreError`` (retryable by whoever runs the load). Any other ``ERR`` is the row's fault: it
is recorded in ``failures`` with its tag and the stream goes on. Garbage, an unsolicited reply
or a line longer than ``MAX_REPLY_BYTES`` raise ``ProtocolError``.

Cancel-safety: the only awaits are waiting for window room and for ``flush``; a request is
either wholly in ``_out``/``_pending`` or not at all. Cancelling a waiting ``set`` or ``flush``
closes the connection anyway (the caller has abandoned a stream whose outcome is now partly
unknown, and a half-used connection must never be handed back), and ``close`` always cancels
and awaits the reader task and any pending backoff timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import random as _random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from minidb.client._backoff import Backoff
from minidb.errors import BusyError, MinidbError, ProtocolError, StoreError, UnavailableError
from minidb.protocol import MAX_LINE_BYTES, MAX_VALUE_BYTES
from minidb.protocol._line import _NAME  # one grammar for names: the decoder's own pattern

DEFAULT_WINDOW = 1024
"""Requests outstanding per connection by default. Measured with ``bench/batch_import.py``
(1 connection, durable server, medians of 3): windows 128 / 1024 / 4096 / 16384 loaded 19.7k /
21.3k / 21.9k / 21.0k rows/s, within noise, because the server's in-flight bound (128) and its
fsync set the pace. 1024 keeps the server's next groups already in its socket buffer (it never
waits for the client) while bounding what is held to 1024 requests (at most 4 MiB)."""
FLUSH_BYTES = 64 * 1024
"""Encoded requests gathered before they are handed to the transport in one write."""
READ_CHUNK_BYTES = 256 * 1024
"""Bytes asked of the socket per read of replies."""
MAX_REPLY_BYTES = MAX_LINE_BYTES
"""Longest reply line accepted; replies to SET/DEL are short (an ``ERR`` quotes at most 128
characters), so anything longer is a broken peer, not a reply to wait for."""
BUSY_ATTEMPTS = 6
"""Times one request is sent while the server answers ``ERR busy`` before ``BusyError``."""
BUSY_BACKOFF = Backoff(attempts=BUSY_ATTEMPTS, base=0.05, cap=2.0)
"""Waits between busy retries: up to 50 ms, doubling, at most 2 s (full jitter)."""

MAX_CHECKED_BUCKETS = 1024
"""Bucket names remembered as valid, so a load over a few buckets checks each once."""

_OK = b"OK\n"
_OK_LINE = b"OK"
_NIL_LINE = b"NIL"
_ERR = b"ERR "
_NEWLINE = b"\n"
_FATAL_PREFIXES = ("not logged", "read-only")


@dataclass(frozen=True)
class BulkFailure:
    """One request the server refused for its content (``ERR <reason>``), with its tag."""

    tag: object
    reason: str


@dataclass(frozen=True)
class BulkStatistics:
    """Counters of one writer since it connected."""

    sent: int
    """Requests queued for the wire (written at the next flush), busy resends included."""
    ok: int
    """Requests answered ``OK`` or ``NIL``."""
    errors: int
    """Requests answered with an ``ERR`` that is the request's fault (see ``failures``)."""
    busy_retries: int
    """``ERR busy`` answers that were retried."""
    outstanding: int
    """Requests sent or queued and not yet answered."""
    bytes_sent: int
    """Request bytes handed to the transport."""
    bytes_received: int
    """Reply bytes read."""


_name_ok = _NAME.fullmatch


def _check(bucket: bytes, key: bytes, value: bytes) -> None:
    """Raise ``ProtocolError`` with the reason the server would give for a request it refuses
    (the hot path in ``set`` only calls this when a cheap test failed)."""
    for name in (bucket, key):
        if _name_ok(name) is None:
            raise ProtocolError(f"invalid name {name.decode(errors='replace')[:128]}")
    if len(value) > MAX_VALUE_BYTES:
        raise ProtocolError("value too long")
    if b"\n" in value or b"\r" in value:
        # The server would take the rest as a second request: never send it.
        raise ProtocolError("a value cannot contain a line break")


class BulkWriter:
    """Streams SET/DEL requests over one connection with up to ``window`` unanswered."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        window: int = DEFAULT_WINDOW,
        flush_bytes: int = FLUSH_BYTES,
        busy_backoff: Backoff = BUSY_BACKOFF,
        random: Callable[[], float] = _random.random,
    ) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.window = window
        self._flush_bytes = flush_bytes
        self._busy_backoff = busy_backoff
        self._random = random
        self._loop = asyncio.get_running_loop()
        self._reader = reader
        self._writer = writer
        self._out = bytearray()
        self._buckets_ok: set[bytes] = set()
        # (line, tag, attempts) of each request on the wire, in wire order.
        self._pending: deque[tuple[bytes, object, int]] = deque()
        # Requests refused busy and waiting out their backoff, by a token of their own.
        self._retrying: dict[int, tuple[asyncio.TimerHandle, tuple[bytes, object, int]]] = {}
        self._tokens = 0
        self._room: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self.failures: list[BulkFailure] = []
        """Requests refused for their content, in the order their replies came."""
        self._sent = self._ok = self._busy_retries = 0
        self._bytes_sent = self._bytes_received = 0
        self._task = self._loop.create_task(self._read_replies(), name="minidb-bulk-reader")

    @classmethod
    async def connect(cls, host: str, port: int, **options: Any) -> BulkWriter:
        """Open one connection (no retry: a load that cannot connect fails its attempt)."""
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, **options)

    # -- the caller's side ---------------------------------------------------------------

    @property
    def outstanding(self) -> int:
        """Requests sent or queued and not yet answered (busy ones in backoff included)."""
        return len(self._pending) + len(self._retrying)

    async def set(self, bucket: bytes, key: bytes, value: bytes, tag: object = None) -> None:
        """Queue ``SET bucket key value``; waits only while ``window`` requests are unanswered.

        Raises ``ProtocolError`` for a request the protocol cannot carry (nothing is sent),
        and the stream's failure (``UnavailableError``, ``StoreError``, ``BusyError``,
        ``ProtocolError``) once it has one.
        """
        # The hot path of a load, so inlined: buckets are few, so each is checked once.
        if (
            bucket not in self._buckets_ok
            or _name_ok(key) is None
            or len(value) > MAX_VALUE_BYTES
            or b"\n" in value
            or b"\r" in value
        ):
            _check(bucket, key, value)
            self._remember_bucket(bucket)
        line = b"SET %b %b %b\n" % (bucket, key, value)
        if self._failure or len(self._pending) + len(self._retrying) >= self.window:
            await self._wait_for_room()
        self._out += line
        self._pending.append((line, tag, 1))
        self._sent += 1
        if len(self._out) >= self._flush_bytes:
            self._write_out()

    async def delete(self, bucket: bytes, key: bytes, tag: object = None) -> None:
        """Queue ``DEL bucket key`` (``NIL``, a key that was not there, counts as success)."""
        _check(bucket, key, b"")
        line = b"DEL %b %b\n" % (bucket, key)
        if self._failure or len(self._pending) + len(self._retrying) >= self.window:
            await self._wait_for_room()
        self._queue(line, tag, 1)

    async def flush(self) -> None:
        """Send what is queued and wait until every request has been answered."""
        self._raise_if_failed()
        self._write_out()
        while self._pending or self._retrying:
            self._drained = self._loop.create_future()
            await self._guarded(self._drained)
            self._raise_if_failed()

    def statistics(self) -> BulkStatistics:
        return BulkStatistics(
            sent=self._sent,
            ok=self._ok,
            errors=len(self.failures),
            busy_retries=self._busy_retries,
            outstanding=self.outstanding,
            bytes_sent=self._bytes_sent,
            bytes_received=self._bytes_received,
        )

    async def close(self) -> None:
        """Close the connection and end the reader task (what is unanswered is abandoned)."""
        self._shut(None)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, MinidbError, OSError):
            await self._task
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()

    async def __aenter__(self) -> BulkWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- sending -------------------------------------------------------------------------

    def _queue(self, line: bytes, tag: object, attempts: int) -> None:
        self._out += line
        self._pending.append((line, tag, attempts))
        self._sent += 1
        if len(self._out) >= self._flush_bytes:
            self._write_out()

    def _remember_bucket(self, bucket: bytes) -> None:
        if len(self._buckets_ok) < MAX_CHECKED_BUCKETS:
            self._buckets_ok.add(bucket)

    def _write_out(self) -> None:
        if self._out and not self._closed:
            self._bytes_sent += len(self._out)
            # Handed over, not copied: the transport may keep a view of it, so start afresh.
            self._writer.write(self._out)
            self._out = bytearray()

    async def _wait_for_room(self) -> None:
        self._raise_if_failed()
        self._write_out()
        while len(self._pending) + len(self._retrying) >= self.window:
            self._room = self._loop.create_future()
            await self._guarded(self._room)
            self._raise_if_failed()

    async def _guarded(self, waiter: asyncio.Future[None]) -> None:
        try:
            await waiter
        except asyncio.CancelledError:
            self._shut(UnavailableError("a bulk write was cancelled; the connection is closed"))
            raise

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise UnavailableError("the bulk writer is closed")

    def _resend(self, token: int) -> None:
        _, entry = self._retrying.pop(token)
        if not self._closed:
            self._queue(*entry)
            self._write_out()

    # -- the reader task -----------------------------------------------------------------

    async def _read_replies(self) -> None:
        buffer = b""
        try:
            while True:
                try:
                    chunk = await self._reader.read(READ_CHUNK_BYTES)
                except OSError as exc:
                    raise UnavailableError(f"connection lost: {exc}") from exc
                if not chunk:
                    raise UnavailableError(
                        f"server closed the connection with {self.outstanding} requests "
                        "unanswered"
                    )
                self._bytes_received += len(chunk)
                buffer += chunk
                end = buffer.rfind(_NEWLINE) + 1
                if len(buffer) - end > MAX_REPLY_BYTES:
                    raise ProtocolError(f"reply line longer than {MAX_REPLY_BYTES} bytes")
                if not end:
                    continue
                complete, buffer = buffer[:end], buffer[end:]
                count = complete.count(_NEWLINE)
                if len(complete) == 3 * count and complete.count(_OK) == count:
                    self._answer_ok(count)
                else:
                    for line in complete.split(_NEWLINE)[:-1]:
                        self._answer(line)
                self._wake()
        except BaseException as exc:
            # Cancelled by close(): nothing to report. Anything else is the stream's failure.
            self._shut(None if isinstance(exc, asyncio.CancelledError) else exc)
            raise

    def _answer_ok(self, count: int) -> None:
        pending = self._pending
        if count > len(pending):
            raise ProtocolError(f"{count - len(pending)} replies to requests never sent")
        self._ok += count
        popleft = pending.popleft
        for _ in range(count):
            popleft()

    def _answer(self, line: bytes) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not self._pending:
            raise ProtocolError(f"unsolicited reply {line[:128]!r}")
        request, tag, attempts = self._pending.popleft()
        if line in (_OK_LINE, _NIL_LINE):
            self._ok += 1
            return
        if not line.startswith(_ERR):
            raise ProtocolError(f"unexpected reply {line[:128]!r} to {request[:4]!r}")
        reason = line[4:].decode("utf-8", errors="replace")
        if reason == "busy":
            if attempts >= self._busy_backoff.attempts:
                raise BusyError(f"busy after {attempts} attempts (tag {tag!r})")
            self._busy_retries += 1
            delay = self._random() * self._busy_backoff.ceiling(attempts)
            self._tokens += 1
            handle = self._loop.call_later(delay, self._resend, self._tokens)
            self._retrying[self._tokens] = (handle, (request, tag, attempts + 1))
        elif reason == "store unavailable":
            raise UnavailableError(reason)
        elif reason.startswith(_FATAL_PREFIXES):
            raise StoreError(reason)
        else:
            self.failures.append(BulkFailure(tag, reason))

    def _wake(self) -> None:
        outstanding = len(self._pending) + len(self._retrying)
        if self._room is not None and outstanding < self.window and not self._room.done():
            self._room.set_result(None)
        if self._drained is not None and not outstanding and not self._drained.done():
            self._drained.set_result(None)

    def _shut(self, failure: BaseException | None) -> None:
        """Stop the stream for good: record why, close the socket, wake every waiter."""
        if self._failure is None and failure is not None:
            self._failure = failure
        if self._closed:
            return
        self._closed = True
        for handle, _ in self._retrying.values():
            handle.cancel()
        self._writer.close()
        for waiter in (self._room, self._drained):
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
