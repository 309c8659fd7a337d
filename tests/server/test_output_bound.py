"""What one connection can make the server hold is bounded by ``--output-hard-limit``, whatever
its replies weigh: the owner builds replies for a connection only while its unsent output is
under the soft limit and hands the rest of its requests back unrun, and a RESP reply longer
than the hard limit less the soft one is refused before it is joined. Black box: a real
``minidb serve``, clients that never read, its RSS from /proc, and a quiet client's latency
meanwhile."""

from __future__ import annotations

import socket
import time

from tests.server.conftest import (
    IO_TIMEOUT_S,
    ServeFactory,
    ServerProcess,
    non_reader,
    rss_peak_bytes,
    rss_when_settled,
)

BIG = 4 * 2**20
"""The attack's value: 4 MiB, so 300 pipelined GETs of it are 1.2 GB of replies."""
HARD_LIMIT = 32 * 2**20
"""The server's default ``--output-hard-limit``: the ceiling the README states."""
RSS_CEILING = 2 * HARD_LIMIT + 16 * 2**20
"""What the server may grow by meanwhile: one hard limit of unsent replies, as much again
while they are joined and copied into the transport's buffer, and the allocator's slack."""
QUIET_LATENCY_S = 1.0
"""A quiet client's worst round trip while a non-reader is served (before the fix the owner
spent seconds building the non-reader's replies)."""


def _command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def _read_reply(sock: socket.socket, buffer: bytearray, want: int) -> bytes:
    """Read until ``buffer`` holds ``want`` bytes; take and return them."""
    while len(buffer) < want:
        chunk = sock.recv(max(65536, want - len(buffer)))
        if not chunk:
            raise ConnectionError("server closed the connection")
        buffer += chunk
    out = bytes(buffer[:want])
    del buffer[:want]
    return out


def _resp_client(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)


def _store_big(server: ServerProcess) -> None:
    assert server.resp_port is not None
    with _resp_client(server.resp_port) as sock:
        sock.sendall(_command(b"SET", b"big", b"x" * BIG) + _command(b"SET", b"small", b"v"))
        assert _read_reply(sock, bytearray(), 10) == b"+OK\r\n+OK\r\n"


def _quiet_worst_latency(server: ServerProcess, rounds: int = 20) -> float:
    """The worst of ``rounds`` sequential ``GET small`` round trips on a fresh connection."""
    assert server.resp_port is not None
    worst = 0.0
    buffer = bytearray()
    with _resp_client(server.resp_port) as sock:
        for _ in range(rounds):
            started = time.monotonic()
            sock.sendall(_command(b"GET", b"small"))
            assert _read_reply(sock, buffer, 7) == b"$1\r\nv\r\n"
            worst = max(worst, time.monotonic() - started)
    return worst


def test_output_bound_pipelined_gets_of_a_big_value_to_a_non_reader(serve: ServeFactory) -> None:
    """300 pipelined ``GET big`` (4 MiB) on a socket that never reads: the server grows by at
    most about the hard limit, not 1.2 GB, and a quiet client keeps being answered quickly."""
    server = serve("--resp-port", "0")
    _store_big(server)
    rss_when_settled(server, 1.0)
    before = rss_peak_bytes(server)
    assert server.resp_port is not None
    flood = non_reader(server.resp_port, _command(b"GET", b"big") * 300)
    try:
        worst = _quiet_worst_latency(server)
        rss_when_settled(server)
        peak = rss_peak_bytes(server)
    finally:
        flood.close()
    grown = peak - before
    print(f"RSS {before / 2**20:.0f} MB -> {peak / 2**20:.0f} MB; quiet worst {worst:.3f} s")
    assert grown < RSS_CEILING, f"server grew {grown / 2**20:.0f} MB"
    assert worst < QUIET_LATENCY_S, f"a quiet GET took {worst:.2f} s"


def test_output_bound_reply_over_the_limit_is_refused_before_it_is_built(
    serve: ServeFactory,
) -> None:
    """One 916-byte ``MGET big big ...`` (100 times the 4 MiB key) is answered ``ERR reply too
    large`` with the size and the limit, the server does not grow by its 400 MiB, and the
    connection goes on; an MGET that fits is still answered whole."""
    server = serve("--resp-port", "0")
    _store_big(server)
    rss_when_settled(server, 1.0)
    before = rss_peak_bytes(server)
    assert server.resp_port is not None
    buffer = bytearray()
    with _resp_client(server.resp_port) as sock:
        sock.sendall(_command(b"MGET", *[b"big"] * 100))
        line = _read_reply(sock, buffer, 5)
        while not line.endswith(b"\r\n"):
            line += _read_reply(sock, buffer, 1)
        assert line.startswith(b"-ERR reply too large: 4194"), line
        assert b"limit %d" % (HARD_LIMIT - 2**20) in line
        after = rss_peak_bytes(server)
        sock.sendall(_command(b"MGET", b"big", b"small"))
        header = b"*2\r\n$%d\r\n" % BIG
        assert _read_reply(sock, buffer, len(header)) == header
        assert _read_reply(sock, buffer, BIG + 2)[-2:] == b"\r\n"
        assert _read_reply(sock, buffer, 7) == b"$1\r\nv\r\n"
    grown = after - before
    assert grown < 64 * 2**20, f"server grew {grown / 2**20:.0f} MB for a refused reply"


def test_output_bound_transaction_keeps_the_replies_that_fit(serve: ServeFactory) -> None:
    """An EXEC whose replies together are over the limit still ran (its writes stand): each
    command's reply that fits is kept, the rest are answered too large, inside the array."""
    server = serve("--resp-port", "0")
    _store_big(server)
    assert server.resp_port is not None
    buffer = bytearray()
    with _resp_client(server.resp_port) as sock:
        sock.sendall(
            _command(b"MULTI")
            + _command(b"SET", b"written", b"yes")
            + _command(b"MGET", *[b"big"] * 10)
            + _command(b"GET", b"small")
            + _command(b"EXEC")
            + _command(b"GET", b"written")
        )
        want = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n+OK\r\n-ERR reply too large: "
        assert _read_reply(sock, buffer, len(want)) == want
        while b"\r\n" not in buffer:
            buffer += sock.recv(65536)
        del buffer[: buffer.index(b"\r\n") + 2]
        assert _read_reply(sock, buffer, 14) == b"$1\r\nv\r\n$3\r\nyes"


def test_output_bound_line_scans_to_a_non_reader(serve: ServeFactory) -> None:
    """The line protocol's equivalent, ``SCAN b 0 1000`` (about 62 KB a reply) pipelined 4096
    times by three clients that never read: each is held to its soft limit plus one reply,
    and others are served meanwhile."""
    server = serve()
    key = "k" * 60
    conn = server.client()
    assert set(conn.pipeline([f"SET b {key}{i:04d} v" for i in range(1000)])) == {"OK"}
    rss_when_settled(server, 1.0)
    before = rss_peak_bytes(server)
    floods = [non_reader(server.port, b"SCAN b 0 1000\n" * 4096) for _ in range(3)]
    try:
        worst = 0.0
        for _ in range(20):
            started = time.monotonic()
            assert conn.request("GET b nothing") == "NIL"
            worst = max(worst, time.monotonic() - started)
        rss_when_settled(server)
        after = rss_peak_bytes(server)
    finally:
        for sock in floods:
            sock.close()
    grown = after - before
    print(f"RSS {before / 2**20:.0f} MB -> {after / 2**20:.0f} MB; quiet worst {worst:.3f} s")
    # Three soft limits (1 MiB) plus a reply each, twice over for the copies: well under this.
    assert grown < 24 * 2**20, f"server grew {grown / 2**20:.0f} MB"
    assert worst < QUIET_LATENCY_S, f"a quiet GET took {worst:.2f} s"
