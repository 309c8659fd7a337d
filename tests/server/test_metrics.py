"""The metrics listener: Prometheus text from statistics(), the runtime's task table, its own
limits (connections, a deadline per connection, the head size), and hostile input."""

from __future__ import annotations

import asyncio
import json
import socket
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest

import minidb.runtime
from minidb.server import Server, ServerConfig, _metrics
from tests.server._clock import run_on_virtual_clock


async def _http_get(port: int, path: str) -> tuple[str, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    raw = await reader.read()
    writer.close()
    head, _, body = raw.decode().partition("\r\n\r\n")
    return head, body


def _with_metrics_server(tmp_path: Path, body: Any) -> None:
    async def main() -> None:
        server = Server(ServerConfig(port=0, metrics_port=0, data_dir=tmp_path))
        await server.start()
        try:
            async with asyncio.timeout(5):
                await body(server)
        finally:
            server.request_shutdown()
            async with asyncio.timeout(5):
                await server.serve()

    minidb.runtime.run(main())


def test_metrics_debug_tasks_serves_runtime_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/debug/tasks answers the JSON that minidb.runtime.snapshot() returns."""
    table = {"tasks": [{"name": "x"}]}
    monkeypatch.setattr(minidb.runtime, "snapshot", lambda: table, raising=False)

    async def body(server: Server) -> None:
        assert server.metrics_address is not None
        head, text = await _http_get(server.metrics_address[1], "/debug/tasks")
        assert head.startswith("HTTP/1.1 200 OK\r\n") and "application/json" in head
        assert json.loads(text) == table

    _with_metrics_server(tmp_path, body)


def test_metrics_port_switches_introspection_on_only_for_task_reads(tmp_path: Path) -> None:
    """The loop runs its plain turn with the metrics port open and scraped; the first
    /debug/tasks read switches the instrumented turn on, and shutdown switches it off."""
    loops: list[asyncio.AbstractEventLoop] = []

    async def body(server: Server) -> None:
        assert server.metrics_address is not None
        loop = asyncio.get_running_loop()
        loops.append(loop)
        await _http_get(server.metrics_address[1], "/metrics")
        assert "_run_once" not in vars(loop)
        _head, text = await _http_get(server.metrics_address[1], "/debug/tasks")
        assert json.loads(text)["introspection"] is True
        assert "_run_once" in vars(loop)

    _with_metrics_server(tmp_path, body)
    assert "_run_once" not in vars(loops[0])


def test_metrics_counts_batches_and_connections(tmp_path: Path) -> None:
    """A pipelined read shows up as one batch in the histogram, and its requests in the
    latency histogram; unknown paths are 404."""

    async def body(server: Server) -> None:
        assert server.line_address is not None and server.metrics_address is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", server.line_address[1])
        writer.write(b"SET b k v\nGET b k\nGET b k\nNOPE\n")
        for _ in range(4):
            await reader.readline()
        head, text = await _http_get(server.metrics_address[1], "/metrics")
        assert "minidb_batch_size_count 1.0" in text
        assert "minidb_batch_size_sum 4.0" in text
        # The batch's four requests, answered together (they share one send and one write).
        assert "minidb_request_latency_seconds_count 4.0" in text
        assert 'minidb_request_latency_seconds_bucket{le="+Inf"} 4.0' in text
        (latency_sum,) = [
            float(line.split()[1]) for line in text.splitlines()
            if line.startswith("minidb_request_latency_seconds_sum ")
        ]
        assert 0 < latency_sum < 4 * 5.0  # four requests, each under the test's deadline
        assert 'minidb_requests_total{outcome="ok",verb="GET"} 2.0' in text
        assert 'minidb_requests_total{outcome="error",verb="INVALID"} 1.0' in text
        assert "minidb_connections_active 1.0" in text
        assert 'minidb_accept_failures_total{kind="resource"} 0.0' in text
        head, _ = await _http_get(server.metrics_address[1], "/nope")
        assert head.startswith("HTTP/1.1 404 Not Found\r\n")
        writer.close()

    _with_metrics_server(tmp_path, body)


async def _exchange(port: int, raw: bytes, *, half_close: bool = False) -> bytes:
    """Send ``raw`` (then FIN if ``half_close``) and read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        if half_close:
            writer.write_eof()
        try:
            return await reader.read()
        except ConnectionResetError:
            return b"<reset>"
    finally:
        writer.close()


HOSTILE = {
    "ok": (b"GET /metrics HTTP/1.1\r\n\r\n", HTTPStatus.OK),
    "dot-dot path": (b"GET /../../etc/passwd HTTP/1.1\r\n\r\n", HTTPStatus.NOT_FOUND),
    "nul-escape path": (b"GET /" + b"%00" * 300 + b" HTTP/1.1\r\n\r\n", HTTPStatus.NOT_FOUND),
    "post with body": (
        b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi", HTTPStatus.METHOD_NOT_ALLOWED
    ),
    "unknown method": (b"BREW /pot HTTP/1.1\r\n\r\n", HTTPStatus.METHOD_NOT_ALLOWED),
    "no version": (b"GET /metrics\r\n\r\n", HTTPStatus.BAD_REQUEST),
    "words": (b"hello there\n\n", HTTPStatus.BAD_REQUEST),
    "binary": (b"\xff\xfe\xfd garbage \x00\x01\n\n", HTTPStatus.BAD_REQUEST),
    "utf-8 path": (b"GET /m\xc3\xa9trics HTTP/1.1\r\n\r\n", HTTPStatus.BAD_REQUEST),
    "binary header": (b"GET /metrics HTTP/1.1\r\n\xff: \xfe\r\n\r\n", HTTPStatus.BAD_REQUEST),
    "http/3": (b"GET / HTTP/3.0\r\n\r\n", HTTPStatus.HTTP_VERSION_NOT_SUPPORTED),
    "huge path": (
        b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n", HTTPStatus.REQUEST_URI_TOO_LONG
    ),
    "endless head": (
        b"GET / HTTP/1.1\r\n" + b"X-Filler: aaaaaaaaaa\r\n" * 500,
        HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
    ),
    "garbage line": (bytes(range(11, 256)) * 64, HTTPStatus.REQUEST_URI_TOO_LONG),
}
"""Requests the metrics port must answer with one status line and a close."""


@pytest.mark.parametrize("name", list(HOSTILE))
def test_metrics_hostile_requests_get_a_status_line_and_close(tmp_path: Path, name: str) -> None:
    """Malformed, foreign, oversized or non-ASCII requests each get one standard status line."""
    raw, status = HOSTILE[name]
    status_line = f"HTTP/1.1 {status.value} {status.phrase}".encode()

    async def body(server: Server) -> None:
        assert server.metrics_address is not None
        answer = await _exchange(server.metrics_address[1], raw)
        assert answer.startswith(status_line + b"\r\n"), answer[:200]
        assert answer.count(b"HTTP/1.1 ") == 1

    _with_metrics_server(tmp_path, body)


def test_metrics_pipelined_requests_get_one_answer_and_close(tmp_path: Path) -> None:
    """Two pipelined requests: the first is answered with Connection: close, the second not."""

    async def body(server: Server) -> None:
        assert server.metrics_address is not None
        raw = b"GET /nope HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n"
        answer = await _exchange(server.metrics_address[1], raw)
        assert answer.startswith(b"HTTP/1.1 404 Not Found\r\n")
        assert b"Connection: close\r\n" in answer and answer.count(b"HTTP/1.1 ") == 1

    _with_metrics_server(tmp_path, body)


def test_metrics_head_request_has_no_body(tmp_path: Path) -> None:
    """HEAD /metrics is answered with the headers only."""

    async def body(server: Server) -> None:
        assert server.metrics_address is not None
        answer = await _exchange(server.metrics_address[1], b"HEAD /metrics HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\n")
        assert b"minidb_keys" not in answer

    _with_metrics_server(tmp_path, body)


@pytest.mark.parametrize(
    "raw, answer_starts",
    [
        (b"GET /metrics HTTP/1.1\r\n\r\n", b"HTTP/1.1 200 OK\r\n"),   # complete, then FIN
        (b"GET /metrics HTTP/1.1\r\nHost:", b"HTTP/1.1 400 Bad Request\r\n"),  # FIN mid-head
        (b"", b""),                                                          # FIN, nothing sent
    ],
)
def test_metrics_half_closed_connections_are_answered_or_closed(
    tmp_path: Path, raw: bytes, answer_starts: bytes
) -> None:
    """A client that half-closes gets its answer, a 400 for a cut head, or a plain close."""

    async def body(server: Server) -> None:
        assert server.metrics_address is not None
        answer = await _exchange(server.metrics_address[1], raw, half_close=True)
        assert answer.startswith(answer_starts) and (answer or not answer_starts), answer[:200]
        if not answer_starts:
            assert answer == b""

    _with_metrics_server(tmp_path, body)


def test_metrics_idle_connections_are_dropped_and_the_limit_holds(tmp_path: Path) -> None:
    """200 idle connections: at most METRICS_MAX_CONNECTIONS are taken at once, each is answered
    408 and closed METRICS_TIMEOUT_S after it was accepted, and a scrape queued behind them is
    served once a slot frees (on the virtual clock)."""
    limit, timeout = _metrics.METRICS_MAX_CONNECTIONS, _metrics.METRICS_TIMEOUT_S
    idle_count = 200

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = Server(ServerConfig(port=0, metrics_port=0, data_dir=tmp_path))
        await server.start()
        assert server.metrics_address is not None
        port = server.metrics_address[1]
        try:
            async with asyncio.timeout(20 * timeout):
                started = loop.time()
                idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(idle_count)]
                for _, writer in idle[::2]:
                    writer.write(b"GET /metr")  # half a request line, then silence
                scrape = loop.create_task(_exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n"))
                await asyncio.sleep(timeout / 2)
                stats = server._metrics.statistics()  # type: ignore[union-attr]
                assert stats.connections == limit and stats.accept.accepted == limit
                closed_at: list[float] = []
                first_wave = [reader.read() for reader, _ in idle[:limit]]
                for answer in await asyncio.gather(*first_wave):
                    closed_at.append(loop.time() - started)
                    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
                assert closed_at[0] == pytest.approx(timeout, abs=0.05)
                answers = await asyncio.gather(*(reader.read() for reader, _ in idle[limit:]))
                assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers)
                assert (await scrape).startswith(b"HTTP/1.1 200 OK\r\n")
                for _, writer in idle:
                    writer.close()
        finally:
            server.request_shutdown()
            async with asyncio.timeout(30):
                await server.serve()

    run_on_virtual_clock(main)


def test_metrics_client_that_does_not_read_is_dropped_at_the_deadline(tmp_path: Path) -> None:
    """A client that asks for /debug/tasks but never reads is aborted at METRICS_TIMEOUT_S."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = Server(ServerConfig(port=0, metrics_port=0, data_dir=tmp_path))
        await server.start()
        assert server.metrics_address is not None
        listener = server._metrics
        assert listener is not None
        # A body far bigger than any socket buffer, so the write cannot finish by itself.
        big = (HTTPStatus.OK, "text/plain", b"x" * (64 * 1024 * 1024))
        listener.endpoint = lambda path: big  # type: ignore[method-assign]
        sock = socket.create_connection(server.metrics_address)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /debug/tasks HTTP/1.1\r\n\r\n")
        started = loop.time()
        try:
            async with asyncio.timeout(10 * _metrics.METRICS_TIMEOUT_S):
                while not listener.connections:
                    await asyncio.sleep(0.001)
                while listener.connections:
                    await asyncio.sleep(0.1)
            assert loop.time() - started == pytest.approx(_metrics.METRICS_TIMEOUT_S, abs=0.2)
            assert listener.timed_out == 1
        finally:
            sock.close()
            server.request_shutdown()
            async with asyncio.timeout(30):
                await server.serve()

    run_on_virtual_clock(main)
