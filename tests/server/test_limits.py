"""What hostile or unlucky clients cannot do to ``minidb serve``: kill a connection with a huge
number, hold slots past the idle timeout by not reading, or make the server buffer without
bound. Black box: a real process, real sockets, its RSS read from /proc."""

from __future__ import annotations

import time

from minidb.protocol import MAX_BULK_BYTES, MAX_BULK_ROWS
from tests.server.conftest import (
    IO_TIMEOUT_S,
    LineClient,
    ServeFactory,
    ServerProcess,
    non_reader,
    rss_when_settled,
)

KEY = "k" * 60
"""Long keys, so that one ``SCAN b 0 1000`` reply is about 62 KB."""
RSS_SLACK_MB = 64
"""What three non-reading SCAN flooders may grow the server by: each may pin about
--output-soft-limit plus --max-in-flight replies (~9 MB) in bytes, twice that in Python."""


def _preload_scan_bucket(server: ServerProcess) -> None:
    conn = server.client()
    replies = conn.pipeline([f"SET b {KEY}{i:04d} v" for i in range(1000)])
    assert set(replies) == {"OK"}


def test_limits_huge_number_is_answered_and_connection_survives(serve: ServeFactory) -> None:
    """A SCAN count of 4301 digits in the same write as a SET: the SET is answered, the SCAN
    gets a bounded ERR invalid count, the connection keeps working and nothing is fatal."""
    server = serve()
    conn = server.client()
    conn.send(b"SET a k v\nSCAN a 0 " + b"9" * 4301 + b"\n")
    assert conn.read_line() == b"OK"
    error = conn.read_line()
    assert error.startswith(b"ERR invalid count 999") and len(error) < 200
    assert conn.request("GET a k") == "VALUE v"
    server.terminate()
    assert server.wait() == 0
    assert "Fatal error" not in server.stderr()


def test_limits_non_readers_lose_their_slots_at_the_idle_timeout(serve: ServeFactory) -> None:
    """Clients that flood SCANs and never read are dropped at --idle-timeout although their
    output cannot drain, so a client waiting for a slot is served."""
    server = serve(
        "--idle-timeout", "1", "--max-connections", "3", "--output-hard-limit", str(2**30)
    )
    _preload_scan_bucket(server)
    server.clients.pop().close()
    floods = [non_reader(server.port, b"SCAN b 0 1000\n" * 200) for _ in range(3)]
    try:
        late = LineClient(server.port, timeout=IO_TIMEOUT_S)
        server.clients.append(late)
        started = time.monotonic()
        assert late.request("GET b nothing") == "NIL"
        assert time.monotonic() - started < IO_TIMEOUT_S
    finally:
        for sock in floods:
            sock.close()
    server.terminate()
    assert server.wait() == 0
    log = server.stderr()
    assert "event=connection_idle" in log


def test_limits_non_readers_cannot_make_the_server_buffer_without_bound(
    serve: ServeFactory,
) -> None:
    """Three clients sending 4096 SCANs (57 KB each) and never reading grow the server by
    tens of MB, not by gigabytes (each is held to its output limit), and others are served."""
    server = serve()
    _preload_scan_bucket(server)
    before = rss_when_settled(server, 1.0)
    floods = [non_reader(server.port, b"SCAN b 0 1000\n" * 4096) for _ in range(3)]
    try:
        after = rss_when_settled(server)
        assert server.client().request("GET b nothing") == "NIL"
    finally:
        for sock in floods:
            sock.close()
    grown_mb = (after - before) / 2**20
    print(f"RSS {before / 2**20:.0f} MB -> {after / 2**20:.0f} MB")
    assert grown_mb < RSS_SLACK_MB, f"server grew {grown_mb:.0f} MB"


def test_limits_shutdown_aborts_undrainable_connections_after_grace(serve: ServeFactory) -> None:
    """On SIGTERM a connection whose replies cannot drain (its client does not read) does not
    hold the shutdown past --grace: it is aborted and the server exits 0."""
    server = serve("--grace", "1")
    _preload_scan_bucket(server)
    flood = non_reader(server.port, b"SCAN b 0 1000\n" * 200)
    try:
        time.sleep(0.5)
        started = time.monotonic()
        server.terminate()
        assert server.wait() == 0
        assert time.monotonic() - started < 1 + IO_TIMEOUT_S / 2
    finally:
        flood.close()
    assert "dropped_connections=1" in server.stderr()


def test_limits_bulk_frame_over_max_bytes_is_answered_then_closed(serve: ServeFactory) -> None:
    """A frame whose rows pass MAX_BULK_BYTES is refused once that much has arrived, the
    connection closes after the reply, nothing of it is applied, and others are unaffected."""
    server = serve()
    conn = server.client()
    row = b"SET b k " + b"x" * 4000 + b"\n"
    rows = row * (MAX_BULK_BYTES // len(row) + 1)  # just over the bound, far fewer than 1024
    assert len(rows) > MAX_BULK_BYTES and rows.count(b"\n") < MAX_BULK_ROWS
    conn.send(b"SET b first v\nBULK 1024\n" + rows)
    assert conn.read_line() == b"OK"
    assert conn.read_line() == b"ERR bulk frame too large"
    assert conn.at_eof()
    other = server.client()
    assert other.request("GET b k") == "NIL"
    assert other.request("GET b first") == "VALUE v"


def test_limits_small_max_in_flight_still_serves_the_largest_frame(serve: ServeFactory) -> None:
    """With --max-in-flight 2 a MAX_BULK_ROWS-row frame is served whole, then the requests
    pipelined after it."""
    server = serve("--max-in-flight", "2")
    conn = server.client()
    frame = b"BULK %d\n" % MAX_BULK_ROWS + b"".join(
        b"SET b k%d v%d\n" % (i, i) for i in range(MAX_BULK_ROWS)
    )
    conn.send(frame + frame + b"GET b k1023\nGET b k0\n")
    assert [conn.read_line() for _ in range(4)] == [
        b"OK %d" % MAX_BULK_ROWS, b"OK %d" % MAX_BULK_ROWS, b"VALUE v1023", b"VALUE v0",
    ]
