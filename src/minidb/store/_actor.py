"""The data owner: the one task that holds ``StoreState``, fed through the bounded mailbox.

Nothing else touches the data, so there is no lock around it. Per wakeup the owner takes every
batch waiting (up to ``max_drain`` requests) and commits them as a group:

1. apply every request to the state, noting each changing write in a ``Journal``;
2. ``append`` the writes' records to the commit log and ``sync`` once (nothing if the group
   only read);
3. only then hand each batch its replies and ask each connection to flush, once.

The store is never ahead of the log. We keep an undo list rather than applying writes only
after the sync: requests later in the same group must see the earlier writes (a pipelined
``SET`` then ``GET`` answers the new value), and an undo list gives that with one tuple per
write, where deferring the writes would need a second lookup layer on every read. If
``append`` or ``sync`` fails, the group's writes are rolled back newest first, every write of
the group is answered ``ERR not logged: <reason>``, its reads are answered again from the
rolled-back state (so no reply ever shows a value that is not durable), and the owner turns
read-only for good: after a failed fsync the kernel may have dropped the dirty pages, so a later
successful fsync proves nothing (fsyncgate). Reads keep being served; a restart replays the log.

Failpoints: ``store.owner`` is hit once per group (``crash-after(N)`` kills the owner after N
groups); ``store.apply`` delays each group on the loop clock.
"""

from __future__ import annotations

import asyncio
import os
from bisect import bisect_left
from dataclasses import dataclass

from minidb import _failpoints
from minidb.errors import WalError
from minidb.protocol import UNAVAILABLE, WRITES, Request, Set, error_reply
from minidb.store._log import CommitLog
from minidb.store._mailbox import Batch, Mailbox, ReplySink
from minidb.store._state import Journal, StoreState

DEFAULT_MAX_DRAIN = 4096
"""Requests the owner takes per wakeup at most, so one group's latency stays bounded."""

BATCH_SIZE_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
"""Upper bounds of the batch-size histogram buckets, in requests per group."""


@dataclass(frozen=True, slots=True)
class OwnerStatistics:
    """What the owner has done since start."""

    groups: int
    requests: int
    appends: int
    syncs: int
    checkpoints: int
    not_logged: int
    read_only_refusals: int
    refused: dict[tuple[str, str], int]
    """(verb, outcome) -> writes refused: outcome ``not_logged`` or ``read_only``."""
    mailbox_depth: int
    mailbox_capacity: int
    read_only: str | None
    batch_size_buckets: tuple[int, ...]
    """Groups per ``BATCH_SIZE_BOUNDS`` bucket (not cumulative; last one is "more")."""
    batch_size_sum: int


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    return str(exc) or type(exc).__name__


class StoreOwner:
    """Owns a ``StoreState`` and a ``CommitLog``; ``run()`` is the task body."""

    def __init__(
        self,
        state: StoreState,
        log: CommitLog,
        *,
        mailbox: int,
        max_drain: int = DEFAULT_MAX_DRAIN,
    ) -> None:
        self.state = state
        self.log = log
        self.mailbox = Mailbox(mailbox)
        self.max_drain = max_drain
        self._journal = Journal()
        self._read_only: str | None = None
        self._groups = self._requests = self._appends = self._syncs = self._checkpoints = 0
        self._not_logged = self._read_only_refusals = 0
        self._refused: dict[tuple[str, str], int] = {}
        self._sizes = [0] * (len(BATCH_SIZE_BOUNDS) + 1)
        self._size_sum = 0

    # -- the task ------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the mailbox until it is closed and drained; die loudly on any error."""
        batches: list[Batch] = []
        try:
            while True:
                batches = await self.mailbox.get(self.max_drain)
                if not batches:
                    return
                if _failpoints.ACTIVE:
                    _failpoints.hit("store.owner")
                    delay = _failpoints.hit("store.apply")
                    if delay:
                        await asyncio.sleep(delay)
                self.commit(batches)
                batches = []
        except BaseException:
            # The data dies with this task: whoever still waits learns it now, and the
            # mailbox refuses everything from here on.
            self.mailbox.close()
            self._refuse(batches + self.mailbox.take_all(), UNAVAILABLE)
            raise

    def close(self) -> None:
        """Stop taking new batches; ``run()`` returns once the queued ones are committed."""
        self.mailbox.close()

    # -- one group -----------------------------------------------------------------------

    def commit(self, batches: list[Batch]) -> None:
        """Apply, log, sync and answer one group of batches (see the module docstring)."""
        journal = self._journal
        if self._read_only is None:
            execute = self.state.execute
            results = [[execute(r, journal) for r in b.requests] for b in batches]
        else:
            results = [[self._execute_read_only(r) for r in b.requests] for b in batches]
        if journal.records:
            try:
                log = self.log
                for record in journal.records:
                    log.append(record)
                log.sync()
            except (OSError, WalError) as exc:
                results = self._fail_group(batches, _reason(exc))
            else:
                self._appends += len(journal.records)
                self._syncs += 1
                journal.clear()
                self._maybe_checkpoint()
        count = 0
        for batch, replies in zip(batches, results, strict=True):
            count += len(replies)
            if batch.replies is None:
                batch.replies = replies
        self._groups += 1
        self._requests += count
        self._size_sum += count
        self._sizes[bisect_left(BATCH_SIZE_BOUNDS, count)] += 1
        # One flush per connection per group: each connection writes its replies once.
        for sink in dict.fromkeys(b.sink for b in batches):
            sink.flush()

    def _execute_read_only(self, request: Request) -> bytes:
        if isinstance(request, WRITES):
            self._read_only_refusals += 1
            self._count_refused(request, "read_only")
            return error_reply("read-only: " + (self._read_only or ""))
        return self.state.execute(request, None)

    def _fail_group(self, batches: list[Batch], reason: str) -> list[list[bytes]]:
        self.state.rollback(self._journal)
        self._read_only = reason
        not_logged = error_reply("not logged: " + reason)
        results = []
        for batch in batches:
            replies = []
            for request in batch.requests:
                if isinstance(request, WRITES):
                    self._not_logged += 1
                    self._count_refused(request, "not_logged")
                    replies.append(not_logged)
                else:
                    replies.append(self.state.execute(request, None))
            results.append(replies)
        return results

    def _count_refused(self, request: Request, outcome: str) -> None:
        key = ("SET" if isinstance(request, Set) else "DEL", outcome)
        self._refused[key] = self._refused.get(key, 0) + 1

    def _maybe_checkpoint(self) -> None:
        try:
            if self.log.wants_checkpoint():
                self.log.checkpoint(self.state.records())
                self._checkpoints += 1
        except (OSError, WalError) as exc:
            # The group was already durable; what failed is the log's future, so stop writes.
            self._read_only = _reason(exc)

    def _refuse(self, batches: list[Batch], reply: bytes) -> None:
        for batch in batches:
            if batch.replies is None:
                batch.replies = [reply] * len(batch.requests)
        sinks: dict[ReplySink, None] = dict.fromkeys(b.sink for b in batches)
        for sink in sinks:
            sink.flush()

    # -- observing -----------------------------------------------------------------------

    @property
    def read_only(self) -> str | None:
        """Why the store refuses writes, or None while it takes them."""
        return self._read_only

    def statistics(self) -> OwnerStatistics:
        return OwnerStatistics(
            groups=self._groups,
            requests=self._requests,
            appends=self._appends,
            syncs=self._syncs,
            checkpoints=self._checkpoints,
            not_logged=self._not_logged,
            read_only_refusals=self._read_only_refusals,
            refused=dict(self._refused),
            mailbox_depth=len(self.mailbox),
            mailbox_capacity=self.mailbox.capacity,
            read_only=self._read_only,
            batch_size_buckets=tuple(self._sizes),
            batch_size_sum=self._size_sum,
        )
