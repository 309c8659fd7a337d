"""Benchmark: how much can clients that never read make the server hold?

Starts ``minidb serve`` (default settings), stores 1000 keys of 60+ characters in bucket ``b``,
then opens ``--clients`` connections that each send ``SCAN b 0 1000`` 4096 times (57 KB) and
never read (each reply is ~62 KB). Prints the server's VmRSS before and once it stopped growing.
With ``--baseline-src PATH`` the same run is made first against minidb imported from PATH.

    python bench/output_bound.py --clients 3 --baseline-src /tmp/old/src
"""

from __future__ import annotations

import argparse
import socket
import time

from _serverproc import Served, serve

SCANS = 4096
SETTLE_S = 0.5
"""RSS is read once it has not changed for this long."""


def settled_rss(server: Served, limit_s: float) -> int:
    deadline = time.monotonic() + limit_s
    last, since = server.rss_bytes(), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < SETTLE_S:
        time.sleep(0.1)
        now = server.rss_bytes()
        if now != last:
            last, since = now, time.monotonic()
    return last


def one(label: str, src: str | None, clients: int) -> None:
    server = serve(src)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
            conn.sendall(b"".join(b"SET b %s%04d v\n" % (b"k" * 60, i) for i in range(1000)))
            received = b""
            while received.count(b"\n") < 1000:
                received += conn.recv(65536)
        before = settled_rss(server, 2.0)
        socks = []
        for _ in range(clients):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(b"SCAN b 0 1000\n" * SCANS)
            socks.append(sock)
        after = settled_rss(server, 20.0)
        for sock in socks:
            sock.close()
    finally:
        server.stop()
    print(f"{label:>8}: {clients} non-reading clients: server RSS {before / 2**20:.0f} MB -> "
          f"{after / 2**20:.0f} MB (+{(after - before) / 2**20:.0f} MB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--baseline-src", default=None, metavar="PATH")
    args = parser.parse_args()
    if args.baseline_src:
        one("baseline", args.baseline_src, args.clients)
    one("current", None, args.clients)


if __name__ == "__main__":
    main()
