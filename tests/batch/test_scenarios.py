"""Scenarios on real processes: ``minidb batch worker`` subprocesses, a ``minidb serve``
subprocess, both backends, short leases; every wait has a deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from minidb.batch._queue import TaskQueue
from tests.objstore.conftest import S3Rig
from tests.objstore.s3rig import ACCESS_KEY, REGION, SECRET_KEY
from tests.server.conftest import ServeFactory

from .conftest import submit_task, terminal, until
from .procs import DEADLINE_S, Workers

pytestmark = pytest.mark.minidb_loop


async def test_racing_workers_run_each_task_once(workers: Workers, queue: TaskQueue) -> None:
    """Three worker processes drain twelve tasks: each succeeds on attempt 1."""
    for i in range(3):
        workers.start(f"w-{i}")
    ids = [await submit_task(queue, "sleep", {"seconds": 0.05}) for _ in range(12)]
    records = [await until(queue, task_id, terminal) for task_id in ids]
    assert [(r.state, r.attempt) for r in records] == [("succeeded", 1)] * 12
    assert len({r.attempts[0].worker for r in records}) >= 1


async def test_kill_9_mid_task_is_taken_over(workers: Workers, queue: TaskQueue) -> None:
    """A worker killed -9 mid-task loses it on lease expiry; attempt 2 runs on another."""
    first = workers.start("w-doomed")
    task_id = await submit_task(queue, "sleep", {"seconds": 1})
    await until(queue, task_id, lambda r: r.state == "running")
    first.kill()
    first.wait(timeout=10)
    workers.start("w-heir")
    record = await until(queue, task_id, terminal)
    assert (record.state, record.attempt) == ("succeeded", 2)
    assert record.attempts[0].outcome == "lease_expired"
    assert record.attempts[1].worker == "w-heir"


async def test_sigterm_releases_without_spending_an_attempt(
    workers: Workers, queue: TaskQueue
) -> None:
    """SIGTERM to a worker mid-task releases it (attempt not spent) and exits 0."""
    proc = workers.start("w-1")
    task_id = await submit_task(queue, "sleep", {"seconds": 60}, max_attempts=1)
    await until(queue, task_id, lambda r: r.state == "running")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE_S) == 0
    record = await queue.get(task_id)
    assert record.state == "queued" and record.spent() == 0
    assert record.attempts[0].outcome == "released"


async def test_sigstop_past_the_lease_is_fenced(workers: Workers, queue: TaskQueue) -> None:
    """A worker stopped past its lease is taken over; continued, it cannot write, and the
    task ends with the second attempt's success."""
    stalled = workers.start("w-stalled")
    task_id = await submit_task(queue, "sleep", {"seconds": 1.5})
    await until(queue, task_id, lambda r: r.state == "running")
    stalled.send_signal(signal.SIGSTOP)
    # The taker holds a longer lease than the fast one the stalled worker claimed with: what is
    # under test is the stalled worker's fencing, not whether a loaded store answers the
    # taker's heartbeats within 1.2 s (a slow round there would start a third attempt).
    workers.start("w-2", "--lease-seconds", "6", "--heartbeat-seconds", "1")
    await until(queue, task_id, lambda r: r.attempt == 2)
    stalled.send_signal(signal.SIGCONT)
    record = await until(queue, task_id, terminal)
    assert (record.state, record.attempt) == ("succeeded", 2)
    assert record.attempts[0].outcome == "lease_expired"
    assert record.output is not None and record.output.attempt == 2
    assert stalled.poll() is None, "a fenced worker keeps running"


async def test_cancel_while_running(workers: Workers, queue: TaskQueue) -> None:
    """A cancel of a running task ends it cancelled through the worker."""
    workers.start("w-1")
    task_id = await submit_task(queue, "sleep", {"seconds": 60})
    await until(queue, task_id, lambda r: r.state == "running")
    await queue.cancel(task_id)
    record = await until(queue, task_id, terminal)
    assert record.state == "cancelled" and record.attempts[-1].outcome == "cancelled"


async def test_max_attempts_with_a_failing_type(workers: Workers, queue: TaskQueue) -> None:
    """A type that always fails retryably ends failed after --max-attempts (2) attempts."""
    workers.start("w-1", "--max-attempts", "2")
    task_id = await submit_task(queue, "sleep", {"seconds": 0, "fail": "retryable"}, max_attempts=5)
    record = await until(queue, task_id, terminal)
    assert (record.state, record.attempt) == ("failed", 2)


async def test_import_export_and_restart(workers: Workers, queue: TaskQueue) -> None:
    """An import then an export through worker processes; after every worker is restarted
    a new task still runs (all state is in the store)."""
    proc = workers.start("w-1")
    data = b"bucket,key,value\ns,a,=SUM(1)\ns,b,ok\ns,bad key,x\n"
    imported = await until(queue, await submit_task(queue, "csv_import", {}, data=data), terminal)
    assert imported.result == {"rows": 3, "ok": 2, "failed": 1}
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE_S) == 0
    workers.start("w-again")
    exported = await until(queue, await submit_task(queue, "csv_export", {"bucket": "s"}),
                            terminal)
    assert exported.state == "succeeded" and exported.result == {"rows": 2}


def test_self_test_refuses_a_store_without_conditional_writes(
    s3rig: S3Rig, serve: ServeFactory
) -> None:
    """A store that ignores If-None-Match makes the worker exit 1 with the one-line reason."""
    from tests.objstore.faultproxy import Action, Rule

    s3rig.proxy.clear()
    s3rig.proxy.add(Rule(Action.STRIP_CONDITIONS, method="PUT"))
    bucket = s3rig.server.new_bucket()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
           "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": REGION}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "minidb", "batch", "worker", "--store", f"s3://{bucket}/p",
             "--s3-endpoint", s3rig.proxy.endpoint, "--minidb", "127.0.0.1:1"],
            capture_output=True, text=True, env=env, timeout=DEADLINE_S,
        )
    finally:
        s3rig.proxy.clear()
    assert done.returncode == 1
    assert f"conditional writes not enforced by {s3rig.proxy.endpoint}/{bucket}" in done.stderr
