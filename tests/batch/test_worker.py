"""The worker loop in-process, on both backends, against a real ``minidb serve`` subprocess."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from minidb.batch import _keys
from minidb.batch._backoff import IdlePoll, RetryBackoff
from minidb.batch._queue import TaskQueue
from minidb.batch._worker import Worker, WorkerConfig
from minidb.client import Client
from minidb.objstore import ObjectStore
from tests.server.conftest import ServeFactory

from .conftest import submit_task, terminal, until

pytestmark = pytest.mark.minidb_loop

DEADLINE_S = 20.0
"""No wait of this module lasts longer than this, in seconds."""


def _config(worker_id: str = "w-1", **changes: Any) -> WorkerConfig:
    settings: dict[str, Any] = dict(
        worker_id=worker_id, lease_s=2.0, heartbeat_s=0.3, takeover_grace_s=0.5,
        shutdown_grace_s=0.2, poll=IdlePoll(min_s=0.05, cap_s=0.2),
        retry_backoff=RetryBackoff(base_s=0.1, cap_s=0.2),
    )
    settings.update(changes)
    return WorkerConfig(**settings)




class Running:
    """A worker running as an asyncio task for the length of an ``async with``."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Worker:
        self.task = asyncio.ensure_future(self.worker.run())
        return self.worker

    async def __aexit__(self, *exc: object) -> None:
        self.worker.stop()
        assert self.task is not None
        async with asyncio.timeout(DEADLINE_S):
            await self.task








@pytest.fixture
def minidb(serve: ServeFactory) -> tuple[str, int]:
    """A real minidb server (subprocess) and its address."""
    return ("127.0.0.1", serve().port)


def _worker(store: ObjectStore, minidb: tuple[str, int], **changes: Any) -> Worker:
    return Worker(TaskQueue(store), _config(**changes), minidb=minidb)


async def _with_client(minidb: tuple[str, int], op: Callable[[Client], Awaitable[Any]]) -> Any:
    async with await Client.connect(*minidb) as client:
        return await op(client)


async def test_sleep_succeeds_with_heartbeats(store: ObjectStore, minidb: tuple[str, int]) -> None:
    """A sleep task longer than a heartbeat runs once, heartbeats, and succeeds."""
    queue = TaskQueue(store)
    async with Running(_worker(store, minidb)) as worker:
        task_id = await submit_task(queue, "sleep", {"seconds": 0.8})
        record = await until(queue, task_id, terminal)
    assert record.state == "succeeded" and record.attempt == 1
    assert worker.statistics().heartbeats >= 1
    assert (await store.list(prefix=_keys.QUEUE_PREFIX)).entries == ()


async def test_retryable_failure_ends_failed_after_max_attempts(
    store: ObjectStore, minidb: tuple[str, int]
) -> None:
    """A type that always fails retryably runs exactly max_attempts times, with backoff."""
    queue = TaskQueue(store)
    async with Running(_worker(store, minidb)):
        task_id = await submit_task(queue, "sleep", {"seconds": 0, "fail": "retryable"})
        record = await until(queue, task_id, terminal)
    assert record.state == "failed" and record.attempt == 3
    assert [a.outcome for a in record.attempts] == ["failed"] * 3
    assert record.error is not None and record.error.code == "sleep_failed"


async def test_permanent_failure_is_not_retried(
    store: ObjectStore, minidb: tuple[str, int]
) -> None:
    """A permanent failure ends the task on attempt 1."""
    queue = TaskQueue(store)
    async with Running(_worker(store, minidb)):
        task_id = await submit_task(queue, "sleep", {"seconds": 0, "fail": "permanent"})
        record = await until(queue, task_id, terminal)
    assert (record.state, record.attempt) == ("failed", 1)


async def test_cancel_while_running_stops_the_task(
    store: ObjectStore, minidb: tuple[str, int]
) -> None:
    """A cancel reaches the running task on its next heartbeat; it ends cancelled at once."""
    queue = TaskQueue(store)
    async with Running(_worker(store, minidb)):
        task_id = await submit_task(queue, "sleep", {"seconds": 60})
        await until(queue, task_id, lambda r: r.state == "running")
        await queue.cancel(task_id)
        record = await until(queue, task_id, terminal)
    assert record.state == "cancelled"
    assert record.attempts[-1].outcome == "cancelled"


async def test_stop_releases_without_spending_an_attempt(
    store: ObjectStore, minidb: tuple[str, int]
) -> None:
    """stop() during a long task releases it back to queued; the attempt is not spent."""
    queue = TaskQueue(store)
    running = Running(_worker(store, minidb))
    async with running:
        task_id = await submit_task(queue, "sleep", {"seconds": 60}, max_attempts=1)
        await until(queue, task_id, lambda r: r.state == "running")
    record = await queue.get(task_id)
    assert record.state == "queued" and record.spent() == 0
    assert record.attempts[0].outcome == "released"
    async with Running(_worker(store, minidb, worker_id="w-2")):
        await queue.cancel(task_id)  # let the second worker see the task, then end it
        record = await until(queue, task_id, terminal)
    assert record.state == "cancelled"


async def test_lease_expiry_take_over(store: ObjectStore, minidb: tuple[str, int]) -> None:
    """A worker that stops heartbeating loses its task to another after lease + grace; the
    first attempt is lease_expired and the second succeeds."""
    queue = TaskQueue(store)
    task_id = await submit_task(queue, "sleep", {"seconds": 0.2})
    claim = await queue.claim_next(worker="dead", lease_s=1, grace_s=0.5)
    assert claim is not None
    async with Running(_worker(store, minidb, worker_id="w-2")):
        record = await until(queue, task_id, terminal)
    assert record.state == "succeeded" and record.attempt == 2
    assert record.attempts[0].outcome == "lease_expired"
    assert record.attempts[1].worker == "w-2"


CSV = (
    b"bucket,key,value\n"
    b"b,k1,v1\n"
    b"b,k2,=1+1\n"
    b"b,bad key,v\n"
    b"b,k3\n"
    b'b,k4,"a, b"\n'
)


async def test_csv_import_good_and_bad_rows(store: ObjectStore, minidb: tuple[str, int]) -> None:
    """Good rows land in minidb unchanged, bad ones in errors.csv; counts and progress agree."""
    queue = TaskQueue(store)
    async with Running(_worker(store, minidb)):
        task_id = await submit_task(queue, "csv_import", {}, data=CSV)
        record = await until(queue, task_id, terminal)
    assert record.state == "succeeded", record.error
    assert record.result == {"rows": 5, "ok": 3, "failed": 2}
    assert record.progress.rows_done == 5 and record.progress.bytes_done == len(CSV)
    assert record.progress.bytes_total == len(CSV)
    assert record.output is not None and [f.name for f in record.output.files] == ["errors.csv"]
    errors = (await store.get(_keys.output_key(task_id, 1, "errors.csv"))).data
    lines = errors.decode().splitlines()
    assert lines[0] == "line,reason,bucket,key"
    assert [line.split(",")[:2] for line in lines[1:]] == [
        ["4", "invalid_key"], ["5", "wrong_column_count"],
    ]
    values = await _with_client(minidb, lambda c: asyncio.gather(
        c.get("b", "k1"), c.get("b", "k2"), c.get("b", "k4")))
    assert values == ["v1", "=1+1", "a, b"]


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", "empty_file"),
        (b"a,b,c\nx,y,z\n", "bad_header"),
        (b'bucket,key,value\nb,k,"open\n', "unterminated_quote"),
        (b"bucket,key,value\nb,k," + b"x" * 9000 + b"\n", "field_too_large"),
    ],
)
async def test_csv_import_structural_failure_fails_at_once(
    file_store: ObjectStore, minidb: tuple[str, int], data: bytes, code: str
) -> None:
    """A structurally broken CSV fails attempt 1 with the stable code, not retried."""
    queue = TaskQueue(file_store)
    async with Running(_worker(file_store, minidb)):
        task_id = await submit_task(queue, "csv_import", {}, data=data)
        record = await until(queue, task_id, terminal)
    assert (record.state, record.attempt) == ("failed", 1)
    assert record.error is not None and record.error.code == code


async def test_csv_import_too_many_bad_rows(
    file_store: ObjectStore, minidb: tuple[str, int]
) -> None:
    """More bad rows than max_bad_rows fails without retry; errors.csv is still written."""
    queue = TaskQueue(file_store)
    async with Running(_worker(file_store, minidb)):
        task_id = await submit_task(queue, "csv_import", {"max_bad_rows": 1}, data=CSV)
        record = await until(queue, task_id, terminal)
    assert (record.state, record.attempt) == ("failed", 1)
    assert record.error is not None and record.error.code == "too_many_bad_rows"
    errors = (await file_store.get(_keys.output_key(task_id, 1, "errors.csv"))).data
    assert errors.count(b"\r\n") == 3  # header and both bad rows


async def test_csv_import_without_max_bad_rows_reports_every_bad_row(
    file_store: ObjectStore, minidb: tuple[str, int]
) -> None:
    """With no max_bad_rows the task succeeds however many rows are bad (1,500 here), and
    every one is in errors.csv."""
    bad = 1500
    data = b"bucket,key,value\nb,good,v\n" + b"".join(b"b,k%d\n" % i for i in range(bad))
    queue = TaskQueue(file_store)
    async with Running(_worker(file_store, minidb)):
        task_id = await submit_task(queue, "csv_import", {}, data=data)
        record = await until(queue, task_id, terminal)
    assert record.state == "succeeded", record.error
    assert record.result == {"rows": bad + 1, "ok": 1, "failed": bad}
    errors = (await file_store.get(_keys.output_key(task_id, 1, "errors.csv"))).data
    assert errors.count(b"\r\n") == bad + 1  # header and every bad row


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_unreachable_minidb_is_a_retryable_attempt_failure(
    file_store: ObjectStore,
) -> None:
    """An import with minidb down fails its attempts retryably; the worker keeps claiming."""
    queue = TaskQueue(file_store)
    worker = _worker(file_store, ("127.0.0.1", _closed_port()))
    async with Running(worker):
        task_id = await submit_task(queue, "csv_import", {}, data=CSV, max_attempts=2)
        record = await until(queue, task_id, terminal)
        other = await submit_task(queue, "sleep", {"seconds": 0})
        assert (await until(queue, other, terminal)).state == "succeeded"
    assert (record.state, record.attempt) == ("failed", 2)
    assert record.error is not None and record.error.code == "minidb_unavailable"


async def test_csv_export_neutralises_formulas(
    store: ObjectStore, minidb: tuple[str, int]
) -> None:
    """An export writes every key of the bucket, formula cells neutralised by default."""
    async def fill(client: Client) -> None:
        await client.set("exp", "a", "=1+1")
        await client.set("exp", "b", "plain")
        await client.set("other", "c", "x")
    await _with_client(minidb, fill)
    queue = TaskQueue(store)
    async with Running(_worker(store, minidb)):
        task_id = await submit_task(queue, "csv_export", {"bucket": "exp"})
        record = await until(queue, task_id, terminal)
    assert record.state == "succeeded", record.error
    data = (await store.get(_keys.output_key(task_id, 1, "export.csv"))).data
    lines = sorted(data.decode().split("\r\n")[1:-1])
    assert lines == ["exp,a,'=1+1", "exp,b,plain"]
