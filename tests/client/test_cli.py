"""``minidb client``: one request with an exit status, or a prompt fed line by line."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

TIMEOUT_S = 10.0


def _client(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "minidb", "client", *args],
        input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S,
    )


def test_cli_one_request_prints_reply_and_exits_zero(serve: Any) -> None:
    """A request on the command line prints its reply; OK exits 0."""
    address = f"127.0.0.1:{serve().port}"
    result = _client(address, "SET", "users", "alice", "hello")
    assert (result.returncode, result.stdout) == (0, "OK\n")
    assert _client(address, "GET", "users", "alice").stdout == "VALUE hello\n"


def test_cli_error_reply_exits_one(serve: Any) -> None:
    """An ERR reply exits 1."""
    result = _client(f"127.0.0.1:{serve().port}", "PING")
    assert (result.returncode, result.stdout) == (1, "ERR unknown verb PING\n")


def test_cli_prompt_answers_each_line(serve: Any) -> None:
    """Without a request, each stdin line is sent and its reply printed."""
    result = _client(f"127.0.0.1:{serve().port}", stdin="SET b k v\nGET b k\n\nDEL b k\n")
    assert (result.returncode, result.stdout) == (0, "OK\nVALUE v\nOK\n")


def test_cli_unreachable_server_exits_one() -> None:
    """A refused connection is a one-line error and exit 1."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = _client(f"127.0.0.1:{port}", "GET", "b", "k")
    assert result.returncode == 1 and "cannot connect" in result.stderr


def test_cli_bad_address_exits_two() -> None:
    """An address without a port is a usage error."""
    assert _client("localhost", "GET", "b", "k").returncode == 2
