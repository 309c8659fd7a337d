"""The task queue client: the async shell of the batch layer over an ``ObjectStore``.

``TaskQueue`` is what the API and the workers call. It owns no state of its own; everything
is in the store, laid out by ``_keys`` (docs/batch.md, "Storage layout").

Theory of operation. Every change of a task is one compare-and-set of its ``status.json``
computed by a pure transition of ``_machine`` from the record it replaces (``_apply``):

1. read the record and its ETag (or start from the one the caller holds);
2. compute the new record; a transition that changes nothing (a second cancel) writes nothing;
3. if the new record names a new queue marker, create the marker first (a crash after this
   leaves a stale marker, which the poll loop deletes);
4. CAS the record ``If-Match`` the ETag;
5. on an answer that does not say what happened (``AmbiguousWrite``, ``PreconditionFailed``,
   ``NotFound``, a transient error) re-read and let ``_reconcile`` decide by the write id:
   ``ours`` continues from the re-read record, ``lost`` re-evaluates the transition from it
   (which may now be illegal: the claim another worker won, the heartbeat of a fenced lease);
6. after the write is known to have landed, delete the marker the task no longer needs (a
   terminal task's, or the previous one after a requeue under a new marker), and, if the task
   is now queued and due, tell the ``on_claimable`` listeners (an API's in-process workers).

Reads and marker writes retry transient errors a bounded number of times with equal jitter;
conditional writes are never blindly retried (the re-read decides).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import secrets
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

from minidb.batch import _keys
from minidb.batch import _machine as m
from minidb.batch._errors import Contended, IllegalTransition, InvalidTaskId, TaskNotFound
from minidb.batch._ids import TaskIdGenerator, parse_task_id
from minidb.batch._model import (
    TERMINAL,
    OutputFile,
    Progress,
    TaskError,
    TaskRecord,
    decode,
    encode,
    new_record,
)
from minidb.batch._reconcile import reconcile
from minidb.objstore import (
    AmbiguousWrite,
    NotFound,
    ObjectReader,
    ObjectStore,
    PreconditionFailed,
    TransientError,
)

T = TypeVar("T")

TRANSIENT_TRIES = 5
"""Attempts of one read or marker write that meets transient errors before giving up."""
TRANSIENT_BASE_S = 0.05
"""First retry wait after a transient error, in seconds (doubling, equal jitter)."""
TRANSIENT_CAP_S = 1.0
"""Longest retry wait after a transient error, in seconds."""
CAS_ROUNDS = 16
"""Compare-and-set rounds one transition may lose before ``Contended`` (each lost round means
another writer's write landed, so this only trips under a storm of writes to one task)."""
POLL_LIMIT = 50
"""Markers one poll LISTs (S3 MaxKeys): the due head of the queue."""
SHUFFLE_HEAD = 8
"""The first this many due markers are shuffled so racing workers try different tasks first."""
STALE_MARKER_AGE_MS = 60_000
"""A marker its task's record does not name is deleted only once it has been due this long,
in milliseconds: until then it may be the marker of an enqueue whose CAS is still in flight
(the marker is created first). Far longer than any CAS takes; until then such a marker is
re-read on every poll (a GET), which only a crash between marker and CAS makes last."""
LIST_LIMIT_MAX = 100
"""Largest page of a user's task list."""
LEASE_ID_BYTES = 16
"""Random bytes of a lease id (the fencing token)."""


def wall_ms() -> int:
    """The wall clock in Unix milliseconds (leases compare wall clocks of different hosts)."""
    return time.time_ns() // 1_000_000


@dataclasses.dataclass(frozen=True, slots=True)
class Stored:
    """A record and the ETag it has in the store."""

    record: TaskRecord
    etag: str


@dataclasses.dataclass(frozen=True, slots=True)
class Claim:
    """A worker's hold on a running task: the record it last wrote and the lease id."""

    record: TaskRecord
    etag: str
    lease_id: str

    @property
    def task_id(self) -> str:
        return self.record.id

    @property
    def attempt(self) -> int:
        return self.record.attempt

    @property
    def cancel_requested(self) -> bool:
        return self.record.cancel_requested


@dataclasses.dataclass(frozen=True, slots=True)
class MarkerResult:
    """What handling one marker did: ``claim`` if we now hold the task, else ``recheck_ms``
    (when the marker is worth reading again: a live lease's expiry plus grace) or nothing."""

    marker: str
    action: str
    """``claimed``, ``deleted`` (stale), ``finished`` (take-over ended it), ``busy``, ``lost``."""
    claim: Claim | None = None
    recheck_ms: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of a user's tasks, newest first; ``cursor`` fetches the next (None: last)."""

    tasks: tuple[TaskRecord, ...]
    cursor: str | None


@dataclasses.dataclass
class QueueStatistics:
    """Counters of one ``TaskQueue`` since it was made."""

    writes: int = 0
    reconciled_ours: int = 0
    reconciled_lost: int = 0
    transient_retries: int = 0
    markers_created: int = 0
    markers_deleted: int = 0


def _same_request(a: TaskRecord, b: TaskRecord) -> bool:
    """Whether two creates of one task id asked for the same task."""
    return (a.created_by, a.type, dict(a.params), a.name, a.max_attempts) == (
        b.created_by, b.type, dict(b.params), b.name, b.max_attempts
    )


class TaskQueue:
    """Create, submit, list, cancel, retry, claim and finish tasks kept in ``store``."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        clock: Callable[[], int] = wall_ms,
        ids: TaskIdGenerator | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.store = store
        self._clock = clock
        self._ids = ids or TaskIdGenerator()
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._stats = QueueStatistics()
        self._claimable: list[Callable[[str], object]] = []

    def now_ms(self) -> int:
        """The queue's wall clock, in Unix milliseconds (leases are compared on it)."""
        return self._clock()

    def statistics(self) -> QueueStatistics:
        """A copy of the counters."""
        return dataclasses.replace(self._stats)

    def on_claimable(self, callback: Callable[[str], object]) -> None:
        """Call ``callback(task_id)`` each time this queue has made a task claimable now (a
        submit, a retry, a release, the marker of a queued task put back), once the write has
        landed: how an API wakes the workers of its own process instead of letting the task
        wait for their next poll. Workers elsewhere still find it by polling."""
        self._claimable.append(callback)

    def _announce(self, record: TaskRecord) -> None:
        if record.state == "queued" and (
            record.not_before is None or record.not_before <= self._clock()
        ):
            for callback in self._claimable:
                callback(record.id)

    async def with_retries(self, op: Callable[[], Awaitable[T]]) -> T:
        """``op()`` retried on ``TransientError`` like the queue's own reads (bounded, equal
        jitter): for callers making their own idempotent calls on the store (the API)."""
        return await self._retrying(op)

    # --- plumbing ---------------------------------------------------------------------------

    async def _retrying(self, op: Callable[[], Awaitable[T]]) -> T:
        """``op()``, retried on ``TransientError`` up to ``TRANSIENT_TRIES`` times."""
        for tries in range(1, TRANSIENT_TRIES + 1):
            try:
                return await op()
            except TransientError:
                if tries == TRANSIENT_TRIES:
                    raise
                await self._back_off(tries)
        raise AssertionError("unreachable")

    async def _back_off(self, tries: int) -> None:
        """The wait after try ``tries`` failed transiently: jittered, doubling, capped."""
        self._stats.transient_retries += 1
        ceiling = min(TRANSIENT_CAP_S, TRANSIENT_BASE_S * 2 ** (tries - 1))
        await self._sleep(self._rng.uniform(ceiling / 2, ceiling))

    async def _read(self, task_id: str) -> Stored | None:
        key = _keys.status_key(task_id)
        try:
            obj = await self._retrying(lambda: self.store.get(key))
        except NotFound:
            return None
        return Stored(decode(obj.data), obj.etag)

    async def _put_hint(self, key: str) -> None:
        """Create an empty hint object (marker, index entry); one already there is as good,
        whoever made it, so a refused or unanswered create is success."""
        async def put() -> None:
            with contextlib.suppress(PreconditionFailed, AmbiguousWrite):
                await self.store.put_if_absent(key, b"")
        await self._retrying(put)

    async def _create_marker(self, key: str) -> None:
        await self._put_hint(key)
        self._stats.markers_created += 1

    async def _delete_marker(self, key: str) -> None:
        try:
            await self._retrying(lambda: self.store.delete(key))
        except (AmbiguousWrite, TransientError):
            return  # a marker left behind is stale and costs the next poll one GET
        self._stats.markers_deleted += 1

    async def _after(self, before: TaskRecord | None, after: TaskRecord) -> None:
        """Delete the markers ``after`` no longer needs, once ``after`` is known to be stored."""
        if before is not None and before.queue_marker not in (None, after.queue_marker):
            await self._delete_marker(before.queue_marker)
        if after.state in TERMINAL and after.queue_marker is not None:
            await self._delete_marker(after.queue_marker)

    async def _apply(
        self,
        task_id: str,
        action: str,
        compute: Callable[[TaskRecord, int], TaskRecord],
        known: Stored | None = None,
    ) -> Stored:
        """One transition as one CAS, reconciled by write id (see the module docstring)."""
        current = known if known is not None else await self._read(task_id)
        for _ in range(CAS_ROUNDS):
            if current is None:
                raise TaskNotFound(task_id)
            new = compute(current.record, self._clock())
            if new is current.record:
                return current
            if new.queue_marker is not None and new.queue_marker != current.record.queue_marker:
                await self._create_marker(new.queue_marker)
            key = _keys.status_key(task_id)
            try:
                etag = await self.store.compare_and_set(key, encode(new), current.etag)
            except (AmbiguousWrite, PreconditionFailed, NotFound, TransientError):
                reread = await self._read(task_id)
                if reread is not None and reconcile(new.write_id, reread.record) == "ours":
                    self._stats.reconciled_ours += 1
                    # Landed (perhaps with another write on top): the re-read is the truth.
                    await self._after(current.record, new)
                    self._announce(reread.record)
                    return reread
                self._stats.reconciled_lost += 1
                current = reread
                continue
            self._stats.writes += 1
            await self._after(current.record, new)
            self._announce(new)
            return Stored(new, etag)
        raise Contended(task_id, action, CAS_ROUNDS)

    # --- API side ---------------------------------------------------------------------------

    async def create(
        self,
        user: str,
        task_type: str,
        params: Mapping[str, Any],
        *,
        name: str = "",
        max_attempts: int = 3,
        task_id: str | None = None,
    ) -> TaskRecord:
        """A new task in state ``created``: the user's index entry, then ``status.json``.

        ``task_id`` (default: a fresh one) lets an idempotent create name the task before it
        exists; creating one id again returns the stored record when it is the same request
        (same user, type, params, name and budget) and is ``PreconditionFailed`` otherwise.
        """
        _keys.check_user(user)
        now = self._clock()
        record = new_record(
            self._ids.new(now) if task_id is None else parse_task_id(task_id), task_type,
            params, created_by=user, now_ms=now, name=name, max_attempts=max_attempts,
        )
        await self._put_hint(_keys.user_index_key(user, record.id))
        key = _keys.status_key(record.id)
        body = encode(record)
        for tries in range(1, TRANSIENT_TRIES + 1):
            try:
                await self.store.put_if_absent(key, body)
            except (AmbiguousWrite, PreconditionFailed, TransientError) as exc:
                reread = await self._read(record.id)
                if reread is None:
                    # Nothing there: the create did not land (or has not yet). Creating again is
                    # safe, because it is conditional: if the first one lands before it, this
                    # one is refused and the re-read finds our write id.
                    if isinstance(exc, PreconditionFailed) or tries == TRANSIENT_TRIES:
                        raise
                    await self._back_off(tries)
                    continue
                if task_id is not None and _same_request(record, reread.record):
                    return reread.record
                if reconcile(record.write_id, reread.record) != "ours":
                    raise
                self._stats.reconciled_ours += 1
                return reread.record
            self._stats.writes += 1
            return record
        raise AssertionError("unreachable")

    async def put_input(self, task_id: str, chunks: AsyncIterable[bytes]) -> str:
        """Stream the task's input in, once (``PreconditionFailed`` if it is already there)."""
        stored = await self._read(parse_task_id(task_id))
        if stored is None:
            raise TaskNotFound(task_id)
        if stored.record.state != "created":
            raise IllegalTransition(stored.record.state, "put_input", "the task is submitted")
        return await self.store.upload(_keys.input_key(task_id), chunks, if_absent=True)

    async def has_input(self, task_id: str) -> bool:
        """Whether the task's input object exists (one LIST of at most one key)."""
        key = _keys.input_key(task_id)
        page = await self._retrying(lambda: self.store.list(prefix=key, limit=1))
        return any(entry.key == key for entry in page.entries)

    async def submit(self, task_id: str, *, needs_input: bool = False) -> TaskRecord:
        """``created`` -> ``queued`` (marker first, then the CAS); a queued task whose marker
        is missing gets it back (``submit`` again re-creates the marker it names)."""
        parse_task_id(task_id)
        if needs_input and not await self.has_input(task_id):
            raise IllegalTransition("created", "submit", "the task has no input")
        stored = await self._read(task_id)
        if stored is not None and stored.record.state == "queued":
            assert stored.record.queue_marker is not None
            await self._create_marker(stored.record.queue_marker)
            self._announce(stored.record)
            return stored.record
        return (await self._apply(task_id, "submit", m.submit, stored)).record

    async def get(self, task_id: str) -> TaskRecord:
        """The task's record (``TaskNotFound`` if there is none)."""
        stored = await self._read(parse_task_id(task_id))
        if stored is None:
            raise TaskNotFound(task_id)
        return stored.record

    async def list_tasks(
        self, user: str, *, limit: int = 20, cursor: str | None = None
    ) -> TaskPage:
        """A page of ``user``'s tasks, newest first: one LIST of ``limit`` index keys and one
        GET per task (an index entry without a record, a create that crashed, is skipped)."""
        start = None if cursor is None else _keys.user_index_key(user, parse_task_id(cursor))
        return await self._page(
            _keys.user_prefix(user), start, limit, lambda key: _keys.parse_user_index_key(key)[1]
        )

    async def list_all(self, *, limit: int = 20, cursor: str | None = None) -> TaskPage:
        """A page of every user's tasks, newest first (the operator's view): one LIST of
        ``limit`` status keys (``tasks/`` sorts newest first too) and one GET per task."""
        start = None if cursor is None else _keys.status_key(parse_task_id(cursor))
        return await self._page(_keys.TASKS_PREFIX, start, limit, _keys.parse_status_key)

    async def _page(
        self, prefix: str, start: str | None, limit: int, task_of: Callable[[str], str]
    ) -> TaskPage:
        """One LIST under ``prefix`` after ``start``, the records of the tasks it names, and
        the cursor (the last task id) if the listing goes on."""
        if not 1 <= limit <= LIST_LIMIT_MAX:
            raise ValueError(f"limit must be in 1..{LIST_LIMIT_MAX}, not {limit}")
        page = await self._retrying(
            lambda: self.store.list(prefix=prefix, start_after=start, limit=limit)
        )
        ids: list[str] = []
        for entry in page.entries:
            try:
                ids.append(task_of(entry.key))
            except InvalidTaskId:
                continue  # not one of ours
        reads = await asyncio.gather(*(self._read(task_id) for task_id in ids))
        tasks = tuple(stored.record for stored in reads if stored is not None)
        last = ids[-1] if ids else None
        return TaskPage(tasks, last if page.next_start_after is not None else None)

    async def cancel(self, task_id: str) -> TaskRecord:
        """Cancel at once (created/queued) or ask the worker to stop (running)."""
        return (await self._apply(parse_task_id(task_id), "cancel", m.request_cancel)).record

    async def retry(self, task_id: str, *, max_attempts: int | None = None) -> TaskRecord:
        """``failed``/``cancelled`` -> ``queued`` with a fresh budget."""
        def compute(record: TaskRecord, now: int) -> TaskRecord:
            return m.retry(record, now, max_attempts=max_attempts)
        return (await self._apply(parse_task_id(task_id), "retry", compute)).record

    # --- worker side ------------------------------------------------------------------------

    async def poll(self, limit: int = POLL_LIMIT) -> list[str]:
        """Due markers, earliest first but with the head shuffled; not-yet-due ones skipped."""
        bound = _keys.due_bound(self._clock())
        page = await self._retrying(lambda: self.store.list(prefix=_keys.QUEUE_PREFIX, limit=limit))
        due = [entry.key for entry in page.entries if entry.key < bound]
        head = due[:SHUFFLE_HEAD]
        self._rng.shuffle(head)
        return head + due[SHUFFLE_HEAD:]

    async def take(
        self,
        marker: str,
        *,
        worker: str,
        lease_s: float = m.DEFAULT_LEASE_S,
        grace_s: float = m.DEFAULT_GRACE_S,
    ) -> MarkerResult:
        """Handle one due marker: delete it if stale, claim a queued task, take over an
        expired lease, or report when a live lease is worth looking at again."""
        try:
            due_ms, task_id, _nonce = _keys.parse_marker_key(marker)
        except InvalidTaskId:
            return MarkerResult(marker, "lost")  # not one of ours: leave it alone
        stored = await self._read(task_id)
        record = None if stored is None else stored.record
        now = self._clock()
        # Not (yet) named: an enqueue creates its marker *before* the CAS that names it, so a
        # young one may belong to a CAS in flight (read it again on the next poll); only an
        # old one is surely stale.
        young = now < due_ms + STALE_MARKER_AGE_MS
        if record is not None and record.queue_marker != marker and young:
            return MarkerResult(marker, "busy")
        if record is None or record.queue_marker != marker or record.state in TERMINAL:
            await self._delete_marker(marker)
            return MarkerResult(marker, "deleted")
        if record.state == "created":
            return MarkerResult(marker, "busy")
        if record.state == "running" and not m.lease_expired(record, now, grace_s=grace_s):
            assert record.lease is not None
            return MarkerResult(
                marker, "busy", recheck_ms=record.lease.expires_at + round(grace_s * 1000) + 1
            )
        lease_id = secrets.token_hex(LEASE_ID_BYTES)

        def compute(current: TaskRecord, now: int) -> TaskRecord:
            if current.queue_marker != marker:
                raise IllegalTransition(current.state, "claim", "the marker is stale")
            if current.state == "running":
                current = m.expire_lease(current, now, grace_s=grace_s)
                if current.state != "queued":
                    return current
            return m.claim(current, now, worker=worker, lease_id=lease_id, lease_s=lease_s)

        try:
            done = await self._apply(task_id, "claim", compute, stored)
        except (IllegalTransition, TaskNotFound):
            return MarkerResult(marker, "lost")
        if done.record.lease is not None and done.record.lease.lease_id == lease_id:
            return MarkerResult(marker, "claimed", Claim(done.record, done.etag, lease_id))
        if done.record.state in TERMINAL:
            return MarkerResult(marker, "finished")
        return MarkerResult(marker, "lost")

    async def claim_next(
        self,
        *,
        worker: str,
        lease_s: float = m.DEFAULT_LEASE_S,
        grace_s: float = m.DEFAULT_GRACE_S,
        skip: Callable[[str], bool] = lambda _marker: False,
    ) -> Claim | None:
        """Poll and take markers until one claims a task (None: nothing claimable now)."""
        for marker in await self.poll():
            if skip(marker):
                continue
            result = await self.take(marker, worker=worker, lease_s=lease_s, grace_s=grace_s)
            if result.claim is not None:
                return result.claim
        return None

    async def _fenced(
        self, claim: Claim, action: str, compute: Callable[[TaskRecord, int], TaskRecord]
    ) -> Claim:
        done = await self._apply(claim.task_id, action, compute, Stored(claim.record, claim.etag))
        return Claim(done.record, done.etag, claim.lease_id)

    async def heartbeat(
        self, claim: Claim, *, lease_s: float = m.DEFAULT_LEASE_S, progress: Progress | None = None
    ) -> Claim:
        """Extend the lease and publish progress; ``LeaseLost`` when fenced. The returned
        claim's ``cancel_requested`` tells the worker to stop."""
        def compute(record: TaskRecord, now: int) -> TaskRecord:
            return m.heartbeat(
                record, now, lease_id=claim.lease_id, lease_s=lease_s, progress=progress
            )
        return await self._fenced(claim, "heartbeat", compute)

    async def complete(
        self,
        claim: Claim,
        *,
        result: Mapping[str, Any] | None = None,
        files: tuple[OutputFile, ...] = (),
        progress: Progress | None = None,
    ) -> TaskRecord:
        """The attempt succeeded (``cancelled`` if a cancel arrived); fenced."""
        def compute(record: TaskRecord, now: int) -> TaskRecord:
            return m.complete(
                record, now, lease_id=claim.lease_id, result=result, files=files,
                progress=progress,
            )
        return (await self._fenced(claim, "complete", compute)).record

    async def fail(
        self,
        claim: Claim,
        *,
        error: TaskError,
        retryable: bool,
        backoff_s: float = 0.0,
        progress: Progress | None = None,
    ) -> TaskRecord:
        """The attempt failed: requeued after ``backoff_s`` if retryable with budget left."""
        def compute(record: TaskRecord, now: int) -> TaskRecord:
            return m.fail(
                record, now, lease_id=claim.lease_id, error=error, retryable=retryable,
                backoff_s=backoff_s, progress=progress,
            )
        return (await self._fenced(claim, "fail", compute)).record

    async def release(self, claim: Claim, *, progress: Progress | None = None) -> TaskRecord:
        """Give the task back without spending the attempt (``cancelled`` if cancelling)."""
        def compute(record: TaskRecord, now: int) -> TaskRecord:
            return m.release(record, now, lease_id=claim.lease_id, progress=progress)
        return (await self._fenced(claim, "release", compute)).record

    async def open_input(self, task_id: str) -> ObjectReader:
        """A streaming read of the task's input (``NotFound`` if it was never uploaded)."""
        return await self._retrying(lambda: self.store.open_read(_keys.input_key(task_id)))

    async def put_output(
        self, claim: Claim, name: str, chunks: AsyncIterable[bytes]
    ) -> OutputFile:
        """Write one output file of the claim's attempt (``If-None-Match``, never rewritten)."""
        key = _keys.output_key(claim.task_id, claim.attempt, name)
        size = 0

        async def counted() -> AsyncIterator[bytes]:
            nonlocal size
            async for chunk in chunks:
                size += len(chunk)
                yield chunk
        await self.store.upload(key, counted(), if_absent=True)
        return OutputFile(name, size)
