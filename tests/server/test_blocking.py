"""Blocking commands over real sockets: BLPOP and friends, their wake-ups, timeouts on the
virtual clock, CLIENT UNBLOCK, disconnects, the idle and request timeouts, durability."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from minidb.protocol._resp_client import encode_command
from minidb.server import Server, ServerConfig
from tests.server._clock import run_on_virtual_clock
from tests.server.conftest import IO_TIMEOUT_S, ServeFactory, ServerProcess

redis = pytest.importorskip("redis", reason="redis-py is not installed (pip install redis)")

WAIT_S = 5.0
"""Deadline for the server to reach a state a test waits for (blocked clients, a reply)."""


class Raw:
    """A blocking RESP client on a socket with a deadline on every call: bytes out, bytes in."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)
        self.buffer = b""

    def send(self, *commands: list[str | bytes]) -> None:
        self.sock.sendall(b"".join(encode_command(c) for c in commands))

    def read(self, expected: bytes) -> bytes:
        """Read until exactly ``expected`` arrived (fails on a timeout or other bytes)."""
        while len(self.buffer) < len(expected):
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.buffer += chunk
        got, self.buffer = self.buffer[: len(expected)], self.buffer[len(expected):]
        assert got == expected
        return got

    def nothing_yet(self, wait: float = 0.2) -> bool:
        """True if no byte arrives within ``wait`` seconds."""
        self.sock.settimeout(wait)
        try:
            data = self.sock.recv(1)
        except TimeoutError:
            return True
        finally:
            self.sock.settimeout(IO_TIMEOUT_S)
        self.buffer += data
        return False

    def close(self) -> None:
        self.sock.close()


def _blocked(client: Any) -> int:
    return int(client.info("clients")["blocked_clients"])


def _until_blocked(client: Any, count: int) -> None:
    """Wait (with a deadline) until the server counts ``count`` blocked clients."""
    deadline = time.monotonic() + WAIT_S
    while _blocked(client) != count:
        assert time.monotonic() < deadline, f"blocked_clients never reached {count}"
        time.sleep(0.01)


@pytest.fixture
def server(serve: ServeFactory) -> ServerProcess:
    return serve("--resp-port", "0")


def _port(server: ServerProcess) -> int:
    assert server.resp_port is not None
    return server.resp_port


def _redis(server: ServerProcess, **kw: Any) -> Any:
    return redis.Redis(port=_port(server), socket_timeout=IO_TIMEOUT_S, **kw)


def _pair(key: str, value: str) -> bytes:
    return f"*2\r\n${len(key)}\r\n{key}\r\n${len(value)}\r\n{value}\r\n".encode()


# -- wake-ups ------------------------------------------------------------------------------


def test_blpop_serves_three_waiters_in_the_order_they_blocked(server: ServerProcess) -> None:
    """One push of three elements: the first to block gets the first, and so on."""
    admin = _redis(server)
    waiters = []
    for n in range(3):
        raw = Raw(_port(server))
        raw.send(["BLPOP", "q", "0"])
        _until_blocked(admin, n + 1)
        waiters.append(raw)
    assert admin.rpush("q", "a", "b", "c") == 3
    for raw, value in zip(waiters, "abc", strict=True):
        raw.read(_pair("q", value))
    assert admin.llen("q") == 0 and _blocked(admin) == 0


def test_blpop_on_several_keys_takes_the_first_non_empty_in_argument_order(
    server: ServerProcess,
) -> None:
    """Both keys filled by one EXEC: the waiter is served from the key it named first."""
    admin = _redis(server)
    raw = Raw(_port(server))
    raw.send(["BLPOP", "a", "b", "c", "0"])
    _until_blocked(admin, 1)
    pipe = admin.pipeline(transaction=True)
    pipe.rpush("c", "from-c")
    pipe.rpush("b", "from-b")
    assert pipe.execute() == [1, 1]
    raw.read(_pair("b", "from-b"))
    assert admin.lrange("c", 0, -1) == [b"from-c"]


def test_push_inside_multi_wakes_only_after_exec(server: ServerProcess) -> None:
    """A push popped again in the same transaction wakes nobody: the waiter sees the list as
    EXEC left it (empty), and is served by the next push."""
    admin = _redis(server)
    raw = Raw(_port(server))
    raw.send(["BLPOP", "q", "0"])
    _until_blocked(admin, 1)
    pipe = admin.pipeline(transaction=True)
    pipe.rpush("q", "x")
    pipe.lpop("q")
    assert pipe.execute() == [1, b"x"]
    assert raw.nothing_yet()
    admin.rpush("q", "y")
    raw.read(_pair("q", "y"))


def test_blocking_command_inside_multi_never_blocks(server: ServerProcess) -> None:
    """In MULTI/EXEC an empty key answers at once: null array, BLMOVE's null bulk."""
    raw = Raw(_port(server))
    raw.send(["MULTI"], ["BLPOP", "q", "0"], ["BLMOVE", "q", "d", "LEFT", "LEFT", "0"],
             ["BZPOPMIN", "z", "0"], ["EXEC"])  # fmt: skip
    raw.read(b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n*-1\r\n$-1\r\n*-1\r\n")


def test_blmove_moves_to_another_list_when_woken(server: ServerProcess) -> None:
    """BLMOVE src dst: woken by a push onto src, the element lands on dst's chosen side."""
    admin = _redis(server)
    admin.rpush("dst", "old")
    raw = Raw(_port(server))
    raw.send(["BLMOVE", "src", "dst", "RIGHT", "LEFT", "0"])
    _until_blocked(admin, 1)
    admin.rpush("src", "e1", "e2")
    raw.read(b"$2\r\ne2\r\n")
    assert admin.lrange("dst", 0, -1) == [b"e2", b"old"]
    assert admin.lrange("src", 0, -1) == [b"e1"]


def test_a_wrong_type_on_the_key_keeps_the_waiter_waiting(server: ServerProcess) -> None:
    """SET over a waited key wakes nobody (Redis 7.2); a list later does."""
    admin = _redis(server)
    raw = Raw(_port(server))
    raw.send(["BLPOP", "k", "0"])
    _until_blocked(admin, 1)
    admin.set("k", "string")
    assert raw.nothing_yet() and _blocked(admin) == 1
    admin.delete("k")
    admin.lpush("k", "v")
    raw.read(_pair("k", "v"))


def test_pipelined_commands_after_a_blocked_one_wait_for_it(server: ServerProcess) -> None:
    """A blocked connection runs nothing else: PING after BLPOP is answered after it."""
    admin = _redis(server)
    raw = Raw(_port(server))
    raw.send(["BLPOP", "q", "0"], ["PING"], ["LLEN", "q"])
    _until_blocked(admin, 1)
    assert raw.nothing_yet()
    admin.rpush("q", "x", "y")
    raw.read(_pair("q", "x") + b"+PONG\r\n:1\r\n")


def test_bzpopmin_bzpopmax_bzmpop_wake_on_zadd(server: ServerProcess) -> None:
    """BZPOPMIN waits for a ZADD and answers [key, member, score]; BZMPOP [key, pairs]."""
    admin = _redis(server)
    raw = Raw(_port(server))
    raw.send(["BZPOPMIN", "z1", "z2", "0"])
    _until_blocked(admin, 1)
    admin.zadd("z2", {"b": 2, "a": 1})
    raw.read(b"*3\r\n$2\r\nz2\r\n$1\r\na\r\n$1\r\n1\r\n")
    raw.send(["BZPOPMAX", "z2", "0"])
    raw.read(b"*3\r\n$2\r\nz2\r\n$1\r\nb\r\n$1\r\n2\r\n")
    raw.send(["BZMPOP", "0", "2", "z1", "z2", "MAX", "COUNT", "5"])
    _until_blocked(admin, 1)
    admin.zadd("z1", {"c": 3, "d": 4})
    raw.read(b"*2\r\n$2\r\nz1\r\n*2\r\n*2\r\n$1\r\nd\r\n$1\r\n4\r\n"
             b"*2\r\n$1\r\nc\r\n$1\r\n3\r\n")


def test_redis_py_blocking_pops_with_timeouts(server: ServerProcess) -> None:
    """redis-py's blpop / brpop / bzpopmin / brpoplpush: a timeout gives None, a push in
    time the element."""
    admin = _redis(server)
    client = _redis(server)
    assert client.blpop(["none"], timeout=0.1) is None
    assert client.brpop(["none"], timeout=0.1) is None
    assert client.bzpopmin(["none"], timeout=0.1) is None
    assert client.brpoplpush("none", "dst", timeout=0.1) is None
    got: dict[str, Any] = {}

    def pop() -> None:
        got["brpop"] = client.brpop(["l1", "l2"], timeout=5)

    thread = threading.Thread(target=pop)
    thread.start()
    _until_blocked(admin, 1)
    admin.rpush("l2", "a", "b")
    thread.join(WAIT_S)
    assert got["brpop"] == (b"l2", b"b")
    admin.zadd("z", {"m": 1.5})
    assert client.bzpopmin("z", timeout=1) == (b"z", b"m", 1.5)
    assert client.blmpop(1, 1, "l2", direction="LEFT") == [b"l2", [b"a"]]


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "error"),
    [(["BLPOP", "q", "-1"], b"-ERR timeout is negative\r\n"),
     (["BLPOP", "q", "soon"], b"-ERR timeout is not a float or out of range\r\n"),
     (["BRPOP", "q", "1e400"], b"-ERR timeout is out of range\r\n"),
     (["BRPOP", "q", "-inf"], b"-ERR timeout is negative\r\n"),
     (["BLPOP", "q"], b"-ERR wrong number of arguments for 'blpop' command\r\n"),
     (["BLMOVE", "a", "b", "LEFT", "LEFT"],
      b"-ERR wrong number of arguments for 'blmove' command\r\n"),
     (["BLMOVE", "a", "b", "UP", "LEFT", "0"], b"-ERR syntax error\r\n"),
     (["BLMPOP", "0", "0", "a", "LEFT"], b"-ERR numkeys should be greater than 0\r\n"),
     (["BLMPOP", "-1", "1", "a", "up"], b"-ERR syntax error\r\n"),  # before the timeout
     (["BLMPOP", "-1", "1", "a", "LEFT"], b"-ERR timeout is negative\r\n"),
     (["BZMPOP", "-1", "1", "a", "UP"], b"-ERR syntax error\r\n"),
     (["BZMPOP", "-1", "1", "a", "MIN"], b"-ERR timeout is negative\r\n"),
     (["BZMPOP", "0", "1", "a", "MIN", "COUNT", "0"],
      b"-ERR count should be greater than 0\r\n"),
     (["BZPOPMIN", "s", "0"],
      b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
     (["CLIENT", "UNBLOCK", "x"], b"-ERR value is not an integer or out of range\r\n"),
     (["CLIENT", "UNBLOCK", "1", "LATER"],
      b"-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n")],
)  # fmt: skip
def test_blocking_commands_refuse_bad_arguments_in_redis_words(
    server: ServerProcess, command: list[str], error: bytes
) -> None:
    raw = Raw(_port(server))
    raw.send(["SET", "s", "v"])
    raw.read(b"+OK\r\n")
    raw.send(command)
    raw.read(error)


# -- ending a wait ------------------------------------------------------------------------------


def test_client_unblock_timeout_and_error(server: ServerProcess) -> None:
    """CLIENT UNBLOCK: 1 and the timeout reply, 1 and the UNBLOCKED error, 0 when the client
    is not blocked (or does not exist)."""
    admin = _redis(server)
    raw = Raw(_port(server))
    raw.send(["CLIENT", "ID"])
    line = b""
    while not line.endswith(b"\r\n"):
        line += raw.sock.recv(1)
    client_id = int(line[1:-2])
    assert admin.client_unblock(client_id) is False
    raw.send(["BLPOP", "q", "0"])
    _until_blocked(admin, 1)
    assert b"flags=b" in admin.execute_command("CLIENT", "LIST", "ID", client_id)
    assert admin.client_unblock(client_id) is True
    raw.read(b"*-1\r\n")
    raw.send(["BZPOPMAX", "z", "0"])
    _until_blocked(admin, 1)
    assert admin.client_unblock(client_id, error=True) is True
    raw.read(b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n")
    assert admin.client_unblock(client_id) is False and admin.client_unblock(999999) is False
    admin.rpush("q", "kept")
    assert admin.lrange("q", 0, -1) == [b"kept"]  # nobody still waits on it


@pytest.mark.parametrize("how", ["close", "shutdown-write"])
def test_a_blocked_client_that_leaves_leaves_no_waiter(server: ServerProcess, how: str) -> None:
    """A client gone while blocked (closed, or only its sending side shut) is forgotten: the
    count drops to 0 and a later push stays in the list."""
    admin = _redis(server)
    raws = [Raw(_port(server)) for _ in range(3)]
    for n, raw in enumerate(raws):
        raw.send(["BLPOP", "q", "other", "0"])
        _until_blocked(admin, n + 1)
    for raw in raws:
        if how == "close":
            raw.close()
        else:
            raw.sock.shutdown(socket.SHUT_WR)
    _until_blocked(admin, 0)
    admin.rpush("q", "x")
    assert admin.lrange("q", 0, -1) == [b"x"]
    for raw in raws:
        raw.close()


def test_shutdown_closes_a_blocked_client_without_waiting_for_the_grace(
    serve: ServeFactory,
) -> None:
    """SIGTERM with a client blocked forever: it is closed (no reply) and the server exits
    well before its 60 s grace period."""
    server = serve("--resp-port", "0", "--grace", "60")
    admin = _redis(server)
    raw = Raw(_port(server))
    raw.send(["BLPOP", "q", "0"])
    _until_blocked(admin, 1)
    server.terminate()
    assert server.wait(timeout=20) == 0
    raw.read(b"")
    assert raw.sock.recv(1) == b""


# -- timers on the virtual clock -------------------------------------------------------------


def _on_virtual_clock(
    tmp_path: Path, body: Callable[[int, Server], Awaitable[Any]], **config: Any
) -> Any:
    """Run ``body(resp_port, server)`` against an in-process server on the virtual clock."""

    async def main() -> Any:
        server = Server(ServerConfig(port=0, resp_port=0, data_dir=tmp_path, **config))
        await server.start()
        assert server.resp_address is not None
        try:
            return await body(server.resp_address[1], server)
        finally:
            server.request_shutdown()
            await server.serve()

    return run_on_virtual_clock(main)


async def _open(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def _ask(port: int, *command: str) -> bytes:
    reader, writer = await _open(port)
    writer.write(encode_command(list(command)))
    reply = await reader.read(65536)
    writer.close()
    return reply


def test_blpop_times_out_exactly_on_the_loop_clock(tmp_path: Path) -> None:
    """BLPOP q 1.5 answers the null array 1.5 s after it blocked (RESP3: ``_``), past the
    2 s request timeout for the longer one without ERR busy."""

    async def body(port: int, server: Server) -> list[tuple[float, bytes]]:
        loop = asyncio.get_running_loop()
        reader, writer = await _open(port)
        seen = []
        for command in (["BLPOP", "q", "1.5"], ["HELLO", "3"], ["BRPOP", "q", "7"]):
            started = loop.time()
            writer.write(encode_command(command))
            reply = await reader.read(65536)
            seen.append((loop.time() - started, reply[:4]))
        writer.close()
        return seen

    seen = _on_virtual_clock(tmp_path, body)
    assert seen[0][1] == b"*-1\r" and seen[0][0] == pytest.approx(1.5, abs=0.01)
    assert seen[2][1] == b"_\r\n" and seen[2][0] == pytest.approx(7.0, abs=0.01)


def test_a_blocked_client_survives_the_idle_timeout(tmp_path: Path) -> None:
    """With --idle-timeout 1, a client blocked 10 s is still there to get its element; once
    answered, it is idle again and closed a second later."""

    async def body(port: int, server: Server) -> tuple[bytes, float, bytes]:
        loop = asyncio.get_running_loop()
        reader, writer = await _open(port)
        writer.write(encode_command(["BLPOP", "q", "0"]))
        await asyncio.sleep(10)
        assert await _ask(port, "RPUSH", "q", "late") == b":1\r\n"
        reply = await reader.read(65536)
        answered = loop.time()
        after = await reader.read(65536)  # b"": the idle timer closes it
        return reply, loop.time() - answered, after

    reply, closed_after, after = _on_virtual_clock(tmp_path, body, idle_timeout=1.0)
    assert reply == _pair("q", "late") and after == b""
    assert closed_after == pytest.approx(1.0, abs=0.01)


# -- durability -------------------------------------------------------------------------------


def test_a_woken_pop_is_not_answered_before_its_sync(serve: ServeFactory) -> None:
    """Under --fsync always, the woken BLPOP's reply waits for the group's sync: when that
    sync fails, the waiter hears ``not logged`` (never the element) and the push is undone."""
    server = serve("--resp-port", "0", env={"MINIDB_FAILPOINTS": "wal.sync=error(EIO, 0)"})
    admin = _redis(server)
    raw = Raw(_port(server))
    raw.send(["BLPOP", "q", "0"])
    _until_blocked(admin, 1)
    with pytest.raises(redis.ResponseError, match="not logged"):
        admin.rpush("q", "x")
    expected = b"-ERR not logged: "
    raw.read(expected)
    assert admin.llen("q") == 0


def test_kill_after_a_woken_blpop_keeps_the_pop(serve: ServeFactory, tmp_path: Path) -> None:
    """kill -9 right after the woken BLPOP's reply: after restart the element is gone from
    the list (the pop was logged with the push), never served twice."""
    data = tmp_path / "data"
    server = serve("--resp-port", "0", data_dir=data)
    admin = _redis(server)
    raw = Raw(_port(server))
    raw.send(["BRPOP", "q", "0"])
    _until_blocked(admin, 1)
    admin.rpush("q", "first", "second")
    raw.read(_pair("q", "second"))
    os.kill(server.proc.pid, 9)
    server.proc.wait(timeout=IO_TIMEOUT_S)
    again = serve("--resp-port", "0", data_dir=data)
    assert _redis(again).lrange("q", 0, -1) == [b"first"]


def test_command_lists_the_blocking_commands(server: ServerProcess) -> None:
    """COMMAND INFO knows them with Redis's arity and the blocking flag."""
    admin = _redis(server)
    names = ("blpop", "brpop", "blmove", "brpoplpush", "blmpop", "bzpopmin", "bzpopmax",
             "bzmpop")
    info = admin.execute_command("COMMAND", "INFO", *names, "client|unblock")
    assert [info[name]["arity"] for name in names] == [-3, -3, 6, 4, -5, -3, -3, -5]
    assert all("blocking" in info[name]["flags"] for name in names)
    assert info["client|unblock"]["arity"] == -3


def test_blocked_clients_hold_no_mailbox_room(serve: ServeFactory) -> None:
    """With --mailbox 2, four clients blocked forever leave the mailbox free: another
    client's pipeline of 100 commands is served."""
    server = serve("--resp-port", "0", "--mailbox", "2")
    admin = _redis(server)
    raws = [Raw(_port(server)) for _ in range(4)]
    for n, raw in enumerate(raws):
        raw.send(["BLPOP", f"q{n}", "0"])
        _until_blocked(admin, n + 1)
    pipe = admin.pipeline(transaction=False)
    for i in range(100):
        pipe.set(f"k{i}", i)
    assert pipe.execute() == [True] * 100
    assert admin.get("k99") == b"99" and _blocked(admin) == 4


def test_a_replica_refuses_blocking_pops_as_writes() -> None:
    """The owner in the replica role answers a blocking pop READONLY and registers nothing."""
    from minidb.server.resp._executor import BlockingCall, OwnerSide, RespExecutor, RespRequest
    from minidb.server.resp._types import Forward
    from minidb.store import UNBOUNDED_OUTPUT, Batch, MemoryLog, StoreOwner, StoreState

    class Sink:
        def flush(self) -> None:
            pass

        def output_room(self) -> int:
            return UNBOUNDED_OUTPUT

    side = OwnerSide()
    request = RespRequest(BlockingCall(Forward([b"BLPOP", b"q", b"0"], b"0", 2, side)), side)
    owner = StoreOwner(StoreState(), MemoryLog(), mailbox=10, replica=True)
    batch = Batch([request], Sink(), 0.0, executor=RespExecutor())
    owner.commit([batch])
    assert batch.replies == [b"-READONLY You can't write against a read only replica.\r\n"]
    assert len(owner.blocking) == 0 and not batch.held


def test_many_waiters_and_pushers_get_every_element_exactly_once(
    server: ServerProcess,
) -> None:
    """Eight clients looping BLPOP/BRPOP/BLMOVE on three keys while two push 300 elements:
    every element is received exactly once, and nobody is left blocked."""
    keys = ["k1", "k2", "k3"]
    total = 300
    got: list[bytes] = []
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def consume(n: int) -> None:
        client = _redis(server)
        try:
            while not stop.is_set():
                if n % 3 == 0:
                    item = client.blpop(keys, timeout=0.05)
                    value = item[1] if item else None
                elif n % 3 == 1:
                    item = client.brpop(keys[::-1], timeout=0.05)
                    value = item[1] if item else None
                else:
                    moved = client.blmove("k2", "k3", 0.05, "LEFT", "RIGHT")
                    value = None if moved is None else b"moved"
                if value is not None and value != b"moved":
                    with lock:
                        got.append(value)
        except BaseException as exc:  # reported below, with the thread's view
            errors.append(exc)

    def produce(n: int) -> None:
        client = _redis(server)
        for i in range(n, total, 2):
            client.rpush(keys[i % 3], f"e{i}")

    consumers = [threading.Thread(target=consume, args=(n,)) for n in range(8)]
    producers = [threading.Thread(target=produce, args=(n,)) for n in range(2)]
    for thread in consumers + producers:
        thread.start()
    for thread in producers:
        thread.join(WAIT_S * 4)
    admin = _redis(server)
    deadline = time.monotonic() + WAIT_S * 4
    while len(got) < total and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    for thread in consumers:
        thread.join(WAIT_S)
    assert not errors, errors
    assert sorted(got) == sorted(f"e{i}".encode() for i in range(total))
    _until_blocked(admin, 0)
    assert all(admin.llen(key) == 0 for key in keys)
