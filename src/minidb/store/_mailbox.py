"""The data owner's bounded mailbox: batches of requests in, capacity counted in requests.

A connection sends everything one read delivered as one ``Batch``; the owner takes everything
waiting per wakeup (up to a bound). Capacity is counted in requests rather than messages
because requests are what costs the owner time: a mailbox of 4096 holds 4096 requests whether
they came as one pipelined burst or from 4096 connections. A sender never waits for room:
``room()`` says how many requests fit now, and what does not fit is refused at once
(``ERR busy``), because waiting for room would only move the queue into the connections.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

from minidb.errors import UnavailableError
from minidb.protocol import Request


class ReplySink(Protocol):
    """Whoever sent a batch: told once per owner wakeup that some of its replies are ready."""

    def flush(self) -> None: ...


class Batch:
    """Requests from one read of one connection, and (once answered) their replies in order."""

    __slots__ = ("deadline", "replies", "requests", "sink")

    def __init__(self, requests: list[Request], sink: ReplySink, deadline: float) -> None:
        self.requests = requests
        self.sink = sink
        self.deadline = deadline
        # None until answered. Whoever answers first wins: the owner, or the connection that
        # gave up waiting (request timeout) or was refused (busy / unavailable).
        self.replies: list[bytes] | None = None


class Mailbox:
    """A FIFO of batches holding at most ``capacity`` requests, read by one owner task."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("mailbox capacity must be at least 1")
        self.capacity = capacity
        self._batches: deque[Batch] = deque()
        self._queued = 0
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False

    def __len__(self) -> int:
        """Requests waiting."""
        return self._queued

    @property
    def closed(self) -> bool:
        return self._closed

    def room(self) -> int:
        """How many more requests fit right now."""
        return self.capacity - self._queued

    def put_nowait(self, batch: Batch) -> None:
        """Queue ``batch`` (the caller checked ``room()``); raise if the owner is gone."""
        if self._closed:
            raise UnavailableError("store unavailable")
        self._batches.append(batch)
        self._queued += len(batch.requests)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self, limit: int) -> list[Batch]:
        """Wait for work; return every batch waiting, up to ``limit`` requests (at least one
        batch). Returns ``[]`` once the mailbox is closed and empty."""
        while not self._batches:
            if self._closed:
                return []
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        taken: list[Batch] = []
        count = 0
        batches = self._batches
        while batches and (count < limit or not taken):
            batch = batches.popleft()
            count += len(batch.requests)
            taken.append(batch)
        self._queued -= count
        return taken

    def take(self, limit: int) -> list[Batch]:
        """Without waiting: remove and return whole batches queued now, up to ``limit``
        requests (none if the first batch alone is bigger)."""
        taken: list[Batch] = []
        count = 0
        batches = self._batches
        while batches and count + len(batches[0].requests) <= limit:
            batch = batches.popleft()
            count += len(batch.requests)
            taken.append(batch)
        self._queued -= count
        return taken

    def close(self) -> None:
        """Refuse further batches; the owner still drains what is queued, then stops."""
        self._closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take_all(self) -> list[Batch]:
        """Remove and return everything queued (used when the owner died)."""
        taken = list(self._batches)
        self._batches.clear()
        self._queued = 0
        return taken
