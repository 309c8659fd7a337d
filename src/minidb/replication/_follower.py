"""A read replica's follower: tail a primary's shipped log and feed it, in order, to the owner.

``minidb serve --replica-of URL`` restores the newest state (``_restore``), opens it as any data
directory, starts its ``StoreOwner`` in the replica role, and runs one ``Follower``. Every
``poll_interval`` seconds (about the primary's ship interval) the follower:

1. reads ``current`` (one GET): which generation ships now;
2. when that changed (a restart, a takeover, a promoted replica), reads the ``generations/``
   records and takes the route from the generation it followed to the current one along the
   lineage; an older generation's chunks count only up to its child's start time (after that
   they are a fenced server's uploads and belong to no history);
3. lists each generation's chunks after the last key it saw (one LIST with ``start_after``,
   so an idle poll costs one GET and one LIST), and for every chunk holding records from its
   position on: downloads it, checks its size and checksum against its name and every
   record's checksums (``fetch_chunk``, ``chunk_records``), decodes the records and hands them
   to the owner as ``ShippedRecord`` batches of a ``FollowExecutor``, awaiting each: the owner
   applies them, logs them to the replica's own WAL one for one and syncs, in its ordinary
   group commit. The replica's position is its log's next sequence number, so a restart
   resumes where it stopped.

Failure handling. A store error (outage, 503, timeout) marks the link down, is counted and
retried with a jittered backoff up to ``RETRY_MAX_S``; the replica keeps serving what it has,
and its lag grows. A missing range at the newest end is waited for (chunks may become visible
out of order); the lag shows it. A damaged object, a chunk whose records do not continue the
replica's, or a new generation that does not reach back to its position refuses: the follower
stops for good with the reason in its statistics and the log (``replica_refused``), and the
replica keeps serving reads of the state it had. A failure of the replica's own log stops it
too (the owner has turned read-only).

Lag, as reported: ``lag_records`` is the newest record listed minus the newest applied;
``lag_seconds`` is, while behind, the age of the oldest chunk not yet applied (its records were
durable on the primary that long ago), and once caught up, the age of the last successful poll.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import random
from collections.abc import Callable

from minidb.errors import UnavailableError
from minidb.objstore import ObjectStore, ObjectStoreError
from minidb.replication._errors import DamagedObject, RestoreError
from minidb.replication._layout import (
    GENERATIONS_PREFIX,
    Catalog,
    ChunkObject,
    SnapshotObject,
    parse_key,
)
from minidb.replication._restore import chunk_records, current_pointer, fetch_chunk
from minidb.store import APPLIED, UNBOUNDED_OUTPUT, Batch, FollowExecutor, ShippedRecord, StoreOwner
from minidb.store._plainrun import wall_clock_ms
from minidb.wal import PayloadError, decode_ops

logger = logging.getLogger("minidb.replication")

DEFAULT_POLL_INTERVAL_S = 1.0
"""Seconds between polls of the store (the shipper's default ship interval)."""
APPLY_BATCH_RECORDS = 1024
"""Shipped records handed to the owner per batch at most (bounds one group's latency)."""
RETRY_BASE_S = 0.5
"""First backoff after a failed poll, in seconds; doubled per failure, jittered."""
RETRY_MAX_S = 30.0
"""Longest backoff between failed polls, in seconds."""


class FollowState(enum.Enum):
    STARTING = "starting"
    FOLLOWING = "following"  # the last poll succeeded
    DOWN = "down"  # the last poll failed; retrying
    REFUSED = "refused"  # stopped for good: damage, a gap, a diverged generation, own log
    STOPPED = "stopped"  # stopped on request (promote, shutdown)


@dataclasses.dataclass(frozen=True, slots=True)
class FollowerStatistics:
    """A follower's position and counters (``INFO replication``, the replica metrics)."""

    source: str
    state: FollowState
    generation: str | None
    applied_seq: int
    """The newest record applied (-1: none)."""
    shipped_seq: int
    """The newest record seen in a listing (at least ``applied_seq``)."""
    lag_records: int
    lag_seconds: float
    last_contact_s: float | None
    """Seconds since the last successful poll (None: none yet)."""
    polls: int
    poll_failures: int
    chunks_applied: int
    records_applied: int
    bytes_fetched: int
    problem: str | None


class _Applied:
    """The reply sink of one follower batch: resolves a future when the owner answered."""

    def __init__(self, future: asyncio.Future[None]) -> None:
        self._future = future

    def flush(self) -> None:
        if not self._future.done():
            self._future.set_result(None)

    def output_room(self) -> int:
        return UNBOUNDED_OUTPUT  # a record's replies are read by nobody


class _Refusal(Exception):
    """The follower must stop for good, for the reason given."""


class Follower:
    """Tails ``store`` and applies what it finds through ``owner`` (see the module docstring).

    ``next_seq`` is the replica's position (its log's next sequence number), ``generation``
    the generation its state came from (None: unknown, e.g. after a restart; the lineage is
    then searched for its position), ``after_key`` the last chunk key already applied in it.
    """

    def __init__(
        self,
        store: ObjectStore,
        owner: StoreOwner,
        *,
        source: str,
        next_seq: int,
        generation: str | None = None,
        after_key: str | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL_S,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.store = store
        self.owner = owner
        self.source = source
        self.poll_interval = poll_interval
        self._clock_ms = clock_ms
        self._executor = FollowExecutor()
        self._next = next_seq
        self._generation = generation
        self._cursor: dict[str, str | None] = {generation: after_key} if generation else {}
        self._route: list[tuple[str, int | None]] = []
        self._state = FollowState.STARTING
        self._shipped = next_seq - 1
        self._oldest_unapplied_ms: int | None = None
        self._contact_ms: int | None = None
        self._polls = self._failures = self._chunks = self._records = self._bytes = 0
        self._problem: str | None = None

    # -- the task --------------------------------------------------------------------------

    async def run(self) -> None:
        """Poll until cancelled or refused; never raises for a store or data problem."""
        failures = 0
        try:
            while True:
                try:
                    await self.poll_once()
                except ObjectStoreError as exc:
                    failures += 1
                    self._failures += 1
                    if self._state is not FollowState.DOWN:
                        logger.warning("replica_link_down source=%s error=%r", self.source, exc)
                    self._state, self._problem = FollowState.DOWN, str(exc)
                    delay = min(RETRY_MAX_S, RETRY_BASE_S * 2 ** min(failures, 16))
                    await asyncio.sleep(random.uniform(delay / 2, delay))
                    continue
                except (_Refusal, RestoreError) as exc:
                    self._state, self._problem = FollowState.REFUSED, str(exc)
                    logger.error("replica_refused source=%s reason=%r", self.source, str(exc))
                    return
                if self._state is FollowState.DOWN:
                    logger.warning("replica_link_up source=%s", self.source)
                failures = 0
                self._state, self._problem = FollowState.FOLLOWING, None
                await asyncio.sleep(self.poll_interval)
        finally:
            if self._state not in (FollowState.REFUSED,):
                self._state = FollowState.STOPPED

    # -- one poll --------------------------------------------------------------------------

    async def poll_once(self) -> None:
        """Read the pointer, list what is new, apply it in order."""
        self._polls += 1
        current = (await current_pointer(self.store)).generation
        if not self._route or self._route[-1][0] != current:
            await self._plan_route(current)
        polled_ms = self._clock_ms()
        self._oldest_unapplied_ms = None
        for index, (gen, until) in enumerate(self._route):
            newest = index == len(self._route) - 1
            await self._follow(gen, until, newest)
        # Older generations of the route have nothing more to give: their chunks after the
        # child's start are not history, and those before it were all listed.
        self._route = self._route[-1:]
        self._generation = current
        self._contact_ms = polled_ms

    async def _plan_route(self, current: str) -> None:
        """The generations from the one followed to ``current``, oldest first, each with the
        time up to which its chunks count (None for ``current``)."""
        records = await self.store.list_every(GENERATIONS_PREFIX)
        lineage = Catalog.from_listing(records).lineage(current)  # newest first
        names = [g.generation for g, _ in lineage]
        if self._generation is not None and self._generation in names:
            start = names.index(self._generation)
        elif self._generation is not None:
            raise _Refusal(
                f"generation {current} does not continue {self._generation}, which this replica"
                f" followed (its lineage is {', '.join(names)}): restore it afresh"
            )
        else:
            start = len(names) - 1  # position unknown: search the whole lineage
        self._route = [(g.generation, until) for g, until in reversed(lineage[: start + 1])]
        if self._generation is not None and self._generation != current:
            logger.warning(
                "replica_generation_changed source=%s from=%s to=%s",
                self.source, self._generation, current,
            )

    async def _list_chunks(self, gen: str) -> list[ChunkObject]:
        prefix = f"gen/{gen}/wal/"
        entries = await self.store.list_every(prefix, start_after=self._cursor.get(gen))
        chunks = []
        for entry in entries:
            parsed = parse_key(entry.key)
            if not isinstance(parsed, ChunkObject):
                continue
            if entry.size != parsed.size:
                raise DamagedObject(
                    f"object {entry.key!r} is {entry.size} bytes, its name says {parsed.size}"
                    " (truncated upload?)", key=entry.key, reason="size", generation=gen,
                )
            chunks.append(parsed)
        chunks.sort(key=lambda c: (c.first, c.last))
        return chunks

    async def _follow(self, gen: str, until: int | None, newest: bool) -> None:
        for chunk in await self._list_chunks(gen):
            if until is not None and chunk.time_ms > until:
                continue  # shipped after its successor took over: a fenced server's
            self._shipped = max(self._shipped, chunk.last)
            if chunk.last < self._next:
                self._cursor[gen] = chunk.key
                continue
            if chunk.first > self._next:
                if newest:
                    await self._refuse_if_chain_starts_later(gen, chunk)
                    # Not visible yet (uploads may land out of order): wait for it. The cursor
                    # stays before the hole so the next listing sees this chunk again.
                    if self._oldest_unapplied_ms is None:
                        self._oldest_unapplied_ms = chunk.time_ms
                    return
                return  # the rest of the log is in a later generation of the route
            await self._apply(chunk)
            self._cursor[gen] = chunk.key

    async def _refuse_if_chain_starts_later(self, gen: str, chunk: ChunkObject) -> None:
        """A hole before ``chunk`` that can never fill: ``gen``'s chain starts at a snapshot
        after this replica's position (a primary that restarted from a later state than the
        replica has, with nothing shipped in between), so only a fresh restore can catch up."""
        if self._cursor.get(gen) is not None:
            return  # this generation already continued the replica's records
        snaps = [e.key for e in await self.store.list_every(f"gen/{gen}/snap/")]
        bases = [p.base for k in snaps if isinstance(p := parse_key(k), SnapshotObject)]
        if bases and min(bases) > self._next and min(bases) <= chunk.first:
            raise _Refusal(
                f"generation {gen} starts at record {min(bases)} (its snapshot), after this"
                f" replica's record {self._next - 1}, and nothing ships the records between:"
                " restore it afresh"
            )

    async def _apply(self, chunk: ChunkObject) -> None:
        data = await fetch_chunk(self.store, chunk)
        self._bytes += len(data)
        pending: list[ShippedRecord] = []
        limit = max(1, min(APPLY_BATCH_RECORDS, self.owner.mailbox.capacity // 2))
        for record in chunk_records(chunk, data):
            if record.number < self._next:
                continue
            try:
                ops = decode_ops(record.payload, record.version)
            except PayloadError as exc:
                raise DamagedObject(
                    f"object {chunk.key!r}: record {record.number} does not decode: {exc}",
                    key=chunk.key, reason="contents", generation=chunk.generation,
                ) from None
            pending.append(ShippedRecord(record.number, ops))
            if len(pending) >= limit:
                await self._submit(pending)
                pending = []
        if pending:
            await self._submit(pending)
        self._chunks += 1

    async def _submit(self, records: list[ShippedRecord]) -> None:
        """Hand records to the owner and wait until they are applied and logged."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        batch = Batch(records, _Applied(done), loop.time(), executor=self._executor)
        try:
            self.owner.mailbox.put_nowait(batch)
        except UnavailableError:
            raise _Refusal("the store is unavailable (its owner stopped)") from None
        await done
        replies = batch.replies or []
        if any(reply != APPLIED for reply in replies):
            bad = next(r for r in replies if r != APPLIED)
            raise _Refusal(f"the replica could not apply records: {bad.decode().strip()}")
        self._next = records[-1].number + 1
        self._records += len(records)

    # -- observing -------------------------------------------------------------------------

    @property
    def state(self) -> FollowState:
        return self._state

    @property
    def next_seq(self) -> int:
        """The number of the next record the replica needs."""
        return self._next

    def statistics(self) -> FollowerStatistics:
        now = self._clock_ms()
        contact = None if self._contact_ms is None else max(0, now - self._contact_ms) / 1000
        applied = self._next - 1
        behind = max(0, self._shipped - applied)
        if behind and self._oldest_unapplied_ms is not None:
            lag = max(0, now - self._oldest_unapplied_ms) / 1000
        else:
            lag = contact if contact is not None else 0.0
        return FollowerStatistics(
            source=self.source, state=self._state, generation=self._generation,
            applied_seq=applied, shipped_seq=max(self._shipped, applied),
            lag_records=behind, lag_seconds=lag, last_contact_s=contact, polls=self._polls,
            poll_failures=self._failures, chunks_applied=self._chunks,
            records_applied=self._records, bytes_fetched=self._bytes, problem=self._problem,
        )
