"""The metrics listener: Prometheus text from statistics(), and the runtime's task table."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import minidb.runtime
from minidb.server import Server, ServerConfig


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
        assert "200 OK" in head and "application/json" in head
        assert json.loads(text) == table

    _with_metrics_server(tmp_path, body)


def test_metrics_counts_batches_and_connections(tmp_path: Path) -> None:
    """A pipelined read shows up as one batch in the histogram; unknown paths are 404."""

    async def body(server: Server) -> None:
        assert server.line_address is not None and server.metrics_address is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", server.line_address[1])
        writer.write(b"SET b k v\nGET b k\nGET b k\nNOPE\n")
        for _ in range(4):
            await reader.readline()
        head, text = await _http_get(server.metrics_address[1], "/metrics")
        assert "minidb_batch_size_count 1.0" in text
        assert "minidb_batch_size_sum 4.0" in text
        assert 'minidb_requests_total{outcome="ok",verb="GET"} 2.0' in text
        assert 'minidb_requests_total{outcome="error",verb="INVALID"} 1.0' in text
        assert "minidb_connections_active 1.0" in text
        head, _ = await _http_get(server.metrics_address[1], "/nope")
        assert "404" in head
        writer.close()

    _with_metrics_server(tmp_path, body)
