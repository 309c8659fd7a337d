"""The ``file:`` backend's transient failures under an in-process worker (issue 17, part 4, on
the second backend): a file-system error that a later try gets past (EAGAIN, ETIMEDOUT and the
rest of ``_file.TRANSIENT_ERRNOS``), or a write applied with its directory fsync failing, on
each kind of request (marker listing, status read and write, input read, output write, marker
delete). The import runs once, in one clean attempt, and the worker then claims another task."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest

from minidb.batch._backoff import IdlePoll, RetryBackoff
from minidb.batch._queue import TaskQueue
from minidb.batch._worker import Worker, WorkerConfig
from minidb.objstore import FileStore
from tests.objstore.filefaults import Fault, FileFaults, lose_answer, refuse
from tests.server.conftest import ServeFactory

from .conftest import submit_task, terminal, until

pytestmark = pytest.mark.minidb_loop

DEADLINE_S = 30.0
"""How long any one wait of this module may take, in seconds."""
REQUESTS = {
    "list-markers": ("list", r"^queue/$"),
    "get-status": ("get", r"status\.json$"),
    "put-status": ("commit_replace", r"status\.json$"),
    "get-input": ("open", r"input\.csv$"),
    "put-output": ("commit_create", r"errors\.csv$"),
    "delete-marker": ("delete", r"^queue/."),
}
"""Each kind of request of a worker, as (core method, key regex)."""
WRITES = ("put-status", "put-output", "delete-marker")
FAULTS: dict[str, Fault] = {
    "eagain": refuse(errno.EAGAIN),
    "etimedout": refuse(errno.ETIMEDOUT),
    "estale": refuse(errno.ESTALE),
    "applied-unconfirmed": lose_answer,
}
CSV = b"bucket,key,value\nfault,a,1\nfault,b,2\nfault,bad key,3\n"


@pytest.mark.parametrize("fault", FAULTS)
async def test_file_fault_on_every_kind_of_request(
    tmp_path: Path, serve: ServeFactory, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """The fault strikes the first request of every kind it applies to (an unconfirmed
    write only to writes): one clean attempt, then the next task runs."""
    root = str(tmp_path / "objects")
    ours, theirs = FileStore(root), FileStore(root)  # only the worker's store has faults
    config = WorkerConfig(
        "w-file", lease_s=4.0, heartbeat_s=0.5, takeover_grace_s=0.5,
        poll=IdlePoll(min_s=0.05, cap_s=0.2), retry_backoff=RetryBackoff(0.05, 0.1),
    )
    worker = Worker(TaskQueue(theirs), config, minidb=("127.0.0.1", serve().port))
    queue = TaskQueue(ours)
    faults = FileFaults(monkeypatch, theirs)
    running = asyncio.ensure_future(worker.run())
    try:
        async with asyncio.timeout(DEADLINE_S):
            await worker.polling.wait()
        kinds = [k for k in REQUESTS if fault != "applied-unconfirmed" or k in WRITES]
        for kind in kinds:
            method, key = REQUESTS[kind]
            faults.on(method, FAULTS[fault], key=key)
        task_id = await submit_task(queue, "csv_import", {}, data=CSV)
        record = await until(queue, task_id, terminal, timeout=DEADLINE_S)
        other = await submit_task(queue, "sleep", {"seconds": 0})
        after = await until(queue, other, terminal, timeout=DEADLINE_S)
    finally:
        worker.stop()
        async with asyncio.timeout(DEADLINE_S):
            await running
        await ours.close()
        await theirs.close()
    assert record.state == "succeeded", record
    assert [(a.n, a.outcome) for a in record.attempts] == [(1, "succeeded")], record.attempts
    assert record.result == {"rows": 3, "ok": 2, "failed": 1}
    assert (after.state, after.attempt) == ("succeeded", 1)
    assert faults.fired == len(kinds)
