"""Lua scripting through ``minidb serve``'s RESP listener: redis-py's eval / evalsha /
register_script / Lock, SCRIPT LOAD/EXISTS/FLUSH, NOSCRIPT; a script's writes as one log
record across a kill -9; the time limit's rollback; replies diffed against a real
``redis-server`` (skipped without it)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import minidb.runtime
from minidb.protocol import encode_command
from minidb.server.resp._executor import OwnerSide, RespExecutor
from minidb.server.resp._types import Forward
from minidb.store import (
    UNBOUNDED_OUTPUT,
    Batch,
    MemoryLog,
    OpJournal,
    Session,
    StoreOwner,
    StoreState,
    execute,
)
from tests.server.conftest import IO_TIMEOUT_S, ServeFactory, ServerProcess
from tests.server.test_containers_vs_redis import RedisServer
from tests.server.test_redis_clients import drain_stderr

redis = pytest.importorskip("redis", reason="redis-py is not installed (pip install redis)")

KEYS_PER_SCRIPT = 200
"""Keys the all-or-nothing script writes (more than one record's worth of small ops)."""


class RawResp:
    """One RESP connection, one command at a time, the reply's bytes as sent."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)

    raw = RedisServer.raw
    """The reply's bytes (exactly one reply): redis-server's helper, over this socket."""

    def close(self) -> None:
        self.sock.close()


def _client(server: ServerProcess) -> redis.Redis:
    assert server.resp_port is not None
    return redis.Redis(port=server.resp_port, socket_timeout=IO_TIMEOUT_S)


@pytest.fixture
def resp(serve: ServeFactory) -> ServerProcess:
    return drain_stderr(serve("--resp-port", "0", "--lua-time-limit", "300"))


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.close()


def test_scripting_redis_py_eval_evalsha_and_script(resp: ServerProcess) -> None:
    """eval, evalsha, SCRIPT LOAD/EXISTS/FLUSH and NOSCRIPT as redis-py sees them."""
    r = _client(resp)
    assert r.eval("return redis.call('SET', KEYS[1], ARGV[1])", 1, "k", "v") == b"OK"
    assert r.get("k") == b"v"
    sha = r.script_load("return redis.call('GET', KEYS[1])")
    assert r.evalsha(sha, 1, "k") == b"v"
    assert r.script_exists(sha, "0" * 40) == [True, False]
    assert r.script_flush() is True
    with pytest.raises(redis.exceptions.NoScriptError, match="No matching script"):
        r.evalsha(sha, 1, "k")
    with pytest.raises(redis.exceptions.ResponseError, match="Number of keys can't be negative"):
        r.eval("return 1", -1)


def test_scripting_register_script_reloads_after_flush(resp: ServerProcess) -> None:
    """redis-py's Script: EVALSHA, and on NOSCRIPT a SCRIPT LOAD and again."""
    r = _client(resp)
    add = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    assert add(keys=["n"], args=[5]) == 5
    r.script_flush()
    assert add(keys=["n"], args=[5]) == 10


def test_scripting_redis_py_lock(resp: ServerProcess) -> None:
    """redis.lock.Lock: acquire, extend, reacquire and release are Lua scripts."""
    r = _client(resp)
    lock = r.lock("resource", timeout=10)
    assert lock.acquire(blocking=False)
    assert not r.lock("resource", timeout=10).acquire(blocking=False)
    assert lock.extend(5)
    assert lock.reacquire()
    assert lock.owned()
    other = r.lock("resource")
    other.local.token = b"not-the-owner"
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        other.release()
    lock.release()
    assert r.exists("resource") == 0


def test_scripting_eval_in_multi_and_command_table(resp: ServerProcess) -> None:
    """EVAL inside MULTI/EXEC; COMMAND INFO and INFO commandstats know the commands."""
    r = _client(resp)
    pipe = r.pipeline(transaction=True)
    pipe.set("t", 1)
    pipe.eval("return redis.call('INCR', 't')", 0)
    assert pipe.execute() == [True, 2]
    raw = RawResp(resp.resp_port or 0)
    try:
        info = raw.raw([b"COMMAND", b"INFO", b"eval", b"evalsha_ro", b"script"])
        assert b"eval" in info and b"evalsha_ro" in info and b"script" in info
        assert b"cmdstat_eval:" in raw.raw([b"INFO", b"commandstats"])
    finally:
        raw.close()


def test_scripting_time_limit_rolls_back_across_restart(
    serve: ServeFactory, tmp_path: Path
) -> None:
    """A script past --lua-time-limit answers an error, and neither the store nor its log
    (after kill -9 and restart) keeps anything it wrote."""
    data = tmp_path / "data"
    server = drain_stderr(serve("--resp-port", "0", "--lua-time-limit", "100", data_dir=data))
    r = _client(server)
    r.set("kept", "old")
    with pytest.raises(redis.exceptions.ResponseError, match="Script killed by time limit"):
        r.eval("redis.call('SET', 'kept', 'new') redis.call('SET', 'fresh', 'x') "
               "while true do end", 0)
    assert r.get("kept") == b"old" and r.get("fresh") is None
    assert r.eval("return 1", 0) == 1  # the next script runs
    server.kill()
    again = drain_stderr(serve("--resp-port", "0", data_dir=data))
    r = _client(again)
    assert r.get("kept") == b"old" and r.get("fresh") is None


def test_scripting_writes_are_one_record_across_kill_9(
    serve: ServeFactory, tmp_path: Path
) -> None:
    """A script's writes are one log record: acknowledged ones all survive kill -9; one
    killed before its reply is there whole or not at all."""
    data = tmp_path / "data"
    body = (
        "for i = 1, tonumber(ARGV[1]) do redis.call('SET', KEYS[1] .. i, ARGV[2]) end "
        "return redis.call('DBSIZE')"
    )
    server = drain_stderr(serve("--resp-port", "0", data_dir=data))
    r = _client(server)
    assert r.eval(body, 1, "a:", KEYS_PER_SCRIPT, "x") == KEYS_PER_SCRIPT
    # The second one is sent and the server killed without waiting for the reply.
    raw = RawResp(server.resp_port or 0)
    raw.sock.sendall(encode_command([b"EVAL", body.encode(), b"1", b"b:",
                                     str(KEYS_PER_SCRIPT).encode(), b"y"]))
    server.kill()
    raw.close()
    again = drain_stderr(serve("--resp-port", "0", data_dir=data))
    r = _client(again)
    assert len(r.keys("a:*")) == KEYS_PER_SCRIPT
    assert len(r.keys("b:*")) in (0, KEYS_PER_SCRIPT)


def test_scripting_writes_refused_where_writes_are() -> None:
    """EVAL/EVALSHA count as writes (a replica or a failed log refuses them whole, with the
    owner's READONLY / read-only reply); EVAL_RO and EVALSHA_RO do not."""
    executor = RespExecutor()
    for name, write in [(b"EVAL", True), (b"evalsha", True), (b"EVAL_RO", False),
                        (b"EVALSHA_RO", False), (b"SCRIPT", False)]:
        assert executor.is_write(Forward([name, b"return 1", b"0"], b"0", 2)) is write, name


def test_scripting_on_a_replica_owner() -> None:
    """A replica's owner answers EVAL with READONLY and runs EVAL_RO (its reads only)."""
    state = StoreState()
    execute(state.keyspace, Session(), [b"SET", b"k", b"v"], OpJournal(), 0)
    owner = StoreOwner(state, MemoryLog(), mailbox=16, replica=True)
    side = OwnerSide()
    requests = [
        Forward([b"EVAL", b"return redis.call('SET', 'k', 'w')", b"0"], b"0", 2, side),
        Forward([b"EVAL_RO", b"return redis.call('GET', KEYS[1])", b"1", b"k"], b"0", 2, side),
        Forward([b"EVAL_RO", b"return redis.call('DEL', 'k')", b"0"], b"0", 2, side),
    ]
    batch = Batch(list(requests), _Sink(), deadline=0.0, executor=RespExecutor())

    async def serve_one_batch() -> None:
        task = asyncio.create_task(owner.run())
        owner.mailbox.put_nowait(batch)
        owner.close()
        async with asyncio.timeout(IO_TIMEOUT_S):
            await task

    minidb.runtime.run(serve_one_batch())
    assert batch.replies is not None
    refused, read, write = batch.replies
    assert refused == b"-READONLY You can't write against a read only replica.\r\n"
    assert read == b"$1\r\nv\r\n"
    assert write.startswith(b"-ERR Write commands are not allowed from read-only scripts.")


class _Sink:
    """A reply sink with unbounded room (the owner's view of a connection)."""

    def flush(self) -> None:
        pass

    def output_room(self) -> int:
        return UNBOUNDED_OUTPUT


DIFFED_SCRIPTS: list[list[bytes]] = [
    [b"EVAL", b"return {1, 2, 3.7, 'x', nil, 4}", b"0"],
    [b"EVAL", b"return {ok='fine'}", b"0"],
    [b"EVAL", b"return {err='MY bad thing'}", b"0"],
    [b"EVAL", b"return redis.error_reply('oops')", b"0"],
    [b"EVAL", b"return redis.status_reply('hi')", b"0"],
    [b"EVAL", b"return {true, false, -3.99}", b"0"],
    [b"EVAL", b"return redis.call('SET', KEYS[1], ARGV[1])", b"1", b"k", b"v"],
    [b"EVAL", b"return redis.call('INCR', KEYS[1])", b"1", b"k"],
    [b"EVAL", b"local a = 1\nreturn redis.call('INCR', KEYS[1])", b"1", b"k"],
    [b"EVAL", b"return redis.pcall('INCR', KEYS[1])", b"1", b"k"],
    [b"EVAL", b"return redis.call('nosuch')", b"0"],
    [b"EVAL", b"return redis.call('GET')", b"0"],
    [b"EVAL", b"return redis.call()", b"0"],
    [b"EVAL", b"return redis.call('GET', {})", b"0"],
    [b"EVAL", b"return redis.call('MULTI')", b"0"],
    [b"EVAL", b"x = 1", b"0"],
    [b"EVAL", b"return y", b"0"],
    [b"EVAL", b"return os.execute('true')", b"0"],
    [b"EVAL", b"setmetatable(_G, nil)", b"0"],
    [b"EVAL", b"error('boom')", b"0"],
    [b"EVAL", b"error({err='MY boom'})", b"0"],
    [b"EVAL", b"syntax error here", b"0"],
    [b"EVAL", b"return 1", b"-1"],
    [b"EVAL", b"return 1", b"2", b"a"],
    [b"EVAL", b"return 1", b"x"],
    [b"EVALSHA", b"0123456789012345678901234567890123456789", b"0"],
    [b"EVAL_RO", b"return redis.call('SET', 'a', 'b')", b"0"],
    [b"EVAL_RO", b"return redis.call('GET', KEYS[1])", b"1", b"k"],
    [b"EVAL", b"redis.call('HSET', 'h', 'f', 'v') return redis.call('HGETALL', 'h')", b"0"],
    [b"EVAL", b"return redis.call('HGETALL', 'nokey')", b"0"],
    [b"EVAL", b"return cjson.encode({1, 2, {a=1}})", b"0"],
    [b"EVAL", b"return cjson.encode(cjson.decode('{\"a\":[1,2,null],\"b\":1.5}'))", b"0"],
    [b"EVAL", b"return redis.sha1hex('abc')", b"0"],
    [b"EVAL", b"return {bit.band(7, 3), bit.bnot(0), bit.lshift(1, 31)}", b"0"],
    [b"EVAL", b"return tostring(unpack({1, 2}))", b"0"],
    [b"EVAL", b"return redis.call('PING')", b"0"],
    [b"EVAL", b"return redis.pcall('nosuch')", b"0"],
    [b"EVAL", b"#!lua flags=no-writes\nreturn redis.call('SET', 'a', 'b')", b"0"],
    [b"EVAL", b"#!lua\nreturn redis.call('SET', 'a', 'b')", b"0"],
    [b"EVAL", b"#!lua flags=bogus\nreturn 1", b"0"],
    [b"EVAL", b"#!python\nreturn 1", b"0"],
    [b"EVAL", b"#!lua foo=bar\nreturn 1", b"0"],
    [b"EVAL", b"#!lua flags=no-writes,allow-stale\nerror('x')", b"0"],
    [b"EVAL", b"#!lua", b"0"],
    [b"EVAL_RO", b"#!lua\nreturn 1", b"0"],
    [b"EVAL_RO", b"#!lua flags=no-writes\nreturn 1", b"0"],
    [b"EVAL", b"return cmsgpack.pack({1, 2, 'x', {a={true, false}}}, -1, 300, -200, 1.5, "
              b"0.1, string.rep('s', 40), 70000, -70000, 2^40, {}, nil)", b"0"],
    [b"EVAL", b"local a, b, c = cmsgpack.unpack(cmsgpack.pack({1, {2, 'x'}}, 'y', 3.25)) "
              b"return {a[1], a[2][2], b, tostring(c)}", b"0"],
    [b"EVAL", b"local m = cmsgpack.unpack(ARGV[1]) return 'hello ' .. m['name']", b"0",
     b"\x81\xa4name\xa3Joe"],
    [b"EVAL", b"return cmsgpack.unpack('\\196')", b"0"],
    [b"EVAL", b"return cmsgpack.unpack('\\217\\1a')", b"0"],
    [b"EVAL", b"return cmsgpack.unpack('\\147\\1')", b"0"],
    [b"EVAL", b"return cmsgpack.unpack('')", b"0"],
    [b"EVAL", b"return cmsgpack.pack()", b"0"],
    [b"EVAL", b"return {cmsgpack.unpack(cmsgpack.pack(1, 2))}", b"0"],
    [b"EVAL", b"return cjson.decode('x')", b"0"],
    [b"SCRIPT", b"LOAD", b"return 1"],
    [b"SCRIPT", b"EXISTS", b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db", b"00"],
    [b"EVALSHA", b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db", b"0"],
    [b"SCRIPT", b"KILL"],
    [b"SCRIPT", b"NOSUCH"],
    [b"SCRIPT", b"FLUSH"],
    [b"SCRIPT", b"EXISTS", b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db"],
]


def test_scripting_replies_match_redis(resp: ServerProcess, redis_server: RedisServer) -> None:
    """Each script's reply, byte for byte, as the installed redis-server (7.0) answers it."""
    raw = RawResp(resp.resp_port or 0)
    redis_server.raw([b"FLUSHALL"])
    redis_server.raw([b"SCRIPT", b"FLUSH"])
    try:
        for argv in DIFFED_SCRIPTS:
            assert raw.raw(argv) == redis_server.raw(argv), argv
    finally:
        raw.close()


def test_scripting_long_script_is_answered_not_busy(serve: ServeFactory) -> None:
    """A script that runs past --request-timeout gets its own reply, not ERR busy for a
    write that was done: the owner polls the sockets before that group's sync, and the
    connection's request timer leaves the applied batch alone. (Until the batches were marked,
    a group that ran over 0.1 s skipped the polls instead, and a script of 0.05-0.1 s, this
    one on a fast machine, was answered ERR busy.)"""
    server = drain_stderr(serve("--resp-port", "0", "--request-timeout", "0.05",
                                "--lua-time-limit", "60000"))
    r = _client(server)
    body = "redis.call('SET', 'slow', 'done') local t = 0 for i = 1, 2e7 do t = t + i end return 1"
    assert r.eval(body, 0) == 1
    assert r.get("slow") == b"done"
