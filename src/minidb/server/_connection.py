"""One client connection as an asyncio ``Protocol``: the machinery every wire protocol shares.

``Connection`` knows nothing of a wire format: it is given a decoder (bytes in, at most N
requests out on demand) and the two replies it makes itself (busy, unavailable); the replies of
served requests come from the data owner already in wire form. ``LineConnection`` at the bottom
is the line protocol's whole specific part.

Theory of operation.

Taking requests. ``data_received`` hands the read to the decoder, which keeps it as undecoded
bytes; ``_take`` then takes complete requests from it and sends them to the owner as one
``Batch`` per take, as many as the connection may have **in flight** (``--max-in-flight``:
sent to the owner and not yet written back) and the mailbox has room for. While complete
requests are left in the decoder (the *backlog*), the connection does not read: the client's
bytes wait in the kernel and TCP flow control slows the client down (backpressure, not an
error). Every flush that writes replies back lowers the in-flight count and takes more.

Local replies. A decoder may answer some requests itself (RESP's connection commands, the
line protocol's auth gate): it returns their replies as ``bytes`` among the requests. Each run
of them becomes a batch that is answered already, queued in line with the owner's batches, so
it leaves exactly in its place; such replies count towards the in-flight bound like any other.

Sharing the owner. When the mailbox has no room for it, the connection queues for room
(``Mailbox.wait_room``: connections with nothing in flight first, round robin, see
``store._mailbox``) and is called back when its turn comes. ``ERR busy`` is kept for genuine
overload: a request the owner has not answered ``--request-timeout`` after it was sent
(timed out; the owner still applies it later and its late reply is dropped), or requests that
waited that long for mailbox room (shed).

Weights. What the in-flight bound, the mailbox and the owner's drain count is requests'
*weight* (``Batch.size``): one per request, except that a line-protocol ``BULK`` frame of
``n`` rows weighs ``n`` (``_weigh``), so what a connection can make the server hold is bounded
in rows, not frames. The decoder never splits a frame: one heavier than what is left of a
take's limit ends that take and is the first request of the next, taken whatever it weighs
(``_frame_waiting``: the backlog is kept meanwhile). So a connection has at most
``max_in_flight + MAX_BULK_ROWS`` rows in flight (``max_in_flight - 1`` rows, then a frame of
``MAX_BULK_ROWS``), and a frame larger than ``--max-in-flight`` is still served, alone. The
RESP listener's requests all weigh one.

Bounded output/input. What one connection can make the server hold for it is bounded:

- replies: counted in bytes as the owner builds them, not in requests. The owner asks
  ``output_room()`` (the soft limit, ``--output-soft-limit``, less what the transport holds
  unsent) before each batch and runs requests only while it is not negative; it hands the rest
  back unrun (``Batch.leftover``, with every later batch of this connection in the group). The
  handed-back requests wait here (``_deferred``) and go again before anything else, once none
  of this connection's batches is still with the owner (those come back unrun too, since
  ``output_room()`` is negative while any wait), so they still run in order. A RESP reply is at
  most the hard limit less the soft one (longer ones are refused before they are joined, see
  ``RespExecutor``), a line reply at most ~64 KiB (a ``SCAN``): a connection is given replies
  only while it holds less than the soft limit, so it holds at most ``--output-hard-limit``
  (the line protocol: the soft limit plus 64 KiB), however many requests it pipelines. The
  transport's high-water mark is the soft limit too: over it (``pause_writing``) the connection
  takes no more requests until the client has read it down to a quarter. Past the hard limit
  it would be dropped at once (Redis's client-output-buffer-limit), a backstop that the bound
  above keeps from firing;
- requests in flight: at most ``max_in_flight + MAX_BULK_ROWS`` rows (see Weights), each row
  at most ``MAX_LINE_BYTES``;
- undecoded input: at most one read (256 KiB for asyncio's transports) plus one incomplete line,
  because nothing more is read while a backlog is left; or, for a ``BULK`` frame not complete
  yet, ``MAX_BULK_BYTES`` plus one read: past that without the frame's end, it is answered
  ``ERR bulk frame too large``.

Closing after a reply. A line-protocol frame the decoder cannot delimit (a bad count, rows over
``MAX_BULK_BYTES``, a row over ``MAX_LINE_BYTES``) is answered in its turn and the connection
then drains and closes (``begin_drain``), as the RESP listener does after a protocol error:
nothing after it is read or run.

Replies leave in request order: a batch answered out of turn (shed, unavailable, or answered
while an older one still waits) is held until everything before it is answered, and ``flush``
(called by the owner once per group) writes every answered batch at the head with one
``transport.write``.

Timers, read from ``loop.time()`` so a virtual clock drives them (the loop's ``time``, bound
once when the connection is made: a clock is replaced on the loop before connections use it):

- idle: one per connection, pushed out lazily: a take only notes when it happened
  (``_idle_from``, one store), and the timer, when it fires, re-arms itself at that moment
  plus the timeout if there was activity since it was armed (Netty's ``IdleStateHandler``
  does the same). A read at ``-P 1`` paid ~1.7k instructions to move the timer on the wheel
  each time; now a connection's timer moves at most once per timeout. An idle
  connection is closed (not one blocked in BLPOP and the like, with a ``held`` batch: its
  timer is pushed out again when it fires); if its output cannot drain (the client does not
  read) it is aborted, since ``transport.close()`` would wait for the buffer forever and keep
  the slot;
- request timeout: at most one per connection, armed lazily for the oldest unanswered batch (or
  the end of a wait for room) and re-armed when it fires, not one per read. A ``held`` batch
  (a blocked command, answered when its wait ends) is not overdue: it is never answered busy;
  nor is an ``applied`` one (it ran: the owner answers it after its group's sync).

Containment: nothing raised while handling one connection (decoding, dispatch, a callback the
owner or a timer makes) escapes its callbacks: it is logged once (``connection_error`` with the
peer) and that connection alone is aborted. The owner calls ``flush`` and the mailbox calls
``room_available`` inside their own loops, so an exception there must not reach them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any, ClassVar, Protocol, cast

from minidb.errors import UnavailableError
from minidb.protocol import BUSY, UNAVAILABLE, Bulk, RequestDecoder
from minidb.server._config import OUTPUT_LOW_WATER_FRACTION
from minidb.server._hub import Hub
from minidb.server._line_auth import AuthGate
from minidb.server._logging import event
from minidb.store import UNBOUNDED_OUTPUT, Batch, Executor

logger = logging.getLogger("minidb.server")

__all__ = ["Connection", "Decoder", "Hub", "LineConnection"]


class Decoder(Protocol):
    """A wire protocol's request framing, as ``Connection`` uses it (see ``RequestDecoder``)."""

    def receive(self, data: bytes) -> None: ...

    def next_requests(self, limit: int) -> list[Any]:
        """At most ``limit`` requests (line ``Request``s, or what the batch's executor runs)."""
        ...

    def has_request(self) -> bool: ...

    def discard_partial(self) -> None: ...


class Connection(asyncio.Protocol):
    """Serves one client: flow control, batching to the owner, ordered replies, timers."""

    __slots__ = (
        "__dict__", "__weakref__", "_backlog", "_closed", "_cut", "_deferred", "_draining",
        "_idle_from", "_in_turn", "_loop", "_loop_time", "_output_paused", "_pending",
        "_soft_limit",
        "_transport", "requests",
    )  # fmt: skip
    # The fields the RESP connection's C data_received, turn_answered and output_room read
    # and set at their offsets (``server.resp._cconnection``), once per read; the others
    # live in the instance dict.

    busy_reply: ClassVar[bytes]
    """The wire form of ``ERR busy`` (timed out, or shed after waiting for room)."""
    unavailable_reply: ClassVar[bytes]
    """The wire form of ``ERR store unavailable`` (the owner is gone)."""
    listener: ClassVar[str]
    """The listener's name in metrics and logs (``line``, ``resp``)."""
    _batch_executor: Executor | None = None
    """Who runs this connection's batches on the owner: None for line-protocol requests
    (``StoreState``), a protocol's ``Executor`` otherwise."""

    def __init__(self, hub: Hub, loop: asyncio.AbstractEventLoop, decoder: Decoder) -> None:
        config = hub.config
        self._hub = hub
        self._loop = loop
        # Bound once: read once per request at -P 1 (a staticmethod's lookup on the loop's
        # class and its instance dict cost more than the clock itself).
        self._loop_time = loop.time
        self._mailbox = hub.owner.mailbox
        self._idle_s = config.idle_timeout
        self._request_timeout_s = config.request_timeout
        self._max_in_flight = config.max_in_flight
        self._soft_limit = config.output_soft_limit
        self._hard_limit = config.output_hard_limit
        self._decoder = decoder
        self._pending: deque[Batch] = deque()
        self._in_flight = 0
        # Requests the owner handed back unrun (out of output room), oldest first: sent again
        # before anything else, once none of this connection's batches is with the owner.
        self._deferred: deque[Any] = deque()
        self._cut = False  # the owner handed some back: it must run nothing more of ours
        # The decoder may hold complete requests not taken yet; reading waits while it does.
        self._backlog = False
        self._fresh = False  # the decoder's requests came from a read not yet taken from
        self._output_paused = False
        self._reading = True
        self._room_since: float | None = None  # when it began waiting for mailbox room
        self._transport: asyncio.Transport | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._idle_from = 0.0
        """The last take: the idle timeout counts from it (the timer catches up when it
        fires)."""
        self._idle_at = 0.0  # when the armed idle timer fires
        self._request_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._draining = False
        self._failed = False
        self._opened_at = 0.0
        self._peer = "?"
        self.requests = 0
        self._pushed = 0  # bytes of pushed output waiting in line (see ``push``)
        self._in_turn = False
        """A run of this connection's ran in the loop turn's group: its replies come with
        ``turn_answered``, before any other of its replies."""

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._opened_at = now = self._loop_time()
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._hub.opened(self)
        try:
            self._transport.set_write_buffer_limits(
                high=self._soft_limit, low=self._soft_limit // OUTPUT_LOW_WATER_FRACTION
            )
            self._idle_from = now
            self._arm_idle(now + self._idle_s)
            # Debug, as Redis's "Accepted" is verbose: a line per connection costs about as
            # much as the rest of its opening (stdlib logging's record, caller and handler).
            event(logger, logging.DEBUG, "connection_open", peer=self._peer)
        except Exception as exc:
            self._fail("connection_made", exc)

    def data_received(self, data: bytes) -> None:
        try:
            if self._draining:
                return  # shutting down: what arrives after begin_drain was never received
            self._decoder.receive(data)
            self._fresh = True
            self._take()
        except Exception as exc:
            self._fail("data_received", exc)

    def eof_received(self) -> bool:
        # The client finished sending (e.g. ``nc -N``); it still gets every reply it is owed,
        # so keep the transport open for writing until the backlog is answered.
        try:
            self._draining = True
            self._set_reading()
            self._finish_if_drained()
        except Exception as exc:
            self._fail("eof_received", exc)
        return True

    def pause_writing(self) -> None:
        # Over the soft output limit: take no more requests until the client reads.
        self._output_paused = True
        try:
            self._set_reading()
        except Exception as exc:
            self._fail("pause_writing", exc)

    def resume_writing(self) -> None:
        self._output_paused = False
        try:
            if self._backlog:
                self._take()
            else:
                self._set_reading()
        except Exception as exc:
            self._fail("resume_writing", exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        for timer in (self._idle, self._request_timer):
            if timer is not None:
                timer.cancel()
        self._idle = self._request_timer = None
        self._mailbox.forget(self)
        self._hub.closed(self)
        event(
            logger,
            logging.DEBUG,
            "connection_close",
            peer=self._peer,
            duration_s=f"{self._loop_time() - self._opened_at:.3f}",
            requests=self.requests,
            **({"error": exc} if exc is not None else {}),
        )

    # -- requests in -----------------------------------------------------------------------

    def _take(self) -> None:
        """Send complete requests (those the owner handed back first, then the decoder's) to
        the owner while this connection may have more in flight and the mailbox has room for
        it; read again once none is left."""
        # The first take from a fresh read is quiet (the client is within its share), also
        # when it had to queue for room; what is left over from a read that did not fit is a
        # flood's, and may not take the quiet reserve.
        quiet = self._fresh
        while not self._closed:
            allowed = self._max_in_flight - self._in_flight
            if allowed <= 0 or self._output_paused:
                self._backlog = True
                break
            if self._deferred:
                if self._pending:
                    # A batch sent before the cut may still be with the owner; it comes back
                    # unrun too, and the handed-back requests go again only after it.
                    self._backlog = True
                    break
                self._cut = False
            room = self._mailbox.room_for(self, quiet)
            if room <= 0:
                self._backlog = self._has_request()
                if not self._backlog:
                    break  # only part of a line: nothing to queue for yet
                if not self._room_wait_expired(quiet):
                    break
                # Waited --request-timeout for room: genuine overload, answer ERR busy. All
                # of the backlog was read before the wait began (nothing is read meanwhile).
                requests, taken = self._next_requests(allowed)
                if requests:
                    self._shed(requests, taken)
                if taken < allowed and not self._frame_waiting():
                    self._backlog = False
                    self._room_since = None
                    break
                continue
            limit = allowed if allowed < room else room
            requests, taken = self._next_requests(limit)
            if requests:
                self._send(requests, taken)
            if taken < limit:
                # Nothing complete is left, or a frame heavier than what was left is (it is
                # the first request of the next take).
                self._backlog = self._frame_waiting()
                break
            quiet = self._fresh = False
        if self._backlog is self._reading:  # (reading is wanted iff there is no backlog)
            self._set_reading()

    def _next_requests(self, limit: int) -> tuple[list[Any], int]:
        """What to send next, weighing at most ``limit`` (or one request heavier than that),
        and its weight: the requests the owner handed back, else the decoder's."""
        deferred = self._deferred
        if not deferred:
            requests = self._decoder.next_requests(limit)
            return requests, self._weigh(requests)
        taken: list[Any] = []
        weight = 0
        while deferred:
            heft = self._weight_of(deferred[0])
            if taken and weight + heft > limit:
                break
            taken.append(deferred.popleft())
            weight += heft
            if weight >= limit:
                break
        return taken, weight

    def _has_request(self) -> bool:
        return bool(self._deferred) or self._decoder.has_request()

    def _weigh(self, requests: list[Any]) -> int:
        """What ``requests`` weigh towards the in-flight bound, the mailbox's capacity and the
        owner's drain: one each (a protocol with heavier requests says otherwise)."""
        return len(requests)

    def _weight_of(self, request: Any) -> int:
        """What one request weighs (see ``_weigh``)."""
        return 1

    def _refusals(self, requests: list[Any], reply: bytes) -> list[bytes]:
        """``reply`` (busy, unavailable) to each of ``requests``, in wire form, one entry per
        request (a protocol whose request stands for several commands answers each)."""
        return [reply] * len(requests)

    def _frame_waiting(self) -> bool:
        """Whether a take that weighed less than its limit left a complete request behind
        (one too heavy for what was left, or handed back by the owner; where every request
        weighs one, only the latter)."""
        return bool(self._deferred)

    def _send(self, requests: list[Any], weight: int) -> None:
        """Send what the decoder gave (``weight`` in all): runs of requests go to the owner,
        runs of replies the decoder answered itself (``bytes``: a connection command, an auth
        refusal) are answered already; both join the one ordered queue, so each reply keeps
        its place."""
        start = 0
        size = len(requests)
        while start < size and not self._closed:
            local = type(requests[start]) is bytes
            end = start + 1
            while end < size and (type(requests[end]) is bytes) is local:
                end += 1
            if start or end < size:
                run = requests[start:end]
                if local:
                    self._answer_locally(run)
                else:
                    self._send_to_owner(run, self._weigh(run))
            elif local:
                self._answer_locally(requests)
            else:
                self._send_to_owner(requests, weight)
            start = end

    def _send_last(self, requests: list[Any]) -> None:
        """Send requests whose replies nobody will read (a closed connection's last word to
        the owner, such as forgetting its WATCH): past the room check, one batch at most per
        closing connection, and never handed back for want of output room."""
        batch = Batch(requests, self, self._loop_time(), executor=self._batch_executor)
        batch.sink = _NO_READER
        with contextlib.suppress(UnavailableError):  # the owner is gone, the keyspace too
            self._mailbox.put_nowait(batch)

    def _answer_locally(self, replies: list[bytes]) -> None:
        count = len(replies)
        now = self._loop_time()
        self._idle_from = now
        self.requests += count
        self._in_flight += count
        batch = Batch(replies, self, now + self._request_timeout_s)  # counted, never run
        batch.replies = replies
        self._pending.append(batch)
        self._write_answered()

    def _send_to_owner(self, requests: list[Any], weight: int) -> None:
        loop = self._loop
        now = loop.time()
        self._idle_from = now
        count = len(requests)
        self.requests += count
        self._in_flight += weight
        self._room_since = None
        batch = Batch(
            requests, self, now + self._request_timeout_s, executor=self._batch_executor,
            size=weight,
        )
        self._pending.append(batch)
        try:
            self._mailbox.put_nowait(batch)
        except UnavailableError:
            batch.replies = self._refusals(requests, self.unavailable_reply)
            self._hub.unavailable += count
            self._hub.count_refused(batch, "unavailable")
            self._write_answered()
            return
        if self._request_timer is None:
            self._request_timer = loop.call_at(batch.deadline, self._on_request_timeout)

    def _shed(self, requests: list[Any], weight: int) -> None:
        count = len(requests)
        self._idle_from = self._loop_time()
        self.requests += count
        self._in_flight += weight
        batch = Batch(
            requests, self, self._loop_time() + self._request_timeout_s,
            executor=self._batch_executor, size=weight,
        )
        batch.replies = self._refusals(requests, self.busy_reply)
        self._pending.append(batch)
        self._hub.shed += count
        self._hub.count_refused(batch, "shed")
        self._write_answered()

    def _room_wait_expired(self, quiet: bool) -> bool:
        """Queue for mailbox room (again); True once this wait has lasted the request
        timeout."""
        now = self._loop_time()
        if self._room_since is None:
            self._room_since = now
            if self._request_timer is None:
                self._request_timer = self._loop.call_at(
                    now + self._request_timeout_s, self._on_request_timeout
                )
        elif now >= self._room_since + self._request_timeout_s:
            return True
        self._mailbox.wait_room(self, quiet=quiet)
        return False

    def room_available(self) -> None:
        """The mailbox's call when this connection's turn for room has come."""
        try:
            self._take()
        except Exception as exc:
            self._fail("room_available", exc)

    def _set_reading(self) -> None:
        want = not (self._backlog or self._output_paused or self._draining or self._closed)
        if want is not self._reading and self._transport is not None:
            self._reading = want
            if want:
                self._transport.resume_reading()
            else:
                self._transport.pause_reading()

    # -- replies out -----------------------------------------------------------------------

    def flush(self) -> None:
        """Write, in one syscall, the replies of every answered batch at the head of the line,
        then take more requests if some were waiting for in-flight room."""
        try:
            self._write_answered()
            if self._backlog:
                self._take()
            if self._draining:
                self._finish_if_drained()
        except Exception as exc:
            self._fail("flush", exc)

    def turn_answered(self, replies: bytes) -> None:
        """The loop turn's group is logged (``StoreOwner.end_turn``): write the replies of
        the run this connection ran in it, then whatever was answered meanwhile."""
        self._in_turn = False
        try:
            transport = self._transport
            if not self._closed and transport is not None:  # _write, spelled out
                transport.write(replies)
                if self._output_paused and transport.get_write_buffer_size() > self._hard_limit:
                    self._drop_for_output(transport)
            if self._pending or self._backlog or self._draining:
                self.flush()
        except Exception as exc:
            self._fail("turn_answered", exc)

    def _write_answered(self) -> None:
        pending = self._pending
        if not pending or pending[0].replies is None or self._in_turn:
            return  # (in the turn: its replies come first, turn_answered writes these)
        done = 0
        out: list[bytes] = []
        now: float | None = None
        while pending and (replies := pending[0].replies) is not None:
            batch = pending[0]
            if batch.leftover is not None:
                # Out of output room: what the owner did not run waits here, in order, and
                # only the replies of what it ran go out (a batch answered busy meanwhile
                # is given back with none run, so none of its busy replies go).
                self._deferred.extend(batch.leftover)
                self._cut = self._backlog = True
                replies = replies[: len(batch.requests)]
            elif self._cut:
                # Answered busy by the request timer before the owner got to it: the owner
                # will hand it back unrun too, and its place in line is behind the requests
                # handed back so far; wait for that.
                break
            pending.popleft()
            if batch.requests is _PUSHED:
                self._pushed -= sum(map(len, replies))
            done += batch.size
            out += replies
            if now is None:
                now = self._loop_time()
            # The batch was sent at deadline - request timeout (see _send_to_owner).
            self._hub.observe_latency(
                now - batch.deadline + self._request_timeout_s, len(batch.requests)
            )
        self._in_flight -= done
        if out:
            self._write(out[0] if len(out) == 1 else b"".join(out))

    def _write(self, data: bytes) -> None:
        """Write replies to the client (one syscall), dropping it past the hard limit."""
        transport = self._transport
        if self._closed or transport is None:
            return
        transport.write(data)
        # pause_writing() ran inside write() if it crossed the soft limit; only then can the
        # hard one have been crossed, so the common path pays no buffer-size call.
        if self._output_paused and transport.get_write_buffer_size() > self._hard_limit:
            self._drop_for_output(transport)

    def push(self, data: bytes) -> None:
        """Write output no request asked for (pub/sub messages) after every reply already owed:
        at once if none is, else queued in line behind them as an answered batch of no
        requests. Bounded like replies: past ``--output-hard-limit`` counting what is unsent
        and what waits in line, the connection is dropped (Redis's pubsub class), so a
        subscriber that does not read never holds more than that."""
        transport = self._transport
        if self._closed or transport is None:
            return
        pending = self._pending
        if not pending:
            self._write(data)
            return
        last = pending[-1]
        if last.requests is _PUSHED:
            last.replies.append(data)  # type: ignore[union-attr]
        else:
            batch = Batch(_PUSHED, self, self._loop_time() + self._request_timeout_s, size=0)
            batch.replies = [data]
            pending.append(batch)
        self._pushed += len(data)
        if self._pushed + transport.get_write_buffer_size() > self._hard_limit:
            self._drop_for_output(transport)

    def output_room(self) -> int:
        """Bytes of replies the owner may still build for this connection: its soft output
        limit less what is unsent (negative: none, and none either while requests it handed
        back wait to be sent again, or once the connection is closed)."""
        transport = self._transport
        if self._cut or self._closed or transport is None:
            return -1
        return self._soft_limit - transport.get_write_buffer_size()

    def _drop_for_output(self, transport: asyncio.Transport) -> None:
        self._hub.output_dropped += 1
        event(
            logger, logging.WARNING, "connection_output_limit", peer=self._peer,
            unsent_bytes=transport.get_write_buffer_size(), limit=self._hard_limit,
        )
        self._closed = True
        transport.abort()

    def _finish_if_drained(self) -> None:
        # close() lets the last replies drain; if they never do, the idle timer or the end of
        # the shutdown grace period aborts the connection.
        if not self._pending and not self._backlog and not self._closed and not self._in_turn:
            self._closed = True
            if self._transport is not None:
                self._transport.close()

    def _close_or_abort(self) -> None:
        transport = self._transport
        if transport is None:
            return
        self._closed = True
        # close() waits for unsent output to drain, forever if the client does not read, and
        # keeps the connection's slot meanwhile: drop such a connection instead.
        if transport.get_write_buffer_size():
            transport.abort()
        else:
            transport.close()

    # -- timers --------------------------------------------------------------------------

    def _arm_idle(self, when: float) -> None:
        self._idle_at = when
        self._idle = self._loop.call_at(when, self._on_idle)

    def _on_idle(self) -> None:
        self._idle = None
        try:
            due = self._idle_from + self._idle_s
            if due > self._idle_at:
                self._arm_idle(due)  # a take since it was armed: not idle for long enough
                return
            if any(batch.held for batch in self._pending):
                self._arm_idle(self._loop_time() + self._idle_s)
                return
            event(logger, logging.INFO, "connection_idle", peer=self._peer, idle_s=self._idle_s)
            self._close_or_abort()
        except Exception as exc:
            self._fail("idle timer", exc)

    def _on_request_timeout(self) -> None:
        self._request_timer = None
        try:
            now = self._loop_time()
            expired = 0
            for batch in self._pending:
                if batch.deadline > now:
                    break
                if batch.replies is None and not batch.held and not batch.applied:
                    batch.replies = self._refusals(batch.requests, self.busy_reply)
                    expired += len(batch.requests)
                    self._hub.count_refused(batch, "timeout")
            self._hub.timeouts += expired
            self.flush()  # writes what expired; a backlog whose wait for room expired is shed
            if self._request_timer is None and not self._closed:
                self._arm_request_timer()
        except Exception as exc:
            self._fail("request timer", exc)

    def _arm_request_timer(self) -> None:
        when = next(
            (b.deadline for b in self._pending
             if b.replies is None and not b.held and not b.applied),
            None,
        )
        if self._room_since is not None:
            room_deadline = self._room_since + self._request_timeout_s
            if when is None or room_deadline < when:
                when = room_deadline
        if when is not None:
            self._request_timer = self._loop.call_at(when, self._on_request_timeout)

    # -- failure and shutdown ------------------------------------------------------------

    def _fail(self, where: str, exc: Exception) -> None:
        """Contain an unexpected error: log it once with the peer, drop this connection."""
        if not self._failed:
            self._failed = True
            self._hub.errors += 1
            event(
                logger, logging.ERROR, "connection_error", peer=self._peer, where=where,
                error=repr(exc), exc_info=exc,
            )
        self._closed = True
        self._mailbox.forget(self)
        if self._transport is not None:
            self._transport.abort()

    def begin_drain(self) -> None:
        """Take no more requests; close once everything already received is answered."""
        self._draining = True
        self._decoder.discard_partial()
        self._set_reading()
        self._finish_if_drained()

    def abort(self) -> None:
        """Drop the connection now (grace period over, or the owner died)."""
        self._closed = True
        if self._transport is not None:
            self._transport.abort()


_PUSHED: list[Any] = []
"""The ``requests`` of a batch ``push`` queued: output no request asked for (never changed)."""


class _NoReader:
    """The reply sink of requests sent after the connection closed: replies go nowhere."""

    def flush(self) -> None:
        pass

    def output_room(self) -> int:
        return UNBOUNDED_OUTPUT


_NO_READER = _NoReader()


class LineConnection(Connection):
    """The line protocol: ``RequestDecoder`` framing (behind the password gate when the server
    has one) and its refusal replies."""

    busy_reply = BUSY
    unavailable_reply = UNAVAILABLE
    listener = "line"

    def __init__(self, hub: Hub, loop: asyncio.AbstractEventLoop) -> None:
        password = hub.config.password
        self._frames = RequestDecoder()
        decoder: Decoder = self._frames
        if password is not None:
            decoder = AuthGate(self._frames, password)
        super().__init__(hub, loop, decoder)

    def _weigh(self, requests: list[Any]) -> int:
        if not self._frames.extra_weight:  # no frame in the last take: one each
            return len(requests)
        return sum(map(self._weight_of, requests))

    def _weight_of(self, request: Any) -> int:
        return len(request.rows) if type(request) is Bulk else 1

    def _frame_waiting(self) -> bool:
        return bool(self._deferred) or self._decoder.has_request()

    def _take(self) -> None:
        super()._take()
        if self._frames.closing and not self._draining and not self._closed:
            # A frame that could not be delimited: its ERR was the last request taken. Close
            # once every reply up to it is written (as RESP does after a protocol error).
            self.begin_drain()
