"""Records in every phase of the task state machine, and stores on both backends with a
settable clock, for the batch tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from minidb.batch import _machine as m
from minidb.batch._model import TaskError, TaskRecord, new_record
from minidb.batch._queue import TaskQueue
from tests.objstore.conftest import file_store, proxy, s3_store, s3rig  # noqa: F401
from tests.server.conftest import serve  # noqa: F401

from .procs import backend_fixture, queue_fixture, workers_fixture  # noqa: F401

T0 = 1_764_585_000_000
"""A fixed Unix time in milliseconds (2025-12-01T10:30:00Z); tests pass time explicitly."""
TASK_ID = "01KBCQCK20JZ7R9YTJGD1AH5T3"
LEASE = "a" * 32
NONCE = "0123456789abcdef"


def created(max_attempts: int = 3) -> TaskRecord:
    """A fresh task."""
    return new_record(
        TASK_ID, "csv_import", {"max_bad_rows": 0}, created_by="alice", now_ms=T0,
        name="June import", max_attempts=max_attempts,
    )


def queued(max_attempts: int = 3) -> TaskRecord:
    """A submitted task."""
    return m.submit(created(max_attempts), T0 + 1000, nonce=NONCE)


def running(max_attempts: int = 3, lease_id: str = LEASE) -> TaskRecord:
    """A task claimed by worker w-1 at T0 + 2 s with a 30 s lease."""
    return m.claim(queued(max_attempts), T0 + 2000, worker="w-1", lease_id=lease_id, lease_s=30)


def in_phase(phase: str) -> TaskRecord:
    """A record whose ``_machine.phase`` is ``phase``."""
    now = T0 + 3000
    if phase == "created":
        return created()
    if phase == "queued":
        return queued()
    if phase == "running":
        return running()
    if phase == "cancelling":
        return m.request_cancel(running(), now)
    if phase == "succeeded":
        return m.complete(running(), now, lease_id=LEASE, result={"rows": 1})
    if phase == "failed":
        error = TaskError("bad_header", "the header is not bucket,key,value")
        return m.fail(running(), now, lease_id=LEASE, error=error, retryable=False)
    if phase == "cancelled":
        return m.request_cancel(queued(), now)
    raise AssertionError(phase)


PHASES_ALL = ("created", "queued", "running", "cancelling", "succeeded", "failed", "cancelled")


# --- stores for the queue shell: both backends, as in tests/objstore ------------------------


class Clock:
    """A settable wall clock in Unix milliseconds, for ``TaskQueue(clock=...)``."""

    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, seconds: float) -> None:
        self.now_ms += round(seconds * 1000)


@pytest.fixture(params=["file", "s3"])
def store(request: pytest.FixtureRequest) -> object:
    """An empty object store on each backend (S3: moto through the fault proxy)."""
    return request.getfixturevalue("file_store" if request.param == "file" else "s3_store")


@pytest.fixture
def clock() -> Clock:
    """A wall clock that only moves when the test says so."""
    return Clock()


# --- helpers of the worker and scenario tests -----------------------------------------------

WAIT_S = 30.0
"""How long ``until`` waits for a task to reach a state, in seconds."""


async def until(
    queue: TaskQueue, task_id: str, done: Callable[[TaskRecord], bool], timeout: float = WAIT_S
) -> TaskRecord:
    """Re-read the task until ``done(record)``; fail the test (showing it) after ``timeout``."""
    record = await queue.get(task_id)
    try:
        async with asyncio.timeout(timeout):
            while not done(record):
                await asyncio.sleep(0.05)
                record = await queue.get(task_id)
    except TimeoutError:
        pytest.fail(f"task did not get there in {timeout} s: {record}")
    return record


def terminal(record: TaskRecord) -> bool:
    """Whether the task has ended."""
    return record.state in ("succeeded", "failed", "cancelled")


async def _one_chunk(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def submit_task(
    queue: TaskQueue, task_type: str, params: dict[str, Any], *, data: bytes | None = None,
    max_attempts: int = 3,
) -> str:
    """Create alice's task (with ``data`` as its input), submit it, return its id."""
    record = await queue.create("alice", task_type, params, max_attempts=max_attempts)
    if data is not None:
        await queue.put_input(record.id, _one_chunk(data))
    await queue.submit(record.id, needs_input=data is not None)
    return record.id
