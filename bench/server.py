"""Benchmark: minidb's server on minidb.runtime's loop vs the same server on stock asyncio.

Run on demand, not in the tests::

    python bench/server.py            # full matrix, 3 s per cell
    python bench/server.py --quick    # 1 and 50 connections, GET and SET, 1 s per cell
    python bench/server.py --repeat 3 # each cell 3 times, interleaved; medians
    python bench/server.py --inproc   # the server's CPU per request, without sockets

It starts two ``minidb serve`` processes (``--loop minidb`` and ``--loop asyncio``) and, for
each cell (connections x pipeline depth x mix), runs a load-generator process against each in
turn (interleaved, so drift of a shared machine hits both alike; with ``--repeat`` the pair
is run several times and each figure is the median). The generator is an asyncio
``Protocol`` client (on uvloop when installed, to raise its own ceiling) that keeps ``depth``
requests in flight per connection, writes each connection's refill in one ``write``, and
records the latency of every request. It prints requests/s, p50 and p99 latency, and the ratio
minidb/stock per cell.

With 2 cores shared between the server, the generator and everything else on the machine,
absolute numbers move by tens of percent between minutes; compare the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass

KEYS = 10_000
"""Distinct keys the load touches (GETs hit keys preloaded before the run)."""
VALUE = b"x" * 32
"""Payload of each SET (bytes)."""
WARMUP_S = 0.5
"""Time each cell runs before measuring starts."""
MAILBOX = 1_000_000
"""The servers' --mailbox: large enough that 500 x 16 in flight is never shed."""
MIXES = {"get": 0.0, "set": 1.0, "mix": 0.2}
"""Mix name -> fraction of SETs."""


# -- the load generator (runs in its own process) -------------------------------------------


class LoadConnection(asyncio.Protocol):
    def __init__(self, gen: Generator) -> None:
        self.gen = gen
        self.sent: deque[float] = deque()
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.send(self.gen.depth)

    def send(self, n: int) -> None:
        gen = self.gen
        now = time.perf_counter()
        lines = []
        for _ in range(n):
            key = b"k%d" % gen.rng.randrange(KEYS)
            if gen.rng.random() < gen.set_fraction:
                lines.append(b"SET bench " + key + b" " + VALUE + b"\n")
            else:
                lines.append(b"GET bench " + key + b"\n")
            self.sent.append(now)
        assert self.transport is not None
        self.transport.write(b"".join(lines))

    def data_received(self, data: bytes) -> None:
        data = self.buffer + data
        count = data.count(b"\n")
        if not count:
            self.buffer = data
            return
        self.buffer = data[data.rfind(b"\n") + 1 :]
        gen = self.gen
        now = time.perf_counter()
        if gen.measuring:
            gen.replies += count
            if data.startswith(b"ERR") or b"\nERR" in data:
                gen.errors += data.count(b"ERR")
            for _ in range(count):
                gen.latencies.append(now - self.sent.popleft())
        else:
            for _ in range(count):
                self.sent.popleft()
        if not gen.stopping:
            self.send(count)


class Generator:
    def __init__(self, depth: int, set_fraction: float) -> None:
        self.depth = depth
        self.set_fraction = set_fraction
        self.rng = random.Random(7)
        self.measuring = False
        self.stopping = False
        self.replies = 0
        self.errors = 0
        self.latencies: list[float] = []


async def generate(port: int, conns: int, depth: int, mix: str, seconds: float) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    gen = Generator(depth, MIXES[mix])
    transports = []
    for _ in range(conns):
        transport, _ = await loop.create_connection(lambda: LoadConnection(gen), "127.0.0.1", port)
        transports.append(transport)
    await asyncio.sleep(WARMUP_S)
    gen.measuring = True
    started = time.perf_counter()
    await asyncio.sleep(seconds)
    gen.measuring = False
    elapsed = time.perf_counter() - started
    gen.stopping = True
    for transport in transports:
        transport.close()
    lat = sorted(gen.latencies)

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")

    return {"rps": gen.replies / elapsed, "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "errors": gen.errors}


def generator_main(argv: list[str]) -> None:
    port, conns, depth, mix, seconds = argv
    work = generate(int(port), int(conns), int(depth), mix, float(seconds))
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(work)
    else:
        result = uvloop.run(work)
    print(json.dumps(result))


# -- the server's own cost, without sockets ----------------------------------------------------


class _NullTransport(asyncio.Transport):
    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 0) if name == "peername" else default


def inproc(conns: int = 50, depth: int = 16, rounds: int = 400) -> None:
    """Microseconds per request for connection parsing + owner commit + reply join, without
    syscalls: feeds ``conns`` connections one read of ``depth`` requests each, then commits."""
    import minidb.runtime
    from minidb.server import ServerConfig
    from minidb.server._connection import Hub, LineConnection
    from minidb.store import NullLog, StoreOwner, StoreState

    for loop_name in ("minidb", "asyncio"):
        loop = (minidb.runtime.new_event_loop() if loop_name == "minidb"
                else asyncio.SelectorEventLoop())
        owner = StoreOwner(StoreState(), NullLog(), mailbox=MAILBOX)
        hub = Hub(ServerConfig(), owner)
        connections = []
        for _ in range(conns):
            conn = LineConnection(hub, loop)
            conn.connection_made(_NullTransport())
            connections.append(conn)
        for verb in ("SET", "GET"):
            chunk = b"".join(
                (b"SET bench k%d %b\n" % (i, VALUE)) if verb == "SET" else b"GET bench k%d\n" % i
                for i in range(depth)
            )
            for conn in connections:  # warm-up: the keys exist, the code paths are hot
                conn.data_received(chunk)
            owner.commit(owner.mailbox.take_all())
            started = time.perf_counter()
            for _ in range(rounds):
                for conn in connections:
                    conn.data_received(chunk)
                owner.commit(owner.mailbox.take_all())
            per_request = (time.perf_counter() - started) / (rounds * conns * depth)
            print(f"{loop_name:>7} {verb}: {per_request * 1e6:.2f} us/request "
                  f"({conns} connections x {depth} per read)")
        loop.close()


# -- the driver -------------------------------------------------------------------------------


@dataclass
class ServerProc:
    name: str
    proc: subprocess.Popen[str]
    port: int


def start_server(loop_name: str, data_dir: str) -> ServerProc:
    proc = subprocess.Popen(
        [sys.executable, "-m", "minidb", "serve", "--port", "0", "--data-dir", data_dir,
         "--loop", loop_name, "--mailbox", str(MAILBOX)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r":(\d+) \(line\)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"server on {loop_name} did not start: {line!r}")
    return ServerProc(loop_name, proc, int(match.group(1)))


def preload(port: int) -> None:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        payload = b"".join(b"SET bench k%d %b\n" % (i, VALUE) for i in range(KEYS))
        sock.sendall(payload)
        received = 0
        while received < KEYS:
            received += sock.recv(1 << 20).count(b"\n")


def run_cell(port: int, conns: int, depth: int, mix: str, seconds: float) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--generator", str(port), str(conns), str(depth), mix,
         str(seconds)],
        capture_output=True, text=True, timeout=seconds + 60, check=True,
    )
    return dict(json.loads(out.stdout))


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer cells, 1 s each")
    parser.add_argument("--seconds", type=float, default=None, help="measured time per cell")
    parser.add_argument("--conns", default=None, help="comma-separated connection counts")
    parser.add_argument("--depths", default="1,16", help="comma-separated pipeline depths")
    parser.add_argument("--mixes", default=None, help="comma-separated mixes: get,set,mix")
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell (median)")
    parser.add_argument(
        "--inproc", action="store_true", help="only the server's CPU per request, no sockets"
    )
    args = parser.parse_args()
    if args.inproc:
        inproc()
        return
    seconds = args.seconds or (1.0 if args.quick else 3.0)
    conns = [int(c) for c in (args.conns or ("1,50" if args.quick else "1,50,500")).split(",")]
    depths = [int(d) for d in args.depths.split(",")]
    mixes = (args.mixes or ("get,set" if args.quick else "get,set,mix")).split(",")

    with tempfile.TemporaryDirectory() as tmp:
        servers = [start_server("minidb", os.path.join(tmp, "a")),
                   start_server("asyncio", os.path.join(tmp, "b"))]
        try:
            for server in servers:
                preload(server.port)
            header = (f"{'conns':>5} {'depth':>5} {'mix':>4} | {'minidb req/s':>12} "
                      f"{'p50 ms':>7} {'p99 ms':>7} | {'asyncio req/s':>13} {'p50 ms':>7} "
                      f"{'p99 ms':>7} | {'ratio':>5}")
            print(header)
            print("-" * len(header))
            for c in conns:
                for d in depths:
                    for mix in mixes:
                        runs: dict[str, list[dict[str, float]]] = {s.name: [] for s in servers}
                        for _ in range(args.repeat):
                            for s in servers:
                                runs[s.name].append(run_cell(s.port, c, d, mix, seconds))
                        a, b = _median(runs["minidb"]), _median(runs["asyncio"])
                        errors = a["errors"] + b["errors"]
                        print(f"{c:>5} {d:>5} {mix:>4} | {a['rps']:>12,.0f} {a['p50_ms']:>7.2f} "
                              f"{a['p99_ms']:>7.2f} | {b['rps']:>13,.0f} {b['p50_ms']:>7.2f} "
                              f"{b['p99_ms']:>7.2f} | {a['rps'] / b['rps']:>5.2f}"
                              + (f"  ({errors:.0f} ERR replies)" if errors else ""), flush=True)
        finally:
            for server in servers:
                server.proc.send_signal(signal.SIGTERM)
            for server in servers:
                server.proc.wait(timeout=30)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--generator":
        generator_main(sys.argv[2:])
    else:
        main()
