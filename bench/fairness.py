"""Benchmark: does a quiet client keep being served while others flood the data owner?

Starts ``minidb serve`` (default settings), preloads keys, then runs for ``--seconds``:
``--floods`` connections (in a process of their own) that each keep ``--depth`` GET/SET
requests in flight (one write of a chunk per chunk answered), and one well-behaved client doing
one GET at a time. Prints the
well-behaved client's p50/p99 latency, how many of its replies were ``ERR busy`` (goal: zero)
and the same count for the flooders. With ``--baseline-src PATH`` the same run is made first
against a server importing minidb from PATH (e.g. a checkout of the code before a change).

    python bench/fairness.py --seconds 10
    python bench/fairness.py --seconds 8 --baseline-src /tmp/old/src
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import time
from dataclasses import dataclass
from multiprocessing import Queue

from _serverproc import serve

KEYS = 1000
CHUNK = 100
"""Requests per write of a flooder: it writes the next chunk whenever one is answered."""
FLOOD_HEAD_START_S = 0.5
"""The floods start this long before the quiet client."""


@dataclass
class Tally:
    replies: int = 0
    busy: int = 0
    errors: int = 0

    def count(self, lines: bytes) -> None:
        self.replies += lines.count(b"\n")
        self.busy += lines.count(b"ERR busy\n")
        self.errors += lines.count(b"ERR ")


async def flood(
    port: int, depth: int, writes: int, index: int, stop: float, tally: Tally
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    keys = [(index * 7 + i) % KEYS for i in range(CHUNK)]
    chunk = b"".join(  # ``writes`` percent SET, the rest GET
        b"SET bench k%d v%d\n" % (key, i) if i % 100 < writes else b"GET bench k%d\n" % key
        for i, key in enumerate(keys)
    )
    chunks_out = max(1, depth // CHUNK)
    writer.write(chunk * chunks_out)
    buffer = b""
    answered = 0
    loop = asyncio.get_running_loop()
    while loop.time() < stop:
        data = await reader.read(1 << 16)
        if not data:
            break
        buffer += data
        last = buffer.rfind(b"\n")
        if last < 0:
            continue
        lines, buffer = buffer[: last + 1], buffer[last + 1 :]
        tally.count(lines)
        answered += lines.count(b"\n")
        while answered >= CHUNK:
            answered -= CHUNK
            writer.write(chunk)
    writer.close()


async def quiet(port: int, stop: float, latencies: list[float], tally: Tally) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    loop = asyncio.get_running_loop()
    i = 0
    while loop.time() < stop:
        started = time.perf_counter()
        writer.write(b"GET bench k%d\n" % (i % KEYS))
        line = await reader.readline()
        latencies.append(time.perf_counter() - started)
        tally.count(line)
        i += 1
    writer.close()


async def preload(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"".join(b"SET bench k%d v\n" % i for i in range(KEYS)))
    for _ in range(KEYS):
        await reader.readline()
    writer.close()


async def run_floods(port: int, args: argparse.Namespace, stop_in: float) -> Tally:
    loop = asyncio.get_running_loop()
    stop = loop.time() + stop_in
    tally = Tally()
    await asyncio.gather(
        *(flood(port, args.depth, args.writes, i, stop, tally) for i in range(args.floods))
    )
    return tally


def flood_process(port: int, args: argparse.Namespace, results: Queue[Tally]) -> None:
    """The floods, in their own process, so the quiet client's latency is the server's and
    not that of a load generator busy with 20 deep pipelines."""
    results.put(asyncio.run(run_floods(port, args, args.seconds + FLOOD_HEAD_START_S)))


def one(label: str, src: str | None, args: argparse.Namespace) -> None:
    server = serve(src)
    try:
        asyncio.run(preload(server.port))
        results: Queue[Tally] = multiprocessing.Queue()
        floods = multiprocessing.Process(target=flood_process, args=(server.port, args, results))
        floods.start()
        time.sleep(FLOOD_HEAD_START_S)  # let the floods fill the server first
        latencies: list[float] = []
        mine = Tally()

        async def quiet_run() -> None:
            stop = asyncio.get_running_loop().time() + args.seconds
            await quiet(server.port, stop, latencies, mine)

        asyncio.run(quiet_run())
        theirs = results.get(timeout=args.seconds + 30)
        floods.join(timeout=10)
    finally:
        server.stop()
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    print(
        f"{label:>8}: quiet client {len(latencies):6d} requests, p50 {cuts[49] * 1e3:7.2f} ms, "
        f"p99 {cuts[98] * 1e3:7.2f} ms, ERR busy {mine.busy} | {args.floods} floods: "
        f"{theirs.replies / args.seconds:9,.0f} replies/s, ERR busy {theirs.busy}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured time per run")
    parser.add_argument("--floods", type=int, default=20, help="flooding connections")
    parser.add_argument("--depth", type=int, default=1000, help="requests in flight per flood")
    parser.add_argument("--writes", type=int, default=20, help="percent of flood requests "
                        "that are SETs (each group with a SET waits for its fdatasync)")
    parser.add_argument("--baseline-src", default=None, metavar="PATH",
                        help="also run against a server importing minidb from PATH, first")
    args = parser.parse_args()
    if args.baseline_src:
        one("baseline", args.baseline_src, args)
    one("current", None, args)


if __name__ == "__main__":
    main()
