"""The line-protocol write path in process: CPU microseconds per pipelined SET, bytes to bytes.

What a bulk CSV import costs the server per row, without sockets or a running loop: one
``LineConnection`` (over a transport that drops what is written) is fed reads of
``--depth`` pipelined ``SET bucket key value`` lines shaped like ``bench/batch_import.py``'s
rows (10 buckets, 16-40 byte keys, 20-200 byte values); the ``StoreOwner`` takes the batches
from its mailbox and runs its group as ``run()`` does (apply, log, release), appending to a
real ``DurableLog`` (framing, checksums and one join per group); only the write and the
fdatasync are left out (the group's records are sealed and dropped). The replies reach the
transport through the connection's ``flush``. It counts process CPU time and prints the best
of ``--repeat`` runs, so it is repeatable on a busy machine.

    PYTHONPATH=src python bench/line_hotpath.py            # depths 1, 16 and 128
    PYTHONPATH=src python bench/line_hotpath.py --bulk 256 --depths 256,2048

``--bulk N`` sends the same rows as ``BULK`` frames of ``N`` rows (what ``BulkWriter`` sends):
each read then holds ``depth`` rows in frames of ``min(N, depth)``; still reported per row.

The decoding and the batch run in C when the accelerators are built (``protocol._cline``,
``store._cplain.run_line``); ``MINIDB_PURE_PYTHON=1`` measures their Python reference. Run the
two interleaved: this machine's load moves a figure more than the difference between rounds.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

from minidb.runtime import new_event_loop
from minidb.server._config import ServerConfig
from minidb.server._connection import LineConnection
from minidb.server._hub import Hub
from minidb.store import StoreOwner, StoreState
from minidb.wal import DurableLog

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server import _NullTransport  # the same stand-in as ``bench/server.py --inproc``

NOW_MS = 1_700_000_000_000
DISTINCT_ROWS = 50_000
"""Rows generated and cycled through (a SET of an existing key after the first pass)."""
SETS_PER_CHECK = 4096
"""SETs between two looks at the CPU clock (``process_time`` is a syscall here, ~1 ms under
load: looked at too often, it would be what is measured)."""


def rows(seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_-."
    values = alphabet + "ABCDEFGHIJKLMNOPQRSTUVWXYZ ,;:!?'\"()"
    out = []
    for i in range(DISTINCT_ROWS):
        key = f"{i:x}-" + "".join(rng.choices(alphabet, k=rng.randint(12, 34)))
        value = "".join(rng.choices(values, k=rng.randint(20, 200)))
        out.append(f"SET bucket{rng.randint(0, 9)} {key} {value}\n".encode())
    return out


def framed(lines: list[bytes], rows: int) -> bytes:
    """``lines`` as ``BULK`` frames of ``rows`` rows (the last one shorter)."""
    return b"".join(
        b"BULK %d\n" % len(lines[i : i + rows]) + b"".join(lines[i : i + rows])
        for i in range(0, len(lines), rows)
    )


def per_set_us(
    depth: int, seconds: float, repeat: int, lines: list[bytes], bulk: int = 0
) -> float:
    """Best of ``repeat`` runs of ``seconds`` CPU time each: microseconds per SET (per row of
    ``bulk``-row frames if ``bulk``)."""
    reads = [
        framed(lines[i : i + depth], bulk) if bulk else b"".join(lines[i : i + depth])
        for i in range(0, len(lines) - depth + 1, depth)
    ]
    loop = new_event_loop()  # the server's loop: the idle timer is moved in place
    with tempfile.TemporaryDirectory(prefix="minidb-line-hotpath-") as data_dir:
        log = DurableLog.open(data_dir)
        for _ in log.replay():
            pass
        log.sync = log.seal  # type: ignore[assignment,method-assign]  # no write, no fdatasync
        owner = StoreOwner(StoreState(), log, mailbox=1 << 20, clock=lambda: NOW_MS)
        conn = LineConnection(Hub(ServerConfig(max_in_flight=1 << 20), owner), loop)
        transport = _NullTransport()
        conn.connection_made(transport)
        mailbox = owner.mailbox
        best = float("inf")
        at = 0
        reads_per_check = max(1, SETS_PER_CHECK // depth)
        for _ in range(repeat):
            done = 0
            started = time.process_time()
            while time.process_time() - started < seconds:
                for _ in range(reads_per_check):
                    conn.data_received(reads[at])
                    at = (at + 1) % len(reads)
                    batches = mailbox.take(owner.max_drain)
                    results = owner._log(batches, owner._apply(batches, NOW_MS), NOW_MS)
                    owner._release(batches, results)
                done += reads_per_check * depth
            best = min(best, (time.process_time() - started) / done)
        conn.connection_lost(None)
        log.close()
        assert not conn._pending, "every batch was answered and written"
    loop.close()
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--depths", default="1,16,128")
    parser.add_argument("--bulk", type=int, default=0, help="rows per BULK frame (0: none)")
    args = parser.parse_args()
    lines = rows()
    for depth in (int(d) for d in args.depths.split(",")):
        us = per_set_us(depth, args.seconds, args.repeat, lines, args.bulk)
        if args.bulk:
            print(f"BULK {min(args.bulk, depth):<4} depth {depth:<4} {us:6.2f} us/row")
        else:
            print(f"SET depth {depth:<4} {us:6.2f} us/SET")


if __name__ == "__main__":
    main()
