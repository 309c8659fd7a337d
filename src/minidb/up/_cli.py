"""``minidb up``: the server, the batch API with its web page and one worker, in one command.

Contract: prints one ``minidb listening on HOST:PORT (KIND)`` line per listener (line, resp,
metrics, batch), then ``web page: URL``, ``operator token: TOKEN`` and a curl example, all
flushed once everything listens; SIGINT or SIGTERM stops everything gracefully and exits 0; a
child that fails to start or dies exits 1 (after stopping the rest); bad options exit 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from minidb.up import _supervisor as defaults


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "up", help="run everything on this machine (server, batch API, web page, worker)",
        description="Start the minidb server, the batch API with its web page and one worker, "
        "with data under --data-dir; Ctrl-C stops them all.",
    )
    parser.add_argument("--data-dir", default=defaults.DEFAULT_DATA_DIR,
                        help=f"where everything is kept (default {defaults.DEFAULT_DATA_DIR})")
    parser.add_argument("--host", default=defaults.DEFAULT_HOST, help="address to listen on")
    parser.add_argument("--port", type=int, default=defaults.DEFAULT_PORT,
                        help=f"line protocol (default {defaults.DEFAULT_PORT}; 0: any free)")
    parser.add_argument("--resp-port", type=int, default=defaults.DEFAULT_RESP_PORT,
                        help=f"Redis protocol (default {defaults.DEFAULT_RESP_PORT})")
    parser.add_argument("--http-port", type=int, default=defaults.DEFAULT_HTTP_PORT,
                        help=f"batch API and web page (default {defaults.DEFAULT_HTTP_PORT})")
    parser.add_argument("--metrics-port", type=int, default=defaults.DEFAULT_METRICS_PORT,
                        help=f"Prometheus /metrics (default {defaults.DEFAULT_METRICS_PORT})")
    parser.add_argument("--store", default=None, metavar="URL",
                        help="object store of the batch tasks: s3://BUCKET/PREFIX (credentials "
                        "from the AWS_* variables); default file:DATA/objects")
    parser.add_argument("--s3-endpoint", default=None, metavar="URL",
                        help="S3-compatible endpoint of an s3:// store (MinIO, moto, R2)")
    parser.add_argument("--replicate-to", default=None, metavar="URL",
                        help="ship the server's log to s3://BUCKET/PREFIX or file:DIR "
                        "(minidb serve --replicate-to; docs/replication.md)")
    parser.add_argument("--ship-interval", type=float, default=None, metavar="SECONDS",
                        help="with --replicate-to: ship the open segment at least this often")
    parser.add_argument("--retain", default=None, metavar="WINDOW|N",
                        help="with --replicate-to: keep restore points for this window or count")
    parser.set_defaults(handler=_up)


def _up(args: Any) -> int:
    from minidb.errors import ConfigError
    from minidb.up import UpConfig, run_up

    try:
        config = UpConfig(
            data_dir=Path(args.data_dir), host=args.host, port=args.port,
            resp_port=args.resp_port, http_port=args.http_port,
            metrics_port=args.metrics_port, store=args.store,
            s3_endpoint=args.s3_endpoint, replicate_to=args.replicate_to,
            ship_interval=args.ship_interval, retain=args.retain,
        )
    except ConfigError as exc:
        sys.stderr.write(f"minidb up: error: {exc}\n")
        return 2
    return run_up(config)
