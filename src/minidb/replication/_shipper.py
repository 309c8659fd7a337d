"""The shipper: the task that uploads the log's new files beside the data owner, never on its path.

Owns the upload side of docs/replication.md: cutting the open segment's new records into chunk
objects at least every ``ship_interval_s``, the rest of each sealed segment, every checkpoint
snapshot; the fence check before each round; retries with jittered backoff; the lag figures and
their log lines; and the "shipped up to" watermark that lets the log delete covered files.

Theory of operation. ``DurableLog`` calls ``_observe(position)`` after each write, on whichever
thread wrote: it stores the position and, only on the transition from caught-up to behind, wakes
the task with ``call_soon_threadsafe`` (one self-pipe write per round, none per write). The
task then waits until ``ship_interval_s`` after its previous round started (batching), takes
the newest position, and ships, in order, from where it stands (segment base, byte offset,
next record number) up to it, reading the segment files from disk in a worker thread. A round
starts with one GET of ``current`` (the fence); a fenced shipper logs
``replication_fenced``, releases the log's hold and stops for good, while the server keeps
serving. A failing store only makes the round retry (capped, jittered backoff), so the lag
grows; nothing waits on it but this task.

Cancel-safety: the shipped-up-to state is only advanced after an upload returned, and an
object's name (so its key) is fixed before its first attempt, so a retry of an ambiguous write
sends the same key and a ``PreconditionFailed`` on it is settled by reading the object back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable

import google_crc32c

from minidb.objstore import ObjectStore, ObjectStoreError, PreconditionFailed, open_store
from minidb.replication import _generation
from minidb.replication._errors import DamagedObject, Fenced, ReplicationError
from minidb.replication._layout import (
    ChunkObject,
    ShippedObject,
    SnapshotObject,
    chunk_for,
    verify_object,
)
from minidb.replication._retention import RetentionPolicy, sweep
from minidb.wal import (
    END_RECORD_BYTES,
    FILE_HEADER_SIZE,
    DurableLog,
    LogPosition,
    decode_count,
    segment_header,
    segment_name,
    snapshot_name,
)
from minidb.wal._format import FORMAT_VERSION, STRINGS_VERSION

SHIPPABLE_VERSIONS = (STRINGS_VERSION, FORMAT_VERSION)
"""Segment formats whose records a chunk (written with the current header) can carry."""

logger = logging.getLogger("minidb.replication")


def _event(level: int, name: str, exc_info: BaseException | None = None, **fields: object) -> None:
    # The server's key=value log convention (``minidb.server._logging``): the message is the
    # event name, the fields ride in ``minidb_fields``.
    logger.log(level, name, extra={"minidb_fields": fields}, exc_info=exc_info)

DEFAULT_SHIP_INTERVAL_S = 1.0
"""Longest wait, in seconds, of a written record before its upload starts (``--ship-interval``)."""
LAG_WARN_S = 10.0
"""Lag, in seconds, above which the shipper logs ``replication_lagging`` (and then, once it is
back under, ``replication_caught_up``)."""
BACKOFF_FIRST_S = 0.05
"""First wait, in seconds, after a failed upload; doubled per failure up to ``BACKOFF_MAX_S``."""
BACKOFF_MAX_S = 2.0
"""Longest wait between two attempts, in seconds: after an outage the store is used again
within this long."""
SNAPSHOT_READ_BYTES = 1 << 20
"""Piece size, in bytes, in which a snapshot file is read and streamed (bounds its memory)."""
RETENTION_INTERVAL_S = 60.0
"""Most often, in seconds, that retention lists the prefix (also after each snapshot upload)."""
NEVER = 1 << 63
"""A watermark past every record: releases the log's hold when shipping stops for good."""


@dataclasses.dataclass(frozen=True, slots=True)
class ShipperStatistics:
    """One shipper's figures (fed to the ``minidb_replication_*`` metrics)."""

    generation: str
    lag_seconds: float
    lag_records: int
    shipped_bytes: int
    shipped_objects: int
    failures: int
    fenced: bool
    shipped_number: int
    """Records below this number are shipped."""
    deleted_objects: int
    store_requests: int
    """Requests sent to the object store (uploads, fence checks, listings, deletes)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ShipperConfig:
    """How the shipper behaves; the CLI fills it."""

    ship_interval_s: float = DEFAULT_SHIP_INTERVAL_S
    lag_warn_s: float = LAG_WARN_S
    retention: RetentionPolicy | None = None


class Shipper:
    """Uploads ``log``'s files in ``data_dir`` to ``store`` as generation ``generation``."""

    def __init__(
        self,
        store: ObjectStore,
        log: DurableLog,
        data_dir: str,
        generation: str,
        config: ShipperConfig,
        wall_ms: Callable[[], int],
        *,
        owns_store: bool = False,
    ) -> None:
        self._store = store
        self._owns_store = owns_store
        self._log = log
        self._dir = data_dir
        self.generation = generation
        self._config = config
        self._wall_ms = wall_ms
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._signalled = False  # a wake is pending: the observer stays quiet until cleared
        position = log.position()
        self._latest = position
        # Where shipping stands: the next record to ship, in segment ``_segment`` at ``_offset``.
        self._next = position.snapshot_base or 0
        self._segment = self._next
        self._offset = FILE_HEADER_SIZE
        self._snapshot_shipped: int | None = None
        self._behind_since: float | None = None
        self._lagging = False
        self._stopping = False
        self._busy = False  # a round is in progress (drain waits for its retention sweep too)
        self._fenced = False
        self._bytes = self._objects = self._failures = self._deleted = 0
        self._last_round = -float("inf")
        self._last_sweep = -float("inf")

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Hook into the log and start the task (the log must be open, its owner not yet
        writing, so nothing it holds can be deleted before the hold is in place)."""
        self._loop = asyncio.get_running_loop()
        self._log.hold_for_shipping()
        self._log.set_observer(self._observe)
        self._behind_since = self._loop.time()  # the initial chain is unshipped: ship it now
        self._signalled = True
        self._wake.set()
        self._task = self._loop.create_task(self._run(), name="minidb-shipper")

    async def drain(self, timeout_s: float) -> bool:
        """Ship what is written now (snapshot included), for at most ``timeout_s``; True if
        everything was shipped (used at shutdown)."""
        self._wake_now()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._busy or not self._caught_up(self._latest):
            if self._fenced or self._task is None or self._task.done():
                return False
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    async def close(self) -> None:
        """Stop the task (an upload in flight is abandoned; its object may or may not exist,
        which the next generation's own chain makes harmless)."""
        self._stopping = True
        self._log.set_observer(None)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._owns_store:
            await self._store.close()

    def statistics(self) -> ShipperStatistics:
        latest = self._latest
        now = self._loop.time() if self._loop is not None else 0.0
        lag_s = 0.0 if self._behind_since is None else max(0.0, now - self._behind_since)
        return ShipperStatistics(
            generation=self.generation, lag_seconds=lag_s,
            lag_records=max(0, latest.next_number - self._next),
            shipped_bytes=self._bytes, shipped_objects=self._objects, failures=self._failures,
            fenced=self._fenced, shipped_number=self._next, deleted_objects=self._deleted,
            store_requests=self._store.statistics().requests,
        )

    # -- the observer (any thread, inside the log's write path) ----------------------------

    def _observe(self, position: LogPosition) -> None:
        self._latest = position
        if not self._signalled and self._loop is not None:
            self._signalled = True
            with contextlib.suppress(RuntimeError):  # the loop is closing: nothing to wake
                self._loop.call_soon_threadsafe(self._on_wake)

    def _on_wake(self) -> None:
        if self._behind_since is None and self._loop is not None:
            self._behind_since = self._loop.time()
        self._wake.set()

    def _wake_now(self) -> None:
        self._last_round = -float("inf")
        self._wake.set()

    # -- the task ------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._loop is not None
        loop = self._loop
        try:
            while not self._stopping:
                await self._wake.wait()
                self._wake.clear()
                wait = self._last_round + self._config.ship_interval_s - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                self._last_round = loop.time()
                target = self._latest
                self._busy = True
                try:
                    await self._retrying(functools.partial(self._round, target))
                finally:
                    self._busy = False
                self._settle(target, self._last_round)
        except Fenced as exc:
            self._fence(exc)
        except Exception as exc:  # ReplicationError, or a bug: either way shipping is over
            _event(logging.ERROR, "replication_stopped", generation=self.generation,
                   error=str(exc) or repr(exc), exc_info=exc)
            self._log.set_observer(None)
            self._log.release_shipped(NEVER, NEVER)

    def _caught_up(self, position: LogPosition) -> bool:
        snapshot_done = position.snapshot_base is None or (
            self._snapshot_shipped is not None and self._snapshot_shipped >= position.snapshot_base
        )
        return self._next >= position.next_number and snapshot_done

    def _settle(self, target: LogPosition, round_started: float) -> None:
        # Clear the pending-wake flag first, then look again: a write that came in between
        # either saw the flag set (and is caught by the look) or signals anew.
        self._signalled = False
        if self._caught_up(self._latest):
            self._behind_since = None
        else:
            if self._caught_up(target):
                self._behind_since = round_started  # what is left came after the round began
            self._signalled = True
            self._wake.set()
        self._check_lag()

    async def _retrying(self, attempt: Callable[[], Awaitable[None]]) -> None:
        delay = BACKOFF_FIRST_S
        while True:
            try:
                await attempt()
                return
            except (Fenced, DamagedObject):
                raise
            except (ObjectStoreError, OSError) as exc:
                self._failures += 1
                self._check_lag()
                logger.debug("replication upload failed error=%r", repr(exc))
            await asyncio.sleep(random.uniform(delay / 2, delay))
            delay = min(BACKOFF_MAX_S, delay * 2)

    def _check_lag(self) -> None:
        lag = self.statistics().lag_seconds
        if not self._lagging and lag > self._config.lag_warn_s:
            self._lagging = True
            _event(
                logging.WARNING, "replication_lagging", generation=self.generation,
                lag_seconds=round(lag, 1), lag_records=self.statistics().lag_records,
                failures=self._failures,
            )
        elif self._lagging and lag <= self._config.lag_warn_s:
            self._lagging = False
            _event(
                logging.WARNING, "replication_caught_up", generation=self.generation,
                lag_seconds=round(lag, 1), failures=self._failures,
            )

    def _fence(self, exc: Fenced) -> None:
        self._fenced = True
        _event(
            logging.ERROR, "replication_fenced", generation=exc.generation, by=exc.by,
            action="stop_shipping",
        )
        self._log.set_observer(None)
        self._log.release_shipped(NEVER, NEVER)

    # -- one round -------------------------------------------------------------------------

    async def _round(self, target: LogPosition) -> None:
        if self._caught_up(target):
            return
        await _generation.check(self._store, self.generation)
        shipped_snapshot = False
        while self._segment < target.segment_base or (
            self._segment == target.segment_base and self._next < target.next_number
        ):
            await self._ship_segment_part(target)
        base = target.snapshot_base
        if base is not None and (self._snapshot_shipped is None or self._snapshot_shipped < base):
            await self._ship_snapshot(base)
            shipped_snapshot = True
        await asyncio.to_thread(self._log.release_shipped, self._next, self._snapshot_shipped)
        if self._config.retention is not None and (
            shipped_snapshot or self._last_round - self._last_sweep >= RETENTION_INTERVAL_S
        ):
            self._last_sweep = self._last_round
            self._deleted += await sweep(
                self._store, self.generation, self._wall_ms(), self._config.retention
            )

    async def _ship_segment_part(self, target: LogPosition) -> None:
        sealed = self._segment < target.segment_base
        end = None if sealed else target.segment_size
        try:
            data = await asyncio.to_thread(self._read_segment, self._segment, self._offset, end)
        except FileNotFoundError:
            if not sealed:
                raise
            # The log deletes a covered segment only once every record of it is shipped
            # (``release_shipped``), so its successor starts exactly at our next record.
            self._segment, self._offset = self._next, FILE_HEADER_SIZE
            return
        if sealed:
            if len(data) < END_RECORD_BYTES:
                raise ReplicationError(f"segment {segment_name(self._segment)} lost its END")
            count = decode_count(data[-8:])
            body, next_number = data[:-END_RECORD_BYTES], self._segment + count
        else:
            body, next_number = data, target.next_number
        if body:
            if next_number <= self._next:
                raise ReplicationError(
                    f"segment {segment_name(self._segment)}: bytes past record {self._next}"
                    " but no records"
                )
            payload = segment_header(self._next) + body
            chunk = chunk_for(self.generation, self._next, next_number - 1, self._wall_ms(),
                              payload)
            await self._put(chunk, payload)
        if sealed:
            self._segment, self._offset, self._next = next_number, FILE_HEADER_SIZE, next_number
        else:
            self._offset, self._next = end or self._offset, next_number

    def _read_segment(self, base: int, start: int, end: int | None) -> bytes:
        with open(os.path.join(self._dir, segment_name(base)), "rb") as f:
            if start == FILE_HEADER_SIZE:
                # Version 2's records are version 3's (string operations only), so such a
                # segment ships under the current header; version 1 framed them otherwise.
                version = f.read(FILE_HEADER_SIZE)[7]
                if version not in SHIPPABLE_VERSIONS:
                    raise ReplicationError(
                        f"segment {segment_name(base)} is format version {version}: only"
                        " versions 2 and 3 are shipped (a checkpoint replaces it)"
                    )
            f.seek(start)
            return f.read() if end is None else f.read(end - start)

    async def _ship_snapshot(self, base: int) -> None:
        path = os.path.join(self._dir, snapshot_name(base))
        size, crc = await asyncio.to_thread(_file_checksum, path)
        snap = SnapshotObject(self.generation, base, self._wall_ms(), size, crc)

        async def pieces() -> AsyncIterator[bytes]:
            with open(path, "rb") as f:
                while piece := await asyncio.to_thread(f.read, SNAPSHOT_READ_BYTES):
                    yield piece

        try:
            await self._store.upload(snap.key, pieces(), if_absent=True)
        except PreconditionFailed:
            await self._settle_existing(snap)
        self._snapshot_shipped = base
        self._bytes += size
        self._objects += 1

    async def _put(self, obj: ChunkObject, data: bytes) -> None:
        try:
            await self._store.put_if_absent(obj.key, data)
        except PreconditionFailed:
            await self._settle_existing(obj)
        self._bytes += len(data)
        self._objects += 1

    async def _settle_existing(self, obj: ShippedObject) -> None:
        # The key exists: our own earlier attempt landed (an ambiguous write), or it is damage.
        # ``NotFound`` here (deleted in between) is an ``ObjectStoreError``: the round retries.
        stored = await self._store.get(obj.key)
        verify_object(obj, stored.data)


def _file_checksum(path: str) -> tuple[int, int]:
    size = crc = 0
    with open(path, "rb") as f:
        while piece := f.read(SNAPSHOT_READ_BYTES):
            size += len(piece)
            crc = int(google_crc32c.extend(crc, piece))
    return size, crc


CLAIM_TIMEOUT_S = 10.0
"""How long, in seconds, a start may spend claiming the prefix before it refuses to start."""


async def start_shipping(
    url: str,
    log: DurableLog,
    data_dir: str,
    *,
    takeover: bool,
    config: ShipperConfig,
    wall_ms: Callable[[], int],
    store_options: dict[str, object] | None = None,
) -> Shipper:
    """Open the store at ``url``, claim it for a new generation, and start shipping ``log``.

    Raises ``GenerationConflict`` if another server ships there (and not ``takeover``),
    ``ObjectStoreError`` or ``TimeoutError`` if the store cannot be reached within
    ``CLAIM_TIMEOUT_S``. The store is closed again on any failure.
    """
    store = open_store(url, **(store_options or {}))
    try:
        async with asyncio.timeout(CLAIM_TIMEOUT_S):
            won = await _generation.claim(store, data_dir, takeover=takeover, wall_ms=wall_ms,
                                          url=url)
    except BaseException:
        await store.close()
        raise
    _event(
        logging.INFO, "replication_claimed", generation=won.generation, parent=won.parent,
        takeover=won.takeover, store=store.endpoint,
    )
    shipper = Shipper(store, log, data_dir, won.generation, config, wall_ms, owns_store=True)
    shipper.start()
    return shipper
