"""Lua scripting in the command engine (``store.scripting``), without a server: conversions,
Redis's error wording, the sandbox's walls, the time limit's rollback, the journal group."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from minidb.store import Keyspace, OpJournal, Session, execute, execute_transaction
from minidb.store._results import ErrorReply, Result, Simple
from minidb.store.scripting import ENGINE, ScriptCache, sha1_of
from minidb.store.scripting._cache import MAX_EVAL_SCRIPTS
from minidb.store.scripting._engine import ScriptEngine
from minidb.store.scripting._sandbox import Sandbox

Db = tuple[Keyspace, OpJournal]
"""A test's keyspace and the journal its commands note changes in."""


class TickingClock:
    """A clock that moves ``step`` seconds each time it is read: the count hook's reads
    make a script's time pass without any real waiting."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.fixture
def db() -> Iterator[Db]:
    clock, limit = ENGINE.clock, ENGINE.time_limit_ms
    ENGINE.cache.flush()
    yield Keyspace(), OpJournal()
    ENGINE.clock, ENGINE.time_limit_ms = clock, limit


def run(db: Db, *argv: str | bytes | int) -> Result:
    ks, journal = db
    words = [a if isinstance(a, bytes) else str(a).encode() for a in argv]
    return execute(ks, Session(), words, journal, 1_000)


def ev(db: Db, body: str, *keys_then_args: str, keys: int = 0) -> Result:
    return run(db, "EVAL", body, keys, *keys_then_args)


def sha(body: str) -> str:
    return sha1_of(body.encode()).decode()


# -- conversions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("return 3.99", 3),
        ("return -3.99", -3),
        ("return 'x'", b"x"),
        ("return {1, 2, 3.7, 'x', nil, 4}", [1, 2, 3, b"x"]),
        ("return {ok='fine'}", Simple("fine")),
        ("return {err='MY bad thing'}", ErrorReply("MY bad thing")),
        ("return true", 1),
        ("return false", None),
        ("return nil", None),
        ("return {{1, {2}}, 'a'}", [[1, [2]], b"a"]),
        ("return redis.status_reply('hi')", Simple("hi")),
        ("return redis.error_reply('oops')", ErrorReply("ERR oops")),
        ("return redis.error_reply('-E2 oops')", ErrorReply("E2 oops")),
        ("return function() end", None),
    ],
)
def test_scripting_lua_to_reply(db: Db, body: str, expected: Result) -> None:
    """A script's value becomes the reply Redis gives for it."""
    assert ev(db, body) == expected


def test_scripting_reply_to_lua(db: Db) -> None:
    """redis.call's results reach Lua as Redis converts them (RESP2): nil -> false, status
    -> {ok=}, integer -> number, array -> table, a hash's map -> a flat array."""
    run(db, "HSET", "h", "f", "v")
    body = """
      local missing = redis.call('GET', 'nokey')
      local status = redis.call('SET', 'k', 'v')
      local n = redis.call('INCR', 'n')
      local all = redis.call('HGETALL', 'h')
      return {type(missing), tostring(missing), status.ok, type(n), n, all[1], all[2]}
    """
    assert ev(db, body) == [b"boolean", b"false", b"OK", b"number", 1, b"f", b"v"]


def test_scripting_keys_and_argv(db: Db) -> None:
    """KEYS and ARGV split at numkeys; numbers given to redis.call become Lua's text."""
    assert ev(db, "return {KEYS[1], KEYS[2], ARGV[1], #ARGV}", "a", "b", "x", keys=2) == [
        b"a", b"b", b"x", 1,
    ]
    assert ev(db, "redis.call('SET', 'f', 1.5) redis.call('SET', 'i', 10) "
                  "return {redis.call('GET', 'f'), redis.call('GET', 'i')}") == [b"1.5", b"10"]


# -- errors ----------------------------------------------------------------------------------


def test_scripting_call_error_aborts_with_line(db: Db) -> None:
    """A failing redis.call ends the script with Redis 7's trailer naming the line."""
    run(db, "SET", "s", "x")
    body = "local a = 1\nreturn redis.call('INCR', 's')"
    assert ev(db, body) == ErrorReply(
        f"ERR value is not an integer or out of range script: {sha(body)}, on @user_script:2."
    )


def test_scripting_pcall_returns_error_table(db: Db) -> None:
    """redis.pcall returns the error as {err=...} and the script goes on."""
    run(db, "SET", "s", "x")
    assert ev(db, "local e = redis.pcall('INCR', 's') return e.err") == (
        b"ERR value is not an integer or out of range"
    )
    assert ev(db, "return redis.pcall('INCR', 's')") == ErrorReply(
        "ERR value is not an integer or out of range"
    )
    assert ev(db, "local ok, e = pcall(redis.call, 'INCR', 's') return {tostring(ok), e.err}") == [
        b"false", b"ERR value is not an integer or out of range",
    ]


def test_scripting_runtime_error_wording(db: Db) -> None:
    """error() with a string or a table, as Redis 7 words them."""
    boom = "error('boom')"
    assert ev(db, boom) == ErrorReply(
        f"ERR user_script:1: boom script: {sha(boom)}, on @user_script:1."
    )
    body = "error({err='MY boom'})"
    assert ev(db, body) == ErrorReply(f"MY boom script: {sha(body)}, on @user_script:1.")


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("return redis.call('nosuch')", "ERR Unknown Redis command called from script"),
        ("return redis.call('GET')", "ERR Wrong number of args calling Redis command from script"),
        ("return redis.call()", "ERR Please specify at least one argument for this redis lib call"),
        ("return redis.call('GET', {})",
         "ERR Lua redis lib command arguments must be strings or integers"),
        ("return redis.call('MULTI')", "ERR This Redis command is not allowed from script"),
        ("return redis.call('WATCH', 'k')", "ERR This Redis command is not allowed from script"),
        ("return redis.call('EVAL', 'return 1', '0')",
         "ERR This Redis command is not allowed from script"),
        ("return redis.call('BLPOP', 'l', '0')",
         "ERR This Redis command is not allowed from script"),
    ],
)
def test_scripting_refused_calls(db: Db, body: str, error: str) -> None:
    """Commands a script may not run answer Redis 7.0's errors."""
    assert ev(db, body) == ErrorReply(f"{error} script: {sha(body)}, on @user_script:1.")


def test_scripting_numkeys_errors(db: Db) -> None:
    assert run(db, "EVAL", "return 1", "-1") == ErrorReply("ERR Number of keys can't be negative")
    assert run(db, "EVAL", "return 1", "2", "a") == ErrorReply(
        "ERR Number of keys can't be greater than number of args"
    )
    assert run(db, "EVAL", "return 1", "x") == ErrorReply(
        "ERR value is not an integer or out of range"
    )
    assert run(db, "EVAL", "return 1") == ErrorReply(
        "ERR wrong number of arguments for 'eval' command"
    )


def test_scripting_compile_error(db: Db) -> None:
    assert ev(db, "syntax error here") == ErrorReply(
        "ERR Error compiling script (new function): user_script:1: '=' expected near 'error'"
    )


def test_scripting_read_only_refuses_writes(db: Db) -> None:
    """EVAL_RO / EVALSHA_RO refuse a write inside, and still read."""
    run(db, "SET", "k", "v")
    body = "return redis.call('SET', 'k', 'w')"
    assert run(db, "EVAL_RO", body, 0) == ErrorReply(
        "ERR Write commands are not allowed from read-only scripts. "
        f"script: {sha(body)}, on @user_script:1."
    )
    assert run(db, "EVAL_RO", "return redis.call('GET', KEYS[1])", 1, "k") == b"v"
    loaded = run(db, "SCRIPT", "LOAD", "return redis.call('GET', KEYS[1])")
    assert run(db, "EVALSHA_RO", loaded, 1, "k") == b"v"


# -- cache -----------------------------------------------------------------------------------


def test_scripting_script_commands(db: Db) -> None:
    """SCRIPT LOAD / EXISTS / FLUSH / KILL and EVALSHA's NOSCRIPT."""
    digest = run(db, "SCRIPT", "LOAD", "return 'hi'")
    assert digest == sha1_of(b"return 'hi'")
    assert run(db, "EVALSHA", digest, 0) == b"hi"
    assert run(db, "EVALSHA", digest.upper(), 0) == b"hi"
    assert run(db, "SCRIPT", "EXISTS", digest, "0" * 40) == [1, 0]
    assert run(db, "SCRIPT", "FLUSH") == Simple("OK")
    assert run(db, "EVALSHA", digest, 0) == ErrorReply(
        "NOSCRIPT No matching script. Please use EVAL."
    )
    assert run(db, "SCRIPT", "KILL") == ErrorReply("NOTBUSY No scripts in execution right now.")
    assert run(db, "SCRIPT", "FLUSH", "LATER") == ErrorReply(
        "ERR SCRIPT FLUSH only support SYNC|ASYNC option"
    )
    ev(db, "return 2")
    assert run(db, "EVALSHA", sha("return 2"), 0) == 2  # EVAL caches its script


def test_scripting_cache_bounds_evaluated_scripts() -> None:
    """Scripts added by EVAL are dropped least recently used first; loaded ones stay."""
    cache = ScriptCache()
    cache.add_loaded(b"f" * 40, "loaded")
    for i in range(MAX_EVAL_SCRIPTS + 5):
        cache.add_evaluated(b"%040d" % i, i)
    assert not cache.exists(b"%040d" % 0)
    assert cache.exists(b"%040d" % (MAX_EVAL_SCRIPTS + 4))
    assert cache.get(b"f" * 40) == "loaded"
    assert len(cache) == MAX_EVAL_SCRIPTS + 1


# -- sandbox ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "return os.execute('true')",
        "return io.open('/etc/passwd')",
        "return require('os')",
        "return dofile('/etc/passwd')",
        "return loadfile('/etc/passwd')",
        "return debug.getinfo(1)",
        "return package.loaded",
        "return getfenv(0)",
        "return python.eval('1')",
        "return print('x')",
    ],
)
def test_scripting_sandbox_hides_the_outside(db: Db, body: str) -> None:
    """No file system, os, io, debug, module loading or Python from a script."""
    reply = ev(db, body)
    assert isinstance(reply, ErrorReply)
    assert "Script attempted to access nonexistent global variable" in reply.message


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("x = 1", "Attempt to modify a readonly table"),
        ("setmetatable(_G, nil)", "Attempt to modify a readonly table"),
        ("rawset(_G, 'zz', 1)", "Attempt to modify a readonly table"),
        ("string.rep = nil", "Attempt to modify a readonly table"),
        ("redis.call = nil", "Attempt to modify a readonly table"),
        ("return string.dump(function() end)", "attempt to call field 'dump'"),
        ("local f, e = loadstring('\\27Lua\\81\\0') return e", "bytecode is not allowed"),
        ("return cjson.null.__class__", "access to Python attributes is not allowed"),
        ("return getmetatable('').__index", "attempt to index a boolean value"),
    ],
)
def test_scripting_sandbox_refuses_escapes(
    db: Db, body: str, needle: str
) -> None:
    """Globals, the libraries and the string metatable are read-only; bytecode and Python
    attributes are refused."""
    reply = ev(db, body)
    assert needle in (reply.message if isinstance(reply, ErrorReply) else str(reply))


def test_scripting_loadstring_runs_in_the_sandbox(db: Db) -> None:
    """A chunk loadstring compiles sees the script's read-only globals, not the real ones."""
    reply = ev(db, "return loadstring('return os')()")
    assert isinstance(reply, ErrorReply) and "nonexistent global variable 'os'" in reply.message
    assert ev(db, "return loadstring('return redis.sha1hex(\"\")')()") == (
        b"da39a3ee5e6b4b0d3255bfef95601890afd80709"
    )


def test_scripting_memory_is_bounded() -> None:
    """An allocation past the state's bound fails cleanly; the next script runs."""
    engine = ScriptEngine(max_memory=32 << 20)
    ks, journal = Keyspace(), OpJournal()
    compiled = engine.compile(b"return string.rep('x', 1e9)")
    assert not isinstance(compiled, ErrorReply)
    reply = engine.run(ks, Session(), *compiled, [], [], journal, 0, read_only=False)
    assert isinstance(reply, ErrorReply) and "not enough memory" in reply.message
    table = engine.compile(b"local t = {} for i = 1, 1e8 do t[i] = i end return #t")
    assert not isinstance(table, ErrorReply)
    reply = engine.run(ks, Session(), *table, [], [], journal, 0, read_only=False)
    assert isinstance(reply, ErrorReply) and "not enough memory" in reply.message
    ok = engine.compile(b"return string.rep('x', 3)")
    assert not isinstance(ok, ErrorReply)
    assert engine.run(ks, Session(), *ok, [], [], journal, 0, read_only=False) == b"xxx"


def test_scripting_sandbox_prelude_functions_are_not_globals() -> None:
    """The host's functions are not reachable as globals of the real state either."""
    sandbox = Sandbox(lambda *a: (True, None), lambda *a: None, lambda e: b"", lambda: None)
    for name in ("os", "io", "debug", "python", "require", "dofile", "loadfile"):
        assert sandbox.runtime.globals()[name.encode()] is None


# -- time limit and the journal ----------------------------------------------------------------


@pytest.mark.parametrize(
    "loop",
    [
        "while true do end",
        "while true do pcall(function() while true do end end) end",
        "local function f() return f() end return f()",
    ],
)
def test_scripting_time_limit_stops_and_rolls_back(
    db: Db, loop: str
) -> None:
    """A script past the limit is stopped (even one catching errors) and its writes undone."""
    ENGINE.clock = TickingClock(step=1.0)
    ENGINE.time_limit_ms = 5_000
    run(db, "SET", "kept", "old")
    journal = db[1]
    records = len(journal.records)
    body = f"redis.call('SET', 'kept', 'new') redis.call('SET', 'fresh', 'x') {loop}"
    reply = ev(db, body)
    assert isinstance(reply, ErrorReply)
    assert reply.message.startswith("ERR Script killed by time limit")
    assert f"script: {sha(body)}" in reply.message
    assert run(db, "GET", "kept") == b"old"
    assert run(db, "GET", "fresh") is None
    assert len(journal.records) == records  # nothing of the script is left to log
    ENGINE.clock = TickingClock(step=0.0)
    assert ev(db, "return redis.call('GET', 'kept')") == b"old"  # the next script runs


def test_scripting_writes_are_one_journal_group(db: Db) -> None:
    """Everything a script wrote is one group: one log record of effects."""
    journal = db[1]
    before = len(journal.records)
    ev(db, "redis.call('SET', 'a', '1') redis.call('INCR', 'a') redis.call('RPUSH', 'l', 'x')")
    assert len(journal.records) == before + 1
    assert len(journal.records[-1]) == 3
    ev(db, "redis.call('SET', 'b', '1') redis.call('INCR', 'nonumber', 'x')")
    # an error after a write keeps the write (as Redis), still one group
    assert run(db, "GET", "b") == b"1"


def test_scripting_in_a_transaction(db: Db) -> None:
    """EVAL queued in MULTI runs inside EXEC's one group."""
    ks, journal = db
    results = execute_transaction(
        ks, Session(),
        [[b"SET", b"a", b"1"], [b"EVAL", b"return redis.call('INCR', 'a')", b"0"]],
        journal, 1_000,
    )  # fmt: skip
    assert results == [Simple("OK"), 2]


def test_scripting_select_is_the_scripts_own(db: Db) -> None:
    """SELECT inside a script changes the script's database only."""
    ks, journal = db
    session = Session()
    reply = execute(
        ks, session, [b"EVAL", b"redis.call('SELECT', '5') return redis.call('SET', 'k', 'v')",
                      b"0"], journal, 1_000,
    )  # fmt: skip
    assert reply == Simple("OK") and session.bucket == b"0"
    assert run(db, "GET", "k") is None


# -- libraries ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("return cjson.encode({1, 2, {a=1}})", b'[1,2,{"a":1}]'),
        ("return cjson.encode({})", b"{}"),
        ("return cjson.encode('a/b')", b'"a\\/b"'),
        ("return cjson.encode(1.5)", b"1.5"),
        ("return cjson.encode(cjson.decode('{\"a\":[1,2,null]}'))", b'{"a":[1,2,null]}'),
        ("return cjson.decode('[1,\"x\"]')[2]", b"x"),
        ("return tostring(cjson.decode('null') == cjson.null)", b"true"),
        ("return redis.sha1hex('')", b"da39a3ee5e6b4b0d3255bfef95601890afd80709"),
        ("return bit.band(7, 3)", 3),
        ("return bit.bor(1, 2, 4)", 7),
        ("return bit.bxor(5, 1)", 4),
        ("return bit.bnot(0)", -1),
        ("return bit.lshift(1, 31)", -(1 << 31)),
        ("return bit.rshift(-1, 28)", 15),
        ("return bit.arshift(-16, 2)", -4),
        ("return bit.tohex(255)", b"000000ff"),
        ("return bit.tohex(255, -2)", b"FF"),
        ("return tostring(unpack({1, 2}))", b"1"),
        ("return table.getn({1, 2, 3})", 3),
        ("return redis.LOG_WARNING", 3),
    ],
)
def test_scripting_libraries(db: Db, body: str, expected: Result) -> None:
    """cjson (Redis's lua-cjson conventions), bit (LuaBitOp), Lua 5.1's own functions."""
    assert ev(db, body) == expected


def test_scripting_cjson_refuses(db: Db) -> None:
    for body, needle in [
        ("return cjson.decode('{')", "Expected"),
        ("return cjson.encode({[1]=1, [100]=2})", "excessively sparse array"),
        ("return cjson.encode(function() end)", "type not supported"),
    ]:
        reply = ev(db, body)
        assert isinstance(reply, ErrorReply) and needle in reply.message, body


def test_scripting_log(db: Db, caplog: pytest.LogCaptureFixture) -> None:
    """redis.log writes to the server's log."""
    with caplog.at_level("INFO", logger="minidb.scripting"):
        assert ev(db, "redis.log(redis.LOG_WARNING, 'hello', 42)") is None
    assert "hello 42" in caplog.text


def test_scripting_publish(db: Db) -> None:
    """PUBLISH from a script reaches the pub/sub registry's outbox (delivered once the group
    is logged); a script stopped by the time limit delivers nothing."""
    from minidb.store._pubsub import registry_for

    class Receiver:
        def receive(self, messages: list[object]) -> None:
            pass

    registry = registry_for(db[0])
    registry.subscribe(Receiver(), b"ch")
    assert ev(db, "return redis.call('PUBLISH', 'ch', 'm')") == 1
    published = len(registry.outbox)
    assert published == 1
    ENGINE.clock = TickingClock(step=1.0)
    reply = ev(db, "redis.call('PUBLISH', 'ch', 'lost') while true do end")
    assert isinstance(reply, ErrorReply) and "killed" in reply.message
    assert len(registry.outbox) == published


@pytest.mark.parametrize("count", [0, 3, 1000])
def test_scripting_many_arguments(db: Db, count: int) -> None:
    """KEYS and ARGV arrive whole however many there are (a long list goes another way)."""
    args = [str(i) for i in range(count)]
    assert ev(db, "return {#KEYS, #ARGV, KEYS[1], ARGV[#ARGV]}", "k1", "k2", *args, keys=2) == [
        2, count, b"k1", *([str(count - 1).encode()] if count else []),
    ]


@pytest.mark.parametrize(
    "body",
    [
        "return setmetatable({}, {__index = function() while true do end end})",
        "error(setmetatable({}, {__index = function() while true do end end}))",
        "return {setmetatable({}, {__index = function() while true do end end})}",
    ],
)
def test_scripting_metamethods_run_under_the_time_limit(db: Db, body: str) -> None:
    """The reply and the error are read raw (as Redis reads them), never by calling a
    script's metamethod outside the time limit's hook."""
    ENGINE.clock = TickingClock(step=1.0)
    reply = ev(db, body)
    assert reply in ([], [[]]) or isinstance(reply, ErrorReply), reply


def test_scripting_table_holding_itself(db: Db) -> None:
    """A table holding itself is answered down to the depth bound, then an error."""
    reply = ev(db, "local t = {} t[1] = t return t")
    depth = 0
    while isinstance(reply, list):
        reply, depth = reply[0], depth + 1
    assert depth == 200 and reply == ErrorReply("ERR reached lua stack limit")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("local s = string.rep('x', 70000) return #cmsgpack.unpack(cmsgpack.pack(s))", 70000),
        ("local t = {} for i = 1, 20 do t[i] = i end "
         "return #cmsgpack.unpack(cmsgpack.pack(t))", 20),
        ("local t = {} for i = 1, 70000 do t[i] = i end "
         "return cmsgpack.unpack(cmsgpack.pack(t))[70000]", 70000),
        ("local m = {} for i = 1, 20 do m['k' .. i] = i end "
         "return cmsgpack.unpack(cmsgpack.pack(m))['k20']", 20),
        ("return cmsgpack.unpack(cmsgpack.pack(-2^40))", -(2**40)),
        ("return tostring(cmsgpack.unpack(cmsgpack.pack(0.1)))", b"0.1"),
        ("return cmsgpack.pack(function() end)", b"\xc0"),
    ],
)
def test_scripting_cmsgpack_round_trips(db: Db, body: str, expected: Result) -> None:
    """cmsgpack's longer forms (str16/32, array16/32, map16, int64, float64) come back."""
    assert ev(db, body) == expected
