"""``minidb serve``: the command-line contract of the server (options, output, exit status)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from minidb.server import _config as defaults

PASSWORD_ENV = "MINIDB_PASSWORD"
"""Where the password comes from when ``--requirepass`` is not given (kept out of ``ps``)."""

LOOPS = ("minidb", "asyncio")
LOG_LEVELS = {
    "debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
    "error": logging.ERROR,
}
"""``--log-level``'s names and their ``logging`` levels."""
"""Event loops ``--loop`` accepts: minidb.runtime's timer-wheel loop, or stock asyncio."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve", help="run the minidb server", description="Run the minidb server."
    )
    parser.add_argument("--host", default=defaults.DEFAULT_HOST, help="address to listen on")
    parser.add_argument("--port", type=int, default=defaults.DEFAULT_PORT, help="line port")
    parser.add_argument("--data-dir", default=defaults.DEFAULT_DATA_DIR, help="data directory")
    parser.add_argument(
        "--idle-timeout", type=float, default=defaults.DEFAULT_IDLE_TIMEOUT_S, metavar="SECONDS",
        help="close a connection that sends nothing for this long",
    )
    parser.add_argument(
        "--request-timeout", type=float, default=defaults.DEFAULT_REQUEST_TIMEOUT_S,
        metavar="SECONDS", help="answer ERR busy to a request not served within this long",
    )
    parser.add_argument(
        "--max-connections", type=int, default=defaults.DEFAULT_MAX_CONNECTIONS, metavar="N",
        help="serve at most N connections at once; the rest wait in the kernel backlog",
    )
    parser.add_argument(
        "--mailbox", type=int, default=defaults.DEFAULT_MAILBOX, metavar="N",
        help="requests the data owner queues; beyond it connections wait for room",
    )
    parser.add_argument(
        "--max-in-flight", type=int, default=defaults.DEFAULT_MAX_IN_FLIGHT, metavar="N",
        help="requests one connection may have unanswered; beyond it it stops reading",
    )
    parser.add_argument(
        "--output-soft-limit", type=int, default=defaults.DEFAULT_OUTPUT_SOFT_LIMIT,
        metavar="BYTES",
        help="unsent reply bytes over which a connection is given no more replies and stops"
        " reading",
    )
    parser.add_argument(
        "--output-hard-limit", type=int, default=defaults.DEFAULT_OUTPUT_HARD_LIMIT,
        metavar="BYTES",
        help="the most reply bytes one connection can make the server hold (default 32 MiB):"
        " a RESP reply longer than this less the soft limit is answered ERR reply too large",
    )
    parser.add_argument(
        "--grace", type=float, default=defaults.DEFAULT_GRACE_S, metavar="SECONDS",
        help="on SIGTERM/SIGINT, wait this long for in-flight work",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=None, metavar="PORT",
        help="serve Prometheus /metrics and /debug/tasks on this port (off by default)",
    )
    parser.add_argument(
        "--resp-port", type=int, default=None, metavar="PORT",
        help="also serve the Redis protocol (RESP2/RESP3) on this port; 0: any free port",
    )
    parser.add_argument(
        "--requirepass", default=None, metavar="PASSWORD",
        help=f"clients must authenticate first (RESP: AUTH/HELLO AUTH, line: AUTH <password>);"
        f" default ${PASSWORD_ENV} if set",
    )
    parser.add_argument(
        "--checkpoint-bytes", type=int, default=defaults.DEFAULT_CHECKPOINT_BYTES,
        metavar="BYTES", help="write a snapshot after this much log (default 64 MiB)",
    )
    parser.add_argument(
        "--checkpoint-growth", type=float, default=defaults.DEFAULT_CHECKPOINT_GROWTH,
        metavar="RATIO",
        help="...and not before the log is RATIO times the last snapshot (default 1; 0: off)",
    )
    parser.add_argument(
        "--commit-delay", type=int, default=defaults.DEFAULT_COMMIT_DELAY_US,
        metavar="MICROSECONDS",
        help="let a writing batch wait this long for more requests before its sync",
    )
    parser.add_argument(
        "--fsync", choices=defaults.FSYNC_POLICIES, default="always",
        help="when acknowledged writes are fdatasynced: always (default), everysec, no",
    )
    parser.add_argument(
        "--max-value-bytes", type=int, default=defaults.DEFAULT_MAX_VALUE_BYTES,
        metavar="BYTES",
        help="the longest value a Redis-protocol command may store (default 16 MiB)",
    )
    parser.add_argument(
        "--lua-time-limit", type=int, default=defaults.DEFAULT_LUA_TIME_LIMIT_MS, metavar="MS",
        help="milliseconds a Lua script (EVAL) may run before it is stopped with an error and"
        " its writes rolled back (default 5000)",
    )
    parser.add_argument(
        "--replica-of", default=None, metavar="URL",
        help="serve as a read-only replica of the log a primary ships to URL "
        "(s3://BUCKET/PREFIX or file:DIR); an empty --data-dir is restored first",
    )
    parser.add_argument(
        "--poll-interval", type=float, default=defaults.DEFAULT_REPLICA_POLL_INTERVAL_S,
        metavar="SECONDS", help="how often a replica looks for newly shipped records",
    )
    parser.add_argument(
        "--replicate-to", default=None, metavar="URL",
        help="ship the WAL to object storage: s3://BUCKET/PREFIX or file:DIR"
        " (see docs/replication.md)",
    )
    parser.add_argument(
        "--ship-interval", type=float, default=defaults.DEFAULT_SHIP_INTERVAL_S,
        metavar="SECONDS", help="upload new log records at least this often (default 1)",
    )
    parser.add_argument(
        "--retain", default=None, metavar="WINDOW|N",
        help="delete shipped objects no restore point of the last WINDOW (24h, 7d) or of the"
        " newest N snapshots needs (default: keep everything)",
    )
    parser.add_argument(
        "--takeover", action="store_true",
        help="ship to a prefix another server ships to, fencing that server",
    )
    parser.add_argument(
        "--s3-endpoint", default=None, metavar="URL",
        help="S3-compatible endpoint for --replicate-to / --replica-of s3:// (MinIO, moto, R2)",
    )
    parser.add_argument(
        "--log-level", choices=LOG_LEVELS, default="info",
        help="the least severe events logged (default info); debug adds one event per "
        "connection opened and closed, as Redis's verbose level does",
    )
    # Where the fdatasync runs: for benchmarks, not for operators (see store._actor).
    parser.add_argument(
        "--sync-in", choices=defaults.SYNC_PLACES, default="loop", help=argparse.SUPPRESS
    )
    # Which event loop runs the server: for benchmarks and debugging, not for operators.
    parser.add_argument("--loop", choices=LOOPS, default="minidb", help=argparse.SUPPRESS)
    parser.set_defaults(handler=_serve)


def _password(flag: str | None) -> bytes | None:
    text = flag if flag is not None else os.environ.get(PASSWORD_ENV)
    return text.encode("utf-8", "surrogateescape") if text is not None else None


def _serve(args: argparse.Namespace) -> int:
    from minidb.errors import ConfigError
    from minidb.server._config import ServerConfig
    from minidb.server._logging import configure

    try:
        config = ServerConfig(
            host=args.host,
            port=args.port,
            data_dir=Path(args.data_dir),
            idle_timeout=args.idle_timeout,
            request_timeout=args.request_timeout,
            max_connections=args.max_connections,
            mailbox=args.mailbox,
            max_in_flight=args.max_in_flight,
            output_soft_limit=args.output_soft_limit,
            output_hard_limit=args.output_hard_limit,
            grace=args.grace,
            metrics_port=args.metrics_port,
            checkpoint_bytes=args.checkpoint_bytes,
            checkpoint_growth=args.checkpoint_growth,
            commit_delay_us=args.commit_delay,
            sync_in=args.sync_in,
            resp_port=args.resp_port,
            password=_password(args.requirepass),
            fsync=args.fsync,
            max_value_bytes=args.max_value_bytes,
            lua_time_limit=args.lua_time_limit,
            replica_of=args.replica_of,
            replica_poll_interval=args.poll_interval,
            replicate_to=args.replicate_to,
            ship_interval=args.ship_interval,
            retain=args.retain,
            takeover=args.takeover,
            s3_endpoint=args.s3_endpoint,
        )
    except ConfigError as exc:
        sys.stderr.write(f"minidb serve: error: {exc}\n")
        return 2
    configure(LOG_LEVELS[args.log_level])
    from minidb.store import scripting

    scripting.configure(time_limit_ms=config.lua_time_limit)
    import minidb.runtime

    minidb.runtime.tune_for_throughput()
    if args.loop == "asyncio":
        return asyncio.run(_main(config))
    return minidb.runtime.run(_main(config))


async def _main(config: Any) -> int:
    from minidb.errors import ConfigError, MinidbError, WalError
    from minidb.objstore import ObjectStoreError
    from minidb.replication import ReplicationError
    from minidb.server._lifecycle import Server

    server = Server(config)
    try:
        await server.start()
    except WalError as exc:
        # Damage the log cannot cut off as a torn tail: serve nothing rather than a store
        # missing acknowledged writes. One line naming the file and the byte offset.
        where = f" (file {exc.path}, byte offset {exc.offset})" if exc.offset is not None else ""
        sys.stderr.write(f"minidb serve: error: refusing to start: {exc}{where}\n")
        return 1
    except (ReplicationError, ObjectStoreError, TimeoutError) as exc:
        # Another server ships to the prefix (GenerationConflict), or the store is unreachable
        # (before OSError, since TimeoutError is one).
        reason = str(exc) or f"{config.replicate_to} did not answer in time"
        sys.stderr.write(f"minidb serve: error: refusing to start: replication: {reason}\n")
        return 1
    except OSError as exc:
        sys.stderr.write(f"minidb serve: error: cannot listen on {config.host}: {exc}\n")
        return 1
    except ConfigError as exc:  # the environment, e.g. too low a file limit: not a usage error
        sys.stderr.write(f"minidb serve: error: refusing to start: {exc}\n")
        return 1
    except MinidbError as exc:  # a replica's restore: a gap, a damaged object, the store
        sys.stderr.write(f"minidb serve: error: refusing to start: {exc}\n")
        return 1
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, server.request_shutdown)
    if config.replica_of is not None:
        from minidb.replication._cli import PROMOTE_SIGNAL

        loop.add_signal_handler(PROMOTE_SIGNAL, server.request_promote)
    assert server.line_address is not None
    lines = [f"minidb listening on {server.line_address[0]}:{server.line_address[1]} (line)"]
    if server.resp_address is not None:
        host, port = server.resp_address
        lines.append(f"minidb listening on {host}:{port} (resp)")
    if server.metrics_address is not None:
        host, port = server.metrics_address
        lines.append(f"minidb listening on {host}:{port} (metrics)")
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    return await server.serve()
