"""CSV import benchmark: ``BulkWriter`` into a durable minidb against ``redis-cli --pipe``.

Generates N rows of ``bucket,key,value`` (10 buckets, 16-40 byte keys, 20-200 byte values,
seeded so every run loads the same bytes), writes them as a CSV file and, for Redis, as the
same rows in RESP (``SET bucket:key value``). Then, interleaved for ``--rounds`` rounds, each
cell on a fresh server:

- ``minidb xC``: ``minidb serve`` (every write fsynced before its ``OK``), and a loader process
  that parses the CSV with the stdlib ``csv`` module and streams it through ``BulkWriter``
  over C connections (the file split into C byte ranges at line boundaries, one task each);
  rows/s is from the loader's first connect to its last ``OK`` (CSV parsing included).
- ``redis <policy>``: Debian's ``redis-server --appendonly yes --appendfsync <policy> --save ''``
  in a temp dir, loaded with ``redis-cli --pipe`` from the RESP file; rows/s from the wall time
  of ``redis-cli`` (the RESP file is prepared beforehand, so Redis parses no CSV).

It prints the median of each cell, the ratios minidb/Redis, the loader's peak RSS (``wait4``'s
rusage) and the server's (``VmHWM``), and for minidb the server's CPU per row (startup
included, from ``/proc/<pid>/stat``). The last line is one JSON object with every figure.

    python bench/batch_import.py                        # 100k rows, 3 rounds, about a minute
    python bench/batch_import.py --rows 10000000 --rounds 1 --cells 'minidb x1,redis always'
    python bench/batch_import.py --rows 200000 --windows 128,512,1024,4096 --cells 'minidb x1'
    python bench/batch_import.py --cells 'minidb x1,minidb x1 f1024'  # server --max-in-flight
    python bench/batch_import.py --rows 200000 --profile   # cProfile of the 1-connection load
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _serverproc import Served, serve
from minidb.client import BulkWriter
from minidb.client._bulk import DEFAULT_FRAME_ROWS, DEFAULT_WINDOW

SEED = 20261201
BUCKETS = [f"bucket{i}" for i in range(10)]
KEY_BYTES = (16, 40)
VALUE_BYTES = (20, 200)
READ_BYTES = 1 << 20
"""How much of the CSV a loader task reads at a time (cut back to the last line end)."""
STARTUP_TIMEOUT_S = 10.0
_RESP_SET = b"*3\r\n$3\r\nSET\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n"
DEFAULT_ROWS = 100_000
"""Rows of the default run: with every write fsynced on this shared disk (2-4 ms per
fdatasync), three rounds of four cells of more rows would not fit in a minute."""
DEFAULT_CELLS = "minidb x1,minidb x4,redis always,redis everysec"


# -- the data -----------------------------------------------------------------------------


def generate(rows: int, csv_path: Path, resp_path: Path) -> None:
    """Write ``rows`` seeded rows as CSV and as RESP ``SET`` commands."""
    rng = random.Random(SEED)
    key_alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_-."
    value_alphabet = key_alphabet + "ABCDEFGHIJKLMNOPQRSTUVWXYZ ,;:!?'\"()"
    # Slicing pools is far cheaper than drawing every character.
    key_pool = "".join(rng.choices(key_alphabet, k=1 << 16))
    value_pool = "".join(rng.choices(value_alphabet, k=1 << 18))
    randint = rng.randint
    with open(csv_path, "w", newline="") as csv_file, open(resp_path, "wb") as resp_file:
        out = csv.writer(csv_file, lineterminator="\n")
        resp: list[bytes] = []
        for i in range(rows):
            bucket = BUCKETS[randint(0, 9)]
            prefix = f"{i:x}-"
            length = randint(*KEY_BYTES) - len(prefix)
            at = randint(0, len(key_pool) - 64)
            key = prefix + key_pool[at : at + length]
            length = randint(*VALUE_BYTES)
            at = randint(0, len(value_pool) - 256)
            value = value_pool[at : at + length]
            out.writerow((bucket, key, value))
            name = f"{bucket}:{key}".encode()
            data = value.encode()
            resp.append(_RESP_SET % (len(name), name, len(data), data))
            if len(resp) >= 10000:
                resp_file.write(b"".join(resp))
                resp.clear()
        resp_file.write(b"".join(resp))


def ranges(path: Path, parts: int) -> list[tuple[int, int]]:
    """``parts`` byte ranges of the file, each starting at a line start."""
    size = path.stat().st_size
    starts = [0]
    with open(path, "rb") as f:
        for i in range(1, parts):
            f.seek(size * i // parts)
            f.readline()
            starts.append(f.tell())
    return list(zip(starts, [*starts[1:], size], strict=True))


def csv_rows(path: Path, start: int, end: int) -> Iterator[list[str]]:
    """The CSV rows of ``[start, end)``, parsed with the stdlib ``csv`` module (values hold
    no line breaks, so a read cut back to its last newline holds whole records)."""
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start
        carry = b""
        while left > 0:
            block = f.read(min(READ_BYTES, left))
            if not block:
                break
            left -= len(block)
            block = carry + block
            cut = block.rfind(b"\n") + 1 if left > 0 else len(block)
            carry = block[cut:]
            yield from csv.reader(block[:cut].decode().splitlines())


# -- the minidb loader (a separate process) -----------------------------------------------


async def load_range(
    port: int, path: Path, start: int, end: int, window: int, frame_rows: int
) -> tuple[int, int]:
    """Stream one range; return (rows, rows refused)."""
    rows = 0
    async with await BulkWriter.connect(
        "127.0.0.1", port, window=window, frame_rows=frame_rows
    ) as writer:
        put = writer.set
        for bucket, key, value in csv_rows(path, start, end):
            rows += 1
            await put(bucket.encode(), key.encode(), value.encode(), rows)
        await writer.flush()
        return rows, len(writer.failures)


async def load(
    port: int, path: Path, connections: int, window: int, frame_rows: int
) -> dict[str, Any]:
    began = time.perf_counter()
    results = await asyncio.gather(
        *(load_range(port, path, s, e, window, frame_rows) for s, e in ranges(path, connections))
    )
    seconds = time.perf_counter() - began
    return {
        "rows": sum(r for r, _ in results),
        "errors": sum(e for _, e in results),
        "seconds": seconds,
    }


def worker_main(args: argparse.Namespace) -> None:
    import minidb.runtime

    result = minidb.runtime.run(
        load(args.port, Path(args.worker), args.connections, args.window, args.frame_rows)
    )
    print(json.dumps(result))


# -- cells ----------------------------------------------------------------------------------


def vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a live process has used (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_child(command: list[str], stdin: Any = None) -> tuple[str, float, int]:
    """Run ``command``; return its stdout, wall seconds and peak RSS in bytes."""
    began = time.perf_counter()
    proc = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - began
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{command[0]} exited {proc.returncode}")
    return out, seconds, usage.ru_maxrss * 1024


def minidb_cell(
    csv_path: Path, rows: int, connections: int, window: int, server_args: list[str],
    frame_rows: int = DEFAULT_FRAME_ROWS,
) -> dict[str, Any]:
    served: Served = serve(None, *server_args)
    try:
        out, _, loader_rss = run_child([
            sys.executable, os.path.abspath(__file__), "--worker", str(csv_path),
            "--port", str(served.port), "--connections", str(connections),
            "--window", str(window), "--frame-rows", str(frame_rows),
        ])
        result = json.loads(out)
        server_rss = vm_hwm(served.proc.pid)
        server_cpu = cpu_seconds(served.proc.pid)
    finally:
        served.stop()
    if result["rows"] != rows or result["errors"]:
        raise SystemExit(f"minidb loaded {result}, expected {rows} rows and no errors")
    return {
        "rows_s": rows / result["seconds"], "loader_rss": loader_rss, "server_rss": server_rss,
        "server_cpu_us_per_row": server_cpu / rows * 1e6,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def redis_cell(resp_path: Path, rows: int, policy: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="minidb-bench-redis-") as data_dir:
        port = free_port()
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", data_dir,
             "--appendonly", "yes", "--appendfsync", policy, "--save", "", "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                        sock.sendall(b"PING\r\n")
                        if sock.recv(64).startswith(b"+PONG"):
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("redis-server did not start")
                time.sleep(0.05)
            with open(resp_path, "rb") as stdin:
                out, seconds, loader_rss = run_child(
                    ["redis-cli", "-p", str(port), "--pipe"], stdin=stdin
                )
            server_rss = vm_hwm(server.pid)
        finally:
            server.kill()
            server.wait(timeout=10)
    if f"errors: 0, replies: {rows}" not in out:
        raise SystemExit(f"redis-cli --pipe said: {out!r}")
    return {"rows_s": rows / seconds, "loader_rss": loader_rss, "server_rss": server_rss}


def run_cell(
    name: str, csv_path: Path, resp_path: Path, rows: int, window: int,
    frame_rows: int = DEFAULT_FRAME_ROWS,
) -> dict[str, Any]:
    kind, _, arg = name.partition(" ")
    if kind == "minidb":
        # "minidb x4" = 4 connections; "minidb x1 f1024" also passes --max-in-flight 1024.
        connections, *flight = arg.split()
        server_args = ["--max-in-flight", flight[0].lstrip("f")] if flight else []
        return minidb_cell(
            csv_path, rows, int(connections.lstrip("x")), window, server_args, frame_rows
        )
    return redis_cell(resp_path, rows, arg)


def profile(csv_path: Path) -> None:
    """cProfile the loader's side of a 1-connection load, in this process."""
    import cProfile
    import pstats

    import minidb.runtime

    served = serve(None)
    try:
        profiler = cProfile.Profile()
        profiler.enable()
        result = minidb.runtime.run(
            load(served.port, csv_path, 1, DEFAULT_WINDOW, DEFAULT_FRAME_ROWS)
        )
        profiler.disable()
    finally:
        served.stop()
    print(f"profiled load: {result['rows'] / result['seconds']:,.0f} rows/s (under cProfile)")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cells", default=DEFAULT_CELLS, help="comma-separated cell names")
    parser.add_argument("--windows", default=str(DEFAULT_WINDOW),
                        help="comma-separated windows to measure for the minidb cells")
    parser.add_argument("--frame-rows", type=int, default=DEFAULT_FRAME_ROWS,
                        help="rows per BULK frame of the minidb loader")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--connections", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args)
        return
    if shutil.which("redis-server") is None and "redis" in args.cells:
        raise SystemExit("redis-server not found (apt-get install redis-server)")

    with tempfile.TemporaryDirectory(prefix="minidb-bench-import-") as tmp:
        csv_path, resp_path = Path(tmp, "rows.csv"), Path(tmp, "rows.resp")
        began = time.perf_counter()
        generate(args.rows, csv_path, resp_path)
        print(f"generated {args.rows:,} rows: CSV {csv_path.stat().st_size / 1e6:.0f} MB, "
              f"RESP {resp_path.stat().st_size / 1e6:.0f} MB in "
              f"{time.perf_counter() - began:.1f} s", flush=True)
        if args.profile:
            profile(csv_path)
            return
        windows = [int(w) for w in args.windows.split(",")]
        names: list[str] = []
        for cell in args.cells.split(","):
            cell = cell.strip()
            if cell.startswith("minidb"):
                names += [f"{cell} w{w}" for w in windows] if len(windows) > 1 else [cell]
            else:
                names.append(cell)
        figures: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for round_number in range(1, args.rounds + 1):
            for name in names:
                window = int(name.rsplit(" w", 1)[1]) if " w" in name else windows[0]
                figure = run_cell(
                    name.split(" w")[0], csv_path, resp_path, args.rows, window, args.frame_rows
                )
                figures[name].append(figure)
                cpu = figure.get("server_cpu_us_per_row")
                server = f", server CPU {cpu:.1f} us/row" if cpu is not None else ""
                print(f"round {round_number} {name:<24} {figure['rows_s']:>11,.0f} rows/s"
                      f"{server}", flush=True)

    medians = {
        name: {k: statistics.median(f[k] for f in runs) for k in runs[0]}
        for name, runs in figures.items()
    }
    redis = {n: m["rows_s"] for n, m in medians.items() if n.startswith("redis")}
    print(f"\n{args.rows:,} rows, median of {args.rounds}; RSS is peak (MB)")
    print(f"| cell | rows/s | {' | '.join(f'/ {n}' for n in redis)} | loader RSS | server RSS |")
    print(f"|---|---:|{'---:|' * len(redis)}---:|---:|")
    for name, m in medians.items():
        ratios = " | ".join(f"{m['rows_s'] / r:.2f}" for r in redis.values())
        print(f"| {name} | {m['rows_s']:,.0f} | {ratios} | {m['loader_rss'] / 1e6:.0f} | "
              f"{m['server_rss'] / 1e6:.0f} |")
    print(json.dumps({"rows": args.rows, "rounds": args.rounds, "medians": medians,
                      "runs": figures}))


if __name__ == "__main__":
    main()
