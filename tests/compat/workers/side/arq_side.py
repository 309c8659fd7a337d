"""arq's side of the worker test, run with the arq virtualenv's python.

``enqueue PORT COUNT ACKED``: ``ArqRedis.enqueue_job`` each job, writing the acknowledged
numbers. ``results PORT COUNT [N,N,...]``: job number -> finished / failed / queued / started /
missing / wrong, from ``Job.status`` and ``Job.result_info``, of every job or only those
listed. The worker is
``arq arq_side.WorkerSettings`` (the port from ``MINIDB_COMPAT_PORT``).

Reconnection: arq's worker loop has none of its own, so its redis-py pool retries every command
on a connection error (``RedisSettings.retry_on_error`` with ``retry``: up to
``COMMAND_RETRIES`` times, exponential backoff capped at ``RETRY_BACKOFF_CAP_S``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from arq.jobs import Job, JobStatus
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from workload import job_id, only_numbers, record_run, write_acked

COMMAND_RETRIES = 30
RETRY_BACKOFF_CAP_S = 1.0
RETRY_BACKOFF_BASE_S = 0.05
KEEP_RESULT_S = 3600
JOB_TIMEOUT_S = 5
"""A job's time limit. arq keeps a job's in-progress key for this + 10 s: a job whose worker
died while taking it is skipped until then, so a short limit lets the test see it rerun."""


def settings(port: int) -> RedisSettings:
    return RedisSettings(
        host="127.0.0.1", port=port, conn_retries=30, conn_retry_delay=1,
        retry_on_error=[RedisConnectionError, RedisTimeoutError, ConnectionError, OSError],
        retry=Retry(ExponentialBackoff(RETRY_BACKOFF_CAP_S, RETRY_BACKOFF_BASE_S),
                    COMMAND_RETRIES),
    )  # fmt: skip


async def record(ctx: dict[str, Any], number: int) -> int:
    return record_run(number)


class WorkerSettings:
    functions = [record]
    redis_settings = settings(int(os.environ.get("MINIDB_COMPAT_PORT", "6379")))
    keep_result = KEEP_RESULT_S
    job_timeout = JOB_TIMEOUT_S
    max_jobs = 10


async def enqueue(port: int, count: int, acked_path: str) -> None:
    redis = await create_pool(settings(port))
    acked = []
    for number in range(count):
        if await redis.enqueue_job("record", number, _job_id=job_id(number)) is not None:
            acked.append(number)
    write_acked(acked_path, acked)
    await redis.aclose() if hasattr(redis, "aclose") else await redis.close()


async def results(port: int, numbers: list[int]) -> dict[int, str]:
    redis = await create_pool(settings(port))
    states: dict[int, str] = {}
    for number in numbers:
        job = Job(job_id(number), redis)
        status = await job.status()
        if status == JobStatus.complete:
            info = await job.result_info()
            if info is None:
                states[number] = "missing"
            elif not info.success:
                states[number] = "failed"
            else:
                states[number] = "finished" if info.result == number else "wrong"
        else:
            states[number] = {JobStatus.in_progress: "started", JobStatus.deferred: "queued",
                              JobStatus.queued: "queued"}.get(status, "missing")
    return states


if __name__ == "__main__":
    action, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if action == "enqueue":
        asyncio.run(enqueue(port, count, sys.argv[4]))
    else:
        print(json.dumps(asyncio.run(results(port, only_numbers(sys.argv[4:], count)))))
