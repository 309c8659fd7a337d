"""Replication benchmark: what shipping the WAL costs the primary, and what it costs at S3.

Parts:

``throughput``
    Two ``minidb serve`` processes on fresh data dirs, one with ``--replicate-to file:DIR``
    (the shipping path is the same for S3; ``file:`` keeps a second moto process off this
    2-core machine) and one without. ``bench/server.py``'s load generator runs durable SETs
    (``--conns`` connections, pipeline ``--depth``) against each in turn, interleaved
    ``--rounds`` times so a shared machine's drift hits both alike; the figure is the ratio of
    the median requests/s, shipping on / off (goal: at least 0.95).
``traffic``
    From the shipping server's own ``/metrics`` around the load: bytes and store requests per
    million writes, then an idle stretch (``--idle`` seconds) scaled to an hour, and the cost
    at S3 Standard list prices (us-east-1: PUT/LIST $0.005 per 1,000, GET $0.0004 per 1,000,
    storage $0.023 per GB-month).
``restore``
    Restore time of ``--restore-keys`` keys (default 1M) from a ``file:`` store: a snapshot of
    that many keys plus as many log records after it (overwrites of the same keys) in
    segment-sized chunks, written straight in the layout (no server, so generating them stays
    well under a minute), then ``minidb.replication.restore`` into a fresh directory (every
    checksum verified, the data directory written and synced), then the time ``minidb serve``
    needs to replay the result.

The last line of output is one JSON object with every figure.

    python bench/replication.py              # 3 rounds of 4 s per server (about 40 s)
    python bench/replication.py --quick      # 2 rounds of 2 s
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _serverproc
import server as server_bench  # bench/server.py: the one load generator

S3_PUT_PER_1000_USD = 0.005
"""S3 Standard PUT, COPY, POST, LIST requests, per 1,000 (us-east-1 list price)."""
S3_GET_PER_1000_USD = 0.0004
"""S3 Standard GET and all other requests, per 1,000."""
S3_STORAGE_GB_MONTH_USD = 0.023
"""S3 Standard storage, per GB-month (first 50 TB)."""


def _metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(minidb_(?:replication|wal)_\w+?)(?:_total)? ([0-9.e+-]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def _ports(served: _serverproc.Served) -> int:
    # The metrics line follows the line-port line that _serverproc read.
    assert served.proc.stdout is not None
    while True:
        line = served.proc.stdout.readline()
        if m := re.search(r":(\d+) \(metrics\)", line):
            return int(m.group(1))
        if not line:
            raise SystemExit("server printed no metrics port")


def throughput_and_traffic(args: argparse.Namespace) -> dict[str, Any]:
    objects = tempfile.TemporaryDirectory(prefix="minidb-bench-objects-")
    on = _serverproc.serve(None, "--metrics-port", "0", "--replicate-to", f"file:{objects.name}",
                           "--ship-interval", str(args.ship_interval))
    on_metrics = _ports(on)
    # The same flags but shipping, the metrics port included (only the shipping server's is
    # read): the ratio is of shipping alone.
    off = _serverproc.serve(None, "--metrics-port", "0")
    _ports(off)
    try:
        rps: dict[str, list[float]] = {"on": [], "off": []}
        before = _metrics(on_metrics)
        for _ in range(args.rounds):
            for name, target in (("off", off), ("on", on)):
                cell = server_bench.run_cell(target.port, args.conns, args.depth, "set",
                                             args.seconds)
                rps[name].append(cell["rps"])
        time.sleep(args.ship_interval * 2)  # let the last chunk go out
        after = _metrics(on_metrics)
        writes = after["minidb_wal_appends"] - before["minidb_wal_appends"]
        shipped = {k: after[k] - before.get(k, 0.0) for k in (
            "minidb_replication_shipped_bytes", "minidb_replication_shipped_objects",
            "minidb_replication_store_requests")}
        time.sleep(0.5)
        idle_before = _metrics(on_metrics)
        time.sleep(args.idle)
        idle_after = _metrics(on_metrics)
    finally:
        on.stop()
        off.stop()
        objects.cleanup()
    per_million = 1e6 / max(writes, 1.0)
    puts = shipped["minidb_replication_shipped_objects"] * per_million
    requests = shipped["minidb_replication_store_requests"] * per_million
    gets = max(0.0, requests - puts)  # the fence check before each round
    idle_scale = 3600.0 / args.idle
    idle_requests = (idle_after["minidb_replication_store_requests"]
                     - idle_before["minidb_replication_store_requests"]) * idle_scale
    idle_bytes = (idle_after["minidb_replication_shipped_bytes"]
                  - idle_before["minidb_replication_shipped_bytes"]) * idle_scale
    bytes_per_million = shipped["minidb_replication_shipped_bytes"] * per_million
    cost = puts / 1000 * S3_PUT_PER_1000_USD + gets / 1000 * S3_GET_PER_1000_USD
    return {
        "rps_off": statistics.median(rps["off"]), "rps_on": statistics.median(rps["on"]),
        "ratio_on_off": statistics.median(rps["on"]) / statistics.median(rps["off"]),
        "rounds": rps, "writes_measured": writes,
        "per_million_writes": {"bytes": bytes_per_million, "put_requests": puts,
                               "get_requests": gets, "request_cost_usd": cost,
                               "storage_usd_per_month_if_kept": bytes_per_million / 1e9
                               * S3_STORAGE_GB_MONTH_USD},
        "per_idle_hour": {"requests": idle_requests, "bytes": idle_bytes},
    }


RESTORE_CHUNK_RECORDS = 100_000
"""Log records per shipped chunk in the restore part (about a 16 MiB segment's worth)."""


async def ship_store(store: Any, keys: int) -> int:
    """Write into ``store`` (an empty ``ObjectStore``) what a primary would have shipped for
    ``keys`` keys: a snapshot of them, then as many log records after it (overwrites of the same
    keys) in chunks of ``RESTORE_CHUNK_RECORDS``, straight in the layout (no server, so
    generating them stays well under a minute); the bytes shipped. ``bench/replay.py`` restores
    the same store."""
    from minidb.replication import (
        CurrentPointer,
        GenerationRecord,
        chunk_for,
        generation_id,
        snapshot_for,
    )
    from minidb.wal import encode_put, segment_header
    from minidb.wal._checkpoint import snapshot_chunks
    from minidb.wal._format import encode_record

    value = b"v" * 32
    now = int(time.time() * 1000)
    gen = generation_id(now, 1)
    record = GenerationRecord(gen, None, now, "bench", os.getpid(), False)
    await store.put_if_absent(record.key, record.to_json())
    await store.put_if_absent("current", CurrentPointer(gen, 1, now, "bench").to_json())
    snapshot = b"".join(snapshot_chunks(keys, (
        encode_put(b"b", b"key:%09d" % i, value) for i in range(keys)
    )))
    snap = snapshot_for(gen, keys, now, snapshot)
    await store.put_if_absent(snap.key, snapshot)
    shipped = len(snapshot)
    for first in range(keys, 2 * keys, RESTORE_CHUNK_RECORDS):
        last = min(first + RESTORE_CHUNK_RECORDS, 2 * keys) - 1
        data = segment_header(first) + b"".join(
            encode_record(n, encode_put(b"b", b"key:%09d" % (n - keys), b"w" * 32))
            for n in range(first, last + 1)
        )
        chunk = chunk_for(gen, first, last, now, data)
        await store.put_if_absent(chunk.key, data)
        shipped += len(data)
    return shipped


def restore_part(args: argparse.Namespace) -> dict[str, Any]:
    """Restore ``args.restore_keys`` keys: a snapshot of them plus as many log records."""
    import asyncio

    from minidb.objstore import FileStore
    from minidb.replication._restore import restore
    from minidb.server._config import ServerConfig
    from minidb.server._lifecycle import open_store

    keys = args.restore_keys

    async def run(root: str) -> dict[str, Any]:
        store = FileStore(os.path.join(root, "objects"))
        started = time.perf_counter()
        shipped = await ship_store(store, keys)
        generated = time.perf_counter() - started
        target = os.path.join(root, "restored")
        result = await restore(store, target)
        await store.close()
        replay = None
        if args.restore_replay:
            started = time.perf_counter()
            state, log = open_store(ServerConfig(data_dir=pathlib.Path(target)))
            replay = round(time.perf_counter() - started, 3)
            count = len(state)
            log.close()
            assert count == keys, (count, keys)
        return {
            "keys": keys, "log_records": result.records, "bytes": shipped,
            "objects": result.objects_read, "generate_s": round(generated, 3),
            "restore_s": round(result.seconds, 3),
            "restore_mb_per_s": round(shipped / 1e6 / result.seconds, 1),
            "replay_s": replay,
        }

    with tempfile.TemporaryDirectory(prefix="minidb-bench-restore-") as root:
        return asyncio.run(run(root))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--conns", type=int, default=50)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--idle", type=float, default=5.0)
    parser.add_argument("--ship-interval", type=float, default=1.0)
    parser.add_argument("--restore-keys", type=int, default=1_000_000,
                        help="keys in the restore part's snapshot, and log records after it")
    parser.add_argument("--restore-replay", action="store_true",
                        help="also time minidb serve's replay of the restored directory")
    parser.add_argument("--part", choices=("all", "ship", "restore"), default="all")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.idle = 2, 2.0, 3.0
        args.restore_keys = min(args.restore_keys, 100_000)
    if args.part == "restore":
        restored = restore_part(args)
        _print_restore(restored)
        print(json.dumps({"restore": restored}))
        return
    result = throughput_and_traffic(args)
    if args.part == "all":
        result["restore"] = restore_part(args)
    print(f"durable SETs, {args.conns} conns x depth {args.depth}, {args.rounds} interleaved"
          f" rounds of {args.seconds}s")
    print(f"  shipping off: {result['rps_off']:10.0f} req/s")
    print(f"  shipping on:  {result['rps_on']:10.0f} req/s   ratio on/off"
          f" {result['ratio_on_off']:.3f} (goal >= 0.95)")
    pm = result["per_million_writes"]
    print(f"per million writes: {pm['bytes'] / 1e6:.1f} MB shipped, {pm['put_requests']:.0f} PUTs,"
          f" {pm['get_requests']:.0f} GETs: ${pm['request_cost_usd']:.4f} in requests,"
          f" ${pm['storage_usd_per_month_if_kept']:.4f}/month to keep the bytes")
    idle = result["per_idle_hour"]
    print(f"per idle hour: {idle['requests']:.0f} requests, {idle['bytes']:.0f} bytes")
    if "restore" in result:
        _print_restore(result["restore"])
    print(json.dumps(result))


def _print_restore(r: dict[str, Any]) -> None:
    print(f"restore of {r['keys']} keys (a snapshot plus {r['log_records']} log records,"
          f" {r['bytes'] / 1e6:.0f} MB in {r['objects']} objects): {r['restore_s']:.2f} s"
          f" ({r['restore_mb_per_s']} MB/s, every checksum verified; objects generated in"
          f" {r['generate_s']:.1f} s)")
    if r["replay_s"] is not None:
        print(f"  then minidb serve replays the restored directory in {r['replay_s']:.2f} s")


if __name__ == "__main__":
    main()
