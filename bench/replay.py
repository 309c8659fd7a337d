"""Replay and restore benchmark: start-up replay of logged SETs and ``minidb restore``, C and pure.

Each figure is measured in a fresh subprocess, once with the C accelerators (as built) and once
with the pure-Python twins (``MINIDB_PURE_PYTHON=1``), on the same files, interleaved round by
round so a shared machine's drift hits both alike; the medians and their ratio are printed.

``replay``
    A data directory holding ``--keys`` logged SETs (default 1M): one record per SET (the RESP
    ``SET``'s payload, a ``PUT`` without expiry in bucket ``0``), written through ``DurableLog``
    in group commits of ``--group`` records, segments rolling at 16 MiB as the server's do, no
    checkpoint, so every SET is a log record. The figure is ``open_store``, what
    ``minidb serve`` calls at start: open the log and replay every record into a new keyspace
    (the interpreter's start-up and imports not included).
``restore``
    ``minidb restore --from file:DIR`` of ``--keys`` keys from the store ``bench/replication.py``
    ships (``ship_store``: a snapshot of that many keys, one record each, plus as many log
    records after it in chunks of 100k). The figure is the command's wall time (a new process,
    start-up included); the time it reports itself is printed beside it.

Beside each wall time, the CPU time the process spent: on a shared machine the wall time also
counts waiting for a core.

The last line of output is one JSON object with every figure.

    python bench/replay.py                   # 1M keys, 3 rounds (about 3 minutes)
    python bench/replay.py --keys 100000 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replication  # bench/replication.py: the shipped store of its restore part

PURE_ENV = "MINIDB_PURE_PYTHON"
VALUE_BYTES = 32
"""Bytes of each SET's value (as bench/replication.py's)."""
SYNC_EVERY_GROUPS = 64
"""Groups written between two fdatasyncs while building (the bytes are the same either way)."""
REPLAY_GOAL_S = 3.0
RESTORE_GOAL_S = 10.0


def build_log(data_dir: str, keys: int, group: int) -> int:
    """A data directory holding ``keys`` logged SETs of distinct keys, ``group`` records per
    write; its log bytes."""
    from minidb.wal import encode_put, open_log

    log, replay = open_log(data_dir)
    assert list(replay) == []
    value = b"v" * VALUE_BYTES
    for groups, first in enumerate(range(0, keys, group), 1):
        last = min(first + group, keys)
        log.append_all([encode_put(b"0", b"key:%09d" % i, value) for i in range(first, last)])
        log.write_pending()
        if groups % SYNC_EVERY_GROUPS == 0:
            log.datasync()
    log.sync()
    log_bytes = log.statistics().bytes
    log.close()
    return log_bytes


def child_replay(data_dir: str) -> None:
    """In the subprocess: time ``open_store`` of ``data_dir`` and print the figures as JSON."""
    from minidb.server._config import ServerConfig
    from minidb.server._lifecycle import open_store
    from minidb.wal._reader import ACCELERATED

    started, cpu = time.perf_counter(), time.process_time()
    state, log = open_store(ServerConfig(data_dir=pathlib.Path(data_dir)))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    records = log.statistics().replayed
    log.close()
    print(json.dumps({
        "seconds": seconds, "cpu": cpu, "keys": len(state), "records": records,
        "accelerated": ACCELERATED,
    }))


def _env(pure: bool) -> dict[str, str]:
    env = dict(os.environ)
    if pure:
        env[PURE_ENV] = "1"
    else:
        env.pop(PURE_ENV, None)
    return env


def run_replay(data_dir: str, pure: bool, keys: int) -> tuple[float, float]:
    """``open_store`` of ``data_dir`` in a new process: wall time, CPU time."""
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child-replay", data_dir],
        env=_env(pure), check=True, capture_output=True, text=True,
    ).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["keys"] == keys and figures["records"] == keys, figures
    assert figures["accelerated"] is not pure, ("the C reader is not built", figures)
    return float(figures["seconds"]), float(figures["cpu"])


def run_restore(objects: str, target: str, pure: bool) -> tuple[float, float, float]:
    """``minidb restore`` into ``target`` (removed afterwards): wall time, CPU time (user and
    system), the time the command reports."""
    started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [sys.executable, "-m", "minidb", "restore", "--from", f"file:{objects}",
         "--data-dir", target],
        env=_env(pure), check=True, capture_output=True, text=True,
    ).stdout
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    shutil.rmtree(target)
    found = re.search(r" in ([0-9.]+) s$", out.strip())
    assert found, out
    return wall, cpu, float(found.group(1))


def _summary(runs: dict[bool, list[tuple[float, ...]]]) -> dict[str, Any]:
    """Medians of the C (False) and pure (True) rounds: wall, CPU, and the third figure if
    any; every round as measured."""
    c, pure = ([statistics.median(f) for f in zip(*runs[p], strict=True)] for p in (False, True))
    return {"c_s": c[0], "pure_s": pure[0], "ratio_pure_over_c": pure[0] / c[0],
            "c_cpu_s": c[1], "pure_cpu_s": pure[1], "medians_c": c, "medians_pure": pure,
            "rounds_c": runs[False], "rounds_pure": runs[True]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--group", type=int, default=64,
                        help="records per group commit while building the log")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--part", choices=("all", "replay", "restore"), default="all")
    parser.add_argument("--child-replay", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_replay:
        child_replay(args.child_replay)
        return
    result: dict[str, Any] = {"keys": args.keys, "rounds": args.rounds}
    with tempfile.TemporaryDirectory(prefix="minidb-bench-replay-") as root:
        if args.part in ("all", "replay"):
            data_dir = os.path.join(root, "data")
            started = time.perf_counter()
            log_bytes = build_log(data_dir, args.keys, args.group)
            print(f"built {args.keys} logged SETs ({log_bytes / 1e6:.0f} MB of log, groups of"
                  f" {args.group}) in {time.perf_counter() - started:.1f} s", flush=True)
            times: dict[bool, list[tuple[float, ...]]] = {False: [], True: []}
            for _ in range(args.rounds):
                for pure in (False, True):
                    times[pure].append(run_replay(data_dir, pure, args.keys))
            result["replay"] = {**_summary(times), "log_bytes": log_bytes}
            shutil.rmtree(data_dir)
        if args.part in ("all", "restore"):
            from minidb.objstore import FileStore

            objects = os.path.join(root, "objects")
            store = FileStore(objects)
            started = time.perf_counter()
            shipped = asyncio.run(replication.ship_store(store, args.keys))
            print(f"shipped {args.keys} keys ({shipped / 1e6:.0f} MB) in"
                  f" {time.perf_counter() - started:.1f} s", flush=True)
            runs: dict[bool, list[tuple[float, ...]]] = {False: [], True: []}
            for _ in range(args.rounds):
                for pure in (False, True):
                    runs[pure].append(run_restore(objects, os.path.join(root, "restored"), pure))
            result["restore"] = {**_summary(runs), "bytes": shipped}
    _print(result)
    print(json.dumps(result))


def _print(result: dict[str, Any]) -> None:
    keys, rounds = result["keys"], result["rounds"]
    if "replay" in result:
        r = result["replay"]
        print(f"replay at start of {keys} logged SETs ({r['log_bytes'] / 1e6:.0f} MB), median of"
              f" {rounds}: C {r['c_s']:.2f} s, pure {r['pure_s']:.2f} s,"
              f" pure/C {r['ratio_pure_over_c']:.1f}x (goal < {REPLAY_GOAL_S:g} s at 1M);"
              f" CPU: C {r['c_cpu_s']:.2f} s, pure {r['pure_cpu_s']:.2f} s")
    if "restore" in result:
        r = result["restore"]
        print(f"minidb restore of {keys} keys from file: ({r['bytes'] / 1e6:.0f} MB), median of"
              f" {rounds}: C {r['c_s']:.2f} s, pure {r['pure_s']:.2f} s,"
              f" pure/C {r['ratio_pure_over_c']:.1f}x (goal < {RESTORE_GOAL_S:g} s at 1M);"
              f" CPU: C {r['c_cpu_s']:.2f} s, pure {r['pure_cpu_s']:.2f} s; reported by the"
              f" command: C {r['medians_c'][2]:.2f} s, pure {r['medians_pure'][2]:.2f} s")


if __name__ == "__main__":
    main()
