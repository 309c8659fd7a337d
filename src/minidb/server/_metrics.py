"""Prometheus metrics and the runtime's introspection, on a small HTTP listener.

Counters are not incremented on the hot path: the components keep plain integers and expose
``statistics()``, and a ``Collector`` turns those into metric families when ``/metrics`` is
scraped. Each server has its own ``CollectorRegistry`` so several servers can live in one
process (the tests start many).

The HTTP side is deliberately tiny (GET and HEAD, one request per connection, on the server's
own loop): ``/metrics`` (Prometheus text), ``/debug/tasks`` (JSON from
``minidb.runtime.snapshot()`` when the runtime provides it, else ``{}``; its reads switch the
runtime's introspection on, ``IntrospectionOnDemand``). Serving on the loop, not
in a thread, means the snapshot is taken on the thread that owns the tasks. The port is open to
whoever can reach it, so it has limits of its own: ``METRICS_MAX_CONNECTIONS`` at once (then it
stops accepting, like the line port), ``METRICS_TIMEOUT_S`` per connection, and the request head
size of ``_http`` (which parses heads without I/O).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
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
from minidb.runtime import IntrospectionOnDemand
from minidb.server._http import METHODS, Refusal, Request, RequestHead, response
from minidb.server._hub import LATENCY_BOUNDS_S
from minidb.server._listeners import Acceptor, AcceptStatistics, address_of, bind_listener
from minidb.server._logging import event
from minidb.store import BATCH_SIZE_BOUNDS

if TYPE_CHECKING:
    from minidb.replication import ShipperStatistics
    from minidb.replication._follower import FollowerStatistics
    from minidb.server._lifecycle import Server

logger = logging.getLogger("minidb.server")

METRICS_MAX_CONNECTIONS = 16
"""Metrics connections served at once; beyond it the listener stops accepting. A scrape or a
`minidb top` refresh holds one for milliseconds, so 16 is room for several of each, and it
keeps the descriptor reserve small (see ``_fdlimit``)."""
METRICS_TIMEOUT_S = 10.0
"""Seconds a metrics connection may take, from accept, to send its request and read the answer
(Prometheus's default scrape timeout); then it is dropped, idle or not."""

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
NOT_FOUND_BODY = b"not found: try /metrics or /debug/tasks\n"


def _cumulative(bounds: Iterator[str], counts: tuple[int, ...]) -> list[tuple[str, int]]:
    """Prometheus histogram buckets from per-bucket counts (the last one past every bound)."""
    total, buckets = 0, []
    for bound, count in zip([*bounds, "+Inf"], counts, strict=True):
        total += count
        buckets.append((bound, total))
    return buckets


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
        by_listener = GaugeMetricFamily(
            "minidb_listener_connections_active", "Open client connections per listener",
            labels=["listener"],
        )
        for listener, count in sorted(self._server.connections_by_listener().items()):
            by_listener.add_metric([listener], count)
        yield by_listener
        counts = self._server.resp_counts
        commands = CounterMetricFamily(
            "minidb_resp_commands", "RESP commands by name and outcome (what INFO commandstats"
            " shows): ok, error (an error reply), rejected (unknown, arity, not authenticated)",
            labels=["command", "outcome"],
        )
        for name, calls in sorted(counts.calls.items()):
            failed = counts.failed.get(name, 0)
            commands.add_metric([name, "ok"], calls - failed)
            if failed:
                commands.add_metric([name, "error"], failed)
        for name, rejected in sorted(counts.rejected.items()):
            commands.add_metric([name, "rejected"], rejected)
        yield commands
        yield GaugeMetricFamily(
            "minidb_watched_keys", "Keys some connection's WATCH is registered on",
            self._server.owner.state.keyspace.statistics().watched_keys,
        )
        accept = CounterMetricFamily(
            "minidb_accept_failures",
            "Failed accepts on the line port (resource: out of descriptors or memory)",
            labels=["kind"],
        )
        accept.add_metric(["resource"], stats.accept.resource_failures)
        accept.add_metric(["transient"], stats.accept.transient_failures)
        accept.add_metric(["other"], stats.accept.other_failures)
        yield accept
        yield GaugeMetricFamily(
            "minidb_mailbox_depth", "Requests waiting for the data owner", owner.mailbox_depth
        )
        yield GaugeMetricFamily("minidb_keys", "Keys in the store", store.keys)
        yield GaugeMetricFamily(
            "minidb_read_only", "1 if the store refuses writes after a log failure",
            1 if owner.read_only else 0,
        )
        yield CounterMetricFamily(
            "minidb_inline_requests",
            "Plain commands a RESP connection ran in its own callback while the data owner was"
            " idle: reads served at once and runs of the loop turn's group (part of the"
            " requests it answers; see docs/architecture.md)",
            owner.inline_requests,
        )
        yield HistogramMetricFamily(
            "minidb_batch_size",
            "Requests committed per data-owner wakeup",
            buckets=_cumulative(map(str, BATCH_SIZE_BOUNDS), owner.batch_size_buckets),
            sum_value=owner.batch_size_sum,
        )
        yield HistogramMetricFamily(
            "minidb_request_latency_seconds",
            "Requests by the time from their batch's send to the data owner to their replies'"
            " write (a batch's requests counted together)",
            buckets=_cumulative(map(repr, LATENCY_BOUNDS_S), stats.latency_buckets),
            sum_value=stats.latency_sum_s,
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
        if (rep := stats.replication) is not None:
            yield from _replication_metrics(rep)
        if (replica := stats.replica) is not None:
            yield from _replica_metrics(replica)


def _replication_metrics(rep: ShipperStatistics) -> Iterator[Metric]:
    """The shipper's figures (``--replicate-to``); see docs/replication.md."""
    yield GaugeMetricFamily(
        "minidb_replication_lag_seconds",
        "Age of the oldest written log record not yet shipped (0 when caught up)",
        rep.lag_seconds,
    )
    yield GaugeMetricFamily(
        "minidb_replication_lag_records", "Written log records not yet shipped", rep.lag_records
    )
    yield CounterMetricFamily(
        "minidb_replication_shipped_bytes", "Bytes uploaded to the object store",
        rep.shipped_bytes,
    )
    yield CounterMetricFamily(
        "minidb_replication_shipped_objects", "Objects (chunks, snapshots) uploaded",
        rep.shipped_objects,
    )
    yield CounterMetricFamily(
        "minidb_replication_failures", "Failed object-store requests of the shipper (retried)",
        rep.failures,
    )
    yield CounterMetricFamily(
        "minidb_replication_deleted_objects", "Objects deleted by retention", rep.deleted_objects
    )
    yield CounterMetricFamily(
        "minidb_replication_store_requests", "Requests the shipper sent to the object store",
        rep.store_requests,
    )
    yield GaugeMetricFamily(
        "minidb_replication_fenced", "1 once another server took the prefix over", int(rep.fenced)
    )


def _replica_metrics(replica: FollowerStatistics) -> Iterator[Metric]:
    """A replica's follower (``--replica-of``); see docs/replication.md."""
    yield GaugeMetricFamily(
        "minidb_replica_lag_seconds", "How long ago the primary made durable the oldest"
        " record this replica has not applied (caught up: since its last poll)",
        replica.lag_seconds,
    )
    yield GaugeMetricFamily(
        "minidb_replica_lag_records", "Records shipped that this replica has not applied",
        replica.lag_records,
    )
    yield GaugeMetricFamily(
        "minidb_replica_applied_seq", "The newest record this replica applied",
        replica.applied_seq,
    )
    yield GaugeMetricFamily(
        "minidb_replica_link_up", "1 while the replica's last poll of the store worked",
        1 if replica.state.value == "following" else 0,
    )
    yield CounterMetricFamily(
        "minidb_replica_records_applied", "Shipped records this replica applied",
        replica.records_applied,
    )
    yield CounterMetricFamily(
        "minidb_replica_poll_failures", "Polls of the store that failed",
        replica.poll_failures,
    )
    yield CounterMetricFamily(
        "minidb_replica_fetched_bytes", "Bytes of shipped chunks downloaded",
        replica.bytes_fetched,
    )


def task_snapshot() -> Any:
    """The runtime's task table, if this version of the runtime has one."""
    snapshot = cast(Callable[[], Any] | None, getattr(minidb.runtime, "snapshot", None))
    return snapshot() if snapshot is not None else {}


class MetricsHTTP(asyncio.Protocol):
    """One connection of the metrics port: one request head, one response, then close.

    A deadline armed at ``connection_made`` (``timeout`` after it, on the loop clock) bounds
    the whole connection: a client that sends nothing, or only part of a head, is answered
    408 and dropped; one that does not read its response is dropped. Nothing a client sends
    raises out of this protocol: every head ends in a response with a standard status line.
    """

    def __init__(self, listener: MetricsListener) -> None:
        self._listener = listener
        self._head = RequestHead()
        self._answered = False
        self._transport: asyncio.Transport | None = None
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_at(loop.time() + self._listener.timeout, self._on_deadline)
        self._listener.opened(self)

    def data_received(self, data: bytes) -> None:
        if self._answered:
            return  # a pipelined request or a body: this connection answers one request
        decided = self._head.feed(data)
        if decided is not None:
            self._answer(decided)

    def eof_received(self) -> bool:
        # Half-closed before the head was complete: it never will be. Keep the transport open
        # so the refusal (or a response still being written) can go out; _respond closes it.
        if not self._answered:
            if self._head.pending():
                self._answer(self._head.finish())
            else:
                self._answered = True
                self._close()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._listener.closed(self)

    def _on_deadline(self) -> None:
        self._deadline = None
        self._listener.timed_out += 1
        if not self._answered:
            self._respond(response(HTTPStatus.REQUEST_TIMEOUT, b"request not received in time\n"))
        # Whatever did not fit in the socket buffer is not worth another second of the slot.
        if self._transport is not None:
            self._transport.abort()

    def _answer(self, decided: Request | Refusal) -> None:
        if isinstance(decided, Refusal):
            self._listener.count_refusal(decided.status)
            event(
                logger, logging.DEBUG, "metrics_refused",
                status=decided.status.value, reason=decided.detail,
            )
            allow = (("Allow", ", ".join(METHODS)),)
            headers = allow if decided.status is HTTPStatus.METHOD_NOT_ALLOWED else ()
            body = (decided.detail + "\n").encode()
            self._respond(response(decided.status, body, headers=headers))
            return
        head_only = decided.method == "HEAD"
        try:
            status, content_type, body = self._listener.endpoint(decided.path)
        except Exception as exc:
            event(logger, logging.ERROR, "metrics_endpoint_failed", path=decided.path, exc_info=exc)
            status, content_type, body = (
                HTTPStatus.INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", b"internal error\n"
            )
        self._respond(response(status, body, content_type, head_only=head_only))

    def _respond(self, raw: bytes) -> None:
        self._answered = True
        if self._transport is None or self._transport.is_closing():
            return
        self._transport.write(raw)
        self._close()

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Drop the connection now (the server is stopping)."""
        if self._transport is not None:
            self._transport.abort()


class MetricsListener:
    """The metrics port: its socket, its accept loop, and its own connection limit.

    Over ``max_connections`` it stops accepting, as the line port does at
    ``--max-connections``: new clients wait in the kernel's backlog at no cost to the server
    (accepting and closing them at once would cost an accept, a descriptor and a close per
    attempt on the loop that also serves the line port, which is what a flood would want),
    and a legitimate scraper that waits is served as soon as a slot frees, which the deadline
    of every connection guarantees soon.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        max_connections: int = METRICS_MAX_CONNECTIONS,
        timeout: float = METRICS_TIMEOUT_S,
        introspection: IntrospectionOnDemand | None = None,
    ) -> None:
        self.registry = registry
        self.introspection = introspection
        self.max_connections = max_connections
        self.timeout = timeout
        self.connections: set[MetricsHTTP] = set()
        self.refused: dict[int, int] = {}
        self.timed_out = 0
        self.address: tuple[str, int] | None = None
        self._sock: socket.socket | None = None
        self._acceptor: Acceptor | None = None
        self._task: asyncio.Task[None] | None = None
        self._slot_waiter: asyncio.Future[None] | None = None

    def start(self, host: str, port: int) -> tuple[str, int]:
        """Bind (``OSError`` if the port is taken) and start accepting; return the address."""
        self._sock = sock = bind_listener(host, port)
        self.address = address_of(sock)
        self._acceptor = Acceptor(
            sock, lambda: MetricsHTTP(self), self._wait_for_slot, listener="metrics",
            open_connections=lambda: len(self.connections),
        )
        self._task = asyncio.get_running_loop().create_task(
            self._acceptor.run(), name="minidb-metrics-accept"
        )
        return self.address

    async def close(self) -> None:
        """Stop accepting and drop the connections still open (each is one short request)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._sock is not None:
            self._sock.close()
        for conn in list(self.connections):
            conn.abort()
        if self.introspection is not None:
            self.introspection.close()
        # Let the transports run connection_lost, so no descriptor outlives the server.
        for _ in range(2):
            await asyncio.sleep(0)

    def endpoint(self, path: str) -> tuple[HTTPStatus, str, bytes]:
        """Status, content type and body for ``path``."""
        if path == "/metrics":
            return HTTPStatus.OK, PROMETHEUS_TEXT, generate_latest(self.registry)
        if path == "/debug/tasks":
            if self.introspection is not None:
                self.introspection.touch()
            body = json.dumps(task_snapshot(), default=str).encode() + b"\n"
            return HTTPStatus.OK, "application/json", body
        return HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", NOT_FOUND_BODY

    # -- admission -----------------------------------------------------------------------

    def opened(self, conn: MetricsHTTP) -> None:
        self.connections.add(conn)

    def closed(self, conn: MetricsHTTP) -> None:
        self.connections.discard(conn)
        if self._slot_waiter is not None and not self._slot_waiter.done():
            self._slot_waiter.set_result(None)

    def count_refusal(self, status: HTTPStatus) -> None:
        self.refused[status.value] = self.refused.get(status.value, 0) + 1

    async def _wait_for_slot(self) -> None:
        while len(self.connections) >= self.max_connections:
            self._slot_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._slot_waiter
            finally:
                self._slot_waiter = None

    def statistics(self) -> MetricsListenerStatistics:
        assert self._acceptor is not None, "metrics listener not started"
        return MetricsListenerStatistics(
            connections=len(self.connections),
            refused=dict(self.refused),
            timed_out=self.timed_out,
            accept=self._acceptor.statistics(),
        )


@dataclass(frozen=True, slots=True)
class MetricsListenerStatistics:
    """What the metrics port has served and refused."""

    connections: int
    refused: dict[int, int]
    """Requests answered with an error status, by status code (404s not included)."""
    timed_out: int
    """Connections dropped at their deadline."""
    accept: AcceptStatistics


def new_registry(server: Server) -> CollectorRegistry:
    """A registry holding only this server's metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServerCollector(server))
    return registry
