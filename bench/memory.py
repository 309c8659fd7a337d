"""Issue 19's "bytes per element for each type beside Redis's used_memory for the same data":
1M small strings, hashes, lists, sets and sorted sets in redis-server and in minidb.

For each type, a fresh redis-server (``--appendonly no --save ''``: no persistence, so no AOF
buffer) and a fresh ``minidb serve --fsync no`` (``bench/_peers.py``) are started side by side,
and the same ``--keys`` keys of that type are loaded into each over a pipelined redis-py
connection (``--batch`` commands a round trip). What each type's key holds (``SHAPES``) is
small, as most real keys are: a hash of 4 short fields, a list of 5 short elements, a set of 5
short non-integer members, a sorted set of 5 members; a string of 10 bytes is the reference
row. Redis 7.0 keeps the hash, the list and the sorted set in a ``listpack``; a set of
non-integers is a ``hashtable`` there (listpack sets came in 7.2), so its row weighs a dict.

Measured per type: Redis's ``INFO memory`` ``used_memory`` after the load minus before
(what its allocator hands out for the data) and, beside it, its RSS delta; minidb's RSS delta
(``/proc/PID/status`` VmRSS: minidb's INFO ``used_memory`` *is* its RSS, as CPython's
allocator keeps no count of its own), each divided by the keys and by the elements (a hash's
fields, a list's elements, a set's or sorted set's members; a string is one). The ratio is
minidb's RSS delta over Redis's ``used_memory`` delta, and the goal (issue 19) is at most
``GOAL_RATIO``. Both servers run one type at a time, so a 1M run fits in a few GB.

Run::

    PYTHONPATH=src python bench/memory.py                   # 1M keys of each type
    PYTHONPATH=src python bench/memory.py --keys 100000 --types hash,zset
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from _peers import Peer, machine, start_minidb, start_redis, unset_pure_python
from _serverproc import rss_of

GOAL_RATIO = 2.5
"""minidb's bytes per key at most this x Redis's ``used_memory`` (issue 19)."""
BATCH = 1000
"""Commands per pipelined round trip while loading."""
CLIENT_TIMEOUT_S = 120.0
"""Any one round trip (a batch on a loaded shared machine)."""
SETTLE_S = 1.0
"""A pause after the load before RSS is read, for the WAL writer to drain what it holds."""


@dataclass(frozen=True)
class Shape:
    """What one key of a type holds: its loading command and how many elements it counts."""

    name: str
    elements: int
    command: Callable[[int], tuple[bytes | str | int, ...]]


SHAPES = {
    "string": Shape("string", 1, lambda i: ("SET", f"s:{i:08d}", f"value-{i % 1000:04d}")),
    "hash": Shape("hash", 4, lambda i: (
        "HSET", f"h:{i:08d}", "name", f"user{i % 1000}", "age", "33", "city", "paris",
        "email", "u@example.com")),
    "list": Shape("list", 5, lambda i: (
        "RPUSH", f"l:{i:08d}", "alpha", "bravo", "charlie", "delta", f"e{i % 1000}")),
    "set": Shape("set", 5, lambda i: (
        "SADD", f"t:{i:08d}", "alpha", "bravo", "charlie", "delta", f"m{i % 1000}")),
    "zset": Shape("zset", 5, lambda i: (
        "ZADD", f"z:{i:08d}", 1, "alpha", 2, "bravo", 3, "charlie", 4, "delta", 5,
        f"m{i % 1000}")),
}  # fmt: skip


@dataclass(frozen=True)
class Row:
    shape: Shape
    keys: int
    redis_used: int
    redis_rss: int
    minidb_rss: int
    minidb_peak: int

    def per_key(self, total: int) -> float:
        return total / self.keys

    def per_element(self, total: int) -> float:
        return total / (self.keys * self.shape.elements)

    @property
    def ratio(self) -> float:
        return self.minidb_rss / self.redis_used


def load(peer: Peer, shape: Shape, keys: int, batch: int) -> None:
    """``keys`` keys of ``shape`` into ``peer``, ``batch`` commands a round trip; checked by
    DBSIZE so a refused command cannot pass for a small footprint."""
    client = redis.Redis(port=peer.port, socket_timeout=CLIENT_TIMEOUT_S)
    try:
        for start in range(0, keys, batch):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(start + batch, keys)):
                pipe.execute_command(*shape.command(i))  # type: ignore[no-untyped-call]
            pipe.execute()
        size = client.dbsize()
        if size != keys:
            raise SystemExit(f"{peer.name} holds {size} keys after loading {keys}")
    finally:
        client.close()


def used_memory(peer: Peer) -> int:
    client = redis.Redis(port=peer.port, socket_timeout=CLIENT_TIMEOUT_S)
    try:
        return int(client.info("memory")["used_memory"])
    finally:
        client.close()


def measure(shape: Shape, keys: int, batch: int) -> Row:
    """One type in a fresh redis-server and a fresh minidb, loaded one after the other."""
    redis_peer = start_redis("no", appendonly=False)
    try:
        used, rss = used_memory(redis_peer), rss_of(redis_peer.proc.pid)
        load(redis_peer, shape, keys, batch)
        redis_used = used_memory(redis_peer) - used
        redis_rss = rss_of(redis_peer.proc.pid) - rss
    finally:
        redis_peer.stop()
    gc.collect()
    minidb_peer = start_minidb("no")
    try:
        rss = rss_of(minidb_peer.proc.pid)
        load(minidb_peer, shape, keys, batch)
        time.sleep(SETTLE_S)
        minidb_rss = rss_of(minidb_peer.proc.pid) - rss
        minidb_peak = rss_of(minidb_peer.proc.pid, "VmHWM") - rss
    finally:
        minidb_peer.stop()
    return Row(shape, keys, redis_used, redis_rss, minidb_rss, minidb_peak)


def print_rows(rows: list[Row]) -> None:
    print(f"{'type':<7} {'elems':>5} {'redis B/key':>11} {'B/elem':>7} {'(rss B/key)':>11} "
          f"{'minidb B/key':>12} {'B/elem':>7} {'(peak)':>7} {'ratio':>6}  goal <= "
          f"{GOAL_RATIO}x")  # fmt: skip
    for row in rows:
        verdict = "MET" if row.ratio <= GOAL_RATIO else "NOT MET"
        print(f"{row.shape.name:<7} {row.shape.elements:>5} "
              f"{row.per_key(row.redis_used):>11.0f} {row.per_element(row.redis_used):>7.1f} "
              f"{row.per_key(row.redis_rss):>11.0f} "
              f"{row.per_key(row.minidb_rss):>12.0f} {row.per_element(row.minidb_rss):>7.1f} "
              f"{row.per_key(row.minidb_peak):>7.0f} {row.ratio:>6.2f}  {verdict}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys of each type")
    parser.add_argument("--types", default=",".join(SHAPES), help="of " + ",".join(SHAPES))
    parser.add_argument("--batch", type=int, default=BATCH)
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed (Debian: redis-server)")
    unknown = set(args.types.split(",")) - set(SHAPES)
    if unknown:
        raise SystemExit(f"unknown types: {', '.join(sorted(unknown))}")
    if unset_pure_python():
        print("# MINIDB_PURE_PYTHON was set: unset for the server")
    print(f"# {machine()}")
    print(f"# {args.keys} keys of each type, loaded over redis-py pipelines of {args.batch}; "
          "redis-server --appendonly no, minidb serve --fsync no; bytes are redis's INFO "
          "used_memory delta and minidb's RSS delta (its INFO used_memory is its RSS); ratio: "
          "minidb RSS / redis used_memory")  # fmt: skip
    rows = []
    for name in args.types.split(","):
        rows.append(measure(SHAPES[name], args.keys, args.batch))
        print(f"# {name} done", file=sys.stderr)
    print_rows(rows)


if __name__ == "__main__":
    main()
