"""Benchmark: how much can clients that never read make the server hold, and what does a quiet
client see meanwhile?

Three attacks, each on a fresh server with default settings:

- ``get``: over RESP, ``SET big`` (4 MiB), then one connection that never reads (a 4 KiB
  receive buffer) pipelines 300 ``GET big`` (1.2 GB of replies);
- ``mget``: one 916-byte ``MGET big big ...`` (the key 100 times: a 400 MiB reply), read;
- ``scan``: over the line protocol, 1000 keys of 60+ characters, then three connections that
  never read each send ``SCAN b 0 1000`` 4096 times (each reply ~62 KB).

For each it prints the server's peak RSS growth (``VmHWM`` after less before) and the worst of
20 sequential ``GET``s of a small key from a quiet client meanwhile. Peers in the same run,
interleaved: ``--baseline-src PATH`` (minidb imported from another tree, e.g. before a change)
and, for the RESP attacks, Debian's ``redis-server`` with its default client output limits
(none for normal clients) when it is installed.

    git worktree add /tmp/old <commit> && python bench/output_bound.py --baseline-src /tmp/old/src
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable

from _serverproc import Served, rss_of, serve

BIG = 4 * 2**20
SCANS = 4096
SETTLE_S = 0.5
"""RSS is read once it has not changed for this long."""
QUIET_ROUNDS = 20


def _command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def _read(sock: socket.socket, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        chunk = sock.recv(min(2**20, size - len(out)))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def _non_reader(port: int, payload: bytes) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    sock.sendall(payload)
    return sock


class Redis:
    """Debian's redis-server on a free port, no persistence, default client limits."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.resp_port = probe.getsockname()[1]
        self._dir = tempfile.TemporaryDirectory(prefix="redis-bench-")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.resp_port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self._dir.name],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.resp_port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("redis-server did not start")

    def rss_bytes(self, field: str = "VmRSS") -> int:
        return rss_of(self.proc.pid, field)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self._dir.cleanup()


Server = Served | Redis


def settled(server: Server, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    last, since = server.rss_bytes(), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < SETTLE_S:
        time.sleep(0.1)
        now = server.rss_bytes()
        if now != last:
            last, since = now, time.monotonic()


def quiet_worst(port: int, resp: bool) -> float:
    request, reply = (
        (_command(b"GET", b"small"), b"$1\r\nv\r\n") if resp else (b"GET b small\n", b"VALUE v\n")
    )
    worst = 0.0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        for _ in range(QUIET_ROUNDS):
            started = time.monotonic()
            sock.sendall(request)
            assert _read(sock, len(reply)) == reply
            worst = max(worst, time.monotonic() - started)
    return worst


def attack_get(server: Server) -> float:
    assert server.resp_port is not None
    flood = _non_reader(server.resp_port, _command(b"GET", b"big") * 300)
    try:
        return quiet_worst(server.resp_port, resp=True)
    finally:
        settled(server, 10)
        flood.close()


def attack_mget(server: Server) -> float:
    assert server.resp_port is not None
    with socket.create_connection(("127.0.0.1", server.resp_port), timeout=60) as sock:
        sock.sendall(_command(b"MGET", *[b"big"] * 100))
        first = _read(sock, 5)
        if first.startswith(b"-"):
            while not first.endswith(b"\n"):
                first += _read(sock, 1)
        else:
            header = len(b"$%d\r\n" % BIG)
            left = 6 + 100 * (header + BIG + 2) - len(first)  # the whole 400 MiB reply, read
            while left > 0:
                chunk = sock.recv(min(2**20, left))
                if not chunk:
                    break
                left -= len(chunk)
        return quiet_worst(server.resp_port, resp=True)


def attack_scan(server: Server) -> float:
    assert isinstance(server, Served)
    floods = [_non_reader(server.port, b"SCAN b 0 1000\n" * SCANS) for _ in range(3)]
    try:
        return quiet_worst(server.port, resp=False)
    finally:
        settled(server, 10)
        for sock in floods:
            sock.close()


def prepare(server: Server, resp: bool) -> None:
    if resp:
        assert server.resp_port is not None
        with socket.create_connection(("127.0.0.1", server.resp_port), timeout=30) as sock:
            sock.sendall(_command(b"SET", b"big", b"x" * BIG) + _command(b"SET", b"small", b"v"))
            assert _read(sock, 10) == b"+OK\r\n+OK\r\n"
        return
    assert isinstance(server, Served)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
        conn.sendall(b"".join(b"SET b %s%04d v\n" % (b"k" * 60, i) for i in range(1000)))
        conn.sendall(b"SET b small v\n")
        received = b""
        while received.count(b"\n") < 1001:
            received += conn.recv(65536)


ATTACKS: dict[str, tuple[bool, Callable[[Server], float]]] = {
    "get": (True, attack_get), "mget": (True, attack_mget), "scan": (False, attack_scan),
}


def one(label: str, start: Callable[[], Server], attack: str) -> None:
    resp, run = ATTACKS[attack]
    server = start()
    try:
        prepare(server, resp)
        settled(server, 2.0)
        before = server.rss_bytes("VmHWM")
        worst = run(server)
        grown = server.rss_bytes("VmHWM") - before
    finally:
        server.stop()
    print(f"{attack:>5} {label:>9}: peak RSS +{grown / 2**20:6.0f} MB, "
          f"quiet client's worst GET {worst * 1000:7.1f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", default=None, metavar="PATH")
    parser.add_argument("--attacks", default="get,mget,scan")
    args = parser.parse_args()
    peers: list[tuple[str, Callable[[], Server], bool]] = [
        ("minidb", lambda: serve(None, "--resp-port", "0"), True),
    ]
    if args.baseline_src:
        src = args.baseline_src
        peers.insert(0, ("baseline", lambda: serve(src, "--resp-port", "0"), True))
    if shutil.which("redis-server"):
        peers.append(("redis", Redis, False))
    for attack in args.attacks.split(","):
        for label, start, line_too in peers:
            if ATTACKS[attack][0] or line_too:
                one(label, start, attack)


if __name__ == "__main__":
    main()
