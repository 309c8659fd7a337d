"""``minidb batch worker``: run a batch worker against an object store and one minidb server.

Contract: the store is self-tested first (``conditional writes not enforced by <endpoint>``
on stderr and exit 1 if it fails); once the first poll has been made the worker prints
``minidb batch worker <id> ready`` (flushed); SIGTERM or SIGINT stops claiming, lets the
running attempt finish within ``--grace`` seconds or releases it, writes one line
``minidb batch worker <id> stopped: <JSON>`` (the worker's and the store's counters) on stderr
and exits 0. Bad options exit 2 with one line.

``minidb batch serve`` (the control API, docs/batch-api.md) self-tests the store the same way,
prints ``minidb listening on HOST:PORT (batch)`` and exits 0 on SIGTERM after the requests in
flight (``minidb.batch.api._serve``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from minidb.batch._backoff import DEFAULT_POLL_CAP_S, DEFAULT_POLL_MIN_S

if TYPE_CHECKING:
    from minidb.objstore import ObjectStore

PASSWORD_ENV = "MINIDB_PASSWORD"
"""The server's ``--requirepass`` (``minidb serve`` reads the same variable)."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "batch", help="batch jobs on object storage", description="Batch jobs (docs/batch.md)."
    )
    commands = parser.add_subparsers(dest="batch_command", metavar="COMMAND")
    worker = commands.add_parser(
        "worker", help="run a worker", description="Claim and run batch tasks until SIGTERM."
    )
    worker.add_argument("--store", required=True, help="file:DIR or s3://BUCKET/PREFIX")
    worker.add_argument("--minidb", required=True, metavar="HOST:PORT",
                        help="the minidb server tasks read and write")
    worker.add_argument("--worker-id", default=None, help="name in leases (default host-pid)")
    worker.add_argument("--lease-seconds", type=float, default=30.0)
    worker.add_argument("--heartbeat-seconds", type=float, default=10.0)
    worker.add_argument("--poll-seconds", type=float, default=DEFAULT_POLL_MIN_S,
                        help="wait after the first empty poll that follows work (doubles"
                        " while idle, up to --poll-max)")
    worker.add_argument("--poll-max", type=float, default=DEFAULT_POLL_CAP_S,
                        metavar="SECONDS",
                        help="poll interval of an idle worker (what a task waits at most)")
    worker.add_argument("--retry-backoff", type=float, default=1.0, metavar="SECONDS",
                        help="base of the retry backoff of failed attempts")
    worker.add_argument("--max-attempts", type=int, default=3,
                        help="no retryable failure is retried past this many attempts")
    worker.add_argument("--grace", type=float, default=30.0, metavar="SECONDS",
                        help="on SIGTERM, let the running attempt finish for this long")
    worker.add_argument("--s3-endpoint", default=None, metavar="URL",
                        help="S3-compatible endpoint (MinIO, moto, R2)")
    worker.add_argument("--s3-read-timeout", type=float, default=None, metavar="SECONDS",
                        help="give up on an S3 response after this long (default 30); the "
                             "outcome of a write that timed out is settled by re-reading")
    worker.set_defaults(handler=_worker)
    _register_serve(commands)
    _register_scripts(commands)
    parser.set_defaults(handler=lambda _args: _usage(parser))


def _register_scripts(commands: Any) -> None:
    """``submit``, ``ls``, ``show``, ``cancel``, ``retry``, ``output``: clients of the API."""
    from minidb.batch import _scripts

    _scripts.register(commands)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _address(text: str, option: str = "--minidb") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{option} must be HOST:PORT, not {text!r}")
    return host, int(port)


def _worker(args: argparse.Namespace) -> int:
    from minidb.batch._backoff import IdlePoll, RetryBackoff
    from minidb.batch._worker import WorkerConfig

    try:
        address = _address(args.minidb)
        config = WorkerConfig(
            worker_id=args.worker_id or f"{socket.gethostname()}-{os.getpid()}",
            lease_s=args.lease_seconds, heartbeat_s=args.heartbeat_seconds,
            shutdown_grace_s=args.grace, max_attempts=args.max_attempts,
            poll=IdlePoll(min_s=args.poll_seconds,
                          cap_s=max(args.poll_seconds, args.poll_max)),
            retry_backoff=RetryBackoff(base_s=args.retry_backoff),
        )
    except ValueError as exc:
        sys.stderr.write(f"minidb batch worker: error: {exc}\n")
        return 2
    import minidb.runtime

    minidb.runtime.tune_for_throughput()
    return minidb.runtime.run(_main(args, config, address))


async def _main(args: argparse.Namespace, config: Any, minidb: tuple[str, int]) -> int:
    from minidb.batch._queue import TaskQueue
    from minidb.batch._worker import Worker

    async def work(store: ObjectStore) -> int:
        worker = Worker(TaskQueue(store), config, minidb=minidb)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, worker.stop)
        running = asyncio.ensure_future(worker.run())
        ready = asyncio.ensure_future(worker.polling.wait())
        await asyncio.wait({running, ready}, return_when=asyncio.FIRST_COMPLETED)
        if ready.done():
            sys.stdout.write(f"minidb batch worker {config.worker_id} ready\n")
            sys.stdout.flush()
        ready.cancel()
        await running
        # One line of counters on the way out, for operators and bench/batch.py (what the
        # worker cost the store: requests per task, per idle poll).
        counters = {"worker": dataclasses.asdict(worker.statistics()),
                    "store": dataclasses.asdict(store.statistics())}
        sys.stderr.write(f"minidb batch worker {config.worker_id} stopped: "
                         f"{json.dumps(counters, sort_keys=True)}\n")
        return 0

    return await _on_checked_store(args, "worker", work)


async def _on_checked_store(
    args: argparse.Namespace, command: str, body: Callable[[ObjectStore], Awaitable[int]]
) -> int:
    """Open ``--store``, self-test it and run ``body`` on it (exit 2 for a bad URL, 1 for a
    store that fails the self-test or cannot be reached); the store is closed afterwards."""
    from minidb.errors import ConfigError
    from minidb.objstore import ConditionalWritesNotEnforced, ObjectStoreError, open_store
    from minidb.objstore import self_test as store_self_test

    options: dict[str, Any] = {}
    if args.s3_endpoint is not None:
        options["endpoint_url"] = args.s3_endpoint
    read_timeout = getattr(args, "s3_read_timeout", None)
    if read_timeout is not None:
        if not args.store.startswith("s3://") or not read_timeout > 0:
            sys.stderr.write(f"minidb batch {command}: error: --s3-read-timeout takes seconds > 0 "
                             "and an s3:// store\n")
            return 2
        options["read_timeout_s"] = read_timeout
    try:
        store = open_store(args.store, **options)
    except ConfigError as exc:
        sys.stderr.write(f"minidb batch {command}: error: {exc}\n")
        return 2
    try:
        try:
            await store_self_test(store)
        except ConditionalWritesNotEnforced as exc:
            sys.stderr.write(f"minidb batch {command}: error: {exc}\n")
            return 1
        except ObjectStoreError as exc:
            sys.stderr.write(f"minidb batch {command}: error: store {store.endpoint}: {exc}\n")
            return 1
        return await body(store)
    finally:
        await store.close()


# --- minidb batch serve ---------------------------------------------------------------------

def _register_serve(commands: Any) -> None:
    serve = commands.add_parser(
        "serve", help="run the HTTP control API",
        description="Serve the batch control API (docs/batch-api.md) until SIGTERM.",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    serve.add_argument("--store", required=True, help="file:DIR or s3://BUCKET/PREFIX")
    serve.add_argument("--tokens", required=True, metavar="FILE",
                       help="one TOKEN USER ROLE per line (ROLE: user or operator)")
    serve.add_argument("--minidb", default=None, metavar="HOST:PORT",
                       help="the minidb server the in-process workers use")
    serve.add_argument("--minidb-resp", default=None, metavar="HOST:PORT",
                       help="that server's RESP listener: the page's store browser and INFO "
                            "(MINIDB_PASSWORD is sent with AUTH)")
    serve.add_argument("--minidb-metrics", default=None, metavar="HOST:PORT",
                       help="that server's metrics listener: the page's server charts")
    serve.add_argument("--workers", type=int, default=0, help="in-process workers (default 0)")
    serve.add_argument("--presign-seconds", type=int, default=900,
                       help="lifetime of output download URLs")
    serve.add_argument("--max-input-bytes", type=int, default=100 << 20,
                       help="largest input CSV accepted (413 above)")
    serve.add_argument("--lease-seconds", type=float, default=30.0)
    serve.add_argument("--heartbeat-seconds", type=float, default=10.0)
    serve.add_argument("--poll-seconds", type=float, default=DEFAULT_POLL_MIN_S)
    serve.add_argument("--poll-max", type=float, default=DEFAULT_POLL_CAP_S, metavar="SECONDS")
    serve.add_argument("--s3-endpoint", default=None, metavar="URL",
                       help="S3-compatible endpoint (MinIO, moto, R2)")
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from minidb.batch._backoff import IdlePoll
    from minidb.batch._worker import WorkerConfig
    from minidb.batch.api._attached import ServerLink
    from minidb.batch.api._serve import ServeConfig
    from minidb.batch.api._service import ApiSettings

    try:
        if not 0 <= args.port < 65536:
            raise ValueError(f"--port must be in 0..65535, not {args.port}")
        if args.workers < 0:
            raise ValueError("--workers must be 0 or more")
        address = None if args.minidb is None else _address(args.minidb)
        if args.workers and address is None:
            raise ValueError("--workers needs --minidb HOST:PORT")
        server = ServerLink(
            resp=None if args.minidb_resp is None
            else _address(args.minidb_resp, "--minidb-resp"),
            metrics=None if args.minidb_metrics is None
            else _address(args.minidb_metrics, "--minidb-metrics"),
            password=os.environ.get(PASSWORD_ENV) or None,
        )
        worker = WorkerConfig(
            worker_id=f"{socket.gethostname()}-{os.getpid()}",
            lease_s=args.lease_seconds, heartbeat_s=args.heartbeat_seconds,
            poll=IdlePoll(min_s=args.poll_seconds,
                          cap_s=max(args.poll_seconds, args.poll_max)),
        )
        config = ServeConfig(
            host=args.host, port=args.port, workers=args.workers, worker=worker, minidb=address,
            settings=ApiSettings(presign_s=args.presign_seconds,
                                 max_input_bytes=args.max_input_bytes, server=server),
        )
    except ValueError as exc:
        sys.stderr.write(f"minidb batch serve: error: {exc}\n")
        return 2
    import logging

    import minidb.runtime

    # The access log and the API's warnings (a store outage) go to stderr; neither ever
    # holds a token or a presigned URL's query string (docs/batch-api.md).
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return minidb.runtime.run(_serve_main(args, config))


async def _serve_main(args: argparse.Namespace, config: Any) -> int:
    from minidb.batch.api import TokenFileError, load_tokens
    from minidb.batch.api._serve import serve

    try:
        tokens = load_tokens(args.tokens)
    except TokenFileError as exc:
        sys.stderr.write(f"minidb batch serve: error: {exc}\n")
        return 2

    async def api(store: ObjectStore) -> int:
        return await serve(store, tokens, config)

    return await _on_checked_store(args, "serve", api)
