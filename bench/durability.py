"""Durability benchmark: what the write-ahead log costs and how fast a store comes back.

Parts (``--part``, default all that exist):

``replay``
    Write N records (a ``Put`` of ``bench k<i % keys> <value>`` each) into a fresh log with one
    sync per 256 records and no checkpoint, close it, then time ``open_log`` plus the full replay
    iteration: records/s from segments. Then checkpoint the same number of records as a
    snapshot and time the replay again: records/s from a snapshot. Both are pure read + CRC32C
    + op-decode cost; the store's apply is not included.
``append``
    Raw ``append`` + ``sync`` on the log for batch sizes 1, 16 and 256 (one sync per batch,
    i.e. group commit of that size), printing durable records/s, syncs/s and the sync latency
    p50/p99. Batch 1 is the serial fdatasync ceiling (research note: about 4.5-6.5k/s here).
``checkpoint``
    The checkpoint pause: a store of K keys (10k, 100k, 1M; 40-byte values) in a real
    ``StoreOwner`` on a ``DurableLog``; times what the owner is blocked for (``begin_checkpoint``:
    sync and new segment, plus the copy of the map) against the snapshot write that then runs
    off the owner (encode, write, fsync, manifest switch).
``server``
    Durable SETs against ``minidb serve`` from 1, 50 and 500 connections at pipeline depth 1 and
    16, with ``bench/server.py``'s load generator (one process per cell): requests/s, p50/p99
    latency, and appends per sync read from the server's own ``/metrics`` counters around the
    cell. Each *target* is one server under test and one column group: ``--sync-in loop,thread``
    runs minidb with its fdatasync on the loop thread and in a worker thread, interleaved per
    cell. A target whose counters are unknown (a future Redis ``appendfsync always`` column,
    added as another ``Target``) prints ``-`` for appends per sync.

The machine is shared and noisy, so keep N small while developing (``--quick``) and compare
numbers from one run only. The last line of output is one JSON object with every figure.

    python bench/durability.py                  # replay 200k records, 2000 syncs per batch size
    python bench/durability.py --quick          # a smoke run
    python bench/durability.py --part append --syncs 500
    python bench/durability.py --part server --seconds 3 --sync-in loop,thread
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from minidb.wal import encode_put, open_log

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server as server_bench  # bench/server.py: the one load generator

BATCH_SIZES = (1, 16, 256)
VALUE = b"v" * 40  # a typical short value; the record is about 75 bytes framed


def _fill(data_dir: str, n: int, keys: int) -> None:
    log, replay = open_log(data_dir, segment_bytes=1 << 30)
    assert not list(replay)
    for i in range(n):
        log.append(encode_put(b"bench", b"k%d" % (i % keys), VALUE))
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
    log.checkpoint(encode_put(b"bench", b"k%d" % i, VALUE) for i in range(n))
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
        payloads = [encode_put(b"bench", b"k%d" % i, VALUE) for i in range(batch)]
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


CHECKPOINT_KEYS = (10_000, 100_000, 1_000_000)


def run_checkpoint_part(root: str, sizes: tuple[int, ...]) -> dict[str, Any]:
    """Owner pause vs off-owner snapshot write, per store size (milliseconds)."""
    from minidb.protocol import Set
    from minidb.store import StoreOwner, StoreState

    results: dict[str, Any] = {}
    for keys in sizes:
        data_dir = os.path.join(root, f"checkpoint-{keys}")
        log, _ = open_log(data_dir, checkpoint_bytes=1)
        state = StoreState()
        value = VALUE
        for i in range(keys):
            state.apply(Set(b"bench", b"k%d" % i, value))
        owner = StoreOwner(state, log, mailbox=16)
        log.append(encode_put(b"bench", b"k0", value))  # some log since the last checkpoint
        log.sync()
        job = owner._begin_checkpoint()  # what the owner does inline: the pause
        assert job is not None
        pause = owner.statistics().checkpoint_pause_last_s
        started = time.perf_counter()
        job()  # what a worker thread does while the owner goes on
        finish = time.perf_counter() - started
        log.close()
        shutil.rmtree(data_dir)
        results[str(keys)] = {"pause_ms": pause * 1e3, "snapshot_write_ms": finish * 1e3}
    return results


SERVER_CONNS = (1, 50, 500)
SERVER_DEPTHS = (1, 16)
STARTUP_TIMEOUT_S = 30.0
"""How long a server under test may take to print its listening lines."""


@dataclass
class Target:
    """One server under test: where to send load, and (if it can say) its log counters."""

    name: str
    port: int
    counters: Callable[[], tuple[float, float]] | None  # (appends, syncs) so far
    stop: Callable[[], None]


def _scrape(metrics_port: int) -> tuple[float, float]:
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    values = {}
    for name in ("minidb_wal_appends_total", "minidb_wal_syncs_total"):
        match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
        values[name] = float(match.group(1)) if match else 0.0
    return values["minidb_wal_appends_total"], values["minidb_wal_syncs_total"]


def start_minidb(data_dir: str, sync_in: str) -> Target:
    """``minidb serve`` with its metrics port, fsync placement ``sync_in``, a huge mailbox."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "minidb", "serve", "--port", "0", "--metrics-port", "0",
         "--data-dir", data_dir, "--mailbox", str(server_bench.MAILBOX), "--sync-in", sync_in],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    assert proc.stdout is not None
    ports: dict[str, int] = {}
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while len(ports) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        match = re.search(r":(\d+) \((\w+)\)", line)
        if match:
            ports[match.group(2)] = int(match.group(1))
        elif not line:
            break
    if len(ports) < 2:
        proc.kill()
        raise SystemExit(f"minidb serve --sync-in {sync_in} did not start")

    def stop() -> None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)

    return Target(f"minidb/{sync_in}", ports["line"], lambda: _scrape(ports["metrics"]), stop)


def _measure(t: Target, conns: int, depth: int, seconds: float) -> dict[str, float]:
    before = t.counters() if t.counters else None
    cell = server_bench.run_cell(t.port, conns, depth, "set", seconds)
    if t.counters and before is not None:
        after = t.counters()
        syncs = after[1] - before[1]
        cell["appends_per_sync"] = (after[0] - before[0]) / syncs if syncs else 0.0
    return cell


def run_server_part(
    root: str, seconds: float, sync_places: list[str], conns: tuple[int, ...], repeat: int = 1
) -> dict[str, Any]:
    """Durable SET matrix per target: req/s, p50/p99 ms, appends per sync (medians of
    ``repeat`` interleaved runs)."""
    targets = [start_minidb(os.path.join(root, f"server-{p}"), p) for p in sync_places]
    results: dict[str, Any] = {t.name: {} for t in targets}
    try:
        head = " ".join(
            f"| {t.name:>16} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'app/sync':>8}"
            for t in targets
        )
        print(f"durable SET, {seconds:g} s per cell")
        print(f"{'conns':>5} {'depth':>5} {head}")
        for c in conns:
            for d in SERVER_DEPTHS:
                runs: dict[str, list[dict[str, float]]] = {t.name: [] for t in targets}
                for _ in range(repeat):
                    for t in targets:  # interleaved per cell: drift hits every target alike
                        runs[t.name].append(_measure(t, c, d, seconds))
                row = []
                for t in targets:
                    cell = results[t.name][f"{c}x{d}"] = server_bench._median(runs[t.name])
                    per_sync = cell.get("appends_per_sync")
                    row.append(
                        f"| {'':>16} {cell['rps']:>8,.0f} {cell['p50_ms']:>7.2f} "
                        f"{cell['p99_ms']:>7.2f} "
                        + (f"{per_sync:>8.1f}" if per_sync is not None else f"{'-':>8}")
                        + (f" ({cell['errors']:.0f} ERR)" if cell["errors"] else "")
                    )
                print(f"{c:>5} {d:>5} " + " ".join(row), flush=True)
    finally:
        for t in targets:
            t.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--part", choices=("replay", "append", "checkpoint", "server"), action="append"
    )
    parser.add_argument("--records", type=int, default=200_000, help="records to replay")
    parser.add_argument("--syncs", type=int, default=2000, help="syncs per batch size")
    parser.add_argument("--dir", default=None, help="where to put the logs (default: temp)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small N")
    parser.add_argument("--seconds", type=float, default=3.0, help="server: time per cell")
    parser.add_argument(
        "--sync-in", default="loop", help="server: comma-separated fsync places (loop,thread)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="server: runs per cell (median)")
    parser.add_argument(
        "--conns", default=",".join(map(str, SERVER_CONNS)), help="server: connection counts"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.syncs, args.seconds = 10_000, 100, 1.0
    parts = args.part or ["replay", "append", "checkpoint", "server"]
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
        if "checkpoint" in parts:
            sizes = CHECKPOINT_KEYS[:2] if args.quick else CHECKPOINT_KEYS
            k = out["checkpoint"] = run_checkpoint_part(root, sizes)
            print("checkpoint: owner pause vs snapshot write off the owner")
            print(f"  {'keys':>9} {'pause ms':>9} {'write ms':>9}")
            for keys, cell in k.items():
                pause, write = cell["pause_ms"], cell["snapshot_write_ms"]
                print(f"  {int(keys):>9,} {pause:>9.1f} {write:>9.1f}")
        if "server" in parts:
            out["server"] = run_server_part(
                root, args.seconds, args.sync_in.split(","),
                tuple(int(c) for c in args.conns.split(",")), args.repeat,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
