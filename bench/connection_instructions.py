"""Instructions per request in process, through a real ``RespConnection``: the server's own
share of a request, without the event loop's turn and the socket.

A real ``Server`` (C accelerators as built, fsync ``no``, a temporary data dir) and RESP
connections over a fake transport that only counts what is written; the measured loop runs
under ``valgrind --tool=callgrind`` between two markers (callgrind zeroes its counters at
``os.getppid`` and dumps them at ``os.getpgid``), so start-up never counts:

- ``GET``: one connection, ``--reads`` reads of one ``GET`` each (``redis-benchmark -P 1``),
  the owner idle, so each is served in ``data_received`` (the express lane's inline read);
- ``SET``: ``--connections`` connections each get one ``SET`` read per round and the loop runs
  until the round's group is logged and answered (the shape of ``-P 1`` with that many
  clients ready in one turn: the loop turn's group, the owner idle); ``--reads`` requests in
  all.

What ``bench/instructions.py`` adds to this in the server is the loop's turn and the transport
(its ``floor`` column). Counts are repeatable: the same tree gives the same numbers within a
fraction of a per cent, whatever else runs.

    PYTHONPATH=src python bench/connection_instructions.py [--reads 10000] [--connections 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

GET = b"*2\r\n$3\r\nGET\r\n$16\r\nkey:000000000001\r\n"
SET = b"*3\r\n$3\r\nSET\r\n$16\r\nkey:000000000001\r\n$3\r\nxxx\r\n"
TIMEOUT_S = 1800.0


class CountingTransport(asyncio.Transport):
    """Takes every write at once (nothing is ever buffered) and counts its bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0
        self.closing = False

    def write(self, data: Any) -> None:
        self.written += len(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name in ("peername", "sockname") else default

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


async def _measure(test: str, reads: int, connections: int) -> None:
    from minidb.server._config import ServerConfig
    from minidb.server._lifecycle import Server
    from minidb.server.resp._connection import RespConnection

    with tempfile.TemporaryDirectory(prefix="conn-instr-") as data_dir:
        server = Server(ServerConfig(port=0, resp_port=0, data_dir=Path(data_dir), fsync="no"))
        await server.start()
        loop = asyncio.get_running_loop()
        hub = server._hub
        assert hub is not None  # started
        conns = []
        for _ in range(connections if test == "SET" else 1):
            conn = RespConnection(hub, loop, server._resp_context())
            conn.connection_made(CountingTransport())
            conns.append(conn)

        async def one_round() -> None:
            for conn in conns:
                conn.data_received(SET)
            for _ in range(3):  # the owner's wakeup, its group, the replies' release
                await asyncio.sleep(0)

        await one_round()  # the key exists and every first use is paid before the window
        await one_round()
        rounds = max(1, reads // len(conns))
        os.getppid()  # callgrind: zero
        if test == "GET":
            received = conns[0].data_received
            for _ in range(rounds):
                received(GET)
        else:
            for _ in range(rounds):
                await one_round()
        os.getpgid(0)  # callgrind: dump
        if any(conn._pending for conn in conns):
            raise SystemExit("requests still unanswered after the window")
        server.request_shutdown()
        print(rounds * len(conns))


def _child(test: str, reads: int, connections: int) -> None:
    from minidb.runtime import new_event_loop

    loop = new_event_loop()
    try:
        loop.run_until_complete(_measure(test, reads, connections))
    finally:
        loop.close()


def count(test: str, reads: int, connections: int) -> float:
    """Instructions per request of ``test``, under callgrind in a child process."""
    with tempfile.TemporaryDirectory(prefix="callgrind-") as out:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.out",
             "--zero-before=os_getppid", "--dump-before=os_getpgid",
             sys.executable, __file__, "--child", test, "--reads", str(reads),
             "--connections", str(connections)],
            capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"the {test} run failed:\n{done.stderr[-3000:]}")
        requests = int(done.stdout.split()[-1])
        window = Path(out, "cg.out.1")
        for line in window.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1]) / requests
        raise SystemExit(f"no callgrind dump at {window}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reads", type=int, default=10_000)
    parser.add_argument("--connections", type=int, default=40, help="SET: clients per group")
    parser.add_argument("--child", choices=("GET", "SET"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.reads, args.connections)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    from minidb.store import _plainrun

    print(f"# in process, fsync no, C accelerators {'on' if _plainrun.ACCELERATED else 'off'}")
    for test in ("GET", "SET"):
        per = count(test, args.reads, args.connections)
        shape = "one read each, served inline" if test == "GET" else (
            f"{args.connections} connections a group"
        )
        print(f"{test}  {per:>9,.0f} instructions per request  ({shape})")


if __name__ == "__main__":
    main()
