"""The worker: poll the queue, claim a task, run its type under a heartbeating lease.

Theory of operation. ``Worker.run`` loops until ``stop()``:

1. **poll**: LIST the due head of ``queue/`` (``TaskQueue.poll``), skipping markers of tasks
   known to be running under a live lease until that lease could have expired (so a running
   task costs other workers no GET per poll), and ``take`` each in turn until one claims;
2. **run** the claimed attempt (``_Attempt``): the task type's runner as an asyncio task, and
   beside it a heartbeat every ``heartbeat_s`` that extends the lease and publishes progress.
   A heartbeat that finds ``cancel_requested`` or meets ``LeaseLost`` cancels the runner at
   once; so does the holder's own clock passing ``expires_at - heartbeat_s`` without a
   successful heartbeat (the store is unreachable: stop before another worker may take over);
3. **finish** with one fenced CAS: ``complete`` with the files written, ``fail`` (retryable
   failures get ``not_before`` from ``RetryBackoff``; the machine decides whether budget is
   left), or ``release`` (cancel seen, or the worker is stopping);
4. **sleep** the adaptive idle interval (``IdlePoll``: the minimum after the first empty poll
   that follows work, doubling per empty poll to the cap, jittered) after a poll that found
   nothing; a poll that claimed polls again at once. A poll that failed on the store is not an
   empty queue: the next one comes after ``IdlePoll.error_pause`` (half a second, doubling to
   a few seconds while the store keeps failing), and the idle schedule is left where it was.

**Wake.** ``wake()`` ends the idle sleep at once: the API of the same process calls it (through
``TaskQueue.on_claimable`` and ``wake_one``) when it has just made a task claimable, so a task
submitted to ``minidb up`` or ``minidb batch serve --workers N`` is claimed in milliseconds, not
at the next poll. A wake that arrives while a poll is under way is kept, and the worker polls
again as soon as that poll ends (the poll may have listed before the task's marker existed);
a worker running a task is not woken (it polls at once when the task ends anyway).

``stop()`` (SIGTERM in the CLI): stop claiming; a running attempt gets ``shutdown_grace_s`` to
finish, then is cancelled and released back to ``queued`` without spending an attempt.

Storage errors while polling or finishing are logged and survived: a worker never dies of a
flaky store or an unreachable minidb (those are retryable attempt failures). Which errors are
transient is decided once, where foreign errors are translated (``minidb.objstore``: a dropped
or reset connection, a 5xx, a throttling answer; docs/batch.md, "Which failures are
transient"); the layers above only ask ``TransientError`` or not. A marker whose handling
fails (its record unreadable, or the store failing on it) is skipped for the rest of the poll
instead of ending it, so one bad marker cannot hide the tasks queued behind it. A store error
raised out of a task's run (its input or output could not be read or written, after the
store's own retries) fails the attempt retryably with ``store_unavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import Sequence
from typing import Any

from minidb.batch import _machine as m
from minidb.batch._backoff import IdlePoll, RetryBackoff
from minidb.batch._errors import IllegalTransition, LeaseLost, TaskTypeError
from minidb.batch._model import MAX_ATTEMPTS_LIMIT, TaskError
from minidb.batch._queue import Claim, TaskQueue
from minidb.batch._runner import AttemptContext, LazyClient, runner_of
from minidb.batch._tasktypes import TaskFailure, TaskOutcome, TaskTypeRegistry
from minidb.errors import MinidbError
from minidb.objstore import ObjectStoreError

log = logging.getLogger("minidb.batch.worker")

DEFAULT_HEARTBEAT_S = 10.0
"""Seconds between heartbeats (at most a third of the lease)."""
DEFAULT_SHUTDOWN_GRACE_S = 30.0
"""How long a stopping worker lets the running attempt finish before releasing it, seconds."""
HEARTBEAT_RETRY_S = 0.5
"""After a heartbeat that failed on a store error, the next try comes this much later, s."""


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """How a worker behaves; every time in seconds."""

    worker_id: str
    lease_s: float = m.DEFAULT_LEASE_S
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    takeover_grace_s: float = m.DEFAULT_GRACE_S
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S
    max_attempts: int = MAX_ATTEMPTS_LIMIT
    """A retryable failure of an attempt numbered this or higher in its budget is final,
    whatever the record allows (an operator's cap)."""
    poll: IdlePoll = dataclasses.field(default_factory=IdlePoll)
    retry_backoff: RetryBackoff = dataclasses.field(default_factory=RetryBackoff)

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_s <= self.lease_s / 2:
            raise ValueError("the heartbeat must be positive and at most half the lease")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")


@dataclasses.dataclass
class WorkerStatistics:
    """Counters of one worker."""

    polls: int = 0
    claims: int = 0
    succeeded: int = 0
    failed: int = 0
    released: int = 0
    lease_lost: int = 0
    heartbeats: int = 0
    store_errors: int = 0
    wakes: int = 0


class Worker:
    """One worker process's loop (see the module docstring)."""

    def __init__(
        self,
        queue: TaskQueue,
        config: WorkerConfig,
        *,
        minidb: tuple[str, int],
        registry: TaskTypeRegistry | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.queue = queue
        self.config = config
        self._minidb = minidb
        self._registry = registry or TaskTypeRegistry()
        self._rng = rng or random.Random()
        self._stopping = asyncio.Event()
        self._nudge = asyncio.Event()
        """Set by ``wake()`` and ``stop()``: ends the idle sleep."""
        self._woken = False
        """A wake has arrived that no poll has started to answer yet."""
        self.state = "polling"
        """``polling``, ``sleeping`` (between polls) or ``running`` (a task)."""
        self._recheck: dict[str, int] = {}
        self._stats = WorkerStatistics()
        self.polling = asyncio.Event()
        """Set once the first poll has been made (the CLI prints ``ready`` then)."""

    def statistics(self) -> WorkerStatistics:
        return dataclasses.replace(self._stats)

    def stop(self) -> None:
        """Stop claiming; the running attempt finishes within the grace or is released."""
        self._stopping.set()
        self._nudge.set()

    def wake(self) -> bool:
        """Poll now rather than at the end of the idle sleep (a task was just made claimable
        in this process). False, and nothing done, if the worker is running a task or a wake
        is already pending: another worker should be asked."""
        if self.state == "running" or self._woken:
            return False
        self._woken = True
        self._stats.wakes += 1
        self._nudge.set()
        return True

    async def run(self) -> None:
        """Poll and run tasks until ``stop()``."""
        empty = 0  # empty polls in a row: the idle schedule's position
        failures = 0  # polls in a row that failed on the store
        while not self._stopping.is_set():
            self.state = "polling"
            self._woken = False  # this poll answers every wake so far
            self._nudge.clear()
            try:
                claim = await self._claim_one()
                failures = 0
            except (MinidbError, OSError) as exc:
                self._stats.store_errors += 1
                failures += 1
                log.warning("poll failed (%d in a row): %s", failures, exc)
                claim = None
            finally:
                self.polling.set()
            if claim is not None:
                self.state = "running"
                await self._run(claim)
                empty = 0
                continue
            if failures:
                sleep = self.config.poll.error_pause(failures, self._rng)
            else:
                empty += 1
                sleep = self.config.poll.sleep_for(self.config.poll.interval(empty), self._rng)
            self.state = "sleeping"
            # A wake or stop() during the poll has set the nudge already: no sleep then.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudge.wait(), sleep)

    async def _claim_one(self) -> Claim | None:
        """One poll: LIST the due markers and take them in turn until one claims a task. A
        marker whose handling fails is skipped (and counted) rather than ending the poll."""
        self._stats.polls += 1
        now = self.queue.now_ms()
        self._recheck = {k: t for k, t in self._recheck.items() if t > now}
        for marker in await self.queue.poll():
            if self._stopping.is_set():
                return None
            if marker in self._recheck:
                continue
            try:
                result = await self.queue.take(
                    marker, worker=self.config.worker_id, lease_s=self.config.lease_s,
                    grace_s=self.config.takeover_grace_s,
                )
            except (MinidbError, OSError) as exc:
                self._stats.store_errors += 1
                log.warning("marker %s skipped: %s", marker, exc)
                continue
            if result.recheck_ms is not None:
                self._recheck[marker] = result.recheck_ms
            if result.claim is not None:
                self._stats.claims += 1
                return result.claim
        return None

    async def _run(self, claim: Claim) -> None:
        minidb = LazyClient(*self._minidb)
        try:
            await _Attempt(self, claim, minidb).run()
        except (MinidbError, OSError) as exc:
            self._stats.store_errors += 1
            log.warning("task %s attempt %d: %s", claim.task_id, claim.attempt, exc)
        finally:
            await minidb.close()


class _Attempt:
    """One claimed attempt: the runner, its heartbeats, and the one CAS that ends it."""

    def __init__(self, worker: Worker, claim: Claim, minidb: LazyClient) -> None:
        self.worker = worker
        self.queue = worker.queue
        self.config = worker.config
        self.claim = claim
        self.minidb = minidb
        self.lost = False
        self.context: AttemptContext | None = None

    async def run(self) -> None:
        try:
            task_type = self.worker._registry.get(self.claim.record.type)
            params = task_type.validate(self.claim.record.params)
            runner = runner_of(task_type)
            if runner is None:
                raise TaskTypeError("the type has no runner", task_type=task_type.name)
        except TaskTypeError as exc:
            await self._fail(TaskFailure("invalid_task", str(exc), retryable=False))
            return
        self.context = AttemptContext(self.queue, self.claim, params, self.minidb)
        work = asyncio.ensure_future(runner(self.context))
        beats = asyncio.ensure_future(self._heartbeats(work))
        stop = asyncio.ensure_future(self._on_stop(work))
        try:
            outcome: Any
            try:
                outcome = await work
            except asyncio.CancelledError:
                if not work.cancelled():
                    raise
                outcome = None
            except TaskFailure as exc:
                outcome = exc
            except ObjectStoreError as exc:  # input or output, after the store's own retries
                outcome = TaskFailure("store_unavailable", f"{type(exc).__name__}: {exc}",
                                      retryable=True)
            except Exception as exc:  # the type's bug: fail the attempt, keep the worker
                log.exception("task %s raised", self.claim.task_id)
                outcome = TaskFailure("internal_error", f"{type(exc).__name__}: {exc}",
                                      retryable=True)
        finally:
            beats.cancel()
            stop.cancel()
            await asyncio.gather(beats, stop, return_exceptions=True)
            self.context.abort()
        await self._finish(outcome)

    async def _on_stop(self, work: asyncio.Future[Any]) -> None:
        await self.worker._stopping.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(work), self.config.shutdown_grace_s)
            return
        work.cancel()

    async def _heartbeats(self, work: asyncio.Future[Any]) -> None:
        """Heartbeat every ``heartbeat_s``; cancel ``work`` on cancel, lease loss, or when
        the lease would lapse before the next heartbeat could land."""
        assert self.context is not None
        delay = self.config.heartbeat_s
        while True:
            await asyncio.sleep(delay)
            lease = self.claim.record.lease
            assert lease is not None
            try:
                self.claim = await self.queue.heartbeat(
                    self.claim, lease_s=self.config.lease_s, progress=self.context.progress
                )
                self.worker._stats.heartbeats += 1
                delay = self.config.heartbeat_s
            except IllegalTransition:  # LeaseLost, or the task ended under us
                self.lost = True
                work.cancel()
                return
            except (MinidbError, OSError) as exc:
                log.warning("heartbeat of %s failed: %s", self.claim.task_id, exc)
                deadline = lease.expires_at - round(self.config.heartbeat_s * 1000)
                if self.queue.now_ms() >= deadline:
                    self.lost = True  # stop before another worker may take over
                    work.cancel()
                    return
                delay = HEARTBEAT_RETRY_S
                continue
            if self.claim.cancel_requested:
                self.context.cancelled = True
                work.cancel()
                return

    async def _finish(self, outcome: TaskOutcome | TaskFailure | None) -> None:
        assert self.context is not None
        stats = self.worker._stats
        if self.lost:
            stats.lease_lost += 1
            return
        progress = self.context.progress
        try:
            if outcome is None:  # cancelled: a cancel request, or the worker is stopping
                await self.queue.release(self.claim, progress=progress)
                stats.released += 1
            elif isinstance(outcome, TaskFailure):
                await self._fail(outcome)
            else:
                done = await self.queue.complete(
                    self.claim, result=dict(outcome.result), files=self.context.files(),
                    progress=progress,
                )
                if done.state == "succeeded":
                    stats.succeeded += 1
        except LeaseLost:
            stats.lease_lost += 1

    async def _fail(self, failure: TaskFailure) -> None:
        spent = self.claim.record.spent()
        backoff = self.config.retry_backoff.delay(spent, self.worker._rng)
        retryable = failure.retryable and spent < self.config.max_attempts
        progress = None if self.context is None else self.context.progress
        try:
            await self.queue.fail(
                self.claim, error=TaskError.of(failure.code, failure.message),
                retryable=retryable, backoff_s=backoff, progress=progress,
            )
        except LeaseLost:
            self.worker._stats.lease_lost += 1
            return
        self.worker._stats.failed += 1


def wake_one(workers: Sequence[Worker]) -> Worker | None:
    """Wake one of ``workers`` for a task just made claimable: a sleeping one if there is
    one, else one that is polling without a wake pending (it polls again after this poll);
    None if every worker is running a task or already woken (each polls when it is free)."""
    for wanted in ("sleeping", "polling"):
        for worker in workers:
            if worker.state == wanted and worker.wake():
                return worker
    return None
