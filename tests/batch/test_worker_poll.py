"""The worker's poll loop on the virtual clock: when it polls after polls that failed on the
store, and that one marker it cannot handle does not stop it from claiming the others."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from minidb.batch import _keys
from minidb.batch._backoff import ERROR_PAUSE_CAP_S, POLL_JITTER, IdlePoll
from minidb.batch._queue import TaskQueue
from minidb.batch._worker import Worker, WorkerConfig
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
