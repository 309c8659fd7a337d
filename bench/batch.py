"""Batch import benchmark: ``minidb batch worker`` processes importing a generated CSV into a
running durable minidb, against ``redis-cli --pipe`` into Redis on the same rows.

Generates N rows (``batch_import.generate``: 10 buckets, 16-40 byte keys, 20-200 byte values,
seeded; 10M rows is about 1 GB) as a CSV and as RESP. Then, for each worker count W of
``--workers`` (default ``1,4``), on a fresh ``minidb serve`` (``--fsync always``, the default:
every write fdatasynced before its ``OK``) and a fresh ``file:`` store:

- the CSV is split at line boundaries into W inputs (each with the header), W ``csv_import``
  tasks are created, uploaded and submitted, then W workers are started;
- rows/s is N over the span from the first claim to the last success (the tasks' own
  ``started_at`` / ``ended_at``: the import, not process start-up);
- once every task has succeeded the workers get SIGTERM, and each one's peak RSS comes from
  ``wait4`` and its object-store requests from the counters line it prints on exit.

Idle cost: one worker is left polling an empty store for ``--idle-seconds``; its requests per
poll, times the polls an idle worker makes per hour at the poll cap (``DEFAULT_POLL_CAP_S``),
is the requests per idle worker-hour. Both are priced at S3 Standard list prices (a LIST is a
PUT-class request; the figures are upper bounds: every request is priced as PUT-class).

Redis: Debian's ``redis-server --appendonly yes --appendfsync always``, loaded with
``redis-cli --pipe`` from the RESP file (prepared beforehand: Redis parses no CSV), wall time.

    python bench/batch.py                       # 10M rows (about 1 GB; several minutes)
    python bench/batch.py --rows 1000000        # the figure in README.md and docs/batch.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _serverproc import serve
from batch_import import generate, ranges, redis_cell, vm_hwm
from minidb.batch._backoff import DEFAULT_POLL_CAP_S
from minidb.batch._queue import TaskQueue
from minidb.objstore import FileStore

IMPORT_HEADER = b"bucket,key,value\n"
RSS_LIMIT_BYTES = 150 << 20
"""The goal: a worker's peak RSS stays under this whatever the file size."""
ROWS_GOAL_S = 100_000
"""The goal: rows/s of one worker into a durable minidb."""
PUT_PRICE_USD = 0.005 / 1000
"""S3 Standard, us-east-1: PUT, COPY, POST, LIST per request."""
GET_PRICE_USD = 0.0004 / 1000
"""S3 Standard, us-east-1: GET and other reads per request."""
UPLOAD_CHUNK_BYTES = 1 << 20
"""Bytes per chunk when an input is uploaded to the store."""
READY_TIMEOUT_S = 30.0
"""How long a worker may take to print its ready line."""
TASK_TIMEOUT_S = 3600.0
"""How long the benchmark waits for the imports before it gives up."""
WORKER_ARGS = ("--poll-seconds", "0.1", "--heartbeat-seconds", "5", "--lease-seconds", "60")
"""Workers poll often while tasks wait, so start-up latency stays out of the measured span."""


# -- inputs ------------------------------------------------------------------------------------


def split_csv(csv_path: Path, parts: int, out_dir: Path) -> list[Path]:
    """``parts`` files, each the import header and one line-aligned range of the generated
    rows (``generate`` writes rows only)."""
    paths = []
    for n, (start, end) in enumerate(ranges(csv_path, parts)):
        path = out_dir / f"part-{n}.csv"
        with open(csv_path, "rb") as src, open(path, "wb") as dst:
            dst.write(IMPORT_HEADER)
            src.seek(start)
            left = end - start
            while left > 0:
                block = src.read(min(UPLOAD_CHUNK_BYTES, left))
                dst.write(block)
                left -= len(block)
        paths.append(path)
    return paths


async def _chunks(path: Path) -> AsyncIterator[bytes]:
    with open(path, "rb") as f:
        while block := f.read(UPLOAD_CHUNK_BYTES):
            yield block


async def submit_imports(store_dir: Path, inputs: list[Path]) -> list[str]:
    queue = TaskQueue(FileStore(str(store_dir)))
    ids = []
    for path in inputs:
        record = await queue.create("bench", "csv_import", {}, max_attempts=1)
        await queue.put_input(record.id, _chunks(path))
        await queue.submit(record.id, needs_input=True)
        ids.append(record.id)
    return ids


async def wait_done(store_dir: Path, ids: list[str]) -> list[Any]:
    queue = TaskQueue(FileStore(str(store_dir)))
    deadline = time.monotonic() + TASK_TIMEOUT_S
    while True:
        records = [await queue.get(task_id) for task_id in ids]
        if all(r.state in ("succeeded", "failed", "cancelled") for r in records):
            return records
        if time.monotonic() > deadline:
            raise SystemExit(f"imports did not finish in {TASK_TIMEOUT_S} s")
        await asyncio.sleep(0.2)


# -- workers -----------------------------------------------------------------------------------


def start_worker(store_dir: Path, port: int, worker_id: str, *extra: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "minidb", "batch", "worker", "--store", f"file:{store_dir}",
         "--minidb", f"127.0.0.1:{port}", "--worker-id", worker_id, *WORKER_ARGS, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != f"minidb batch worker {worker_id} ready":
        proc.kill()
        raise SystemExit(f"worker {worker_id} did not start: {line!r}")
    return proc


def stop_worker(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """SIGTERM, then the worker's peak RSS (``wait4``) and the counters it printed."""
    proc.send_signal(signal.SIGTERM)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stderr.close()
    if proc.stdout is not None:
        proc.stdout.close()
    marker = " stopped: "
    lines = [line for line in err.splitlines() if marker in line]
    if proc.returncode or not lines:
        raise SystemExit(f"worker exited {proc.returncode}: {err[-2000:]}")
    counters: dict[str, Any] = json.loads(lines[-1].split(marker, 1)[1])
    return {"rss": usage.ru_maxrss * 1024, **counters}


def _s(stamp_ms: int) -> float:
    return stamp_ms / 1000


def import_cell(
    csv_path: Path, rows: int, workers: int, tmp: Path, startup_requests: int
) -> dict[str, Any]:
    cell_dir = Path(tempfile.mkdtemp(prefix=f"w{workers}-", dir=tmp))
    store_dir = cell_dir / "store"
    inputs = split_csv(csv_path, workers, cell_dir)
    ids = asyncio.run(submit_imports(store_dir, inputs))
    for path in inputs:
        path.unlink()  # the store holds its copy
    served = serve(None)
    procs = []
    try:
        procs = [start_worker(store_dir, served.port, f"bench-{n}") for n in range(workers)]
        records = asyncio.run(wait_done(store_dir, ids))
        stats = [stop_worker(p) for p in procs]
        procs = []
        server_rss = vm_hwm(served.proc.pid)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
        served.stop()
    bad = [r for r in records if r.state != "succeeded"]
    if bad:
        raise SystemExit(f"imports failed: {[(r.id, r.state, r.error) for r in bad]}")
    loaded = sum(r.result["ok"] for r in records)
    if loaded != rows:
        raise SystemExit(f"imported {loaded} rows, expected {rows}")
    began = min(_s(r.attempts[0].started_at) for r in records)
    ended = max(_s(r.attempts[-1].ended_at) for r in records)
    # Without each worker's start-up (self-test, first poll): what the tasks cost.
    requests = sum(s["store"]["requests"] for s in stats) - workers * startup_requests
    return {
        "rows_s": rows / (ended - began),
        "seconds": ended - began,
        "worker_rss": [s["rss"] for s in stats],
        "server_rss": server_rss,
        "store_requests_per_task": requests / workers,
        "heartbeats": sum(s["worker"]["heartbeats"] for s in stats),
    }


def idle_cell(tmp: Path, seconds: float) -> dict[str, Any]:
    """Requests per poll of a worker with nothing to do, scaled to the polls per hour an idle
    worker makes at the poll cap. The start-up self-test and first poll are measured apart
    (a worker stopped as soon as it is ready) and taken out."""
    store_dir = Path(tempfile.mkdtemp(prefix="idle-", dir=tmp)) / "store"
    FileStore(str(store_dir))
    served = serve(None)
    try:
        runs = []
        for idle_s in (0.0, seconds):
            proc = start_worker(store_dir, served.port, "bench-idle")
            time.sleep(idle_s)
            runs.append(stop_worker(proc))
    finally:
        served.stop()
    (r0, p0), (r1, p1) = ((s["store"]["requests"], s["worker"]["polls"]) for s in runs)
    per_poll = (r1 - r0) / max(1, p1 - p0)
    return {
        "startup_requests": r0, "requests_per_poll": per_poll,
        "requests_per_idle_hour": per_poll * 3600 / DEFAULT_POLL_CAP_S,
    }


# -- report ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--workers", default="1,4", help="comma-separated worker counts")
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--no-redis", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="minidb-bench-batch-") as tmp_name:
        tmp = Path(tmp_name)
        csv_path, resp_path = tmp / "rows.csv", tmp / "rows.resp"
        began = time.perf_counter()
        generate(args.rows, csv_path, resp_path)
        size = csv_path.stat().st_size
        print(f"generated {args.rows:,} rows, {size / 1e6:,.0f} MB of CSV in "
              f"{time.perf_counter() - began:.1f} s", flush=True)
        idle = idle_cell(tmp, args.idle_seconds)
        cells: dict[str, dict[str, Any]] = {}
        for workers in (int(w) for w in args.workers.split(",")):
            cells[f"minidb, {workers} worker{'s' * (workers > 1)}"] = cell = import_cell(
                csv_path, args.rows, workers, tmp, idle["startup_requests"])
            print(f"{workers} workers: {cell['rows_s']:,.0f} rows/s", flush=True)
        csv_path.unlink()
        if not args.no_redis:
            cells["redis-cli --pipe (appendfsync always)"] = redis_cell(
                resp_path, args.rows, "always")

    redis = cells.get("redis-cli --pipe (appendfsync always)")
    print(f"\n{args.rows:,} rows ({size / 1e6:,.0f} MB), durable minidb (--fsync always)")
    print("| cell | rows/s | / redis | peak RSS per worker (MB) | store requests per task |")
    print("|---|---:|---:|---|---:|")
    for name, cell in cells.items():
        ratio = f"{cell['rows_s'] / redis['rows_s']:.2f}" if redis else "-"
        rss = ", ".join(f"{r / 1e6:.0f}" for r in cell.get("worker_rss", [cell.get(
            "loader_rss", 0)]))
        per_task = cell.get("store_requests_per_task")
        print(f"| {name} | {cell['rows_s']:,.0f} | {ratio} | {rss} | "
              f"{'-' if per_task is None else f'{per_task:.0f}'} |")
    one = next((c for n, c in cells.items() if n.startswith("minidb, 1 ")), None)
    peak = max(r for c in cells.values() for r in c.get("worker_rss", [0]))
    per_task = max(c.get("store_requests_per_task", 0) for c in cells.values())
    print(f"\nstore requests per task: at most {per_task:.0f}, at most "
          f"${per_task * PUT_PRICE_USD * 1000:.3f} per 1,000 tasks (all priced as PUT-class)")
    print(f"idle worker: {idle['requests_per_poll']:.1f} requests per poll, "
          f"{idle['requests_per_idle_hour']:.0f} per hour at the {DEFAULT_POLL_CAP_S:.0f} s "
          f"poll cap = ${idle['requests_per_idle_hour'] * PUT_PRICE_USD:.4f} per idle "
          "worker-hour (LIST is PUT-class)")
    if one is not None:
        met = "met" if one["rows_s"] >= ROWS_GOAL_S else "NOT met"
        print(f"goal >= {ROWS_GOAL_S:,} rows/s with one worker: {met} "
              f"({one['rows_s']:,.0f})")
    print(f"goal peak worker RSS < {RSS_LIMIT_BYTES >> 20} MB: "
          f"{'met' if peak < RSS_LIMIT_BYTES else 'NOT met'} ({peak / 1e6:.0f} MB)")
    print(json.dumps({"rows": args.rows, "csv_bytes": size, "cells": cells, "idle": idle,
                      "get_price_usd": GET_PRICE_USD, "put_price_usd": PUT_PRICE_USD}))


if __name__ == "__main__":
    main()
