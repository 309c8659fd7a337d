"""RESP codec micro-benchmark: decode and encode rates of the pure codec, no sockets.

Parts:

``decode``
    redis-benchmark-shaped traffic (``SET key:__rand_int__ xxx`` / ``GET key:__rand_int__``, 3-byte
    values, as ``redis-benchmark -t set,get`` sends by default) fed to one ``RespDecoder`` a read
    at a time and drained with ``next_commands()``: at depth 1 a read holds one command, at depth 16
    a read holds 16 (``-P 16``). Also a 64 KiB read of back-to-back SETs (a client far ahead of
    the server) drained 16 at a time, and the inline ``PING`` of ``PING_INLINE``. Prints commands/s.
``encode``
    Replies per second for the hot answers, one ``encode`` each (depth 1) and 16 per
    ``encode_many`` (depth 16): ``+OK``, a 3-byte bulk, a null, a small integer; RESP2 and RESP3.

Each cell runs for ``--seconds`` (default 0.5) and prints the best of ``--repeat`` (default 3)
runs; the last line is one JSON object with every figure.

    python bench/resp_codec.py
    python bench/resp_codec.py --seconds 0.2 --repeat 1   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from minidb.protocol import SIMPLE_OK, RespDecoder, RespEncoder, encode_command
from minidb.protocol._results import Result

_SET = encode_command([b"SET", b"key:__rand_int__", b"xxx"])
_GET = encode_command([b"GET", b"key:__rand_int__"])


def _rate(work: Callable[[], int], seconds: float, repeat: int) -> float:
    """Best of ``repeat`` runs of ``work`` (which returns items done) for ``seconds`` each."""
    best = 0.0
    for _ in range(repeat):
        done = 0
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            done += work()
        best = max(best, done / (time.perf_counter() - start))
    return best


def _decode_cell(read: bytes, per_read: int, take: int | None) -> Callable[[], int]:
    decoder = RespDecoder()
    reads = 100

    def work() -> int:
        for _ in range(reads):
            decoder.feed(read)
            if take is None:
                got = len(decoder.next_commands())
            else:
                got = 0
                while batch := decoder.next_commands(take):
                    got += len(batch)
            assert got == per_read, got
        return reads * per_read

    return work


def _encode_cell(result: Result, protocol: int, depth: int) -> Callable[[], int]:
    encoder = RespEncoder(protocol)
    batch = [result] * depth
    rounds = 1000

    def one() -> int:
        encode = encoder.encode
        for _ in range(rounds):
            encode(result)
        return rounds

    def many() -> int:
        encode_many = encoder.encode_many
        for _ in range(rounds):
            encode_many(batch)
        return rounds * depth

    return one if depth == 1 else many


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    figures: dict[str, float] = {}

    far_ahead = _SET * (64 * 1024 // len(_SET))
    decode_cells = {
        "decode SET depth 1": (_SET, 1, None),
        "decode GET depth 1": (_GET, 1, None),
        "decode SET depth 16": (_SET * 16, 16, None),
        "decode GET depth 16": (_GET * 16, 16, None),
        "decode SET 64KiB read, 16 at a time": (far_ahead, len(far_ahead) // len(_SET), 16),
        "decode inline PING depth 16": (b"PING\r\n" * 16, 16, None),
    }
    for name, (read, per_read, take) in decode_cells.items():
        figures[name] = _rate(_decode_cell(read, per_read, take), args.seconds, args.repeat)
        print(f"{name:<44} {figures[name] / 1e6:6.2f} M commands/s")

    replies: dict[str, Result] = {"+OK": SIMPLE_OK, "bulk 3 B": b"xxx", "null": None, "int": 7}
    for protocol in (2, 3):
        for label, result in replies.items():
            for depth in (1, 16):
                name = f"encode RESP{protocol} {label} depth {depth}"
                work = _encode_cell(result, protocol, depth)
                figures[name] = _rate(work, args.seconds, args.repeat)
                print(f"{name:<44} {figures[name] / 1e6:6.2f} M replies/s")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
