"""One client connection of the line protocol, as an asyncio ``Protocol``.

Theory of operation. ``data_received`` feeds the read to a ``RequestDecoder`` and sends every
request it completed to the data owner as one ``Batch`` (one mailbox message per read, not per
request). Batches wait in ``_pending`` in arrival order; the owner fills in their replies and
calls ``flush`` once per group, and ``flush`` writes the replies of every answered batch at the
head of ``_pending`` with one ``transport.write``. A batch answered out of turn (a refused one,
or one answered while an older one still waits) is held until everything before it is answered,
so replies always leave in request order.

Waiting versus refusing: the part of a read that does not fit in the mailbox is answered
``ERR busy`` at once (shed); a batch that the owner has not answered by its deadline
(``--request-timeout``) is answered ``ERR busy`` too (timed out). Giving up waiting does not
take the batch back: the owner still applies it later, and its late replies are dropped.

Timers, both read from ``loop.time()`` so a virtual clock drives them:

- idle: one timer per connection, pushed out by every read that completes a request, with
  ``loop.reschedule`` where the loop has it (the timer wheel moves the entry in O(1)) and
  cancel + ``call_at`` otherwise;
- request timeout: at most one timer per connection, armed lazily for the oldest unanswered
  batch and re-armed when it fires, so a busy connection does not create a timer per read.

Reading stops while the transport's write buffer is over its high-water mark (the client is
not reading its replies), so a slow reader cannot make the server buffer without bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import cast

from minidb.errors import UnavailableError
from minidb.protocol import BUSY, UNAVAILABLE, RequestDecoder
from minidb.server._config import ServerConfig
from minidb.server._logging import event
from minidb.store import Batch, StoreOwner

logger = logging.getLogger("minidb.server")


class Hub:
    """What every connection of one server shares: the owner, the settings, the counters,
    and the set of open connections (which admission control and shutdown look at)."""

    def __init__(self, config: ServerConfig, owner: StoreOwner) -> None:
        self.config = config
        self.owner = owner
        self.connections: set[LineConnection] = set()
        self.shed = 0
        self.timeouts = 0
        self.unavailable = 0
        self.accepted = 0
        self.rejected_verbs: dict[tuple[str, str], int] = {}
        self._slot_waiter: asyncio.Future[None] | None = None
        self._idle_waiter: asyncio.Future[None] | None = None

    def count_refused(self, batch: Batch, outcome: str) -> None:
        """Count each request of a refused batch under its verb (a rare, slow path)."""
        for request in batch.requests:
            key = (type(request).__name__.upper().replace("DELETE", "DEL"), outcome)
            self.rejected_verbs[key] = self.rejected_verbs.get(key, 0) + 1

    def opened(self, conn: LineConnection) -> None:
        self.connections.add(conn)
        self.accepted += 1

    def closed(self, conn: LineConnection) -> None:
        self.connections.discard(conn)
        for waiter in (self._slot_waiter, self._idle_waiter if not self.connections else None):
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def wait_for_slot(self) -> None:
        """Return once fewer than ``max_connections`` connections are open."""
        while len(self.connections) >= self.config.max_connections:
            self._slot_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._slot_waiter
            finally:
                self._slot_waiter = None

    async def wait_all_closed(self) -> None:
        """Return once no connection is open."""
        while self.connections:
            self._idle_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._idle_waiter
            finally:
                self._idle_waiter = None


class LineConnection(asyncio.Protocol):
    """Serves one client: framing, batching to the owner, ordered replies, timers."""

    def __init__(self, hub: Hub, loop: asyncio.AbstractEventLoop) -> None:
        self._hub = hub
        self._loop = loop
        self._mailbox = hub.owner.mailbox
        self._idle_s = hub.config.idle_timeout
        self._request_timeout_s = hub.config.request_timeout
        self._decoder = RequestDecoder()
        self._pending: deque[Batch] = deque()
        self._transport: asyncio.Transport | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._request_timer: asyncio.TimerHandle | None = None
        self._reschedule: Callable[[asyncio.TimerHandle, float], bool | None] | None = getattr(
            loop, "reschedule", None
        )
        self._closed = False
        self._draining = False
        self._opened_at = 0.0
        self._peer = "?"
        self.requests = 0

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._opened_at = now = self._loop.time()
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._idle = self._loop.call_at(now + self._idle_s, self._on_idle)
        self._hub.opened(self)
        event(logger, logging.INFO, "connection_open", peer=self._peer)

    def data_received(self, data: bytes) -> None:
        requests = self._decoder.feed(data)
        if not requests or self._draining:
            return
        loop = self._loop
        now = loop.time()
        self._push_idle(now)
        self.requests += len(requests)
        batch = Batch(requests, self, now + self._request_timeout_s)
        pending = self._pending
        mailbox = self._mailbox
        room = mailbox.room()
        if len(requests) > room:
            refused = batch
            if room > 0:
                batch = Batch(requests[:room], self, batch.deadline)
                refused = Batch(requests[room:], self, batch.deadline)
                self._send(batch)
            refused.replies = [BUSY] * len(refused.requests)
            self._hub.shed += len(refused.requests)
            self._hub.count_refused(refused, "shed")
            pending.append(refused)
            self.flush()
            return
        self._send(batch)

    def _send(self, batch: Batch) -> None:
        self._pending.append(batch)
        try:
            self._mailbox.put_nowait(batch)
        except UnavailableError:
            batch.replies = [UNAVAILABLE] * len(batch.requests)
            self._hub.unavailable += len(batch.requests)
            self._hub.count_refused(batch, "unavailable")
            self.flush()
            return
        if self._request_timer is None:
            self._request_timer = self._loop.call_at(batch.deadline, self._on_request_timeout)

    def eof_received(self) -> bool:
        # The client finished sending (e.g. ``nc -N``); it still gets every reply it is owed,
        # so keep the transport open for writing until the pending batches are answered.
        self._draining = True
        if not self._pending and self._transport is not None:
            self._transport.close()
        return True

    def pause_writing(self) -> None:
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None and not self._draining:
            self._transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        for timer in (self._idle, self._request_timer):
            if timer is not None:
                timer.cancel()
        self._idle = self._request_timer = None
        self._hub.closed(self)
        event(
            logger,
            logging.INFO,
            "connection_close",
            peer=self._peer,
            duration_s=f"{self._loop.time() - self._opened_at:.3f}",
            requests=self.requests,
            **({"error": exc} if exc is not None else {}),
        )

    # -- replies -------------------------------------------------------------------------

    def flush(self) -> None:
        """Write, in one syscall, the replies of every answered batch at the head of the line."""
        pending = self._pending
        if not pending or pending[0].replies is None:
            return
        out: list[bytes] = []
        while pending and pending[0].replies is not None:
            out += pending.popleft().replies or ()
        if self._closed or self._transport is None:
            return
        self._transport.write(b"".join(out))
        if self._draining and not pending:
            self._transport.close()

    # -- timers --------------------------------------------------------------------------

    def _push_idle(self, now: float) -> None:
        idle = self._idle
        if idle is None:
            return
        when = now + self._idle_s
        # reschedule() moves the armed timer in place and returns False if it was no longer
        # armed; then (and on loops without it) a fresh timer replaces the old one.
        if self._reschedule is None or self._reschedule(idle, when) is False:
            idle.cancel()
            self._idle = self._loop.call_at(when, self._on_idle)

    def _on_idle(self) -> None:
        self._idle = None
        event(logger, logging.INFO, "connection_idle", peer=self._peer, idle_s=self._idle_s)
        if self._transport is not None:
            self._transport.close()

    def _on_request_timeout(self) -> None:
        self._request_timer = None
        now = self._loop.time()
        expired = 0
        for batch in self._pending:
            if batch.deadline > now:
                break
            if batch.replies is None:
                batch.replies = [BUSY] * len(batch.requests)
                expired += len(batch.requests)
                self._hub.count_refused(batch, "timeout")
        self._hub.timeouts += expired
        for batch in self._pending:
            if batch.replies is None:
                self._request_timer = self._loop.call_at(batch.deadline, self._on_request_timeout)
                break
        self.flush()

    # -- shutdown ------------------------------------------------------------------------

    def begin_drain(self) -> None:
        """Take no more requests; close once everything already received is answered."""
        self._draining = True
        self._decoder.discard_partial()
        if self._transport is None:
            return
        self._transport.pause_reading()
        if not self._pending:
            self._transport.close()

    def abort(self) -> None:
        """Drop the connection now (grace period over, or the owner died)."""
        if self._transport is not None:
            self._transport.abort()
