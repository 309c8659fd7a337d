"""Prometheus metrics and the runtime's introspection, on a small HTTP listener.

Counters are not incremented on the hot path: the components keep plain integers and expose
``statistics()``, and a ``Collector`` turns those into metric families when ``/metrics`` is
scraped. Each server has its own ``CollectorRegistry`` so several servers can live in one
process (the tests start many).

The HTTP side is deliberately tiny (GET only, one request per connection, on the server's own
loop): ``/metrics`` (Prometheus text), ``/debug/tasks`` (JSON from ``minidb.runtime.snapshot()``
when the runtime provides it, else ``{}``). Serving on the loop, not in a thread, means the
snapshot is taken on the thread that owns the tasks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

import minidb.runtime
from minidb.store import BATCH_SIZE_BOUNDS

if TYPE_CHECKING:
    from minidb.server._lifecycle import Server

MAX_HTTP_REQUEST_BYTES = 8192
"""A metrics request head larger than this is answered 431 and closed."""


class ServerCollector(Collector):
    """Reads one server's statistics at scrape time."""

    def __init__(self, server: Server) -> None:
        self._server = server

    def collect(self) -> Iterator[Metric]:
        stats = self._server.statistics()
        store, owner = stats.store, stats.owner
        requests = CounterMetricFamily(
            "minidb_requests", "Requests by verb and outcome", labels=["verb", "outcome"]
        )
        # A write refused by a failed log was applied and rolled back, so the state counted it.
        applied = {
            ("GET", "ok"): store.gets,
            ("SET", "ok"): store.sets - owner.refused.get(("SET", "not_logged"), 0),
            ("DEL", "ok"): store.dels - owner.refused.get(("DEL", "not_logged"), 0),
            ("SCAN", "ok"): store.scans,
            ("INVALID", "error"): store.invalid,
        }
        for (verb, outcome), value in {**applied, **stats.refused, **owner.refused}.items():
            requests.add_metric([verb, outcome], max(value, 0))
        yield requests
        yield CounterMetricFamily(
            "minidb_shed", "Requests refused at once because the mailbox was full", stats.shed
        )
        yield CounterMetricFamily(
            "minidb_request_timeouts",
            "Requests answered ERR busy after waiting longer than --request-timeout",
            stats.timeouts,
        )
        yield GaugeMetricFamily(
            "minidb_connections_active", "Open client connections", stats.connections
        )
        yield GaugeMetricFamily(
            "minidb_mailbox_depth", "Requests waiting for the data owner", owner.mailbox_depth
        )
        yield GaugeMetricFamily("minidb_keys", "Keys in the store", store.keys)
        yield GaugeMetricFamily(
            "minidb_read_only", "1 if the store refuses writes after a log failure",
            1 if owner.read_only else 0,
        )
        cumulative, buckets = 0, []
        for bound, count in zip(
            [*map(str, BATCH_SIZE_BOUNDS), "+Inf"], owner.batch_size_buckets, strict=True
        ):
            cumulative += count
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily(
            "minidb_batch_size",
            "Requests committed per data-owner wakeup",
            buckets=buckets,
            sum_value=owner.batch_size_sum,
        )
        wal = stats.wal
        yield CounterMetricFamily(
            "minidb_wal_appends", "Records appended to the write-ahead log",
            wal.appends if wal is not None else owner.appends,
        )
        yield CounterMetricFamily(
            "minidb_wal_syncs", "fdatasyncs of the write-ahead log that carried records",
            wal.syncs if wal is not None else owner.syncs,
        )
        yield CounterMetricFamily(
            "minidb_wal_checkpoints", "Checkpoints completed", owner.checkpoints
        )
        yield GaugeMetricFamily(
            "minidb_checkpoint_pause_seconds_max",
            "Longest time a checkpoint blocked the data owner (sync, new segment, map copy)",
            owner.checkpoint_pause_max_s,
        )
        if wal is not None:
            yield GaugeMetricFamily(
                "minidb_wal_replayed_records", "Records replayed at start, snapshot included",
                wal.replayed,
            )
            yield GaugeMetricFamily(
                "minidb_wal_log_bytes", "Log bytes since the last checkpoint", wal.log_bytes
            )
        yield GaugeMetricFamily(
            "minidb_wal_replay_seconds", "Time the start spent opening and replaying the log",
            stats.replay_seconds,
        )


def task_snapshot() -> Any:
    """The runtime's task table, if this version of the runtime has one."""
    snapshot = cast(Callable[[], Any] | None, getattr(minidb.runtime, "snapshot", None))
    return snapshot() if snapshot is not None else {}


class MetricsHTTP(asyncio.Protocol):
    """A one-request HTTP/1.1 responder for ``/metrics`` and ``/debug/tasks``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if b"\r\n\r\n" not in self._buffer and b"\n\n" not in self._buffer:
            if len(self._buffer) > MAX_HTTP_REQUEST_BYTES:
                self._respond(431, "text/plain", b"request header too large\n")
            return
        request_line = self._buffer.split(b"\n", 1)[0].decode("latin-1").strip()
        parts = request_line.split()
        if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
            self._respond(405, "text/plain", b"only GET\n")
            return
        path = parts[1].split("?", 1)[0]
        if path == "/metrics":
            self._respond(
                200, "text/plain; version=0.0.4; charset=utf-8", generate_latest(self._registry)
            )
        elif path == "/debug/tasks":
            body = json.dumps(task_snapshot(), default=str).encode() + b"\n"
            self._respond(200, "application/json", body)
        else:
            self._respond(404, "text/plain", b"not found: try /metrics or /debug/tasks\n")

    def _respond(self, status: int, content_type: str, body: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}.get(status, "Error")
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        self._transport.write(head.encode() + body)
        self._transport.close()


def new_registry(server: Server) -> CollectorRegistry:
    """A registry holding only this server's metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServerCollector(server))
    return registry
