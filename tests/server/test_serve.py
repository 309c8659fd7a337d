"""``minidb serve`` as a black box: real sockets, a real process, the command-line contract."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.server.conftest import IO_TIMEOUT_S, LineClient, ServeFactory, ServerProcess


def test_serve_answers_every_verb(serve: ServeFactory) -> None:
    """SET, GET, DEL and SCAN answer as the protocol says."""
    conn = serve().client()
    assert conn.request("SET users alice  hello world ") == "OK"
    assert conn.request("GET users alice") == "VALUE  hello world "
    assert conn.request("get users bob") == "NIL"
    assert conn.request("SET users bob x") == "OK"
    assert conn.request("SCAN users 0 1") == "KEYS +alice alice"
    assert conn.request("SCAN users +alice 1") == "KEYS 0 bob"
    assert conn.request("DEL users alice") == "OK"
    assert conn.request("DEL users alice") == "NIL"


def test_serve_second_client_served_while_first_stays_connected(serve: ServeFactory) -> None:
    """A second client is answered while the first keeps its connection open."""
    server = serve()
    first = server.client()
    assert first.request("SET users alice hello") == "OK"
    second = server.client()
    assert second.request("GET users alice") == "VALUE hello"
    assert first.request("GET users alice") == "VALUE hello"


def test_serve_writes_visible_to_the_next_connection(serve: ServeFactory) -> None:
    """A write made on one connection is seen by a connection opened after it closed."""
    server = serve()
    conn = server.client()
    assert conn.request("SET users alice hello") == "OK"
    conn.close()
    assert server.client().request("GET users alice") == "VALUE hello"


@pytest.mark.parametrize(
    "line, reply",
    [
        (b"", "ERR empty request"),
        (b"PING", "ERR unknown verb PING"),
        (b"GET users", "ERR missing argument"),
        (b"GET us!ers alice", "ERR invalid name us!ers"),
        (b"SET users alice " + b"v" * 4097, "ERR value too long"),
        (b"SET users alice \xff", "ERR invalid utf-8"),
        (b"GET " + b"x" * 9000, "ERR line too long"),
    ],
)
def test_serve_malformed_input_gets_err_and_connection_survives(
    serve: ServeFactory, line: bytes, reply: str
) -> None:
    """Each malformed request gets its ERR, and the same connection keeps working."""
    conn = serve().client()
    assert conn.request(line) == reply
    assert conn.request("SET users alice ok") == "OK"
    assert conn.request("GET users alice\r") == "VALUE ok"


def test_serve_split_request_parses(serve: ServeFactory) -> None:
    """A request sent in pieces with pauses in between is one request."""
    conn = serve().client()
    for piece in (b"SET us", b"ers ali", b"ce hel", b"lo\n"):
        conn.send(piece)
        time.sleep(0.05)
    assert conn.read_line() == b"OK"
    assert conn.request("GET users alice") == "VALUE hello"


def test_serve_pipelined_replies_come_in_order(serve: ServeFactory) -> None:
    """A deep pipeline is answered in request order."""
    conn = serve().client()
    lines = [f"SET b k{i} v{i}" if i % 2 == 0 else f"GET b k{i - 1}" for i in range(2000)]
    replies = conn.pipeline(lines)
    assert replies == ["OK" if i % 2 == 0 else f"VALUE v{i - 1}" for i in range(2000)]


def test_serve_silent_client_is_hung_up_on(serve: ServeFactory) -> None:
    """A client that sends nothing for --idle-timeout is disconnected."""
    conn = serve("--idle-timeout", "0.3").client()
    started = time.monotonic()
    assert conn.at_eof()
    assert 0.25 <= time.monotonic() - started < IO_TIMEOUT_S


def test_serve_requests_push_the_idle_deadline_out(serve: ServeFactory) -> None:
    """A client that keeps sending requests is not hung up on."""
    conn = serve("--idle-timeout", "1.0").client()
    for _ in range(6):  # 1.2 s in all: longer than the idle timeout, never idle that long
        time.sleep(0.2)
        assert conn.request("GET users alice") == "NIL"


def test_serve_burst_against_tiny_mailbox_waits_instead_of_shedding(serve: ServeFactory) -> None:
    """Against --mailbox 1, eight connections bursting 200 writes each are paused, not shed:
    every request is answered OK, in order, and nothing is counted as shed."""
    server = serve("--mailbox", "1", "--metrics-port", "0")
    conns = [server.client() for _ in range(8)]
    burst = [f"SET b k{i} v" for i in range(200)]
    for conn in conns:
        conn.send("".join(line + "\n" for line in burst).encode())
    replies = [conn.read_line().decode() for conn in conns for _ in burst]
    assert set(replies) == {"OK"}
    assert "minidb_shed_total 0.0" in _metrics(server)


def test_serve_quiet_client_is_served_while_others_flood(serve: ServeFactory) -> None:
    """With a small mailbox and eight connections pipelining thousands of writes, a client
    doing one request at a time is never answered ERR busy."""
    server = serve("--mailbox", "64")
    floods = [server.client() for _ in range(8)]
    burst = b"".join(b"SET b k%d v\n" % i for i in range(3000))
    for conn in floods:
        conn.send(burst)
    quiet = server.client()
    replies = [quiet.request(f"GET b k{i}") for i in range(100)]
    assert not [r for r in replies if r.startswith("ERR")]
    for conn in floods:
        assert {conn.read_line() for _ in range(3000)} == {b"OK"}


def _metrics(server: ServerProcess) -> str:
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=IO_TIMEOUT_S) as response:
        return str(response.read().decode())


def test_serve_request_timeout_answers_busy_and_write_still_lands(serve: ServeFactory) -> None:
    """A request that waits past --request-timeout gets ERR busy, yet the write applies."""
    server = serve(
        "--request-timeout", "0.2", "--metrics-port", "0",
        env={"MINIDB_FAILPOINTS": "store.apply=delay(0.6)"},
    )
    conn = server.client()
    started = time.monotonic()
    assert conn.request("SET users alice late") == "ERR busy"
    assert time.monotonic() - started < 0.6
    assert "minidb_request_timeouts_total 1.0" in _metrics(server)
    # Every request through the owner is delayed past the timeout, so ask the metrics
    # (served without the owner) whether the write landed.
    deadline = time.monotonic() + IO_TIMEOUT_S
    while "minidb_keys 1.0" not in _metrics(server):
        assert time.monotonic() < deadline, "the timed-out write never landed"
        time.sleep(0.05)


def test_serve_connection_over_the_limit_waits(serve: ServeFactory) -> None:
    """With --max-connections 2 a third client waits until one of the first two leaves."""
    server = serve("--max-connections", "2")
    first, second = server.client(), server.client()
    assert first.request("GET b k") == "NIL" and second.request("GET b k") == "NIL"
    third = LineClient(server.port, timeout=0.5)
    server.clients.append(third)
    third.send(b"SET b k v\n")
    with pytest.raises(TimeoutError):
        third.read_line()
    first.close()
    third.sock.settimeout(IO_TIMEOUT_S)
    assert third.read_line() == b"OK"


def test_serve_sigterm_answers_in_flight_refuses_new_and_exits_zero(serve: ServeFactory) -> None:
    """SIGTERM: the request in flight is answered, new connections are refused, exit 0."""
    server = serve("--grace", "5", env={"MINIDB_FAILPOINTS": "store.apply=delay(0.5)"})
    conn = server.client()
    conn.send(b"SET users alice hello\nGET users alice\nGET users al")
    time.sleep(0.1)
    server.terminate()
    assert conn.read_line() == b"OK"
    assert conn.read_line() == b"VALUE hello"
    assert conn.at_eof()
    with pytest.raises(OSError):
        LineClient(server.port, timeout=1.0).request("GET users alice")
    assert server.wait() == 0


def test_serve_grace_expiry_still_exits_zero(serve: ServeFactory) -> None:
    """Work still running after --grace is dropped and the exit status is still 0."""
    server = serve("--grace", "0.3", env={"MINIDB_FAILPOINTS": "store.apply=delay(5)"})
    conn = server.client()
    conn.send(b"SET users alice hello\n")
    time.sleep(0.1)
    started = time.monotonic()
    server.terminate()
    assert server.wait() == 0
    assert time.monotonic() - started < 3


def test_serve_dead_data_owner_exits_nonzero(serve: ServeFactory) -> None:
    """When the data owner dies the process logs it and exits non-zero."""
    server = serve(env={"MINIDB_FAILPOINTS": "store.owner=crash-after(2)"})
    conn = server.client()
    assert conn.request("SET users a 1") == "OK"
    assert conn.request("SET users b 2") == "OK"
    # The batch in the owner's hands when it died is answered before the process exits.
    with contextlib.suppress(ConnectionError):
        assert conn.request("SET users c 3") == "ERR store unavailable"
    assert server.wait() != 0
    assert "store_owner_died" in server.stderr()


def test_serve_metrics_endpoint_reports_requests(serve: ServeFactory) -> None:
    """/metrics shows the request counters and /debug/tasks answers JSON."""
    server = serve("--metrics-port", "0")
    conn = server.client()
    conn.pipeline(["SET b k v", "GET b k", "PING"])
    url = f"http://127.0.0.1:{server.metrics_port}"
    text = _metrics(server)
    assert 'minidb_requests_total{outcome="ok",verb="SET"} 1.0' in text
    assert 'minidb_requests_total{outcome="ok",verb="GET"} 1.0' in text
    assert "minidb_connections_active 1.0" in text
    assert "minidb_batch_size_count" in text
    with urllib.request.urlopen(url + "/debug/tasks", timeout=IO_TIMEOUT_S) as response:
        assert response.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    "args",
    [["--port", "nope"], ["--mailbox", "0"], ["--idle-timeout", "-1"], ["--bogus"],
     ["--max-in-flight", "0"], ["--output-soft-limit", "2048", "--output-hard-limit", "1024"]],
)
def test_serve_bad_options_exit_2_with_one_line(args: list[str]) -> None:
    """Bad options exit 2 with a one-line message on stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "minidb", "serve", *args],
        capture_output=True, text=True, timeout=IO_TIMEOUT_S,
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1


def test_serve_creates_missing_data_dir(serve: ServeFactory, tmp_path: object) -> None:
    """A data dir that does not exist is created on start."""
    from pathlib import Path

    target = Path(str(tmp_path)) / "deep" / "er"
    serve(data_dir=target)
    assert target.is_dir()


def test_serve_busy_port_fails_to_start(tmp_path: object) -> None:
    """A port already in use makes the server exit non-zero with a message."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "minidb", "serve", "--port", str(port), "--data-dir",
             str(tmp_path)],
            capture_output=True, text=True, timeout=IO_TIMEOUT_S,
        )
    assert result.returncode == 1
    assert "cannot listen" in result.stderr


def test_serve_metrics_port_serves_live_task_table_for_top(serve: ServeFactory) -> None:
    """--metrics-port serves per-task counters at /debug/tasks, switched on by the first read
    (counting from there); `minidb top --once` shows them."""
    import json

    server = serve("--metrics-port", "0")
    url = f"http://127.0.0.1:{server.metrics_port}/debug/tasks"
    with urllib.request.urlopen(url, timeout=IO_TIMEOUT_S) as response:
        table = json.loads(response.read())
    assert table["introspection"] is True  # the read switched it on
    assert server.client().request("SET users alice hello") == "OK"  # a new client: an accept
    with urllib.request.urlopen(url, timeout=IO_TIMEOUT_S) as response:
        table = json.loads(response.read())
    accept = next(t for t in table["tasks"] if t["name"] == "minidb-accept")
    assert accept["polls"] >= 1 and accept["busy_s"] > 0
    top = subprocess.run(
        [sys.executable, "-m", "minidb", "top", f"127.0.0.1:{server.metrics_port}", "--once"],
        capture_output=True, text=True, timeout=IO_TIMEOUT_S * 3,
    )
    assert top.returncode == 0, top.stderr
    assert "minidb-store-owner" in top.stdout and "minidb-accept" in top.stdout
