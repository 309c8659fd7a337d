"""The RESP hot path in process: CPU microseconds per command from bytes in to reply bytes out.

One connection's ``RespRequests`` (decoder and session) and the server's ``RespExecutor`` on one
keyspace, no sockets and no loop: each read of ``redis-benchmark``-shaped traffic (``SET
key:__rand_int__ xxx`` or ``GET key:__rand_int__``, ``--depth`` commands per read, as ``-P``)
is fed, decided, executed and encoded, and the journal is cleared as the owner's log would.
What it leaves out (syscalls, the event loop, the mailbox, the WAL) is what ``bench/vs_redis.py``
measures; this part is repeatable on a busy machine because it counts process CPU time and
prints the best of ``--repeat`` runs.

    PYTHONPATH=src python bench/resp_hotpath.py            # depths 1 and 16, SET and GET
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import dataclass, field

from minidb.protocol import encode_command
from minidb.server.resp._connection import RespContext, RespRequests
from minidb.server.resp._executor import OwnerSide, RespExecutor
from minidb.server.resp._info import InfoSnapshot, ServerFacts
from minidb.server.resp._session import RespSession, SessionConfig
from minidb.store import Keyspace, OpJournal

NOW_MS = 1_700_000_000_000
COMMANDS = {
    "SET": [b"SET", b"key:__rand_int__", b"xxx"],
    "GET": [b"GET", b"key:__rand_int__"],
}
READS_PER_CHECK = 200


class Env:
    """A SessionEnv with a fixed clock."""

    def unix_time(self) -> float:
        return NOW_MS / 1000

    def snapshot(self) -> InfoSnapshot:
        return InfoSnapshot()

    def sessions(self) -> list[RespSession]:
        return []


@dataclass
class State:
    keyspace: Keyspace = field(default_factory=Keyspace)


def per_command_us(argv: list[bytes], depth: int, seconds: float, repeat: int) -> float:
    """Best of ``repeat`` runs of ``seconds`` CPU time each: microseconds per command."""
    executor = RespExecutor()
    ids = itertools.count(1)
    context = RespContext(SessionConfig(ServerFacts(minidb_version="0")), executor, Env(),
                          max_bulk_bytes=1 << 20, next_id=lambda: next(ids))  # fmt: skip
    client = RespRequests(RespSession(1, context.config), OwnerSide(), context)
    state, journal = State(), OpJournal()
    data = b"".join(encode_command(argv) for _ in range(depth))
    run = executor.execute
    best = float("inf")
    for _ in range(repeat):
        done = 0
        started = time.process_time()
        while time.process_time() - started < seconds:
            for _ in range(READS_PER_CHECK):
                client.receive(data)
                b"".join([run(state, r, journal, NOW_MS) for r in client.next_requests(depth)])
                journal.clear()
            done += READS_PER_CHECK * depth
        best = min(best, (time.process_time() - started) / done)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.08)
    parser.add_argument("--repeat", type=int, default=25)
    args = parser.parse_args()
    for name, argv in COMMANDS.items():
        for depth in (1, 16):
            us = per_command_us(argv, depth, args.seconds, args.repeat)
            print(f"{name} -P {depth:<2} {us:6.2f} us/command")


if __name__ == "__main__":
    main()
