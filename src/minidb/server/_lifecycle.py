"""The server's life: start, serve, shut down gracefully, and die loudly if the data dies.

States: created -> started (listening, owner running) -> serving -> stopping -> stopped.
``serve()`` waits for the first of two things:

- a shutdown request (SIGTERM/SIGINT in ``minidb serve``, or ``request_shutdown()``): stop
  accepting and close the listeners (new clients are refused), let data already received be
  read, then have every connection answer what it received in full and close; then let the
  owner drain and close the log. Whatever is still running after ``--grace`` is dropped.
  Exit status 0.
- the data owner's task ending without being asked to (supervision): the data lived in that
  task, so nothing can bring it back; serving ``ERR store unavailable`` forever would look
  alive to every health check that only opens the port. Log it, drop every connection, exit
  status 1, and let whoever runs the process restart it (the log makes the restart recover).

``open_store`` builds the keyspace from the write-ahead log in ``--data-dir``: open it, apply
every record's operations (snapshot first), drop the keys whose deadline passed meanwhile, and
only then is anything bound, so a damaged log (``CorruptionError``) means nothing is ever
served and an expired key is never served either. A clean shutdown ends with a checkpoint,
so the next start reads one snapshot instead of the history.

A replica (``--replica-of URL``) first restores the newest shipped state into an empty data
dir (``minidb.replication``), then opens it the same way, runs its owner in the replica role
and a ``Follower`` task that tails the shipped log into it. ``request_promote()`` (SIGUSR1)
stops the follower once what it fetched is applied and turns the owner into a primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import itertools
import logging
import os
import platform
import secrets
import socket
import sys
import time
from dataclasses import asdict as dataclasses_asdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from minidb.errors import ConfigError, WalError
from minidb.replication import RetentionPolicy, Shipper, ShipperConfig, ShipperStatistics
from minidb.replication import start_shipping as _start_shipping
from minidb.replication._follower import Follower, FollowerStatistics
from minidb.runtime import IntrospectionOnDemand, WheelEventLoop
from minidb.server._config import ServerConfig
from minidb.server._connection import Connection, Hub, LineConnection
from minidb.server._fdlimit import fit_to_fd_limit
from minidb.server._listeners import Acceptor, AcceptStatistics, address_of, bind_listener
from minidb.server._logging import event
from minidb.server._metrics import MetricsListener, new_registry
from minidb.server.resp._connection import RespConnection, RespContext
from minidb.server.resp._env import ServerEnv
from minidb.server.resp._executor import CommandCounts, RespExecutor
from minidb.server.resp._info import ServerFacts
from minidb.server.resp._session import SessionConfig
from minidb.store import Keyspace, OwnerStatistics, StoreOwner, StoreState, StoreStatistics
from minidb.store._plainrun import wall_clock_ms
from minidb.wal import DurableLog, WalStatistics, open_log

if TYPE_CHECKING:
    from minidb.objstore import ObjectStore
    from minidb.replication._restore import RestoreResult

logger = logging.getLogger("minidb.server")

SHUTDOWN_READ_ROUNDS = 2
"""Loop iterations granted on shutdown so bytes already in socket buffers are read in."""


def open_store(config: ServerConfig, now_ms: int | None = None) -> tuple[StoreState, DurableLog]:
    """Open the log in the data dir (created if missing) and replay it into a new keyspace, as
    of wall-clock ``now_ms`` (default: now): a key whose deadline has passed is dropped.

    Raises ``CorruptionError`` (file and offset) for damage other than a torn tail, and
    ``WalError`` if the directory cannot be opened or is locked by another server.
    """
    started = time.perf_counter()
    try:
        log, replay = open_log(
            config.data_dir, checkpoint_bytes=config.checkpoint_bytes,
            checkpoint_growth=config.checkpoint_growth,
        )
    except OSError as exc:
        raise WalError(f"cannot open the data dir: {exc}", path=str(config.data_dir)) from exc
    if now_ms is None:
        now_ms = wall_clock_ms()
    keyspace = Keyspace(now_ms=now_ms, max_value_bytes=config.max_value_bytes)
    try:
        # Each record's operations, decoded by the log (which knows each file's format), are
        # applied whole: a record that does not decode was refused there, with file and offset.
        apply_ops = keyspace.apply_ops
        for ops in replay:
            apply_ops(ops, now_ms)
        # Only once everything is in (see Keyspace.apply_ops: a later record may persist a
        # key whose first deadline has passed). Nothing is journaled: the log implies these.
        purged = keyspace.purge_expired(now_ms)
    except BaseException:
        log.close()
        raise
    if log.torn_tail is not None:
        torn = log.torn_tail
        event(
            logger, logging.WARNING, "wal_torn_tail_cut",
            file=torn.name, offset=torn.good_offset, size=torn.size, reason=torn.problem,
        )
    event(
        logger, logging.INFO, "store_replayed",
        records=log.statistics().replayed, keys=len(keyspace), expired=purged,
        seconds=round(time.perf_counter() - started, 6),
    )
    return StoreState(keyspace), log


def _minidb_version() -> str:
    # The package's own metadata: the top-level package is above this layer.
    try:
        return importlib.metadata.version("minidb")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def _fmt(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


@dataclass(frozen=True, slots=True)
class ServerStatistics:
    """One server's figures: its connections, its refusals, and its store's."""

    connections: int
    accepted: int
    shed: int
    timeouts: int
    unavailable: int
    refused: dict[tuple[str, str], int]
    accept: AcceptStatistics
    store: StoreStatistics
    owner: OwnerStatistics
    wal: WalStatistics | None
    replay_seconds: float
    replication: ShipperStatistics | None
    latency_buckets: tuple[int, ...]
    """Requests per ``LATENCY_BOUNDS_S`` bucket of send-to-reply time (see ``Hub``)."""
    latency_sum_s: float
    replica: FollowerStatistics | None = None
    """The follower's figures while the server is a replica (None: a primary)."""


class Server:
    """A minidb server: the listeners, the connections and the data owner."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._owner: StoreOwner | None = None
        self._log: DurableLog | None = None
        self._shipper: Shipper | None = None
        self._replay_seconds = 0.0
        self._owner_task: asyncio.Task[None] | None = None
        self._hub: Hub | None = None
        self._listener: socket.socket | None = None
        self._acceptor: Acceptor | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._metrics: MetricsListener | None = None
        self._shutdown: asyncio.Future[None] | None = None
        self._resp_listener: socket.socket | None = None
        self._resp_acceptor: Acceptor | None = None
        self._resp_accept_task: asyncio.Task[None] | None = None
        self.resp_counts = CommandCounts()
        self.line_address: tuple[str, int] | None = None
        self.resp_address: tuple[str, int] | None = None
        self.metrics_address: tuple[str, int] | None = None
        self._replica_store: ObjectStore | None = None
        self._follower: Follower | None = None
        self._follower_task: asyncio.Task[None] | None = None
        self._promote_task: asyncio.Task[None] | None = None
        self.registry = new_registry(self)

    # -- start ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the store, bind every listener and start serving; raise ``OSError`` on bind."""
        loop = asyncio.get_running_loop()
        # Before anything opens a descriptor; may lower max_connections (with a warning).
        self.config = config = fit_to_fd_limit(self.config)
        started = time.perf_counter()
        restored = await self._restore_replica() if config.replica_of is not None else None
        try:
            state, log = open_store(config)
        except BaseException:
            await self._close_replica_store()
            raise
        self._replay_seconds = time.perf_counter() - started
        self._log = log
        if config.replicate_to is not None:
            try:
                self._shipper = await self._start_shipping(log)
            except BaseException:
                log.close()
                raise
        self._owner = StoreOwner(
            state, log, mailbox=config.mailbox,
            commit_delay=config.commit_delay_us / 1e6,
            sync_in_thread=config.sync_in == "thread",
            fsync=config.fsync,
            replica=config.replica_of is not None,
        )
        if self._replica_store is not None:
            self._follower = self._new_follower(self._replica_store, log, restored)
        self._hub = hub = Hub(config, self._owner)
        self._shutdown = loop.create_future()
        try:
            self._listener = bind_listener(config.host, config.port)
        except BaseException:
            log.close()
            raise
        self.line_address = address_of(self._listener)
        self._acceptor = Acceptor(
            self._listener, lambda: LineConnection(hub, loop), hub.wait_for_slot,
            listener="line", open_connections=lambda: len(hub.connections),
        )
        if config.resp_port is not None:
            try:
                self._resp_listener = bind_listener(config.host, config.resp_port)
            except BaseException:
                self._listener.close()
                log.close()
                raise
            self.resp_address = address_of(self._resp_listener)
            context = self._resp_context()
            self._resp_acceptor = Acceptor(
                self._resp_listener, lambda: RespConnection(hub, loop, context),
                hub.wait_for_slot, listener="resp",
                open_connections=lambda: len(hub.connections),
            )
        if config.metrics_port is not None:
            # The metrics port serves /debug/tasks, which `minidb top` reads: its reads switch
            # the per-task counters on, and they go off a minute after the last one (the
            # instrumented turn costs a request about half again its instructions).
            on_demand = IntrospectionOnDemand(loop) if isinstance(loop, WheelEventLoop) else None
            self._metrics = MetricsListener(self.registry, introspection=on_demand)
            try:
                self.metrics_address = self._metrics.start(config.host, config.metrics_port)
            except BaseException:
                self._listener.close()
                log.close()
                raise
        self._owner_task = loop.create_task(self._owner.run(), name="minidb-store-owner")
        if self._follower is not None:
            self._follower_task = loop.create_task(
                self._follower.run(), name="minidb-replica-follower"
            )
        self._accept_task = loop.create_task(self._acceptor.run(), name="minidb-accept")
        if self._resp_acceptor is not None:
            self._resp_accept_task = loop.create_task(
                self._resp_acceptor.run(), name="minidb-accept-resp"
            )
        event(
            logger, logging.INFO, "server_started", line=_fmt(self.line_address),
            **({"resp": _fmt(self.resp_address)} if self.resp_address is not None else {}),
        )

    # -- replica -------------------------------------------------------------------------

    async def _restore_replica(self) -> RestoreResult | None:
        """Open the primary's store; restore the newest state if the data dir is empty."""
        from minidb.objstore import open_store as open_object_store
        from minidb.replication._restore import restore_if_empty

        config = self.config
        assert config.replica_of is not None
        options = {} if config.s3_endpoint is None else {"endpoint_url": config.s3_endpoint}
        self._replica_store = open_object_store(config.replica_of, **options)
        try:
            restored = await restore_if_empty(self._replica_store, config.data_dir)
        except BaseException:
            await self._close_replica_store()
            raise
        if restored is not None:
            plan = restored.plan
            event(
                logger, logging.INFO, "replica_restored", source=config.replica_of,
                generation=plan.generation, first=plan.first_seq, last=plan.last_seq,
                objects=restored.objects_read, bytes=restored.bytes_read,
                seconds=round(restored.seconds, 6),
            )
        return restored

    def _new_follower(
        self, store: ObjectStore, log: DurableLog, restored: RestoreResult | None
    ) -> Follower:
        config = self.config
        assert config.replica_of is not None and self._owner is not None
        generation = after = None
        if restored is not None:
            generation = restored.plan.generation
            chunks = restored.plan.chunks
            after = chunks[-1].chunk.key if chunks else None
        return Follower(
            store, self._owner, source=config.replica_of, next_seq=log.next_number,
            generation=generation, after_key=after, poll_interval=config.replica_poll_interval,
        )

    async def _stop_follower(self) -> None:
        task, self._follower_task = self._follower_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _close_replica_store(self) -> None:
        store, self._replica_store = self._replica_store, None
        if store is not None:
            await store.close()

    def request_promote(self) -> None:
        """Promote this replica to a primary (SIGUSR1); a no-op on a primary or when under
        way. Runs as a task of its own, awaited at shutdown."""
        if self._follower is None or self._promote_task is not None:
            return
        self._promote_task = asyncio.get_running_loop().create_task(
            self.promote(), name="minidb-promote"
        )

    async def promote(self) -> None:
        """Stop following, start shipping to the same prefix under a new generation (taking
        it over, so a primary still alive there is fenced), then take writes: the owner
        leaves the replica role after the last record the follower handed it, so the
        sequence continues without a gap and every write taken is shipped. If shipping cannot
        start (the store is unreachable) the server stays a replica and follows again."""
        if self._follower is None:
            raise ConfigError("not a replica: nothing to promote")
        config, follower, log = self.config, self._follower, self._log
        assert config.replica_of is not None and log is not None
        await self._stop_follower()
        stats = follower.statistics()
        try:
            self._shipper = await self._start_shipping(log, config.replica_of, takeover=True)
        except Exception as exc:
            event(
                logger, logging.ERROR, "replica_promote_failed", source=stats.source,
                error=repr(exc), action="following again",
            )
            store = self._replica_store
            assert store is not None
            self._follower = Follower(
                store, self.owner, source=config.replica_of, next_seq=log.next_number,
                generation=stats.generation, poll_interval=config.replica_poll_interval,
            )
            self._follower_task = asyncio.get_running_loop().create_task(
                self._follower.run(), name="minidb-replica-follower"
            )
            self._promote_task = None  # a later request may try again
            return
        self.owner.promote()
        self._follower = None
        await self._close_replica_store()
        event(
            logger, logging.WARNING, "replica_promoted", source=stats.source,
            followed=stats.generation, next_seq=log.next_number,
            generation=self._shipper.statistics().generation,
        )

    @property
    def follower(self) -> Follower | None:
        """The follower while the server is a replica."""
        return self._follower

    async def _start_shipping(
        self, log: DurableLog, url: str | None = None, *, takeover: bool | None = None
    ) -> Shipper:
        # Before the owner runs, so the log's hold is in place before any checkpoint (a
        # promoted replica: before the owner takes its first write).
        config = self.config
        url = url if url is not None else config.replicate_to
        assert url is not None
        options: dict[str, object] = {}
        if config.s3_endpoint is not None and url.startswith("s3://"):
            options["endpoint_url"] = config.s3_endpoint
        retention = RetentionPolicy.parse(config.retain) if config.retain is not None else None
        return await _start_shipping(
            url, log, str(config.data_dir),
            takeover=config.takeover if takeover is None else takeover,
            config=ShipperConfig(ship_interval_s=config.ship_interval, retention=retention),
            wall_ms=wall_clock_ms, store_options=options,
        )

    def _resp_context(self) -> RespContext:
        config = self.config
        assert self.resp_address is not None
        facts = ServerFacts(
            minidb_version=_minidb_version(), tcp_port=self.resp_address[1], host=config.host,
            data_dir=str(config.data_dir), max_clients=config.max_connections,
            idle_timeout_s=config.idle_timeout, process_id=os.getpid(),
            run_id=secrets.token_hex(20), arch_bits=64 if sys.maxsize > 2**32 else 32,
            os=f"{platform.system()} {platform.release()} {platform.machine()}",
            executable=sys.executable, python_version=platform.python_version(),
        )  # fmt: skip
        ids = itertools.count(1)
        return RespContext(
            SessionConfig(facts=facts, password=config.password),
            RespExecutor(self.resp_counts, max_reply_bytes=config.max_reply_bytes),
            ServerEnv(self, self.resp_counts),
            max_bulk_bytes=self.owner.state.keyspace.max_value_bytes,
            next_id=lambda: next(ids),
        )

    def request_shutdown(self) -> None:
        """Ask ``serve()`` to shut down gracefully (safe to call more than once)."""
        if self._shutdown is not None and not self._shutdown.done():
            self._shutdown.set_result(None)

    # -- serve ---------------------------------------------------------------------------

    async def serve(self) -> int:
        """Serve until shutdown or the owner's death; return the process exit status."""
        assert self._owner_task is not None and self._shutdown is not None
        await asyncio.wait({self._owner_task, self._shutdown}, return_when=asyncio.FIRST_COMPLETED)
        if self._owner_task.done():
            return await self._owner_died()
        return await self._graceful_shutdown()

    async def _owner_died(self) -> int:
        assert self._owner_task is not None and self._hub is not None
        exc = self._owner_task.exception() if not self._owner_task.cancelled() else None
        event(
            logger, logging.CRITICAL, "store_owner_died",
            error=repr(exc), exc_info=exc, action="exit",
        )
        await self._stop_accepting()
        for conn in list(self._hub.connections):
            conn.abort()
        await self._stop_follower()
        await self._close_replica_store()
        await self._close_metrics()
        if self._shipper is not None:
            await self._shipper.close()
        self.owner.log.close()
        return 1

    async def _graceful_shutdown(self) -> int:
        assert self._owner is not None and self._owner_task is not None and self._hub is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.grace
        event(logger, logging.INFO, "shutdown_begin", connections=len(self._hub.connections))
        if self._promote_task is not None:
            with contextlib.suppress(Exception):
                await self._promote_task
        await self._stop_follower()
        await self._close_replica_store()
        await self._stop_accepting()
        # Requests already in the connections' socket buffers count as received: give the
        # loop a chance to read them before the connections stop reading.
        for _ in range(SHUTDOWN_READ_ROUNDS):
            await asyncio.sleep(0)
        for conn in list(self._hub.connections):
            conn.begin_drain()
        dropped = 0
        try:
            async with asyncio.timeout_at(deadline):
                await self._hub.wait_all_closed()
        except TimeoutError:
            dropped = len(self._hub.connections)
            for conn in list(self._hub.connections):
                conn.abort()
        self._owner.close()
        try:
            async with asyncio.timeout_at(max(deadline, loop.time())):
                await asyncio.shield(self._owner_task)
        except TimeoutError:
            self._owner_task.cancel()
        except Exception:
            pass  # it died while draining; already answered its waiters, nothing to keep
        with contextlib.suppress(BaseException):
            await self._owner_task
        self._checkpoint_on_shutdown()
        if self._shipper is not None:
            # What is written (the final snapshot too) goes out within what is left of the grace.
            shipped = await self._shipper.drain(max(0.0, deadline - loop.time()))
            event(logger, logging.INFO, "shutdown_shipped", complete=shipped,
                  **dataclasses_asdict(self._shipper.statistics()))
            await self._shipper.close()
        self._owner.log.close()
        await self._close_metrics()
        event(logger, logging.INFO, "shutdown_complete", dropped_connections=dropped)
        return 0

    def _checkpoint_on_shutdown(self) -> None:
        """Snapshot the store if the owner finished cleanly and there is log since the last
        checkpoint, so the next start reads one file instead of replaying history."""
        owner, task, log = self._owner, self._owner_task, self._log
        assert owner is not None and task is not None and log is not None
        if task.cancelled() or task.exception() is not None:
            return  # a group may have been cut short: only the log itself is trustworthy
        if log.failure is not None or log.statistics().log_bytes == 0:
            return
        started = time.perf_counter()
        done = owner.final_checkpoint()
        event(
            logger, logging.INFO, "shutdown_checkpoint", ok=done, keys=len(owner.state),
            seconds=round(time.perf_counter() - started, 6),
        )

    async def _stop_accepting(self) -> None:
        for task in (self._accept_task, self._resp_accept_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for listener in (self._listener, self._resp_listener):
            if listener is not None:
                listener.close()

    async def _close_metrics(self) -> None:
        if self._metrics is not None:
            await self._metrics.close()

    # -- observing -----------------------------------------------------------------------

    @property
    def owner(self) -> StoreOwner:
        assert self._owner is not None, "server not started"
        return self._owner

    def connections(self) -> list[Connection]:
        """Every open client connection, of both listeners."""
        assert self._hub is not None, "server not started"
        return list(self._hub.connections)

    def connections_by_listener(self) -> dict[str, int]:
        """Open connections per listener (``line``, and ``resp`` when it is on)."""
        counts = {"line": 0, **({"resp": 0} if self.resp_address is not None else {})}
        for conn in self.connections():
            counts[conn.listener] = counts.get(conn.listener, 0) + 1
        return counts

    def buckets(self) -> list[tuple[bytes, int, int]]:
        """(name, keys, keys with an expiry) of every bucket holding keys."""
        ks = self.owner.state.keyspace
        expires = ks.expiring_by_bucket()
        return [(name, ks.size(name), expires.get(name, 0)) for name in sorted(ks.buckets())]

    def expired_keys(self) -> int:
        stats = self.owner.state.keyspace.statistics()
        return stats.expired_lazily + stats.expired_by_timer

    def statistics(self) -> ServerStatistics:
        assert self._hub is not None and self._owner is not None, "server not started"
        assert self._acceptor is not None, "server not started"
        hub = self._hub
        return ServerStatistics(
            connections=len(hub.connections),
            accepted=hub.accepted,
            shed=hub.shed,
            timeouts=hub.timeouts,
            unavailable=hub.unavailable,
            refused=dict(hub.rejected_verbs),
            accept=self._acceptor.statistics(),
            store=self._owner.state.statistics(),
            owner=self._owner.statistics(),
            wal=self._log.statistics() if self._log is not None else None,
            replay_seconds=self._replay_seconds,
            replica=self._follower.statistics() if self._follower is not None else None,
            replication=self._shipper.statistics() if self._shipper is not None else None,
            latency_buckets=hub.latency_buckets,
            latency_sum_s=hub.latency_sum,
        )
