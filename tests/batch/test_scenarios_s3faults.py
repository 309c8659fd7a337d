"""S3 faults under a real ``minidb batch worker`` process: the worker reaches moto through the
fault proxy, which fails one write of ``status.json`` (a 503 before or after applying it, a
connection dropped before or after, a delay past the worker's read timeout) on the claim, a
heartbeat or the completion, or drops every n-th connection from before the worker starts.
Whatever the fault, the task ends once, correct, and its attempts are numbered 1..n with no
gap, no repeat, and one success. The test's own reads go to moto directly, so only the worker
sees the faults; every wait has a deadline."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from minidb.batch._model import TaskRecord
from minidb.batch._queue import TaskQueue
from minidb.client import Client
from tests.objstore.conftest import S3Rig
from tests.objstore.faultproxy import Action, FaultProxy, Rule
from tests.objstore.s3rig import ACCESS_KEY, REGION, SECRET_KEY
from tests.server.conftest import ServeFactory

from .conftest import submit_task, terminal, until
from .procs import Workers

pytestmark = pytest.mark.minidb_loop

READ_TIMEOUT_S = 1.0
"""The worker's S3 read timeout here: a ``DELAY`` fault waits past it."""
FAULTS = {
    "503-before": Rule(Action.ERROR_BEFORE, status=503),
    "503-after": Rule(Action.ERROR_AFTER, status=503),
    "drop-before": Rule(Action.DROP_BEFORE),
    "drop-after": Rule(Action.DROP_AFTER),
    "timeout": Rule(Action.DELAY, delay_s=2 * READ_TIMEOUT_S),
}
"""Each fault, as a rule still to be aimed at one write (``method``, ``key``, ``nth``)."""
STATUS_WRITE = r"status\.json$"
CSV = b"bucket,key,value\nfault,a,1\nfault,b,2\nfault,bad key,3\n"


@pytest.fixture
def faulty(
    s3rig: S3Rig, proxy: FaultProxy, serve: ServeFactory
) -> Iterator[tuple[Workers, TaskQueue]]:
    """Workers whose store is behind the fault proxy, and a queue on the same bucket that is
    not."""
    bucket = s3rig.server.new_bucket()
    direct = s3rig.store(bucket, endpoint_url=s3rig.server.endpoint)
    env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
           "AWS_DEFAULT_REGION": REGION}
    server = serve()
    pool = Workers(["--store", f"s3://{bucket}/pfx", "--s3-endpoint", proxy.endpoint,
                    "--s3-read-timeout", str(READ_TIMEOUT_S)], env, f"127.0.0.1:{server.port}")
    yield pool, TaskQueue(direct)
    pool.close()
    asyncio.run(direct.close())


def _aim(proxy: FaultProxy, fault: str, nth: int) -> Rule:
    template = FAULTS[fault]
    return proxy.add(Rule(template.action, method="PUT", key=STATUS_WRITE, nth=nth,
                          status=template.status, delay_s=template.delay_s))


def _ended_once(record: TaskRecord) -> None:
    """The task succeeded once; its attempts are 1..n, each ended, only the last a success."""
    assert record.state == "succeeded", record
    numbers = [a.n for a in record.attempts]
    assert numbers == list(range(1, len(numbers) + 1)), record.attempts
    assert [a.outcome for a in record.attempts][-1] == "succeeded", record.attempts
    assert [a.outcome for a in record.attempts].count("succeeded") == 1, record.attempts
    assert all(a.ended_at is not None for a in record.attempts), record.attempts
    assert record.output is not None and record.output.attempt == record.attempt


async def _imported(workers: Workers) -> list[str | None]:
    host, _, port = workers.minidb.rpartition(":")
    async with await Client.connect(host, int(port)) as client:
        return [await client.get("fault", key) for key in ("a", "b")]


@pytest.mark.parametrize("fault", FAULTS)
async def test_fault_on_the_claim(
    faulty: tuple[Workers, TaskQueue], proxy: FaultProxy, fault: str
) -> None:
    """The claim's write faulted: the worker settles it by re-reading (a claim that landed
    unseen is found by its write id) and the import runs once, on attempt 1."""
    workers, queue = faulty
    rule = _aim(proxy, fault, nth=1)
    workers.start("w-claim")
    task_id = await submit_task(queue, "csv_import", {}, data=CSV)
    record = await until(queue, task_id, terminal)
    assert rule.fired == 1
    _ended_once(record)
    assert record.attempt == 1 and record.result == {"rows": 3, "ok": 2, "failed": 1}
    assert await _imported(workers) == ["1", "2"]


@pytest.mark.parametrize("fault", FAULTS)
async def test_fault_on_a_heartbeat(
    faulty: tuple[Workers, TaskQueue], proxy: FaultProxy, fault: str
) -> None:
    """The first heartbeat's write faulted: the task still ends once, succeeded."""
    workers, queue = faulty
    rule = _aim(proxy, fault, nth=2)
    workers.start("w-beat")
    task_id = await submit_task(queue, "sleep", {"seconds": 1.0})
    record = await until(queue, task_id, terminal)
    assert rule.fired == 1
    _ended_once(record)
    assert record.result == {"slept_s": 1.0}


@pytest.mark.parametrize("fault", FAULTS)
async def test_fault_on_the_completion(
    faulty: tuple[Workers, TaskQueue], proxy: FaultProxy, fault: str
) -> None:
    """The success write faulted (heartbeats are too slow to come first): the worker settles
    it by re-reading; the task ends once with the import's counts."""
    workers, queue = faulty
    rule = _aim(proxy, fault, nth=2)
    workers.start("w-done", "--heartbeat-seconds", "5", "--lease-seconds", "15")
    task_id = await submit_task(queue, "csv_import", {}, data=CSV)
    record = await until(queue, task_id, terminal)
    assert rule.fired == 1
    _ended_once(record)
    assert record.result == {"rows": 3, "ok": 2, "failed": 1}
    assert await _imported(workers) == ["1", "2"]


@pytest.mark.parametrize(
    ("action", "every", "times"),
    [(Action.DROP_BEFORE, 5, 5), (Action.DROP_AFTER, 5, 5), (Action.RESET_BEFORE, 5, 5),
     (Action.DROP_BEFORE, 2, 20)],
    ids=["drop-every-5th-5-times", "drop-after-every-5th-5-times", "reset-every-5th-5-times",
         "drop-every-2nd-20-times"],
)
async def test_dropped_connections_from_the_start(
    faulty: tuple[Workers, TaskQueue], proxy: FaultProxy, action: Action, every: int,
    times: int,
) -> None:
    """Issue 17's first finding: the proxy drops (or resets) every n-th connection from
    before the worker starts, its self-test included. The worker starts anyway, the import
    succeeds in one clean attempt, and the worker then claims more tasks until every drop is
    spent. (It used to exit 1 when a drop hit its self-test, leaving the import queued,
    attempt 0.)"""
    workers, queue = faulty
    rule = proxy.add(Rule(action, every=every, times=times))
    workers.start("w-drops")
    task_id = await submit_task(queue, "csv_import", {}, data=CSV)
    record = await until(queue, task_id, terminal)
    _ended_once(record)
    assert record.attempt == 1 and record.result == {"rows": 3, "ok": 2, "failed": 1}
    # How many requests the first tasks make depends on timing (polls, heartbeats), so the
    # rule may still have drops to spend: more tasks, each of which must succeed, until it has.
    for _ in range(4 * times):
        other = await submit_task(queue, "sleep", {"seconds": 0})
        assert (await until(queue, other, terminal)).state == "succeeded"
        if rule.fired == rule.times:
            break
    assert rule.fired == rule.times and workers.procs[0].poll() is None
    assert await _imported(workers) == ["1", "2"]


def test_read_timeout_needs_an_s3_store(tmp_path: os.PathLike[str]) -> None:
    """--s3-read-timeout with a file: store is a usage error (exit 2), not a crash."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "minidb", "batch", "worker", "--store", f"file:{tmp_path}",
         "--minidb", "127.0.0.1:1", "--s3-read-timeout", "1"],
        capture_output=True, text=True, timeout=30,
    )
    assert done.returncode == 2 and "--s3-read-timeout" in done.stderr
