"""The worker's poll loop, mostly on the virtual clock: when it polls after polls that failed
on the store; that one marker it cannot handle does not stop it from claiming the others; the
adaptive schedule (quick after work, backing off to the cap, jittered so a fleet drifts apart);
and the in-process wake (issue 20: a task submitted where a worker runs is claimed at once)."""

from __future__ import annotations

import asyncio
import itertools
import random
from pathlib import Path
from typing import Any

import pytest

from minidb.batch import _keys
from minidb.batch._backoff import ERROR_PAUSE_CAP_S, POLL_JITTER, IdlePoll
from minidb.batch._queue import TaskQueue
from minidb.batch._worker import Worker, WorkerConfig, wake_one
from minidb.objstore import FileStore, TransientError

from .conftest import submit_task, terminal, until

STOP_DEADLINE_S = 30.0
"""Virtual seconds a stopping worker may take (nothing runs, so it is immediate)."""


class StubQueue:
    """A queue whose polls fail ``failures`` times on the store, then find nothing; it
    notes the loop time of each poll."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.polls: list[float] = []

    def now_ms(self) -> int:
        return 0

    async def poll(self) -> list[str]:
        self.polls.append(asyncio.get_running_loop().time())
        if self.failures:
            self.failures -= 1
            raise TransientError("injected: the store is down")
        return []


def _worker(queue: Any, poll: IdlePoll) -> Worker:
    config = WorkerConfig("w-poll", poll=poll)
    return Worker(queue, config, minidb=("127.0.0.1", 1))


async def _run_for(worker: Worker, seconds: float) -> None:
    running = asyncio.ensure_future(worker.run())
    await asyncio.sleep(seconds)
    worker.stop()
    async with asyncio.timeout(STOP_DEADLINE_S):
        await running


def _gaps(times: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in itertools.pairwise(times)]


@pytest.mark.minidb_paused
async def test_polls_after_store_errors_come_soon_not_at_the_idle_cap() -> None:
    """Six polls fail: the next ones come 0.5, 1, 2, 4, 5, 5 s later (jittered), not after
    the idle interval's growth; once the store answers, the idle schedule starts afresh at
    its minimum. The worker never stops polling."""
    queue = StubQueue(failures=6)
    worker = _worker(queue, IdlePoll(min_s=1, cap_s=60))
    await _run_for(worker, 60)
    gaps = _gaps(queue.polls)
    expected_errors = [0.5, 1, 2, 4, ERROR_PAUSE_CAP_S, ERROR_PAUSE_CAP_S]
    for gap, pause in zip(gaps, expected_errors, strict=False):
        assert pause * (1 - POLL_JITTER) <= gap <= pause * (1 + POLL_JITTER), gaps
    idle = gaps[len(expected_errors):]
    for gap, interval in zip(idle, [1, 2, 4, 8, 16], strict=False):
        assert interval * (1 - POLL_JITTER) <= gap <= interval * (1 + POLL_JITTER), gaps
    assert worker.statistics().store_errors == 6


@pytest.mark.minidb_loop
async def test_a_marker_that_cannot_be_read_does_not_hide_the_others(tmp_path: Path) -> None:
    """Nine tasks whose status.json is corrupt sit at the head of the queue; the tenth is
    fine. The worker skips the bad ones (each poll) and claims and runs the tenth (a poll
    used to end at the first bad record, so the task behind it was never claimed)."""
    store = FileStore(str(tmp_path / "objects"))
    queue = TaskQueue(store)
    try:
        for _ in range(9):
            bad = await submit_task(queue, "sleep", {"seconds": 0})
            await store.put(_keys.status_key(bad), b"{not json")
        good = await submit_task(queue, "sleep", {"seconds": 0})
        config = WorkerConfig("w-skip", poll=IdlePoll(min_s=0.05, cap_s=0.2))
        worker = Worker(TaskQueue(store), config, minidb=("127.0.0.1", 1))
        running = asyncio.ensure_future(worker.run())
        try:
            record = await until(queue, good, terminal, timeout=STOP_DEADLINE_S)
        finally:
            worker.stop()
            async with asyncio.timeout(STOP_DEADLINE_S):
                await running
        assert (record.state, record.attempt) == ("succeeded", 1)
        assert worker.statistics().store_errors >= 9
    finally:
        await store.close()


# --- the adaptive schedule and the wake (issue 20, "Pick-up latency") -----------------------

T0_MS = 1_764_585_000_000
"""The virtual clock's zero as Unix milliseconds (the queue's clock in these tests)."""


def _virtual_queue(store: FileStore) -> TaskQueue:
    """A queue whose clock is the loop's virtual one, so leases and due times move with it."""
    loop = asyncio.get_running_loop()
    return TaskQueue(store, clock=lambda: T0_MS + round(loop.time() * 1000))


class Recorded:
    """A worker on a real queue whose polls' loop times are noted."""

    def __init__(self, store: FileStore, poll: IdlePoll, seed: int, name: str = "w") -> None:
        self.queue = _virtual_queue(store)
        self.polls: list[float] = []
        real = self.queue.poll

        async def noted(limit: int = 50) -> list[str]:
            self.polls.append(asyncio.get_running_loop().time())
            return await real(limit)
        self.queue.poll = noted  # type: ignore[method-assign]
        self.worker = Worker(self.queue, WorkerConfig(name, poll=poll),
                             minidb=("127.0.0.1", 1), rng=random.Random(seed))


def _within(gaps: list[float], intervals: list[float]) -> bool:
    return len(gaps) >= len(intervals) and all(
        i * (1 - POLL_JITTER) <= g <= i * (1 + POLL_JITTER) for g, i in zip(gaps, intervals,
                                                                           strict=False))


@pytest.mark.minidb_paused
async def test_poll_schedule_is_quick_after_work_and_backs_off_to_the_cap(
    tmp_path: Path,
) -> None:
    """Idle from the start: polls 1, 2, 4, 8 s apart, then every 10 s (each within the
    jitter band). A task submitted at t=60 is claimed at the next poll, at most 11 s later;
    the worker polls again at once, then 1, 2, 4, 8, 10 s apart again."""
    store = FileStore(str(tmp_path / "objects"))
    rig = Recorded(store, IdlePoll(min_s=1, cap_s=10), seed=1)
    running = asyncio.ensure_future(rig.worker.run())
    try:
        await asyncio.sleep(60)
        submitted = asyncio.get_running_loop().time()
        task_id = await submit_task(_virtual_queue(store), "sleep", {"seconds": 0})
        await asyncio.sleep(60)
        record = await rig.queue.get(task_id)
    finally:
        rig.worker.stop()
        async with asyncio.timeout(STOP_DEADLINE_S):
            await running
        await store.close()
    assert record.state == "succeeded"
    before = [t for t in rig.polls if t <= submitted]
    claimed_at = next(t for t in rig.polls if t > submitted)
    after = [t for t in rig.polls if t >= claimed_at]
    assert _within(_gaps(before), [1, 2, 4, 8, 10, 10, 10]), _gaps(before)
    assert claimed_at - submitted <= 10 * (1 + POLL_JITTER)
    assert record.attempts[0].started_at == T0_MS + round(claimed_at * 1000)
    gaps = _gaps(after)
    assert gaps[0] == 0, gaps  # the poll after a claim comes at once
    assert _within(gaps[1:], [1, 2, 4, 8, 10]), gaps


@pytest.mark.minidb_paused
async def test_a_fleet_started_together_does_not_poll_in_step(tmp_path: Path) -> None:
    """Three idle workers started at the same instant, same schedule, different random
    sources: after two minutes at the cap no two of them poll at the same moment, and they
    have spread over more than a second."""
    store = FileStore(str(tmp_path / "objects"))
    rigs = [Recorded(store, IdlePoll(min_s=1, cap_s=10), seed=s, name=f"w{s}") for s in (1, 2, 3)]
    running = [asyncio.ensure_future(rig.worker.run()) for rig in rigs]
    try:
        await asyncio.sleep(150)
    finally:
        for rig in rigs:
            rig.worker.stop()
        async with asyncio.timeout(STOP_DEADLINE_S):
            await asyncio.gather(*running)
        await store.close()
    late = [[t for t in rig.polls if t > 120] for rig in rigs]
    instants = [t for polls in late for t in polls]
    assert len(set(instants)) == len(instants), late
    firsts = [polls[0] for polls in late]
    assert max(firsts) - min(firsts) > 1.0, late


@pytest.mark.minidb_paused
async def test_a_task_submitted_in_process_is_claimed_at_once(tmp_path: Path) -> None:
    """The API's queue wakes the idle worker of its process when it makes a task claimable:
    the claim happens at the submit's own (virtual) instant, not at the next poll 60 s on."""
    store = FileStore(str(tmp_path / "objects"))
    rig = Recorded(store, IdlePoll(min_s=60, cap_s=60), seed=1)
    api = _virtual_queue(store)
    api.on_claimable(lambda _task_id: wake_one([rig.worker]))
    running = asyncio.ensure_future(rig.worker.run())
    try:
        await asyncio.sleep(100)
        submitted = asyncio.get_running_loop().time()
        task_id = await submit_task(api, "sleep", {"seconds": 0})
        record = await until(api, task_id, terminal, timeout=STOP_DEADLINE_S)
    finally:
        rig.worker.stop()
        async with asyncio.timeout(STOP_DEADLINE_S):
            await running
        await store.close()
    assert record.attempts[0].started_at == T0_MS + round(submitted * 1000)
    assert rig.worker.statistics().wakes == 1


class GatedQueue(StubQueue):
    """Polls that wait for the test to let them finish, finding nothing."""

    def __init__(self) -> None:
        super().__init__(failures=0)
        self.gate = asyncio.Event()

    async def poll(self) -> list[str]:
        self.polls.append(asyncio.get_running_loop().time())
        await self.gate.wait()
        self.gate.clear()
        return []


@pytest.mark.minidb_paused
async def test_a_wake_during_a_poll_makes_the_worker_poll_again_at_once() -> None:
    """The poll under way may have listed before the woken-for task's marker existed: after
    it, the worker polls again at once instead of sleeping its interval."""
    queue = GatedQueue()
    worker = _worker(queue, IdlePoll(min_s=30, cap_s=30))
    running = asyncio.ensure_future(worker.run())
    try:
        await asyncio.sleep(5)  # first poll, at t=0, is waiting at the gate
        assert worker.wake()
        assert not worker.wake()  # one pending wake is enough
        queue.gate.set()
        await asyncio.sleep(1)  # the second poll, at t=5, waits at the gate
        queue.gate.set()
        await asyncio.sleep(60)
    finally:
        worker.stop()
        queue.gate.set()
        async with asyncio.timeout(STOP_DEADLINE_S):
            await running
    # t=0 poll, woken during it: the next at 5 (when it ended), not 30 s later; that one
    # ended at 6 with no wake pending, so the one after it is the interval away.
    assert queue.polls[:2] == [0.0, 5.0]
    assert 6.0 + 30 * (1 - POLL_JITTER) <= queue.polls[2] <= 6.0 + 30 * (1 + POLL_JITTER)


def test_wake_one_prefers_a_sleeping_worker_and_skips_busy_ones() -> None:
    """wake_one wakes a sleeping worker before one in the middle of a poll, never one running
    a task or already woken, and None when no one can be woken."""
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        workers = [_worker(StubQueue(0), IdlePoll()) for _ in range(3)]
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    workers[0].state, workers[1].state, workers[2].state = "running", "polling", "sleeping"
    assert wake_one(workers) is workers[2]
    assert wake_one(workers) is workers[1]  # the sleeper has its wake pending
    assert wake_one(workers) is None
