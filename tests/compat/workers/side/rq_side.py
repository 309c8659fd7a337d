"""RQ's side of the worker test, run with the RQ virtualenv's python.

``enqueue PORT COUNT ACKED``: ``Queue.enqueue`` each job, writing the acknowledged numbers.
``results PORT COUNT [N,N,...]``: one JSON object, job number -> finished / failed / queued /
started / missing (RQ knows nothing of it) / wrong (finished, but its stored return value is
not its number), from ``Job.fetch_many`` and ``Job.return_value``, of every job or only those
listed.
The worker itself is ``rq worker`` (the harness builds the command).
"""

from __future__ import annotations

import json
import sys

from redis import Redis
from rq import Queue
from rq.job import Job
from workload import job_id, only_numbers, write_acked

QUEUE = "compat"
FETCH_CHUNK = 500


def enqueue(port: int, count: int, acked_path: str) -> None:
    queue = Queue(QUEUE, connection=Redis(port=port))
    acked = []
    for number in range(count):
        # result_ttl=-1: results are kept, so the check after the run can read every one.
        queue.enqueue("workload.record", number, job_id=job_id(number), result_ttl=-1)
        acked.append(number)
    write_acked(acked_path, acked)


def results(port: int, numbers: list[int]) -> dict[int, str]:
    connection = Redis(port=port)
    states: dict[int, str] = {}
    for start in range(0, len(numbers), FETCH_CHUNK):
        chunk = numbers[start:start + FETCH_CHUNK]
        jobs = Job.fetch_many([job_id(n) for n in chunk], connection=connection)
        for number, job in zip(chunk, jobs, strict=True):
            states[number] = _state(job, number)
    return states


def _state(job: Job | None, number: int) -> str:
    if job is None:
        return "missing"
    status = job.get_status(refresh=False)
    value = status.value if status is not None else "missing"
    if value == "finished":
        return "finished" if job.return_value() == number else "wrong"
    return value


if __name__ == "__main__":
    action, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if action == "enqueue":
        enqueue(port, count, sys.argv[4])
    else:
        print(json.dumps(results(port, only_numbers(sys.argv[4:], count))))
