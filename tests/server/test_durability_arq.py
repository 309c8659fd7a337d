"""arq's job life cycle over RESP, through a kill -9 of ``minidb serve --fsync always``.

The compat worker test once saw arq jobs "ran without a result" after a kill; the cause was the
test's wait (a job whose finishing transaction the kill cut off reruns only when its
in-progress key expires), not minidb. These tests pin what that finding rests on, with the
exact commands arq 0.26.3 sends (``ArqRedis.enqueue_job``, ``Worker.start_jobs``,
``Worker.run_job``, ``Worker.finish_job``): every acknowledged transaction is whole after the
restart, and a key written with PX keeps its absolute deadline (the restart's own time counts),
so an interrupted job's in-progress key expires when arq expects and the job reruns.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.server.conftest import IO_TIMEOUT_S, ServeFactory

redis = pytest.importorskip("redis", reason="redis-py is not installed (pip install redis)")

QUEUE = b"arq:queue"
ABORT = b"arq:abort"
IN_PROGRESS_MS = 15_000
"""arq's in-progress key: job timeout (5 s in the compat test) + 10 s."""
JOB_EXPIRES_MS = 86_400_000
"""arq's default ``expires_extra_ms``: a job key lives a day."""
RESULT_MS = 3_600_000
"""``keep_result`` in the compat test's worker settings."""
MS_ROUNDING = 2
"""Server and client read different millisecond clocks: slack on each side of a deadline."""


def enqueue(r: redis.Redis, job: bytes, score: int) -> None:
    with r.pipeline(transaction=True) as pipe:
        pipe.watch(b"arq:job:" + job)
        assert not pipe.exists(b"arq:job:" + job, b"arq:result:" + job)
        pipe.multi()
        pipe.psetex(b"arq:job:" + job, JOB_EXPIRES_MS, b"payload-" + job)
        pipe.zadd(QUEUE, {job: score})
        pipe.execute()


def take(r: redis.Redis, job: bytes) -> None:
    """``start_jobs``: claim the job with its in-progress key, then ``run_job``'s first
    transaction (read the job, count the try)."""
    in_progress = b"arq:in-progress:" + job
    with r.pipeline(transaction=True) as pipe:
        pipe.watch(in_progress)
        assert not pipe.exists(in_progress)
        assert pipe.zscore(QUEUE, job) is not None
        pipe.multi()
        pipe.psetex(in_progress, IN_PROGRESS_MS, b"1")
        assert pipe.execute() == [True]
    with r.pipeline(transaction=True) as pipe:
        pipe.get(b"arq:job:" + job)
        pipe.incr(b"arq:retry:" + job)
        pipe.expire(b"arq:retry:" + job, 88_400)
        pipe.zrem(ABORT, job)
        assert pipe.execute() == [b"payload-" + job, 1, True, 0]


def finish(r: redis.Redis, job: bytes) -> None:
    """``finish_job``: the result stored, the job out of the queue, its keys gone: one EXEC."""
    with r.pipeline(transaction=True) as tr:
        tr.set(b"arq:result:" + job, b"result-" + job, px=RESULT_MS)
        tr.zrem(ABORT, job)
        tr.zrem(QUEUE, job)
        tr.delete(b"arq:in-progress:" + job, b"arq:retry:" + job, b"arq:job:" + job)
        assert tr.execute() == [True, 0, 1, 3]


def test_durability_arq_finished_and_interrupted_jobs_survive_kill_9(
    serve: ServeFactory, tmp_path: Path
) -> None:
    """A finished job keeps its result and leaves the queue; a job killed mid-run stays queued
    with its in-progress key, whose deadline is the one set before the kill."""
    data = tmp_path / "arq"
    server = serve("--resp-port", "0", "--fsync", "always", data_dir=data)
    r = redis.Redis(port=server.resp_port, socket_timeout=IO_TIMEOUT_S)
    for score, job in enumerate((b"job-1", b"job-2")):
        enqueue(r, job, 1_000 + score)
    take(r, b"job-1")
    finish(r, b"job-1")
    take(r, b"job-2")  # its finish_job never comes: the kill
    acked_at = time.monotonic()
    server.kill()
    r.close()

    server = serve("--resp-port", "0", "--fsync", "always", data_dir=data)
    r = redis.Redis(port=server.resp_port, socket_timeout=IO_TIMEOUT_S)
    in_progress_ttl = r.pttl(b"arq:in-progress:job-2")
    result_ttl = r.pttl(b"arq:result:job-1")
    elapsed_ms = int((time.monotonic() - acked_at) * 1000)
    assert r.get(b"arq:result:job-1") == b"result-job-1"
    assert r.exists(b"arq:in-progress:job-1", b"arq:retry:job-1", b"arq:job:job-1") == 0
    assert r.zrange(QUEUE, 0, -1, withscores=True) == [(b"job-2", 1001.0)]
    assert r.get(b"arq:job:job-2") == b"payload-job-2"
    assert r.get(b"arq:retry:job-2") == b"1"
    # Absolute deadlines: a replay that restarted the PX from the restart would leave more.
    assert 0 < in_progress_ttl <= IN_PROGRESS_MS - elapsed_ms + MS_ROUNDING, (
        in_progress_ttl, elapsed_ms)  # fmt: skip
    assert 0 < result_ttl <= RESULT_MS - elapsed_ms + MS_ROUNDING, (result_ttl, elapsed_ms)
    r.close()


def test_durability_arq_in_progress_key_expires_by_its_deadline_after_kill_9(
    serve: ServeFactory, tmp_path: Path
) -> None:
    """An in-progress key whose deadline passed while the server was down is gone at the
    restart, so arq's next poll can take the job again."""
    data = tmp_path / "arq-expired"
    server = serve("--resp-port", "0", "--fsync", "always", data_dir=data)
    r = redis.Redis(port=server.resp_port, socket_timeout=IO_TIMEOUT_S)
    enqueue(r, b"job-3", 1_000)
    with r.pipeline(transaction=True) as pipe:
        pipe.watch(b"arq:in-progress:job-3")
        pipe.multi()
        pipe.psetex(b"arq:in-progress:job-3", 1, b"1")  # 1 ms: past by the restart
        pipe.execute()
    server.kill()
    r.close()

    server = serve("--resp-port", "0", "--fsync", "always", data_dir=data)
    r = redis.Redis(port=server.resp_port, socket_timeout=IO_TIMEOUT_S)
    assert r.exists(b"arq:in-progress:job-3") == 0
    assert r.zscore(QUEUE, b"job-3") == 1000.0
    take(r, b"job-3")
    r.close()
