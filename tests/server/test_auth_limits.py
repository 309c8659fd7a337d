"""What a client without the password can make the server hold, on both listeners, over real
sockets: Redis's limits before AUTH on RESP (CVE-2021-32675: ``*11`` and ``$16385`` are refused
with Redis's words and a close), a short line limit on the line port, and both lifted by AUTH.

With ``redis-server`` installed, the RESP cases are also sent to a real Redis and the bytes
compared (skipped without it).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from minidb.protocol import encode_command
from minidb.server._line_auth import MAX_UNAUTHENTICATED_LINE_BYTES
from tests.server.conftest import IO_TIMEOUT_S, LineClient, ServeFactory, ServerProcess

PASSWORD = "pw"
QUIET_S = 0.5
"""How long a connection that owes nothing more must stay silent to count as left open."""
OPEN = b"<open>"
EOF = b"<eof>"


@pytest.fixture
def gated(serve: ServeFactory) -> ServerProcess:
    """A server with a password and its RESP listener."""
    return serve("--resp-port", "0", "--requirepass", PASSWORD)


def exchange(address: str | tuple[str, int], data: bytes, quiet: float = QUIET_S) -> bytes:
    """Send ``data`` and read what comes back until EOF (ends in ``<eof>``) or ``quiet``
    seconds of silence (ends in ``<open>``)."""
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(IO_TIMEOUT_S)
        sock.connect(address)
        sock.sendall(data)
        sock.settimeout(quiet)
        out = b""
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except TimeoutError:
                return out + OPEN
            except ConnectionResetError:
                return out + EOF
            if not chunk:
                return out + EOF
            out += chunk


def resp_address(server: ServerProcess) -> tuple[str, int]:
    assert server.resp_port is not None
    return ("127.0.0.1", server.resp_port)


AUTH = encode_command(["AUTH", PASSWORD])
MANY_ARGS = encode_command(["MSET", *(["k", "v"] * 5), "k11", "v"])  # 12 arguments
BIG_VALUE = encode_command(["SET", "big", "x" * 16385])

# -- RESP ------------------------------------------------------------------------------------


def test_resp_more_than_ten_arguments_refused_before_auth_served_after(
    gated: ServerProcess,
) -> None:
    """``*12`` before AUTH: Redis's ``unauthenticated multibulk length`` and EOF, without
    waiting for the arguments; after AUTH (pipelined with it) the same command is served."""
    refused = b"-ERR Protocol error: unauthenticated multibulk length\r\n" + EOF
    assert exchange(resp_address(gated), b"*12\r\n") == refused
    assert exchange(resp_address(gated), MANY_ARGS) == refused
    assert exchange(resp_address(gated), AUTH + MANY_ARGS) == b"+OK\r\n+OK\r\n" + OPEN


def test_resp_bulk_over_16384_bytes_refused_before_auth_served_after(
    gated: ServerProcess,
) -> None:
    """``$16385`` before AUTH: Redis's ``unauthenticated bulk length`` and EOF; 16384 bytes
    are within the limit (answered NOAUTH, left open); after AUTH the value is stored."""
    assert exchange(resp_address(gated), b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$16385\r\n") == (
        b"-ERR Protocol error: unauthenticated bulk length\r\n" + EOF
    )
    within = encode_command(["SET", "k", "x" * 16384])
    assert exchange(resp_address(gated), within) == b"-NOAUTH Authentication required.\r\n" + OPEN
    strlen = encode_command(["STRLEN", "big"])
    assert exchange(resp_address(gated), AUTH + BIG_VALUE + strlen) == (
        b"+OK\r\n+OK\r\n:16385\r\n" + OPEN
    )


def test_resp_reset_brings_the_limits_back(gated: ServerProcess) -> None:
    """RESET forgets the AUTH; a command read after it is held to the limits again."""
    with socket.create_connection(resp_address(gated), timeout=IO_TIMEOUT_S) as sock:
        sock.sendall(AUTH + encode_command(["RESET"]))
        expected = b"+OK\r\n+RESET\r\n"
        got = b""
        while len(got) < len(expected):
            got += sock.recv(1 << 16)
        assert got == expected
        sock.sendall(MANY_ARGS)
        got = b""
        while chunk := sock.recv(1 << 16):
            got += chunk
    assert got == b"-ERR Protocol error: unauthenticated multibulk length\r\n"


# -- the line port ---------------------------------------------------------------------------


def line_client(server: ServerProcess) -> LineClient:
    return server.client()


def test_line_long_line_refused_before_auth_served_after(gated: ServerProcess) -> None:
    """A complete line over the limit before AUTH: its error, then EOF; after AUTH the same
    line is served (the line protocol's own 8 KiB limit applies)."""
    line = "SET 0 k " + "x" * MAX_UNAUTHENTICATED_LINE_BYTES
    client = line_client(gated)
    assert client.request(line) == "ERR line too long before auth"
    assert client.at_eof()
    client = line_client(gated)
    assert client.request(f"AUTH {PASSWORD}") == "OK"
    assert client.request(line) == "OK"
    assert client.request("GET 0 k") == "VALUE " + line[8:]


def test_line_before_auth_an_unfinished_long_line_is_refused_and_closed(
    gated: ServerProcess,
) -> None:
    """Bytes without a newline past the limit before AUTH are not buffered waiting for one:
    the error comes at once, after the replies to the lines before it, then EOF."""
    client = line_client(gated)
    client.send(b"GET 0 k\n" + b"x" * (4 * MAX_UNAUTHENTICATED_LINE_BYTES))
    assert client.read_line() == b"ERR auth required"
    assert client.read_line() == b"ERR line too long before auth"
    assert client.at_eof()


def test_line_auth_verb_is_case_insensitive(gated: ServerProcess) -> None:
    """``auth pw`` authenticates, as every other verb is case-insensitive."""
    client = line_client(gated)
    assert client.request(f"auth {PASSWORD}") == "OK"
    assert client.request("SET 0 k v") == "OK"
    other = line_client(gated)
    assert other.request(f"Auth {PASSWORD}") == "OK"


# -- the same bytes against a real redis-server ----------------------------------------------


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server with the same password on a Unix socket; skipped if absent."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    directory: Path = tmp_path_factory.mktemp("redis")
    path = str(directory / "redis.sock")
    proc = subprocess.Popen(
        [binary, "--port", "0", "--unixsocket", path, "--requirepass", PASSWORD,
         "--save", "", "--appendonly", "no", "--dir", str(directory)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + IO_TIMEOUT_S
    while not Path(path).exists():
        assert proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
        time.sleep(0.02)
    yield path
    proc.kill()
    proc.wait(timeout=IO_TIMEOUT_S)


SAME_AS_REDIS = [
    b"*11\r\n",
    b"*10\r\n",
    b"*12\rx",
    b"*2147483648\r\n",
    b"*1\r\n$16385\r\n",
    b"*1\r\n$16384\r\n",
    b"*1\r\n$536870913\r\n",
    MANY_ARGS,
    BIG_VALUE,
    AUTH + MANY_ARGS,
    AUTH + b"*1\r\n$16385\r\n" + b"x" * 16385 + b"\r\n",
    b"*x\r\r",
    b"*1\rx$4\r\nPING\r\n",
    b"*1\r\n$4\rxPING\r\n",
    AUTH + b"*1\rx$4\r\nPING\r\n",
    AUTH + b"*1\r\n$4\rxPING\r\n",
    b"*1\r\n$x\r\r",
    b"*1\r\nx\r\r",
    b"*1\r\r\n$4\r\nPING\r\n",
    AUTH + b"*-1\r\r\nPING\r\n",
    b"EXEC\r\n",
    AUTH + b"MULTI\r\nEXEC x\r\n",
    AUTH + b"EXEC x\r\n",
]


@pytest.mark.parametrize("data", SAME_AS_REDIS, ids=[repr(d[:48]) for d in SAME_AS_REDIS])
def test_resp_bytes_match_a_real_redis_server(
    gated: ServerProcess, redis_server: str, data: bytes
) -> None:
    """minidb answers these inputs byte for byte as redis-server does, and closes (or not)
    as it does."""
    assert exchange(resp_address(gated), data) == exchange(redis_server, data)
