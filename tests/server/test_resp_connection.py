"""RespConnection over a real socket: reply order, QUIT, protocol errors, deep pipelines, WATCH
cleanup, against ``minidb serve --resp-port 0``."""

from __future__ import annotations

import re
import socket
import time
import urllib.request

import pytest

from minidb.protocol import SIMPLE_OK, SIMPLE_PONG, RespReplyDecoder, encode_command
from minidb.store._plainrun import ACCELERATED
from tests.server.conftest import ServeFactory, ServerProcess

IO_TIMEOUT_S = 30.0


@pytest.fixture
def resp(serve: ServeFactory) -> ServerProcess:
    """A server with its RESP listener and metrics on free ports."""
    return serve("--resp-port", "0", "--metrics-port", "0")


def connect(server: ServerProcess) -> socket.socket:
    assert server.resp_port is not None
    return socket.create_connection(("127.0.0.1", server.resp_port), timeout=IO_TIMEOUT_S)


def commands(*argvs: tuple[str, ...]) -> bytes:
    return b"".join(encode_command(list(argv)) for argv in argvs)


def read_replies(sock: socket.socket, count: int) -> list[object]:
    """Exactly ``count`` replies (fails on EOF or the socket timeout before that)."""
    decoder = RespReplyDecoder()
    replies: list[object] = []
    while len(replies) < count:
        data = sock.recv(1 << 16)
        assert data, f"EOF after {len(replies)} of {count} replies"
        replies += decoder.feed(data)
    return replies


def read_to_eof(sock: socket.socket) -> bytes:
    out = b""
    while data := sock.recv(1 << 16):
        out += data
    return out


def test_local_and_owner_replies_keep_command_order(resp: ServerProcess) -> None:
    """A pipeline mixing data commands and connection commands is answered in order."""
    with connect(resp) as sock:
        sock.sendall(commands(("SET", "k", "1"), ("PING",), ("INCR", "k"), ("ECHO", "e"),
                              ("GET", "k"), ("CLIENT", "ID"), ("DEL", "k")))  # fmt: skip
        replies = read_replies(sock, 7)
    assert replies[:5] == [SIMPLE_OK, SIMPLE_PONG, 2, b"e", b"2"] and replies[6] == 1


def test_quit_answers_ok_and_never_runs_what_follows(resp: ServerProcess) -> None:
    """QUIT pipelined before a SET: +OK, the connection closes, the SET never ran."""
    with connect(resp) as sock:
        sock.sendall(commands(("QUIT",), ("SET", "after-quit", "v")))
        assert read_to_eof(sock) == b"+OK\r\n"
    with connect(resp) as sock:
        sock.sendall(commands(("EXISTS", "after-quit")))
        assert read_replies(sock, 1) == [0]


def test_protocol_error_is_answered_after_earlier_replies_then_closed(
    resp: ServerProcess,
) -> None:
    """A broken frame after a SET: the SET's +OK, then -ERR Protocol error, then EOF."""
    with connect(resp) as sock:
        sock.sendall(commands(("SET", "k", "v")) + b"*1\r\n$x\r\n" + commands(("PING",)))
        assert read_to_eof(sock) == b"+OK\r\n-ERR Protocol error: invalid bulk length\r\n"


def test_thousands_of_pipelined_commands_are_paused_not_shed(resp: ServerProcess) -> None:
    """20k pipelined INCRs sent at once are all answered (none ERR busy) and all applied."""
    count = 20_000
    with connect(resp) as sock:
        sock.sendall(commands(*[("INCR", "n")] * count))
        replies = read_replies(sock, count)
    assert replies == list(range(1, count + 1))


def watched_keys(server: ServerProcess) -> float:
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=IO_TIMEOUT_S) as response:
        text = response.read().decode()
    return float(re.search(r"^minidb_watched_keys (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]


def test_closed_connection_forgets_its_watch(resp: ServerProcess) -> None:
    """A connection that WATCHed three keys and closed leaves no watched key behind."""
    with connect(resp) as sock:
        sock.sendall(commands(("WATCH", "a", "b", "c")))
        assert read_replies(sock, 1) == [SIMPLE_OK]
        assert watched_keys(resp) == 3
    deadline = time.monotonic() + IO_TIMEOUT_S
    while watched_keys(resp) != 0:
        assert time.monotonic() < deadline, "the closed connection's watch is still held"
        time.sleep(0.05)


def test_http_request_line_closes_without_reply(resp: ServerProcess) -> None:
    """An HTTP POST sent to the RESP port is closed silently at once, as Redis does."""
    with connect(resp) as sock:
        sock.settimeout(5.0)  # well under the idle timeout that would close it anyway
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_to_eof(sock) == b""


def test_shared_connection_limit_wakes_every_listener(serve: ServeFactory) -> None:
    """With both listeners waiting at --max-connections, closing connections lets each accept
    again (the line listener is not left waiting behind the RESP one)."""
    server = serve("--resp-port", "0", "--max-connections", "2")
    first, second = server.client(), server.client()
    assert first.request("SET 0 a 1") == "OK" and second.request("GET 0 a") == "VALUE 1"
    with connect(server) as sock:  # accepted while the line listener waits for a slot
        sock.sendall(commands(("PING",)))
        assert read_replies(sock, 1) == [SIMPLE_PONG]
        first.close()
        second.close()
    late = server.client()
    assert late.request("GET 0 a") == "VALUE 1"


def read_exactly(sock: socket.socket, size: int) -> bytes:
    out = b""
    while len(out) < size:
        data = sock.recv(size - len(out))
        assert data, f"EOF after {out!r}"
        out += data
    return out


def test_header_ended_by_a_bare_cr_is_answered_and_closed_at_once(resp: ServerProcess) -> None:
    """``*x\\r\\r``: a header ends at its first CR (Redis), so this is an invalid multibulk
    length answered and closed at once, not a wait for an LF until the idle timeout."""
    with connect(resp) as sock:
        sock.settimeout(5.0)  # well under the idle timeout
        sock.sendall(b"*x\r\r")
        assert read_to_eof(sock) == b"-ERR Protocol error: invalid multibulk length\r\n"


@pytest.mark.parametrize("data", [b"*1\rx$4\r\nPING\r\n", b"*1\r\n$4\rxPING\r\n"])
def test_header_ended_by_cr_and_any_byte_is_read_as_redis_reads_it(
    resp: ServerProcess, data: bytes
) -> None:
    """``*1\\rx`` and ``$4\\rx`` are whole headers (the byte after the CR is skipped): PING is
    answered +PONG and the connection stays usable."""
    with connect(resp) as sock:
        sock.sendall(data)
        assert read_exactly(sock, 7) == b"+PONG\r\n"
        sock.sendall(commands(("ECHO", "still")))
        assert read_replies(sock, 1) == [b"still"]


def test_rejected_exec_in_multi_is_execabort_with_its_reason(resp: ServerProcess) -> None:
    """EXEC with an argument inside MULTI: ``-EXECABORT Transaction discarded because of:
    wrong number ...``, the transaction is gone (the SET never ran, EXEC has no MULTI)."""
    with connect(resp) as sock:
        sock.sendall(b"MULTI\r\nSET tx 1\r\nEXEC now\r\nEXEC\r\nEXISTS tx\r\n")
        expected = (
            b"+OK\r\n+QUEUED\r\n-EXECABORT Transaction discarded because of: wrong number of "
            b"arguments for 'exec' command\r\n-ERR EXEC without MULTI\r\n:0\r\n"
        )
        assert read_exactly(sock, len(expected)) == expected


def _metric(server: ServerProcess, name: str) -> float:
    assert server.metrics_port is not None
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=IO_TIMEOUT_S) as answer:
        text = answer.read().decode()
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


@pytest.mark.skipif(not ACCELERATED, reason="inline reads run in C only")
def test_plain_reads_are_served_inline_and_writes_in_the_turn(resp: ServerProcess) -> None:
    """With the owner idle, a lone connection's GETs are answered in its own callback
    (counted as inline); a SET at the head of a read runs there too, in the loop turn's
    group (also counted), answered once the turn's group is logged, and the GET pipelined
    behind it sees its value."""
    with connect(resp) as sock:
        before = _metric(resp, "minidb_inline_requests_total")
        sock.sendall(commands(("SET", "k", "v"), ("GET", "k")))
        assert read_replies(sock, 2) == [SIMPLE_OK, b"v"]
        for _ in range(3):
            sock.sendall(commands(("GET", "k"), ("MGET", "k", "nope"), ("PING",)))
            assert read_replies(sock, 3) == [b"v", [b"v", None], SIMPLE_PONG]
        inline = _metric(resp, "minidb_inline_requests_total") - before
    # The client waits for each reply, so the owner is back waiting for work at each read.
    assert inline == 11, inline
