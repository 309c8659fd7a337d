"""Progress while an import runs (issue 17): on a slowed minidb, every heartbeat publishes the
rows acknowledged so far, so ``rows_done`` moves within one input chunk, and the lease and
``rev`` move with it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from minidb.batch._backoff import IdlePoll, RetryBackoff
from minidb.batch._model import TaskRecord
from minidb.batch._queue import TaskQueue
from minidb.batch._worker import Worker, WorkerConfig
from minidb.objstore import FileStore, ObjectStore
from minidb.objstore._types import READ_CHUNK_BYTES
from tests.server.conftest import ServeFactory

from .conftest import submit_task, terminal, until

pytestmark = pytest.mark.minidb_loop

ROWS = 20_000
"""Rows of the import: about 500 KB, one read chunk of the input."""
APPLY_DELAY_S = 0.1
"""The slowed server waits this long before applying each group of requests, in seconds."""
HEARTBEAT_S = 0.2
DEADLINE_S = 60.0
"""No wait of this module lasts longer, in seconds."""


def _csv() -> bytes:
    rows = b"".join(b"prog,key%06d,value-%06d\n" % (i, i) for i in range(ROWS))
    data = b"bucket,key,value\n" + rows
    assert len(data) < READ_CHUNK_BYTES  # the whole input is one chunk
    return data


async def _watch(queue: TaskQueue, task_id: str) -> list[TaskRecord]:
    """Every distinct record of the task while it runs, until it ends."""
    seen: list[TaskRecord] = []
    async with asyncio.timeout(DEADLINE_S):
        while True:
            record = await queue.get(task_id)
            if terminal(record):
                return seen
            if record.state == "running" and (not seen or seen[-1].rev != record.rev):
                seen.append(record)
            await asyncio.sleep(0.02)


async def test_rows_done_moves_at_every_heartbeat_within_one_chunk(
    file_store: ObjectStore, serve: ServeFactory
) -> None:
    """An import of one input chunk into a slowed minidb: the running record shows rows_done
    growing from heartbeat to heartbeat (not one jump at the chunk's end), never past the
    rows acknowledged, with the lease extended and rev bumped at each."""
    assert isinstance(file_store, FileStore)
    server = serve(env={"MINIDB_FAILPOINTS": f"store.apply=delay({APPLY_DELAY_S})"})
    config = WorkerConfig(
        "w-progress", lease_s=3.0, heartbeat_s=HEARTBEAT_S, takeover_grace_s=0.5,
        poll=IdlePoll(min_s=0.05, cap_s=0.2), retry_backoff=RetryBackoff(0.1, 0.2),
    )
    worker = Worker(TaskQueue(file_store), config, minidb=("127.0.0.1", server.port))
    queue = TaskQueue(file_store)
    running = asyncio.ensure_future(worker.run())
    try:
        task_id = await submit_task(queue, "csv_import", {"connections": 1}, data=_csv())
        beats = await _watch(queue, task_id)
        final = await until(queue, task_id, terminal, timeout=DEADLINE_S)
    finally:
        worker.stop()
        async with asyncio.timeout(DEADLINE_S):
            await running
    assert final.state == "succeeded", final.error
    assert final.progress.rows_done == ROWS
    moving: list[Any] = [r.progress.rows_done for r in beats if 0 < r.progress.rows_done < ROWS]
    assert len(set(moving)) >= 3, [(r.rev, r.progress) for r in beats]
    done = [r.progress.rows_done for r in beats]
    assert done == sorted(done), done
    revs = [r.rev for r in beats]
    expiries = [r.lease.expires_at for r in beats if r.lease is not None]
    assert revs == sorted(set(revs)) and expiries == sorted(set(expiries))
