"""Durability benchmark: what the write-ahead log costs and how fast a store comes back.

Parts (``--part``, default all that exist):

``replay``
    Write N records (``SET bench k<i % keys> <value>``) into a fresh log with one sync per 256
    records and no checkpoint, close it, then time ``open_log`` plus the full replay iteration:
    records/s from segments. Then checkpoint the same number of records as a snapshot and time
    the replay again: records/s from a snapshot. Both are pure read + decode + CRC32C cost;
    the store's apply is not included.
``append``
    Raw ``append`` + ``sync`` on the log for batch sizes 1, 16 and 256 (one sync per batch,
    i.e. group commit of that size), printing durable records/s, syncs/s and the sync latency
    p50/p99. Batch 1 is the serial fdatasync ceiling (research note: about 4.5-6.5k/s here).
``server``
    The durable server run (SET from 1, 50 and 500 connections at pipeline depth 1 and 16:
    requests/s, appends per sync, p50/p99) belongs here once the server writes through the WAL;
    the hook is ``run_server_part`` below and it reports "not yet" until then.

The machine is shared and noisy, so keep N small while developing (``--quick``) and compare
numbers from one run only. The last line of output is one JSON object with every figure.

    python bench/durability.py                  # replay 200k records, 2000 syncs per batch size
    python bench/durability.py --quick          # a smoke run
    python bench/durability.py --part append --syncs 500
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from minidb.wal import open_log

BATCH_SIZES = (1, 16, 256)
VALUE = "v" * 40  # a typical short value; the record is about 60 bytes framed


def _fill(data_dir: str, n: int, keys: int) -> None:
    log, replay = open_log(data_dir, segment_bytes=1 << 30)
    assert not list(replay)
    for i in range(n):
        log.append(f"SET bench k{i % keys} {VALUE}".encode())
        if i % 256 == 255:
            log.sync()
    log.sync()
    log.close()


def _time_replay(data_dir: str) -> tuple[float, int]:
    start = time.perf_counter()
    log, replay = open_log(data_dir)
    count = sum(1 for _ in replay)
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed, count


def run_replay_part(root: str, n: int) -> dict[str, Any]:
    """Replay speed from segments and from a snapshot, in records per second."""
    data_dir = os.path.join(root, "replay")
    _fill(data_dir, n, keys=n)
    seg_seconds, seg_count = _time_replay(data_dir)
    assert seg_count == n, (seg_count, n)
    log, replay = open_log(data_dir)
    for _ in replay:
        pass
    log.checkpoint(f"SET bench k{i} {VALUE}".encode() for i in range(n))
    log.close()
    snap_seconds, snap_count = _time_replay(data_dir)
    assert snap_count == n, (snap_count, n)
    shutil.rmtree(data_dir)
    return {
        "records": n,
        "segments_records_per_s": round(n / seg_seconds),
        "snapshot_records_per_s": round(n / snap_seconds),
    }


def run_append_part(root: str, syncs: int) -> dict[str, Any]:
    """Durable append throughput and sync latency per group-commit batch size."""
    results: dict[str, Any] = {}
    for batch in BATCH_SIZES:
        data_dir = os.path.join(root, f"append-{batch}")
        log, _ = open_log(data_dir)
        latencies = []
        # Fewer syncs for big batches keeps every cell about equally short.
        rounds = max(20, syncs // max(1, batch // 16))
        payloads = [f"SET bench k{i} {VALUE}".encode() for i in range(batch)]
        start = time.perf_counter()
        for _ in range(rounds):
            for payload in payloads:
                log.append(payload)
            t0 = time.perf_counter()
            log.sync()
            latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - start
        stats = log.statistics()
        log.close()
        shutil.rmtree(data_dir)
        latencies.sort()
        results[str(batch)] = {
            "records_per_s": round(stats.appends / elapsed),
            "syncs_per_s": round(stats.syncs / elapsed),
            "appends_per_sync": stats.appends / stats.syncs,
            "sync_p50_us": round(statistics.median(latencies) * 1e6),
            "sync_p99_us": round(latencies[int(len(latencies) * 0.99) - 1] * 1e6),
        }
    return results


def run_server_part(root: str) -> dict[str, Any] | None:
    """The durable server matrix; ``None`` until the server writes through the WAL."""
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("replay", "append", "server"), action="append")
    parser.add_argument("--records", type=int, default=200_000, help="records to replay")
    parser.add_argument("--syncs", type=int, default=2000, help="syncs per batch size")
    parser.add_argument("--dir", default=None, help="where to put the logs (default: temp)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small N")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.syncs = 10_000, 100
    parts = args.part or ["replay", "append", "server"]
    root = tempfile.mkdtemp(prefix="minidb-durability-", dir=args.dir)
    out: dict[str, Any] = {}
    try:
        if "replay" in parts:
            r = out["replay"] = run_replay_part(root, args.records)
            print(f"replay of {r['records']:,} records")
            print(f"  from segments: {r['segments_records_per_s']:>12,} records/s")
            print(f"  from snapshot: {r['snapshot_records_per_s']:>12,} records/s")
        if "append" in parts:
            a = out["append"] = run_append_part(root, args.syncs)
            print("append + sync (one fdatasync per batch)")
            print(f"  {'batch':>6} {'records/s':>12} {'syncs/s':>9} {'p50 us':>8} {'p99 us':>8}")
            for batch, cell in a.items():
                print(
                    f"  {batch:>6} {cell['records_per_s']:>12,} {cell['syncs_per_s']:>9,} "
                    f"{cell['sync_p50_us']:>8} {cell['sync_p99_us']:>8}"
                )
        if "server" in parts:
            s = out["server"] = run_server_part(root)
            if s is None:
                print("server: not yet (the server does not write through the WAL yet)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
