"""What every connection of one server shares: the owner, the settings, the counters, and the
set of open connections (which admission control and shutdown look at)."""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from dataclasses import dataclass
from typing import TYPE_CHECKING

from minidb.server._config import ServerConfig
from minidb.store import Batch, StoreOwner

if TYPE_CHECKING:
    from minidb.server._connection import Connection


LATENCY_BOUNDS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)
"""Upper bounds of the request latency histogram's buckets, in seconds: from a pipelined
read's 100 us to past the default ``--request-timeout`` (2 s)."""


@dataclass(frozen=True, slots=True)
class HubStatistics:
    """The connections' figures since start."""

    connections: int
    accepted: int
    shed: int
    """Requests answered ``ERR busy`` after waiting ``--request-timeout`` for mailbox room."""
    timeouts: int
    """Requests answered ``ERR busy`` after waiting ``--request-timeout`` in the mailbox."""
    unavailable: int
    errors: int
    """Connections dropped because their own handling raised (logged ``connection_error``)."""
    output_dropped: int
    """Connections dropped for holding more unsent replies than ``--output-hard-limit``."""
    waiting_for_room: int
    """Connections queued for mailbox room now."""
    latency_buckets: tuple[int, ...]
    """Requests answered per ``LATENCY_BOUNDS_S`` bucket (not cumulative; the last one is
    "more"), by the time from their batch's send to its replies' write."""
    latency_sum_s: float


class Hub:
    """The state shared by one server's connections."""

    def __init__(self, config: ServerConfig, owner: StoreOwner) -> None:
        self.config = config
        self.owner = owner
        self.connections: set[Connection] = set()
        self.shed = 0
        self.timeouts = 0
        self.unavailable = 0
        self.errors = 0
        self.output_dropped = 0
        self.accepted = 0
        self.rejected_verbs: dict[tuple[str, str], int] = {}
        self._latency = [0] * (len(LATENCY_BOUNDS_S) + 1)
        self._latency_sum = 0.0
        self._slot_waiters: set[asyncio.Future[None]] = set()
        self._idle_waiter: asyncio.Future[None] | None = None

    def count_refused(self, batch: Batch, outcome: str) -> None:
        """Count each request of a refused batch under its verb (a rare, slow path)."""
        for request in batch.requests:
            verb = getattr(request, "verb", None)  # a RESP request names its command
            if verb is None:
                verb = type(request).__name__.upper().replace("DELETE", "DEL")
            key = (verb, outcome)
            self.rejected_verbs[key] = self.rejected_verbs.get(key, 0) + 1

    def observe_latency(self, seconds: float, requests: int) -> None:
        """``requests`` answered ``seconds`` after they were sent (one batch: its requests
        share one send and one write, so they are counted together, once per batch)."""
        self._latency[bisect_left(LATENCY_BOUNDS_S, seconds)] += requests
        self._latency_sum += seconds * requests

    @property
    def latency_buckets(self) -> tuple[int, ...]:
        # Requests answered in the callback that read them (the owner's ``inline``) waited
        # for nothing: they are in the first bucket, counted where they are served.
        buckets = list(self._latency)
        buckets[0] += self.owner.inline
        return tuple(buckets)

    @property
    def latency_sum(self) -> float:
        return self._latency_sum

    def opened(self, conn: Connection) -> None:
        self.connections.add(conn)
        self.accepted += 1

    def closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        # Every listener waiting for a slot is woken (the limit is shared by all listeners);
        # each checks again, and those that find no room wait again.
        for waiter in self._slot_waiters:
            if not waiter.done():
                waiter.set_result(None)
        idle = self._idle_waiter
        if idle is not None and not self.connections and not idle.done():
            idle.set_result(None)

    async def wait_for_slot(self) -> None:
        """Return once fewer than ``max_connections`` connections are open (of every
        listener: one limit for all of them)."""
        while len(self.connections) >= self.config.max_connections:
            waiter = asyncio.get_running_loop().create_future()
            self._slot_waiters.add(waiter)
            try:
                await waiter
            finally:
                self._slot_waiters.discard(waiter)

    async def wait_all_closed(self) -> None:
        """Return once no connection is open."""
        while self.connections:
            self._idle_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._idle_waiter
            finally:
                self._idle_waiter = None

    def statistics(self) -> HubStatistics:
        return HubStatistics(
            connections=len(self.connections),
            accepted=self.accepted,
            shed=self.shed,
            timeouts=self.timeouts,
            unavailable=self.unavailable,
            errors=self.errors,
            output_dropped=self.output_dropped,
            waiting_for_room=self.owner.mailbox.waiting_for_room,
            latency_buckets=self.latency_buckets,
            latency_sum_s=self._latency_sum,
        )
