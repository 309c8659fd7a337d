"""What one write + fdatasync costs on this disk, by how the log file grows.

A durable group's cycle under ``--fsync always`` is its CPU plus its sync (docs/architecture.md,
"Eleventh round"), and the sync's share depends on the file as much as on the disk: an append
that grows the file makes the fdatasync also commit the new size and blocks (a journal commit on
ext4), where an overwrite inside a file already written to its full size needs only the data.
This times the two, and a ``posix_fallocate``d file between them, in a temporary directory on
the disk that holds ``--dir`` (default: the system's temporary directory), interleaved in
``--rounds`` rounds of ``--syncs`` syncs of ``--record`` bytes each:

- ``append``: ``O_APPEND`` writes, as minidb's segments and Redis's AOF are written;
- ``fallocated``: writes at increasing offsets inside a file ``posix_fallocate``d to its size
  (its blocks allocated, still unwritten);
- ``zeroed``: the same inside a file written with zeros and synced first (Postgres's WAL
  segments).

    python bench/sync_cost.py
    python bench/sync_cost.py --dir /var/lib/minidb --record 1500 --syncs 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

MODES = ("append", "fallocated", "zeroed")


def one_run(directory: str, mode: str, syncs: int, record: bytes) -> list[float]:
    """Seconds of each write + fdatasync of ``syncs`` records in a fresh file."""
    path = os.path.join(directory, f"sync-cost-{mode}")
    size = syncs * len(record)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_APPEND if mode == "append" else 0)
    fd = os.open(path, flags, 0o644)
    try:
        if mode == "fallocated":
            os.posix_fallocate(fd, 0, size)
            os.fsync(fd)
        elif mode == "zeroed":
            os.pwrite(fd, bytes(size), 0)
            os.fsync(fd)
        times = []
        for i in range(syncs):
            started = time.perf_counter()
            if mode == "append":
                os.write(fd, record)
            else:
                os.pwrite(fd, record, i * len(record))
            os.fdatasync(fd)
            times.append(time.perf_counter() - started)
        return times
    finally:
        os.close(fd)
        os.unlink(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default=tempfile.gettempdir(),
                        help="a directory on the disk to measure")
    parser.add_argument("--record", type=int, default=1500,
                        help="bytes per write (a -P 1 group of ~35 SETs is about 1.5 KB)")
    parser.add_argument("--syncs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    record = b"x" * args.record
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="minidb-sync-cost-", dir=args.dir) as directory:
        for round_ in range(args.rounds):
            for mode in MODES[round_ % len(MODES):] + MODES[:round_ % len(MODES)]:
                times[mode] += one_run(directory, mode, args.syncs, record)
    print(f"# {args.rounds} interleaved rounds of {args.syncs} writes of {args.record} bytes, "
          f"each followed by fdatasync, in {args.dir}")
    print(f"{'file':<11} {'median us':>10} {'p90 us':>8} {'/ append':>9}")
    base = statistics.median(times["append"])
    for mode in MODES:
        ordered = sorted(times[mode])
        median = statistics.median(ordered)
        p90 = ordered[int(len(ordered) * 0.9)]
        print(f"{mode:<11} {median * 1e6:>10.0f} {p90 * 1e6:>8.0f} {median / base:>9.2f}")


if __name__ == "__main__":
    main()
