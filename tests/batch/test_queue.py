"""TaskQueue, the async queue client, against both backends (file: and moto via the proxy)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from minidb.batch import _keys
from minidb.batch._errors import IllegalTransition, LeaseLost, TaskNotFound
from minidb.batch._model import OutputFile, Progress, TaskError, decode, encode
from minidb.batch._queue import (
    STALE_MARKER_AGE_MS,
    TRANSIENT_CAP_S,
    TRANSIENT_TRIES,
    Claim,
    TaskQueue,
)
from minidb.objstore import AmbiguousWrite, ObjectStore, PreconditionFailed, TransientError
from tests.objstore.faultproxy import Action, FaultProxy, Rule

from .conftest import Clock

pytestmark = pytest.mark.minidb_loop

DEADLINE_S = 30.0
"""No test of this module may take longer than this, in seconds."""


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _queued(queue: TaskQueue, user: str = "alice", **params: Any) -> str:
    record = await queue.create(user, "sleep", {"seconds": 0, **params})
    return (await queue.submit(record.id)).id


async def _claim(queue: TaskQueue, worker: str = "w-1") -> Claim:
    claim = await queue.claim_next(worker=worker, lease_s=30, grace_s=5)
    assert claim is not None
    return claim


async def _markers(store: ObjectStore) -> list[str]:
    return [e.key for e in (await store.list(prefix=_keys.QUEUE_PREFIX)).entries]


async def test_create_submit_get(store: ObjectStore, clock: Clock) -> None:
    """create writes index + status (created), submit writes the marker it names, get reads."""
    queue = TaskQueue(store, clock=clock)
    record = await queue.create("alice", "sleep", {"seconds": 1}, name="nap")
    assert (record.state, record.created_by, record.name) == ("created", "alice", "nap")
    assert await queue.get(record.id) == record
    assert await _markers(store) == []
    submitted = await queue.submit(record.id)
    assert submitted.state == "queued"
    assert await _markers(store) == [submitted.queue_marker]
    with pytest.raises(TaskNotFound):
        await queue.get("01KBCQCK20JZ7R9YTJGD1AH5T3")


async def test_submit_of_a_queued_task_recreates_a_lost_marker(
    store: ObjectStore, clock: Clock
) -> None:
    """A queued task whose marker vanished gets it back from a second submit, no write."""
    queue = TaskQueue(store, clock=clock)
    task_id = await _queued(queue)
    record = await queue.get(task_id)
    assert record.queue_marker is not None
    await store.delete(record.queue_marker)
    assert await queue.submit(task_id) == record
    assert await _markers(store) == [record.queue_marker]


async def test_input_is_streamed_once_and_required(store: ObjectStore, clock: Clock) -> None:
    """put_input streams the input once (a second is refused); submit checks it exists."""
    queue = TaskQueue(store, clock=clock)
    record = await queue.create("alice", "csv_import", {})
    with pytest.raises(IllegalTransition):
        await queue.submit(record.id, needs_input=True)
    await queue.put_input(record.id, _chunks(b"bucket,key,value\n", b"b,k,v\n"))
    with pytest.raises(PreconditionFailed):
        await queue.put_input(record.id, _chunks(b"other"))
    assert (await queue.submit(record.id, needs_input=True)).state == "queued"
    reader = await queue.open_input(record.id)
    async with reader:
        assert await reader.read() == b"bucket,key,value\nb,k,v\n"


async def test_list_newest_first_with_cursor(store: ObjectStore, clock: Clock) -> None:
    """list_tasks pages a user's tasks newest first, reading only the page's records."""
    queue = TaskQueue(store, clock=clock)
    ids = []
    for _ in range(5):
        clock.advance(0.001)
        ids.append((await queue.create("alice", "sleep", {"seconds": 0})).id)
    await queue.create("bob", "sleep", {"seconds": 0})
    first = await queue.list_tasks("alice", limit=2)
    assert [t.id for t in first.tasks] == ids[::-1][:2]
    assert first.cursor is not None
    second = await queue.list_tasks("alice", limit=2, cursor=first.cursor)
    third = await queue.list_tasks("alice", limit=2, cursor=second.cursor)
    assert [t.id for t in second.tasks + third.tasks] == ids[::-1][2:]
    assert third.cursor is None


async def test_list_skips_an_index_entry_without_a_record(
    store: ObjectStore, clock: Clock
) -> None:
    """An index entry whose status.json never landed (a crashed create) is skipped."""
    queue = TaskQueue(store, clock=clock)
    real = await queue.create("alice", "sleep", {"seconds": 0})
    await store.put_if_absent(_keys.user_index_key("alice", "01KBCQCK20JZ7R9YTJGD1AH5T3"), b"")
    page = await queue.list_tasks("alice", limit=10)
    assert [t.id for t in page.tasks] == [real.id]


async def test_pagination_is_stable_under_concurrent_creates(
    store: ObjectStore, clock: Clock
) -> None:
    """Tasks created while a user pages sort before the cursor, so no page repeats or skips."""
    queue = TaskQueue(store, clock=clock)
    old = []
    for _ in range(6):
        clock.advance(0.001)
        old.append((await queue.create("alice", "sleep", {"seconds": 0})).id)
    seen: list[str] = []
    cursor = None
    while True:
        clock.advance(0.001)
        page, _new = await asyncio.gather(
            queue.list_tasks("alice", limit=2, cursor=cursor),
            queue.create("alice", "sleep", {"seconds": 0}),
        )
        if cursor is None:
            # The first page may or may not include the task created alongside it.
            seen.extend(t.id for t in page.tasks if t.id in old)
        else:
            seen.extend(t.id for t in page.tasks)
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == old[::-1]


async def test_cancel_and_retry(store: ObjectStore, clock: Clock) -> None:
    """Cancel of a queued task is immediate and deletes its marker; retry requeues it."""
    queue = TaskQueue(store, clock=clock)
    task_id = await _queued(queue)
    cancelled = await queue.cancel(task_id)
    assert cancelled.state == "cancelled"
    assert await _markers(store) == []
    again = await queue.cancel(task_id)
    assert again.rev == cancelled.rev, "a second cancel writes nothing"
    retried = await queue.retry(task_id)
    assert retried.state == "queued"
    assert await _markers(store) == [retried.queue_marker]
    claim = await _claim(queue)
    await queue.complete(claim)
    with pytest.raises(IllegalTransition):
        await queue.retry(task_id)


async def test_claim_heartbeat_complete_with_output(store: ObjectStore, clock: Clock) -> None:
    """A claim opens attempt 1; heartbeats publish progress; complete names the attempt's
    output and deletes the marker; an output is never rewritten."""
    queue = TaskQueue(store, clock=clock)
    task_id = await _queued(queue)
    claim = await _claim(queue)
    assert (claim.task_id, claim.attempt, claim.record.state) == (task_id, 1, "running")
    clock.advance(10)
    claim = await queue.heartbeat(claim, lease_s=30, progress=Progress(rows_done=5))
    assert (await queue.get(task_id)).progress.rows_done == 5
    output = await queue.put_output(claim, "errors.csv", _chunks(b"line,", b"reason\n"))
    assert output == OutputFile("errors.csv", 12)
    with pytest.raises(PreconditionFailed):
        await queue.put_output(claim, "errors.csv", _chunks(b"again"))
    done = await queue.complete(claim, result={"rows": 5}, files=(output,))
    assert done.state == "succeeded"
    assert done.output is not None and done.output.attempt == 1
    assert await _markers(store) == []
    key = _keys.output_key(task_id, 1, "errors.csv")
    assert (await store.get(key)).data == b"line,reason\n"
    with pytest.raises(LeaseLost):
        await queue.heartbeat(claim)


async def test_fail_retryable_defers_and_permanent_ends(store: ObjectStore, clock: Clock) -> None:
    """A retryable failure requeues under a new marker due after the backoff (skipped by
    polls until then, the old marker deleted); a permanent one ends failed."""
    queue = TaskQueue(store, clock=clock)
    await _queued(queue)
    claim = await _claim(queue)
    old_marker = claim.record.queue_marker
    error = TaskError("boom", "it broke")
    requeued = await queue.fail(claim, error=error, retryable=True, backoff_s=10)
    assert requeued.state == "queued" and requeued.not_before == clock() + 10_000
    assert await _markers(store) == [requeued.queue_marker] != [old_marker]
    assert await queue.poll() == []
    assert await queue.claim_next(worker="w-1") is None
    clock.advance(10)
    claim = await _claim(queue)
    assert claim.attempt == 2
    failed = await queue.fail(claim, error=error, retryable=False)
    assert failed.state == "failed" and failed.error == error
    assert await _markers(store) == []


async def test_release_does_not_spend_the_attempt(store: ObjectStore, clock: Clock) -> None:
    """release puts the task back, due at once, keeping its marker and its budget."""
    queue = TaskQueue(store, clock=clock)
    record = await queue.create("alice", "sleep", {"seconds": 0}, max_attempts=1)
    await queue.submit(record.id)
    claim = await _claim(queue)
    released = await queue.release(claim)
    assert released.state == "queued" and released.spent() == 0
    assert await _markers(store) == [released.queue_marker]
    claim = await _claim(queue, "w-2")
    assert claim.attempt == 2 and claim.record.attempts[0].outcome == "released"


async def test_cancel_while_running_reaches_the_worker(store: ObjectStore, clock: Clock) -> None:
    """A cancel of a running task shows on the holder's next heartbeat; release ends it."""
    queue = TaskQueue(store, clock=clock)
    task_id = await _queued(queue)
    claim = await _claim(queue)
    assert (await queue.cancel(task_id)).cancel_requested
    claim = await queue.heartbeat(claim)  # stale ETag: 412, re-read, re-evaluated
    assert claim.cancel_requested
    assert (await queue.release(claim)).state == "cancelled"
    assert await _markers(store) == []


async def test_lease_expiry_take_over_fences_the_old_holder(
    store: ObjectStore, clock: Clock
) -> None:
    """After lease + grace another worker takes over in one CAS (attempt 1 lease_expired,
    attempt 2 runs); the old holder's writes raise LeaseLost."""
    queue = TaskQueue(store, clock=clock)
    await _queued(queue)
    stale = await _claim(queue, "w-1")
    clock.advance(30)
    assert await queue.claim_next(worker="w-2", lease_s=30, grace_s=5) is None  # in grace
    clock.advance(5.001)
    fresh = await _claim(queue, "w-2")
    assert fresh.attempt == 2
    assert fresh.record.attempts[0].outcome == "lease_expired"
    with pytest.raises(LeaseLost):
        await queue.heartbeat(stale)
    with pytest.raises(LeaseLost):
        await queue.complete(stale)
    assert (await queue.complete(fresh)).state == "succeeded"


async def test_take_over_of_the_last_attempt_fails_the_task(
    store: ObjectStore, clock: Clock
) -> None:
    """A worker that dies on the last attempt of the budget leaves a failed task behind."""
    queue = TaskQueue(store, clock=clock)
    record = await queue.create("alice", "sleep", {"seconds": 0}, max_attempts=1)
    await queue.submit(record.id)
    await _claim(queue)
    clock.advance(36)
    assert await queue.claim_next(worker="w-2", lease_s=30, grace_s=5) is None
    failed = await queue.get(record.id)
    assert failed.state == "failed" and failed.error is not None
    assert failed.error.code == "lease_expired"
    assert await _markers(store) == []


async def test_racing_claimers_exactly_one_wins(store: ObjectStore, clock: Clock) -> None:
    """Twelve claimers race for one task: exactly one claim, one attempt."""
    queue = TaskQueue(store, clock=clock)
    task_id = await _queued(queue)
    queues = [TaskQueue(store, clock=clock) for _ in range(12)]
    async with asyncio.timeout(DEADLINE_S):
        claims = await asyncio.gather(
            *(q.claim_next(worker=f"w-{i}") for i, q in enumerate(queues))
        )
    won = [c for c in claims if c is not None]
    assert len(won) == 1
    record = await queue.get(task_id)
    assert record.attempt == 1 and record.lease is not None
    assert record.lease.worker == won[0].record.lease.worker  # type: ignore[union-attr]


async def test_racing_claimers_share_many_tasks(store: ObjectStore, clock: Clock) -> None:
    """Six claimers drain ten tasks: every task is claimed exactly once."""
    queue = TaskQueue(store, clock=clock)
    ids = {await _queued(queue) for _ in range(10)}
    claimed: list[str] = []

    async def claimer(worker: str) -> None:
        q = TaskQueue(store, clock=clock)
        while (claim := await q.claim_next(worker=worker)) is not None or await q.poll():
            if claim is not None:
                claimed.append(claim.task_id)
                await q.complete(claim)

    async with asyncio.timeout(DEADLINE_S):
        await asyncio.gather(*(claimer(f"w-{i}") for i in range(6)))
    assert sorted(claimed) == sorted(ids)
    for task_id in ids:
        assert (await queue.get(task_id)).attempt == 1


async def test_stale_markers_are_deleted_the_live_one_kept(
    store: ObjectStore, clock: Clock
) -> None:
    """A marker the record does not name (a crash between marker and CAS), or of a terminal
    or missing task, is deleted by take; the live marker of a running task stays."""
    queue = TaskQueue(store, clock=clock)
    task_id = await _queued(queue)
    extra = _keys.marker_key(clock() - 1, task_id, "00000000000000aa")
    orphan = _keys.marker_key(clock() - 1, "01KBCQCK20JZ7R9YTJGD1AH5T3", "00000000000000bb")
    await store.put_if_absent(extra, b"")
    await store.put_if_absent(orphan, b"")
    young = await queue.take(extra, worker="w-1")
    assert (young.action, young.recheck_ms) == ("busy", None)
    clock.advance(STALE_MARKER_AGE_MS / 1000)
    assert (await queue.take(extra, worker="w-1")).action == "deleted"
    assert (await queue.take(orphan, worker="w-1")).action == "deleted"
    claim = await _claim(queue)
    live = claim.record.queue_marker
    assert live is not None
    busy = await queue.take(live, worker="w-2", lease_s=30, grace_s=5)
    assert busy.action == "busy" and busy.recheck_ms == clock() + 35_001
    assert await _markers(store) == [live]
    # A crash between the terminal CAS and the marker delete: the next take deletes it.
    done = await queue.complete(claim)
    await store.put_if_absent(live, b"")
    assert done.queue_marker == live
    assert (await queue.take(live, worker="w-2")).action == "deleted"
    assert await _markers(store) == []


async def test_a_marker_whose_cas_is_in_flight_is_not_deleted(
    store: ObjectStore, clock: Clock
) -> None:
    """A poll between an enqueue's marker create and its CAS leaves the young marker alone,
    so the task is claimable once the CAS lands (deleting it would strand a queued task)."""
    queue = TaskQueue(store, clock=clock)
    record = await queue.create("alice", "sleep", {"seconds": 0})
    original = queue._create_marker
    taken: list[str] = []

    async def create_then_poll(key: str) -> None:
        await original(key)
        taken.append((await queue.take(key, worker="w-0")).action)

    queue._create_marker = create_then_poll  # type: ignore[method-assign]
    await queue.submit(record.id)
    queue._create_marker = original  # type: ignore[method-assign]
    assert taken == ["busy"]
    claim = await queue.claim_next(worker="w-1")
    assert claim is not None and claim.task_id == record.id


# --- ambiguous outcomes ---------------------------------------------------------------------


class Meddling:
    """A store whose next status CAS is answered AmbiguousWrite, after ``before`` (a write
    by another party that lands before ours is tried), and ``apply`` says whether ours lands
    and ``after`` what lands on top of it."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self.apply = True
        self.before: Any = None
        self.after: Any = None
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def compare_and_set(self, key: str, data: bytes, etag: str) -> str:
        if not self.armed:
            return await self._store.compare_and_set(key, data, etag)
        self.armed = False
        if self.before is not None:
            await self.before()
        if self.apply:
            with contextlib.suppress(PreconditionFailed):
                await self._store.compare_and_set(key, data, etag)
            if self.after is not None:
                await self.after()
        raise AmbiguousWrite("answer lost", key=key)


async def test_ambiguous_claim_with_a_write_on_top_is_ours(
    store: ObjectStore, clock: Clock
) -> None:
    """A claim that landed, then a cancel on top, then an ambiguous answer: reconciled as
    ours (the write id is in recent_write_ids), so the worker holds the task, no second attempt."""
    meddling = Meddling(store)
    queue = TaskQueue(meddling, clock=clock)  # type: ignore[arg-type]
    api = TaskQueue(store, clock=clock)
    task_id = await _queued(queue)

    async def cancel_on_top() -> None:
        await api.cancel(task_id)

    meddling.after = cancel_on_top
    meddling.armed = True
    claim = await _claim(queue)
    assert claim.attempt == 1 and claim.cancel_requested
    assert queue.statistics().reconciled_ours == 1
    assert (await queue.release(claim)).state == "cancelled"


async def test_ambiguous_claim_lost_to_another_writer(store: ObjectStore, clock: Clock) -> None:
    """A claim that did not land while another worker's did, answered ambiguously: lost,
    re-evaluated against the winner's record, so the loser does not claim."""
    meddling = Meddling(store)
    queue = TaskQueue(meddling, clock=clock)  # type: ignore[arg-type]
    rival = TaskQueue(store, clock=clock)
    task_id = await _queued(rival)
    won: list[Claim] = []

    async def rival_claims() -> None:
        won.append(await _claim(rival, "w-rival"))

    meddling.before = rival_claims
    meddling.apply = False
    meddling.armed = True
    marker = (await rival.get(task_id)).queue_marker
    assert marker is not None
    result = await queue.take(marker, worker="w-1")
    assert (result.action, result.claim) == ("lost", None)
    assert queue.statistics().reconciled_lost == 1
    record = await rival.get(task_id)
    assert record.attempt == 1 and record.lease is not None
    assert record.lease.worker == "w-rival"


def _status_puts(proxy: FaultProxy) -> int:
    return sum(1 for s in proxy.seen if s.method == "PUT" and s.key.endswith("status.json"))


async def test_applied_then_500_on_claim_is_ours(
    s3_store: ObjectStore, proxy: FaultProxy, clock: Clock
) -> None:
    """A claim CAS applied by S3 but answered 500 is reconciled as ours: one attempt, held."""
    queue = TaskQueue(s3_store, clock=clock)
    task_id = await _queued(queue)
    proxy.add(Rule(Action.ERROR_AFTER, method="PUT", key="status.json$", nth=1, status=500))
    before = _status_puts(proxy)
    claim = await _claim(queue)
    assert _status_puts(proxy) == before + 1, "the CAS is not retried blindly"
    assert claim.attempt == 1
    assert queue.statistics().reconciled_ours == 1
    record = await queue.get(task_id)
    assert record.attempt == 1 and len(record.attempts) == 1
    assert (await queue.complete(claim)).state == "succeeded"


async def test_injected_409_on_claim_is_reevaluated(
    s3_store: ObjectStore, proxy: FaultProxy, clock: Clock
) -> None:
    """A 409 ConditionalRequestConflict (not applied) is lost; re-evaluated, the claim lands."""
    queue = TaskQueue(s3_store, clock=clock)
    task_id = await _queued(queue)
    proxy.add(Rule(Action.CONFLICT, method="PUT", key="status.json$", nth=1, status=409))
    claim = await _claim(queue)
    assert queue.statistics().reconciled_lost == 1
    assert (await queue.get(task_id)).attempt == claim.attempt == 1


class Flaky:
    """A store whose next ``failures`` reads (get, list) raise TransientError."""

    def __init__(self, store: ObjectStore, failures: int) -> None:
        self._store = store
        self.failures = failures

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _maybe_fail(self) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise TransientError("slow down", status=503, code="SlowDown")

    async def get(self, key: str) -> Any:
        self._maybe_fail()
        return await self._store.get(key)

    async def list(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail()
        return await self._store.list(*args, **kwargs)


async def test_transient_errors_on_reads_are_retried_bounded(
    store: ObjectStore, clock: Clock
) -> None:
    """Transient read errors (after the backend's own retries) are retried a bounded
    number of times with jittered sleeps; past the bound the error surfaces."""
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    flaky = Flaky(store, 0)
    queue = TaskQueue(flaky, clock=clock, sleep=sleep)  # type: ignore[arg-type]
    task_id = await _queued(queue)
    flaky.failures = TRANSIENT_TRIES - 1
    assert (await queue.get(task_id)).state == "queued"
    assert queue.statistics().transient_retries == TRANSIENT_TRIES - 1
    assert all(0 < s <= TRANSIENT_CAP_S for s in sleeps)
    flaky.failures = TRANSIENT_TRIES
    with pytest.raises(TransientError):
        await queue.poll()


async def test_ambiguous_create_is_reconciled(
    s3_store: ObjectStore, proxy: FaultProxy, clock: Clock
) -> None:
    """A status.json create applied but answered 500 is found by its write id: created once."""
    queue = TaskQueue(s3_store, clock=clock)
    proxy.add(Rule(Action.ERROR_AFTER, method="PUT", key="status.json$", nth=1, status=500))
    record = await queue.create("alice", "sleep", {"seconds": 0})
    assert await queue.get(record.id) == record
    raw = (await s3_store.get(_keys.status_key(record.id))).data
    assert decode(raw) == record and encode(record) == raw


async def test_create_answered_500_before_it_was_applied_is_made_again_once(
    s3_store: ObjectStore, proxy: FaultProxy, clock: Clock
) -> None:
    """A status.json create refused with a 500 before it reached the store (the re-read finds
    nothing) is made again, conditionally: the task exists once and the caller gets it."""
    queue = TaskQueue(s3_store, clock=clock, sleep=_no_sleep)
    proxy.add(Rule(Action.ERROR_BEFORE, method="PUT", key="status.json$", nth=1, status=500))
    record = await queue.create("alice", "sleep", {"seconds": 0})
    assert await queue.get(record.id) == record
    assert queue.statistics().transient_retries == 1


async def _no_sleep(seconds: float) -> None:
    assert 0 < seconds <= TRANSIENT_CAP_S
