"""``minidb client HOST:PORT [REQUEST...]``: one request, or an interactive prompt."""

from __future__ import annotations

import argparse
import sys
from typing import Any

PROMPT = "minidb> "


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "client",
        help="talk to a minidb server",
        description="Send one request (exit 1 if the reply is ERR), or, with no request, "
        "read requests from stdin one line at a time and print each reply.",
    )
    parser.add_argument("address", metavar="HOST:PORT")
    parser.add_argument("request", nargs=argparse.REMAINDER, help="e.g. SET users alice hello")
    parser.add_argument(
        "--attempts", type=int, default=1, help="connection attempts (exponential backoff)"
    )
    parser.set_defaults(handler=_client)


def _client(args: argparse.Namespace) -> int:
    from minidb.client import Backoff, SyncClient
    from minidb.protocol import Error, encode_reply

    host, sep, port_text = args.address.rpartition(":")
    if not sep or not port_text.isdigit():
        sys.stderr.write(f"minidb client: error: expected HOST:PORT, not {args.address!r}\n")
        return 2
    try:
        client = SyncClient(host or "127.0.0.1", int(port_text), backoff=Backoff(args.attempts))
    except (OSError, TimeoutError) as exc:
        sys.stderr.write(f"minidb client: error: cannot connect to {args.address}: {exc}\n")
        return 1
    with client:
        try:
            if args.request:
                reply = client.execute(" ".join(args.request))
                sys.stdout.write(encode_reply(reply).decode())
                return 1 if isinstance(reply, Error) else 0
            interactive = sys.stdin.isatty()
            while True:
                if interactive:
                    sys.stdout.write(PROMPT)
                    sys.stdout.flush()
                line = sys.stdin.readline()
                if not line:
                    return 0
                line = line.rstrip("\r\n")
                if not line.strip():
                    continue
                sys.stdout.write(encode_reply(client.execute(line)).decode())
                sys.stdout.flush()
        except (OSError, TimeoutError, ValueError) as exc:
            sys.stderr.write(f"minidb client: error: {exc}\n")
            return 1
