"""Pick-up latency of batch tasks: submit-to-running and submit-to-done of a task that does no
work (``sleep`` with ``seconds`` 0), p50 and p99 over ``--tasks`` tasks (default 200), in three
set-ups:

- ``up``: ``minidb up`` on a fresh data dir (its ``file:`` store; the batch API, the web page
  and one worker in one process): the API wakes its own worker when a task is submitted;
- ``worker-file``: ``minidb batch serve`` without workers, and one ``minidb batch worker``
  process on the same ``file:`` store: only the store between them, so the worker polls;
- ``worker-s3``: the same on the S3 test server (moto, ``tests/objstore/s3rig.py``, in a
  process of its own).

Each task is created and submitted over HTTP, and waited for (``GET /tasks/ID`` every 5 ms)
before the next is created, after ``--gap`` seconds of nothing. The times are the record's own:
from the submit's ``updated_at`` (the API's clock) to the attempt's ``started_at`` and
``ended_at`` (the worker's clock; one machine, so one clock), in milliseconds. Back to back
(``--gap 0``, the default) a separate worker is early in its idle schedule when the next task
comes (it polled at once after the last task, then waits ``--poll-seconds``); a gap longer
than the schedule's ramp finds it at the cap, where a task waits half the cap on average.

    python bench/batch_latency.py                              # all three, 200 tasks each
    python bench/batch_latency.py --cells up --tasks 500
    python bench/batch_latency.py --cells worker-file --poll-seconds 1
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 60.0
"""How long a process may take to print its listening or ready line."""
TASK_TIMEOUT_S = 120.0
"""How long one task may take before the benchmark gives up."""
WAIT_POLL_S = 0.005
"""How often the benchmark asks the API whether the task has ended, in seconds."""
TOKEN = "bench-latency-token-0123456789"
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret",
          "AWS_DEFAULT_REGION": "us-east-1"}
CELLS = ("up", "worker-file", "worker-s3")

_MOTO = """
import sys
sys.path.insert(0, {root!r})
from tests.objstore.s3rig import MotoServer
server = MotoServer().start()
print(server.endpoint, server.new_bucket(), flush=True)
sys.stdin.read()
"""


def _minidb(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "minidb", *args], stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, **(env or {})},
    )


def _line(proc: subprocess.Popen[str], prefix: str) -> str:
    """The first line of ``proc``'s output starting with ``prefix`` (earlier ones skipped)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return line.strip()
    proc.kill()
    raise SystemExit(f"{proc.args!r} printed no line starting {prefix!r}")


def _listening(proc: subprocess.Popen[str], kind: str) -> str:
    line = _line(proc, "minidb listening on ")
    while not line.endswith(f"({kind})"):
        line = _line(proc, "minidb listening on ")
    return line.removeprefix("minidb listening on ").removesuffix(f" ({kind})")


def _stop(*procs: subprocess.Popen[Any]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def up_cell() -> Iterator[tuple[str, str]]:
    """``minidb up`` on a fresh data dir: its API's URL and operator token."""
    with tempfile.TemporaryDirectory(prefix="minidb-bench-up-") as data:
        proc = _minidb("up", "--data-dir", data, "--host", "127.0.0.1", "--port", "0",
                       "--resp-port", "0", "--http-port", "0", "--metrics-port", "0")
        try:
            url = "http://" + _listening(proc, "batch")
            token = _line(proc, "operator token: ").removeprefix("operator token: ")
            yield url, token
        finally:
            _stop(proc)


@contextmanager
def worker_cell(store: str, env: dict[str, str], extra: list[str],
                worker_args: list[str]) -> Iterator[tuple[str, str]]:
    """A minidb server, the batch API without workers and one worker process on ``store``."""
    with tempfile.TemporaryDirectory(prefix="minidb-bench-lat-") as tmp:
        tokens = Path(tmp) / "tokens"
        tokens.write_text(f"{TOKEN} bench operator\n")
        server = _minidb("serve", "--port", "0", "--data-dir", str(Path(tmp) / "data"))
        procs = [server]
        try:
            minidb = _listening(server, "line")
            api = _minidb("batch", "serve", "--port", "0", "--store", store, "--tokens",
                          str(tokens), *extra, env=env)
            procs.append(api)
            url = "http://" + _listening(api, "batch")
            worker = _minidb("batch", "worker", "--store", store, "--minidb", minidb,
                             "--worker-id", "bench", *extra, *worker_args, env=env)
            procs.append(worker)
            _line(worker, "minidb batch worker bench ready")
            yield url, TOKEN
        finally:
            _stop(*reversed(procs))


@contextmanager
def moto() -> Iterator[tuple[str, str]]:
    """The S3 test server in a process of its own: its endpoint and a fresh bucket."""
    proc = subprocess.Popen([sys.executable, "-c", _MOTO.format(root=str(ROOT))],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        endpoint, bucket = proc.stdout.readline().split()
        yield endpoint, bucket
    finally:
        proc.kill()
        proc.wait()


def _ms(stamp: str) -> int:
    when = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return round(when.timestamp() * 1000)


def measure(url: str, token: str, tasks: int, gap_s: float) -> dict[str, list[int]]:
    """Run ``tasks`` zero-work tasks one after the other; their latencies in ms."""
    found: dict[str, list[int]] = {"running": [], "done": []}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                      timeout=TASK_TIMEOUT_S) as client:
        for _ in range(tasks):
            time.sleep(gap_s)
            created = client.post("/tasks", json={"type": "sleep", "params": {"seconds": 0}})
            created.raise_for_status()
            task_id = created.json()["id"]
            submitted = client.post(f"/tasks/{task_id}/submit")
            submitted.raise_for_status()
            start = _ms(submitted.json()["updated_at"])
            deadline = time.monotonic() + TASK_TIMEOUT_S
            while True:
                task = client.get(f"/tasks/{task_id}").json()
                if task["state"] in ("succeeded", "failed", "cancelled"):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"task {task_id} did not end: {task}")
                time.sleep(WAIT_POLL_S)
            attempt = task["attempts"][0]
            found["running"].append(_ms(attempt["started_at"]) - start)
            found["done"].append(_ms(attempt["ended_at"]) - start)
    return found


def _pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--cells", default=",".join(CELLS), help="comma-separated: " +
                        ", ".join(CELLS))
    parser.add_argument("--gap", type=float, default=0.0, metavar="SECONDS",
                        help="idle time before each task is created")
    parser.add_argument("--poll-seconds", type=float, default=None,
                        help="the separate worker's --poll-seconds (default: its own)")
    args = parser.parse_args()
    worker_args = [] if args.poll_seconds is None else ["--poll-seconds", str(args.poll_seconds)]
    rows = []
    for cell in args.cells.split(","):
        if cell == "up":
            with up_cell() as (url, token):
                found = measure(url, token, args.tasks, args.gap)
        elif cell == "worker-file":
            with tempfile.TemporaryDirectory(prefix="minidb-bench-store-") as store, \
                    worker_cell(f"file:{store}", {}, [], worker_args) as (url, token):
                found = measure(url, token, args.tasks, args.gap)
        elif cell == "worker-s3":
            with moto() as (endpoint, bucket), worker_cell(
                    f"s3://{bucket}/bench", S3_ENV, ["--s3-endpoint", endpoint],
                    worker_args) as (url, token):
                found = measure(url, token, args.tasks, args.gap)
        else:
            raise SystemExit(f"unknown cell {cell!r}")
        rows.append((cell, found))
        print(f"{cell}: done", file=sys.stderr, flush=True)
    print(f"{args.tasks} zero-work tasks per cell, one at a time, gap {args.gap} s; "
          "milliseconds from the submit")
    print("| cell | submit→running p50 | p99 | mean | submit→done p50 | p99 | mean |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for cell, found in rows:
        run, done = found["running"], found["done"]
        print(f"| {cell} | {_pct(run, 0.5):.0f} | {_pct(run, 0.99):.0f} | "
              f"{statistics.fmean(run):.0f} | {_pct(done, 0.5):.0f} | {_pct(done, 0.99):.0f} | "
              f"{statistics.fmean(done):.0f} |")


if __name__ == "__main__":
    main()
