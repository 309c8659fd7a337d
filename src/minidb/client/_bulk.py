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

Theory of operation. ``set`` encodes the row (names checked against the protocol grammar,
the value against its length and line breaks, so a row can never be split into two) and adds
it to the frame being gathered (``_rows``). A frame is closed, as one ``BULK <n>`` request
with its ``n`` rows, once it holds ``frame_rows`` rows or the next row would take its rows past
``MAX_BULK_BYTES``, on ``flush``, and when the writer waits for room; closed frames go to
``_out``, a bytearray handed to the transport in one write once it holds ``flush_bytes`` or
when the writer waits. The server applies a frame atomically, as one log record with one sync,
and answers it once: ``OK <n>``. ``_pending`` holds the rows of every frame written and not
yet answered, in wire order. At most ``window`` rows are outstanding (gathered, pending, plus
frames refused ``ERR busy`` waiting out their backoff), so what the writer holds is bounded by
``window`` rows whatever the input. The server takes frames up to its own in-flight bound
(``--max-in-flight`` rows; a larger frame alone) and pauses reading beyond it; the rest of the
window waits in TCP buffers, which keeps the server's next group full while it syncs the last.

The reader task reads large chunks and answers them line by line (a line answers a frame of
up to ``frame_rows`` rows, so this is cheap). ``OK <n>`` answers every row of its frame
(``OK`` for a ``SET``, ``OK`` or ``NIL`` for a ``DEL``: both successes). ``ERR row <i>:
<reason>`` is row ``i``'s fault, and nothing of the frame was applied: that row is recorded in
``failures`` with its tag and ``reason``, and the frame's other rows are sent again at once as
a new frame (so a frame with many bad rows costs a resend per bad row). ``set`` records a value
that is not UTF-8 in ``failures`` itself, with the server's reason, without sending it: the one
refusal it does not otherwise foresee never costs a resend.
``ERR busy`` is overload, not bad data: the whole frame is resent after a backoff on the loop
clock, up to ``BUSY_ATTEMPTS`` times (then ``BusyError``). A resent frame lands after frames
queued later, so two writes of one key in one stream may reorder when one of them was refused
(busy, or for another row of its frame). ``ERR store unavailable``, ``ERR not logged``, ``ERR
read-only`` and a lost connection end the stream: the next ``set``/``flush`` raises
``UnavailableError`` / ``StoreError`` (retryable by whoever runs the load). Any other ``ERR``
(a reply to the frame as a whole) would be a broken peer, as are garbage, an unsolicited
reply, an ``OK <n>`` for another count or a line longer than ``MAX_REPLY_BYTES``: they raise
``ProtocolError``.

Cancel-safety: the only awaits are waiting for window room and for ``flush``; a row is either
wholly in a frame (gathered, ``_out``/``_pending``) or not at all. Cancelling a waiting ``set``
or ``flush`` closes the connection anyway (the caller has abandoned a stream whose outcome is
now partly unknown, and a half-used connection must never be handed back), and ``close``
always cancels and awaits the reader task and any pending backoff timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import random as _random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from minidb.client._backoff import Backoff
from minidb.errors import BusyError, MinidbError, ProtocolError, StoreError, UnavailableError
from minidb.protocol import MAX_BULK_BYTES, MAX_BULK_ROWS, MAX_LINE_BYTES, MAX_VALUE_BYTES
from minidb.protocol._line import _NAME, can_carry  # the decoder's own grammar and rule

DEFAULT_WINDOW = 4096
"""Rows outstanding per connection by default: four frames of ``DEFAULT_FRAME_ROWS``, so the
server's next frames are already in its socket buffer (it never waits for the client) while
what is held stays bounded (at most 16 MiB of 4 KiB values)."""
DEFAULT_FRAME_ROWS = 1024
"""Rows per ``BULK`` frame by default (``MAX_BULK_ROWS``): each frame is one log record, one
reply and one mailbox entry for the server, so the larger the cheaper per row."""
FLUSH_BYTES = 64 * 1024
"""Encoded frames gathered before they are handed to the transport in one write."""
READ_CHUNK_BYTES = 256 * 1024
"""Bytes asked of the socket per read of replies."""
MAX_REPLY_BYTES = MAX_LINE_BYTES
"""Longest reply line accepted; replies to frames are short (an ``ERR`` quotes at most 128
characters), so anything longer is a broken peer, not a reply to wait for."""
BUSY_ATTEMPTS = 6
"""Times one frame is sent while the server answers ``ERR busy`` before ``BusyError``."""
BUSY_BACKOFF = Backoff(attempts=BUSY_ATTEMPTS, base=0.05, cap=2.0)
"""Waits between busy retries: up to 50 ms, doubling, at most 2 s (full jitter)."""

MAX_CHECKED_BUCKETS = 1024
"""Bucket names remembered as valid, so a load over a few buckets checks each once."""

_OK_PREFIX = b"OK "
_ERR = b"ERR "
_ROW_ERROR = "row "
_NEWLINE = b"\n"
_FATAL_PREFIXES = ("not logged", "read-only")


@dataclass(frozen=True)
class BulkFailure:
    """One row the server refused for its content (``ERR row <i>: <reason>``), with its tag."""

    tag: object
    reason: str


@dataclass(frozen=True)
class BulkStatistics:
    """Counters of one writer since it connected (in rows, except where it says frames)."""

    sent: int
    """Rows queued for the wire (sent with their frame), resends included."""
    ok: int
    """Rows applied (their frame answered ``OK <n>``)."""
    errors: int
    """Rows refused for their content (see ``failures``)."""
    busy_retries: int
    """``ERR busy`` answers (one per frame) that were retried."""
    outstanding: int
    """Rows queued and not yet answered."""
    bytes_sent: int
    """Request bytes handed to the transport."""
    bytes_received: int
    """Reply bytes read."""
    frames: int = 0
    """Frames sent, resends included."""


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


_Frame = tuple[list[bytes], list[object], int]
"""A frame's row lines, their tags, and how many times it has been sent."""


class BulkWriter:
    """Streams SET/DEL rows over one connection in ``BULK`` frames of up to ``frame_rows``,
    with up to ``window`` rows unanswered."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        window: int = DEFAULT_WINDOW,
        frame_rows: int = DEFAULT_FRAME_ROWS,
        flush_bytes: int = FLUSH_BYTES,
        busy_backoff: Backoff = BUSY_BACKOFF,
        random: Callable[[], float] = _random.random,
    ) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        if not 1 <= frame_rows <= MAX_BULK_ROWS:
            raise ValueError(f"frame_rows must be 1 to {MAX_BULK_ROWS}")
        self.window = window
        self.frame_rows = frame_rows
        self._flush_bytes = flush_bytes
        self._busy_backoff = busy_backoff
        self._random = random
        self._loop = asyncio.get_running_loop()
        self._reader = reader
        self._writer = writer
        self._out = bytearray()
        self._buckets_ok: set[bytes] = set()
        # The frame being gathered: its row lines and their tags, and its row bytes.
        self._lines: list[bytes] = []
        self._tags: list[object] = []
        self._frame_bytes = 0
        # Each frame on the wire, in wire order.
        self._pending: deque[_Frame] = deque()
        # Frames refused busy and waiting out their backoff, by a token of their own.
        self._retrying: dict[int, tuple[asyncio.TimerHandle, _Frame]] = {}
        self._tokens = 0
        self._outstanding = 0  # rows gathered, pending and retrying
        self._room: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self.failures: list[BulkFailure] = []
        """Rows refused for their content, in the order their replies came."""
        self._sent = self._ok = self._busy_retries = self._frames = 0
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
        """Rows queued and not yet answered (gathered, sent, busy ones in backoff)."""
        return self._outstanding

    async def set(self, bucket: bytes, key: bytes, value: bytes, tag: object = None) -> None:
        """Queue ``SET bucket key value``; waits only while ``window`` rows are unanswered.

        Raises ``ProtocolError`` for a request the protocol cannot carry (nothing is sent),
        and the stream's failure (``UnavailableError``, ``StoreError``, ``BusyError``,
        ``ProtocolError``) once it has one.
        """
        await self.set_many(((tag, bucket, key, value),))

    async def set_many(self, rows: Iterable[tuple[object, bytes, bytes, bytes]]) -> None:
        """``set(bucket, key, value, tag)`` of each ``(tag, bucket, key, value)`` row, in order,
        as one call: a load's hot path, which awaits only while the window is full.

        Raises as ``set`` does, at the first row it cannot carry; the rows before it stay
        queued.
        """
        buckets_ok = self._buckets_ok
        gather = self._gather
        for tag, bucket, key, value in rows:
            # Inlined checks: buckets are few, so each is checked once.
            if (
                bucket not in buckets_ok
                or _name_ok(key) is None
                or len(value) > MAX_VALUE_BYTES
                or b"\n" in value
                or b"\r" in value
                or not value.isascii()
            ) and not self._carries(bucket, key, value, tag):
                continue
            if self._failure or self._outstanding >= self.window:
                await self._wait_for_room()
            gather(b"SET %b %b %b\n" % (bucket, key, value), tag)

    def _carries(self, bucket: bytes, key: bytes, value: bytes, tag: object) -> bool:
        """The full check of a row the inlined one did not pass: raises ``ProtocolError`` if
        the protocol cannot carry it; False, with the row recorded as a failure, if only its
        UTF-8 is invalid (the server's reason, without the resend of a frame it would
        refuse)."""
        _check(bucket, key, value)
        self._remember_bucket(bucket)
        if can_carry(value):
            return True
        self._raise_if_failed()
        self.failures.append(BulkFailure(tag, "invalid utf-8"))
        return False

    async def delete(self, bucket: bytes, key: bytes, tag: object = None) -> None:
        """Queue ``DEL bucket key`` (``NIL``, a key that was not there, counts as success)."""
        _check(bucket, key, b"")
        line = b"DEL %b %b\n" % (bucket, key)
        if self._failure or self._outstanding >= self.window:
            await self._wait_for_room()
        self._gather(line, tag)

    async def flush(self) -> None:
        """Send what is queued and wait until every row has been answered."""
        self._raise_if_failed()
        self._close_frame()
        self._write_out()
        while self._outstanding:
            self._drained = self._loop.create_future()
            await self._guarded(self._drained)
            self._raise_if_failed()

    def statistics(self) -> BulkStatistics:
        return BulkStatistics(
            sent=self._sent,
            ok=self._ok,
            errors=len(self.failures),
            busy_retries=self._busy_retries,
            outstanding=self._outstanding,
            bytes_sent=self._bytes_sent,
            bytes_received=self._bytes_received,
            frames=self._frames,
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

    def _gather(self, line: bytes, tag: object) -> None:
        """Add a row to the frame being gathered, closing it first if the row would take it
        past ``MAX_BULK_BYTES``, and after if it is full."""
        if self._frame_bytes + len(line) > MAX_BULK_BYTES:
            self._close_frame()
        self._lines.append(line)
        self._tags.append(tag)
        self._frame_bytes += len(line)
        self._outstanding += 1
        if len(self._lines) >= self.frame_rows:
            self._close_frame()

    def _close_frame(self) -> None:
        """Queue the gathered rows as one frame."""
        if self._lines:
            frame = (self._lines, self._tags, 1)
            self._lines, self._tags, self._frame_bytes = [], [], 0
            self._queue(frame)

    def _queue(self, frame: _Frame) -> None:
        lines = frame[0]
        self._out += b"BULK %d\n" % len(lines)
        self._out += b"".join(lines)
        self._pending.append(frame)
        self._sent += len(lines)
        self._frames += 1
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
        self._close_frame()
        self._write_out()
        while self._outstanding >= self.window:
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
        _, frame = self._retrying.pop(token)
        if not self._closed:
            self._queue(frame)
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
                        f"server closed the connection with {self.outstanding} rows "
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
                for line in complete.split(_NEWLINE)[:-1]:
                    self._answer(line)
                if self._out:
                    self._write_out()  # rows resent for another row's fault
                self._wake()
        except BaseException as exc:
            # Cancelled by close(): nothing to report. Anything else is the stream's failure.
            self._shut(None if isinstance(exc, asyncio.CancelledError) else exc)
            raise

    def _answer(self, line: bytes) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not self._pending:
            raise ProtocolError(f"unsolicited reply {line[:128]!r}")
        lines, tags, attempts = frame = self._pending.popleft()
        rows = len(lines)
        if line.startswith(_OK_PREFIX) and line[3:] == b"%d" % rows:
            self._ok += rows
            self._outstanding -= rows
            return
        if not line.startswith(_ERR):
            raise ProtocolError(f"unexpected reply {line[:128]!r} to a frame of {rows} rows")
        reason = line[4:].decode("utf-8", errors="replace")
        if reason.startswith(_ROW_ERROR):
            self._row_failed(frame, reason)
        elif reason == "busy":
            if attempts >= self._busy_backoff.attempts:
                raise BusyError(
                    f"busy after {attempts} attempts (a frame of {rows} rows, first tag "
                    f"{tags[0]!r})"
                )
            self._busy_retries += 1
            delay = self._random() * self._busy_backoff.ceiling(attempts)
            self._tokens += 1
            handle = self._loop.call_later(delay, self._resend, self._tokens)
            self._retrying[self._tokens] = (handle, (lines, tags, attempts + 1))
        elif reason == "store unavailable":
            raise UnavailableError(reason)
        elif reason.startswith(_FATAL_PREFIXES):
            raise StoreError(reason)
        else:
            raise ProtocolError(f"unexpected reply {line[:128]!r} to a frame of {rows} rows")

    def _row_failed(self, frame: _Frame, reason: str) -> None:
        """``ERR row <i>: <why>``: row ``i`` is recorded as failed; nothing of the frame was
        applied, so its other rows go again as a frame of their own."""
        lines, tags, attempts = frame
        number, colon, why = reason[len(_ROW_ERROR) :].partition(": ")
        if not (colon and number.isdigit() and 1 <= int(number) <= len(lines)):
            raise ProtocolError(f"unexpected reply ERR {reason[:128]!r}")
        at = int(number) - 1
        self.failures.append(BulkFailure(tags[at], why))
        self._outstanding -= 1
        if len(lines) > 1:
            self._queue((lines[:at] + lines[at + 1 :], tags[:at] + tags[at + 1 :], attempts))

    def _wake(self) -> None:
        outstanding = self._outstanding
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
