"""Celery's side of the worker test, run with the Celery virtualenv's python.

The app uses the Redis broker and the Redis result backend at ``MINIDB_COMPAT_PORT``.
``enqueue PORT COUNT ACKED``: ``record.delay`` each job (``apply_async`` for its task id);
``results PORT COUNT [N,N,...]``: job number -> finished / failed / queued (PENDING: Celery
cannot tell queued from unknown) / started / wrong, from ``AsyncResult.state`` and ``.result``,
of every job or only those listed. The worker
is ``celery -A celery_side worker`` (the harness builds the command).

Reconnection options set (Celery's names): the broker retries forever
(``broker_connection_retry``, ``broker_connection_retry_on_startup``,
``broker_connection_max_retries=None``); the result backend retries a failed store
(``result_backend_always_retry``, ``result_backend_max_retries``). Tasks are acked early
(``task_acks_late=False``, the default); a message fetched but not yet acked stays in kombu's
``unacked`` hash and is redelivered after ``visibility_timeout``: lowered to
``VISIBILITY_TIMEOUT_S``, and the scan for such messages made every ``RESTORE_INTERVAL_S``
(kombu's default scans every 10 s x throttle 10), so the test sees the redelivery.
"""

from __future__ import annotations

import json
import os
import sys

from celery import Celery
from workload import job_id, only_numbers, record_run, write_acked

VISIBILITY_TIMEOUT_S = 20
RESTORE_INTERVAL_S = 2
QUEUE = "compat"


def make_app(port: int) -> Celery:
    url = f"redis://127.0.0.1:{port}/0"
    app = Celery("compat", broker=url, backend=url)
    app.conf.update(
        task_default_queue=QUEUE,
        task_acks_late=False,
        result_expires=None,
        broker_connection_retry=True,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S,
                                  "unacked_restore_interval": RESTORE_INTERVAL_S,
                                  "unacked_restore_throttle": 1},
        result_backend_always_retry=True,
        result_backend_max_retries=30,
        worker_hijack_root_logger=False,
    )
    return app


app = make_app(int(os.environ.get("MINIDB_COMPAT_PORT", "6379")))


@app.task(name="record")
def record(number: int) -> int:
    return record_run(number)


def enqueue(count: int, acked_path: str) -> None:
    acked = []
    for number in range(count):
        record.apply_async((number,), task_id=job_id(number))
        acked.append(number)
    write_acked(acked_path, acked)


_STATES = {"SUCCESS": "finished", "FAILURE": "failed", "PENDING": "queued",
           "STARTED": "started", "RETRY": "queued", "REVOKED": "failed"}


def results(numbers: list[int]) -> dict[int, str]:
    states: dict[int, str] = {}
    for number in numbers:
        result = app.AsyncResult(job_id(number))
        state = _STATES.get(result.state, "missing")
        if state == "finished" and result.result != number:
            state = "wrong"
        states[number] = state
    return states


if __name__ == "__main__":
    action, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if action == "enqueue":
        enqueue(count, sys.argv[4])
    else:
        print(json.dumps(results(only_numbers(sys.argv[4:], count))))
