"""The data owner's bounded mailbox: batches of requests in, capacity counted in their weight.

A connection sends what one read delivered as one ``Batch`` (as many requests as it may have
in flight); the owner takes everything waiting per wakeup (up to a bound). Capacity is counted
in requests rather than messages because requests are what costs the owner time: a mailbox of
4096 holds 4096 requests whether they came as one pipelined burst or from 4096 connections. A
batch weighs its ``size``: one per request, except that a line-protocol ``BULK`` frame of ``n``
rows weighs ``n``, so the bound is in rows, not frames. Only a batch whose one frame is heavier
than the room left may overshoot (a connection puts such a frame only as the first request of
a take, see ``server._connection``): the mailbox holds at most ``capacity + MAX_BULK_ROWS``.

A sender never blocks and is never refused for lack of room: ``room_for(sender, quiet=...)``
says how many requests it may put now, and a sender that gets 0 queues for room with
``wait_room`` and stops reading its client (backpressure) until ``room_available()`` is called
on it. Theory of operation, which is what shares the owner fairly:

- senders are *quiet* (requests from a fresh read: a client within its share, such as one
  request at a time or a short pipeline) or *busy* (requests left over from a read that did not
  fit: a flood). The last ``capacity // QUIET_RESERVE_FRACTION`` places are reserved for quiet
  senders: a flood refilling the mailbox right after each owner wakeup cannot take them, so a
  quiet client's request still goes into the very next group;
- while anyone waits, ``room_for`` is 0 for newcomers of the same class or lower, so nobody
  overtakes the queue; room the owner frees by taking batches is handed out there and then, in
  queue order, quiet waiters first, so between calls either nobody waits or there is no room;
- each sender served takes what it may have in flight (its own bound), and queues again at the
  back for the rest: round robin with a quantum of one connection's in-flight bound.

Protocols. A batch's ``executor`` says how the owner runs its requests: None for the line
protocol (``StoreState.execute``), or an ``Executor`` that another protocol's connection passes
along with its requests (whatever objects it parsed them into). The owner knows nothing of
that protocol; it only needs these three methods to run, log, refuse and roll back its
requests in order with everyone else's, in the same groups.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from minidb.errors import UnavailableError

if TYPE_CHECKING:
    from minidb.store._journal import OpJournal
    from minidb.store._state import StoreState

QUIET_RESERVE_FRACTION = 8
"""1/8 of the mailbox (512 of the default 4096 requests) is kept for quiet senders."""


UNBOUNDED_OUTPUT = 1 << 62
"""``output_room()`` of a sink that holds no replies for anyone (a replica's follower, a
closing connection's last request): the owner never defers its batches."""


class ReplySink(Protocol):
    """Whoever sent a batch: told once per owner wakeup that some of its replies are ready,
    and asked before each batch how many more bytes of replies it may be given."""

    def flush(self) -> None: ...

    def output_room(self) -> int:
        """Bytes of replies the owner may still produce for this sink (negative: none) before
        it holds more than it should (a connection: its unsent output over the soft limit).
        The owner runs a batch only while this is not negative, counting the replies it built
        in the current group, and hands back whatever it did not run (``Batch.leftover``)."""
        ...


class TurnSink(ReplySink, Protocol):
    """A sink that runs requests in its own callback as part of the loop turn's group
    (``StoreOwner.run_in_turn``): handed their replies once the group is logged."""

    def turn_answered(self, replies: bytes) -> None: ...


class RoomWaiter(Protocol):
    """A sender queued for room: called when some is free for it (from inside the owner's
    ``get``/``take``, so it must never raise); ``room_for`` is positive for it meanwhile."""

    def room_available(self) -> None: ...


class Executor(Protocol):
    """How the owner runs the requests of another protocol than the line protocol's.

    The owner calls, per request of a batch, in order: ``execute(state, request, journal,
    now_ms)``, with the owner's journal, or None when the store is read-only (the executor
    then refuses every write itself with ``refusal(request, "read-only: <reason>")``). If the
    group's log append or sync fails, the group is rolled back and each request is answered
    again: ``refusal(request, "not logged: <reason>")`` if ``is_write(request)``, else
    ``execute(state, request, None, now_ms)`` from the rolled-back state.
    """

    def execute(
        self, state: StoreState, request: Any, journal: OpJournal | None, now_ms: int,
        room: int = UNBOUNDED_OUTPUT,
    ) -> bytes:
        """Run ``request`` on ``state.keyspace`` at ``now_ms`` (the group's wall-clock ms),
        noting its changes in ``journal`` as closed groups; the reply in wire form. A
        request that stands for several (a run of commands) runs only as far as ``room``
        bytes of replies go, as the owner does between requests (see ``remainder``)."""
        ...

    def remainder(self, request: Any) -> Any | None:
        """After an ``execute`` whose reply took the room below zero: the part of
        ``request`` it left unrun (a request of its own, handed back to the sender), or
        None."""
        ...

    def expand(self, request: Any) -> list[Any]:
        """The single requests ``request`` stands for (itself, for most): the owner answers
        each on its own when writes are refused."""
        ...

    def is_write(self, request: Any) -> bool:
        """Whether ``request`` may change the keyspace (so needs the log)."""
        ...

    def refusal(self, request: Any, reason: str) -> bytes:
        """The reply, in wire form, refusing ``request`` for ``reason``."""
        ...


# An executor's ``execute`` may also return ``store._blocking.Blocked`` (empty bytes carrying
# a ``Waiter``) for a request that blocks: the owner then holds that batch's replies until
# the wait ends, and hands back what the batch had after it (see ``StoreOwner._block``).


class Batch:
    """Requests one connection sent together (at most its in-flight bound), the ``Executor``
    that runs them (None: line-protocol requests), and (once answered) their replies in
    order."""

    __slots__ = (
        "applied", "deadline", "executor", "held", "leftover", "replies", "requests", "sink",
        "size",
    )

    def __init__(
        self,
        requests: list[Any],
        sink: ReplySink,
        deadline: float,
        *,
        executor: Executor | None = None,
        size: int | None = None,
    ) -> None:
        # Line-protocol ``Request``s, or whatever ``executor`` understands.
        self.requests = requests
        self.size = len(requests) if size is None else size
        """The batch's weight in the mailbox's capacity and the owner's drain bound: one per
        request, a frame's rows for a ``Bulk``."""
        self.sink = sink
        self.deadline = deadline
        self.executor = executor
        # None until answered. Whoever answers first wins: the owner, or the connection that
        # gave up waiting (request timeout) or was refused (busy / unavailable).
        self.replies: list[bytes] | None = None
        self.applied = False
        """The owner ran it (``StoreOwner._apply``): its replies are the owner's, after the
        group's sync, whatever the owner awaits before that (the gather polls, the
        ``commit_delay``, a sync in a thread), and the request timer leaves it alone. Those
        waits are the owner's choice, not an overload, and the request may have written."""
        self.held = False
        """Its last request blocked (BLPOP...): the owner answers it later, when the wait
        ends (``store._blocking``), not with the group that ran it."""
        self.leftover: list[Any] | None = None
        """The requests the owner did not run because the sink had no output room left (see
        ``ReplySink.output_room``), in order; ``requests`` is then cut to the ones it ran, and
        ``replies`` answers those. The sender sends the leftover again once it has room."""


class Mailbox:
    """A FIFO of batches holding at most ``capacity`` requests (batch ``size``s), read by one
    owner task."""

    __slots__ = ("__dict__", "queued")
    # ``queued`` is read at its offset by a RESP connection's C data_received, once per read.

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("mailbox capacity must be at least 1")
        self.capacity = capacity
        self.reserve = capacity // QUIET_RESERVE_FRACTION
        """Places only quiet senders may fill."""
        self._batches: deque[Batch] = deque()
        self.queued = 0
        """Requests waiting (``len``; read as the attribute on the hot path: no call)."""
        self._waiter: asyncio.Future[None] | None = None
        self._woken = False
        self._closed = False
        # The room queue (see the module docstring): dicts as ordered sets, so a closing
        # connection leaves in O(1).
        self._quiet: dict[RoomWaiter, None] = {}
        self._busy: dict[RoomWaiter, None] = {}
        self._serving: RoomWaiter | None = None
        self._handing_out = False  # guards against re-entry from a sender served

    def __len__(self) -> int:
        """Requests waiting."""
        return self.queued

    @property
    def closed(self) -> bool:
        return self._closed

    def room(self) -> int:
        """How many more requests fit right now."""
        return self.capacity - self.queued

    def room_for(self, sender: object, quiet: bool) -> int:
        """How many requests ``sender`` may put now (may be negative: none): nothing while
        others queue for room ahead of it. Once closed, at least 1, so that senders learn it
        from ``put_nowait``."""
        if self._closed:
            return max(1, self.capacity - self.queued)
        if sender is not self._serving and (self._quiet or (self._busy and not quiet)):
            return 0
        if quiet:
            return self.capacity - self.queued
        return self.capacity - self.reserve - self.queued

    def wait_room(self, sender: RoomWaiter, *, quiet: bool) -> None:
        """Queue ``sender`` for room; ``quiet`` ones are served first."""
        (self._quiet if quiet else self._busy)[sender] = None

    def forget(self, sender: RoomWaiter) -> None:
        """Take ``sender`` out of the room queue (it closed)."""
        self._quiet.pop(sender, None)
        self._busy.pop(sender, None)

    @property
    def waiting_for_room(self) -> int:
        """Senders queued for room."""
        return len(self._quiet) + len(self._busy)

    def _hand_out(self) -> None:
        """Give the free room to queued senders, in queue order. A sender served may queue
        again (at the back) for what did not fit; it is not re-entered meanwhile."""
        if self._handing_out or not (self._quiet or self._busy):
            return
        self._handing_out = True
        try:
            while True:
                if self._quiet and (self._closed or self.queued < self.capacity):
                    queue = self._quiet
                elif self._busy and (
                    self._closed or self.queued < self.capacity - self.reserve
                ):
                    queue = self._busy
                else:
                    break
                sender = next(iter(queue))
                del queue[sender]
                self._serving = sender
                sender.room_available()
        finally:
            self._serving = None
            self._handing_out = False

    def put_nowait(self, batch: Batch) -> None:
        """Queue ``batch`` (the caller checked ``room_for()``); raise if the owner is gone."""
        if self._closed:
            raise UnavailableError("store unavailable")
        self._batches.append(batch)
        self.queued += batch.size
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def wake(self) -> None:
        """Make the owner's pending (or next) ``get`` return even with nothing queued: it has
        work of its own (an expiry timer fired)."""
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self, limit: int) -> list[Batch]:
        """Wait for work; return every batch waiting, up to ``limit`` requests (at least one
        batch). Returns ``[]`` once the mailbox is closed and empty, or after ``wake()``."""
        while not self._batches:
            if self._closed or self._woken:
                self._woken = False
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
            count += batch.size
            taken.append(batch)
        self.queued -= count
        if self._quiet or self._busy:
            self._hand_out()
        return taken

    def take(self, limit: int) -> list[Batch]:
        """Without waiting: remove and return whole batches queued now, up to ``limit``
        requests (none if the first batch alone is bigger)."""
        taken: list[Batch] = []
        count = 0
        batches = self._batches
        while batches and count + batches[0].size <= limit:
            batch = batches.popleft()
            count += batch.size
            taken.append(batch)
        self.queued -= count
        if taken and (self._quiet or self._busy):
            self._hand_out()
        return taken

    def close(self) -> None:
        """Refuse further batches; the owner still drains what is queued, then stops."""
        self._closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self._hand_out()  # whoever waits for room learns it is gone

    def take_all(self) -> list[Batch]:
        """Remove and return everything queued (used when the owner died)."""
        taken = list(self._batches)
        self._batches.clear()
        self.queued = 0
        if self._quiet or self._busy:
            self._hand_out()
        return taken
