"""The command engine: every command's replies and errors, worded as Redis words them."""

from __future__ import annotations

import pytest

from minidb.store._args import Session
from minidb.store._commands import COMMANDS, execute, execute_transaction, validate
from minidb.store._journal import OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._results import OK, ErrorReply, Result, Simple
from minidb.wal._ops import Expire, Flush, Put, Remove

NOW = 1_700_000_000_000
"""A fixed wall-clock time in ms, so TTL arithmetic is exact."""

E = ErrorReply
INT_ERR = E("ERR value is not an integer or out of range")
SYNTAX = E("ERR syntax error")
NX_CONFLICT = E("ERR NX and XX, GT or LT options at the same time are not compatible")


def arity(name: str) -> ErrorReply:
    return E(f"ERR wrong number of arguments for '{name}' command")


def expire_err(name: str) -> ErrorReply:
    return E(f"ERR invalid expire time in '{name}' command")


Step = tuple[str, Result]


def run(steps: list[Step], ks: Keyspace | None = None) -> Keyspace:
    """Run ``steps`` (space-separated argv, expected result) in one session at NOW."""
    ks = ks or Keyspace(now_ms=NOW)
    session = Session()
    journal = OpJournal()
    for line, expected in steps:
        argv = [w.encode() for w in line.split(" ")]
        got = execute(ks, session, argv, journal, NOW)
        assert got == expected, f"{line!r}: got {got!r}, expected {expected!r}"
    return ks


CASES: dict[str, list[Step]] = {
    "get_set": [
        ("GET k", None),
        ("SET k v", OK),
        ("GET k", b"v"),
        ("GET", arity("get")),
        ("GET k x", arity("get")),
        ("SET k", arity("set")),
    ],
    "set_nx_xx_get": [
        ("SET k v XX", None),
        ("SET k v NX", OK),
        ("SET k w NX", None),
        ("SET k w XX", OK),
        ("SET k x GET", b"w"),
        ("SET n x GET", None),
        ("SET k y NX GET", b"x"),
        ("GET k", b"x"),
        ("SET z y XX GET", None),
        ("GET z", None),
    ],
    "set_option_conflicts": [
        ("SET k v NX XX", SYNTAX),
        ("SET k v XX NX", SYNTAX),
        ("SET k v EX 10 PX 100", SYNTAX),
        ("SET k v EX 10 EXAT 100", SYNTAX),
        ("SET k v PXAT 10 EX 100", SYNTAX),
        ("SET k v KEEPTTL EX 10", SYNTAX),
        ("SET k v EX 10 KEEPTTL", SYNTAX),
        ("SET k v EX", SYNTAX),
        ("SET k v PERSIST", SYNTAX),
        ("SET k v FOO", SYNTAX),
        ("SET k v EX 10 EX 20", OK),  # the same option twice is allowed: the last wins
        ("TTL k", 20),
        ("SET k v NX NX", None),
        ("SET k v ex 5", OK),
        ("TTL k", 5),
    ],
    "set_expiry_errors": [
        ("SET k v EX 0", expire_err("set")),
        ("SET k v PX -1", expire_err("set")),
        ("SET k v EX abc", INT_ERR),
        ("SET k v EX 1.5", INT_ERR),
        ("SET k v EX 9223372036854776", expire_err("set")),
        ("SET k v PX 9223372036854775807", expire_err("set")),
        ("SET k v PXAT 9223372036854775807", OK),
        ("GET k", b"v"),
    ],
    "set_expiry_units": [
        ("SET a v EX 10", OK),
        ("PTTL a", 10_000),
        ("SET b v PX 1500", OK),
        ("PTTL b", 1500),
        ("TTL b", 2),  # rounded, as Redis: (1500 + 500) // 1000
        (f"SET c v EXAT {NOW // 1000 + 100}", OK),
        ("TTL c", 100),
        (f"SET d v PXAT {NOW + 42}", OK),
        ("PTTL d", 42),
        ("PEXPIRETIME d", NOW + 42),
        (f"SET e v PXAT {NOW}", OK),  # a deadline reached: the key is gone
        ("GET e", None),
    ],
    "set_keepttl_and_drop": [
        ("SET k v EX 100", OK),
        ("SET k w KEEPTTL", OK),
        ("TTL k", 100),
        ("SET k x", OK),
        ("TTL k", -1),
        ("SET k v EX 100", OK),
        ("GETSET k y", b"v"),
        ("TTL k", -1),
        ("SET k v EX 100", OK),
        ("MSET k z", OK),
        ("TTL k", -1),
    ],
    "setnx_setex_psetex": [
        ("SETNX k v", 1),
        ("SETNX k w", 0),
        ("GET k", b"v"),
        ("SETEX k 10 w", OK),
        ("TTL k", 10),
        ("SETEX k 0 w", expire_err("setex")),
        ("SETEX k x w", INT_ERR),
        ("PSETEX k 250 u", OK),
        ("PTTL k", 250),
        ("PSETEX k -5 u", expire_err("psetex")),
        ("SETEX k 10", arity("setex")),
    ],
    "getset_getdel": [
        ("GETSET k v", None),
        ("GETSET k w", b"v"),
        ("GETDEL k", b"w"),
        ("GETDEL k", None),
        ("EXISTS k", 0),
    ],
    "getex": [
        ("GETEX k", None),
        ("GETEX k EX 0", None),  # a missing key answers null before the time is checked
        ("SET k v", OK),
        ("GETEX k", b"v"),
        ("TTL k", -1),
        ("GETEX k EX 10", b"v"),
        ("TTL k", 10),
        ("GETEX k PX 500", b"v"),
        ("PTTL k", 500),
        ("GETEX k PERSIST", b"v"),
        ("TTL k", -1),
        ("GETEX k EX 0", expire_err("getex")),
        ("GETEX k EX 10 PERSIST", SYNTAX),
        ("GETEX k PERSIST EX 10", SYNTAX),
        ("GETEX k NX", SYNTAX),
        ("GETEX k KEEPTTL", SYNTAX),
        ("GETEX k PXAT 1", b"v"),  # a deadline in the past deletes the key
        ("EXISTS k", 0),
    ],
    "mget_mset_msetnx": [
        ("MSET a 1 b 2 c 3", OK),
        ("MGET a b x c", [b"1", b"2", None, b"3"]),
        ("MSET a 1 b", arity("mset")),
        ("MSETNX a 9 z 9", 0),
        ("GET z", None),
        ("MSETNX y 8 z 9", 1),
        ("MGET y z", [b"8", b"9"]),
        ("MSETNX q", arity("msetnx")),
        ("MGET", arity("mget")),
    ],
    "del_unlink_exists": [
        ("MSET a 1 b 2 c 3", OK),
        ("EXISTS a a b x", 3),
        ("DEL a x a", 1),
        ("UNLINK b c d", 2),
        ("DEL a", 0),
        ("DEL", arity("del")),
        ("EXISTS", arity("exists")),
    ],
    "incr_decr": [
        ("INCR n", 1),
        ("INCRBY n 10", 11),
        ("DECR n", 10),
        ("DECRBY n 20", -10),
        ("GET n", b"-10"),
        ("INCRBY n x", INT_ERR),
        ("INCRBY n 1.5", INT_ERR),
        ("INCRBY n 01", INT_ERR),
        ("INCRBY n +1", INT_ERR),
        ("SET s abc", OK),
        ("INCR s", INT_ERR),
        ("SET s 1.0", OK),
        ("INCR s", INT_ERR),
        ("SET s 007", OK),
        ("INCR s", INT_ERR),
        ("SET t 0", OK),
        ("INCR t", 1),
    ],
    "incr_overflow_edges": [
        ("SET n 9223372036854775806", OK),
        ("INCR n", 9223372036854775807),
        ("INCR n", E("ERR increment or decrement would overflow")),
        ("INCRBY n 0", 9223372036854775807),
        ("SET n 9223372036854775807", OK),
        ("INCRBY n -9223372036854775808", -1),
        ("SET m -9223372036854775808", OK),
        ("DECR m", E("ERR increment or decrement would overflow")),
        ("INCRBY m -1", E("ERR increment or decrement would overflow")),
        ("DECRBY m -9223372036854775807", -1),
        ("DECRBY m -9223372036854775808", E("ERR decrement would overflow")),
        ("INCRBY m 9223372036854775808", INT_ERR),
        ("SET big 9223372036854775808", OK),
        ("INCR big", INT_ERR),
        ("SET neg -9223372036854775809", OK),
        ("INCR neg", INT_ERR),
    ],
    "incr_keeps_ttl": [
        ("SET n 5 EX 100", OK),
        ("INCR n", 6),
        ("TTL n", 100),
        ("INCRBYFLOAT n 0.5", b"6.5"),
        ("TTL n", 100),
        ("APPEND n 0", 4),
        ("TTL n", 100),
        ("SETRANGE n 0 7", 4),
        ("TTL n", 100),
    ],
    "incrbyfloat": [
        ("SET f 10.50", OK),
        ("INCRBYFLOAT f 0.1", b"10.6"),
        ("INCRBYFLOAT f -5", b"5.6"),
        ("SET g 5.0e3", OK),
        ("INCRBYFLOAT g 2.0e2", b"5200"),
        ("INCRBYFLOAT h 3", b"3"),
        ("INCRBYFLOAT h 1.1", b"4.1"),
        ("INCRBYFLOAT h x", E("ERR value is not a valid float")),
        ("INCRBYFLOAT h nan", E("ERR value is not a valid float")),
        ("INCRBYFLOAT h 1_0", E("ERR value is not a valid float")),
        ("INCRBYFLOAT h inf", E("ERR increment would produce NaN or Infinity")),
        ("SET s abc", OK),
        ("INCRBYFLOAT s 1", E("ERR value is not a valid float")),
        ("INCRBYFLOAT z 0.024390243902439025", b"0.02439024390243902"),
        ("INCRBYFLOAT z -0.024390243902439025", b"0"),
        ("INCRBYFLOAT w 1e-20", b"0"),
        ("INCRBYFLOAT v -1e-20", b"0"),
        ("INCRBYFLOAT u 1.5e10", b"15000000000"),
        ("INCRBYFLOAT t .5", b"0.5"),
        ("INCRBYFLOAT t 5.", b"5.5"),
    ],
    "append_strlen": [
        ("APPEND k ab", 2),
        ("APPEND k cd", 4),
        ("GET k", b"abcd"),
        ("STRLEN k", 4),
        ("STRLEN nope", 0),
    ],
    "getrange": [
        ("SET k Hello_World", OK),
        ("GETRANGE k 0 4", b"Hello"),
        ("GETRANGE k -5 -1", b"World"),
        ("GETRANGE k -100 2", b"Hel"),
        ("GETRANGE k 5 100", b"_World"),
        ("GETRANGE k 5 3", b""),
        ("GETRANGE k 20 30", b""),
        ("GETRANGE k 0 -100", b""),
        ("GETRANGE nope 0 -1", b""),
        ("GETRANGE k a 1", INT_ERR),
        ("SET e ", OK),
        ("GETRANGE e 0 -1", b""),
    ],
    "setrange": [
        ("SETRANGE k 0 ", 0),
        ("EXISTS k", 0),
        ("SETRANGE k 3 ab", 5),
        ("GET k", b"\0\0\0ab"),
        ("SETRANGE k 1 XYZW", 5),
        ("GET k", b"\0XYZW"),
        ("SETRANGE k 0 ", 5),
        ("SETRANGE k -1 x", E("ERR offset is out of range")),
        ("SETRANGE k x x", INT_ERR),
        (
            "SETRANGE k 4611686018427387904 x",
            E("ERR string exceeds maximum allowed size (proto-max-bulk-len)"),
        ),
    ],
    "expire_family": [
        ("EXPIRE k 10", 0),
        ("SET k v", OK),
        ("EXPIRE k 10", 1),
        ("TTL k", 10),
        ("PEXPIRE k 1234", 1),
        ("PTTL k", 1234),
        (f"EXPIREAT k {NOW // 1000 + 50}", 1),
        ("TTL k", 50),
        (f"PEXPIREAT k {NOW + 77}", 1),
        ("PTTL k", 77),
        ("EXPIRETIME k", (NOW + 77 + 500) // 1000),
        ("EXPIRE k x", INT_ERR),
        ("EXPIRE k 10 FOO", E("ERR Unsupported option FOO")),
        ("EXPIRE k 10 NX XX", NX_CONFLICT),
        ("EXPIRE k 10 NX GT", NX_CONFLICT),
        ("EXPIRE k 10 GT LT", E("ERR GT and LT options at the same time are not compatible")),
        ("EXPIRE k 9223372036854776", expire_err("expire")),
        ("EXPIRE k -9223372036854776", expire_err("expire")),
        ("PEXPIRE k 9223372036854775807", expire_err("pexpire")),
        ("EXPIRE k", arity("expire")),
    ],
    "expire_nx_xx_gt_lt": [
        ("SET k v", OK),
        ("EXPIRE k 100 XX", 0),
        ("EXPIRE k 100 GT", 0),  # no expiry counts as infinite: nothing is greater
        ("EXPIRE k 100 LT", 1),
        ("EXPIRE k 50 NX", 0),
        ("EXPIRE k 200 LT", 0),
        ("EXPIRE k 50 LT", 1),
        ("TTL k", 50),
        ("EXPIRE k 40 GT", 0),
        ("EXPIRE k 60 GT", 1),
        ("EXPIRE k 70 XX", 1),
        ("TTL k", 70),
        ("PERSIST k", 1),
        ("EXPIRE k 10 NX", 1),
        ("TTL k", 10),
    ],
    "expire_in_past_deletes": [
        ("SET k v", OK),
        ("EXPIRE k 0", 1),
        ("EXISTS k", 0),
        ("SET k v", OK),
        ("PEXPIRE k -100", 1),
        ("EXISTS k", 0),
        ("SET k v", OK),
        ("EXPIREAT k 1", 1),
        ("GET k", None),
    ],
    "ttl_persist_type": [
        ("TTL k", -2),
        ("PTTL k", -2),
        ("EXPIRETIME k", -2),
        ("PEXPIRETIME k", -2),
        ("TYPE k", Simple("none")),
        ("SET k v", OK),
        ("TTL k", -1),
        ("EXPIRETIME k", -1),
        ("PERSIST k", 0),
        ("TYPE k", Simple("string")),
        ("PERSIST nope", 0),
    ],
    "rename": [
        ("RENAME a b", E("ERR no such key")),
        ("RENAMENX a b", E("ERR no such key")),
        ("SET a 1 EX 100", OK),
        ("RENAME a a", OK),
        ("RENAMENX a a", 0),
        ("RENAME a b", OK),
        ("GET a", None),
        ("GET b", b"1"),
        ("TTL b", 100),
        ("SET c 3", OK),
        ("RENAMENX b c", 0),
        ("RENAMENX b d", 1),
        ("RENAME d c", OK),
        ("GET c", b"1"),
        ("TTL c", 100),
    ],
    "copy": [
        ("COPY a b", 0),
        ("SET a 1 EX 100", OK),
        ("COPY a a", E("ERR source and destination objects are the same")),
        ("COPY a b", 1),
        ("TTL b", 100),
        ("COPY a b", 0),
        ("SET a 2", OK),
        ("COPY a b REPLACE", 1),
        ("GET b", b"2"),
        ("TTL b", -1),
        ("COPY a a DB 7", 1),
        ("COPY a b DB", SYNTAX),
        ("COPY a b FOO", SYNTAX),
        ("COPY a b DB a!b", E("ERR DB index is out of range")),
        ("SELECT 7", OK),
        ("GET a", b"2"),
    ],
    "select": [
        ("SET k zero", OK),
        ("SELECT 1", OK),
        ("GET k", None),
        ("SET k one", OK),
        ("SELECT users", OK),  # a minidb bucket name
        ("GET k", None),
        ("SELECT 0", OK),
        ("GET k", b"zero"),
        ("SELECT bad*name", E("ERR DB index is out of range")),
        ("SELECT " + "x" * 65, E("ERR DB index is out of range")),
    ],
    "dbsize_flush": [
        ("MSET a 1 b 2", OK),
        ("DBSIZE", 2),
        ("SELECT 1", OK),
        ("SET c 3", OK),
        ("FLUSHDB", OK),
        ("DBSIZE", 0),
        ("SELECT 0", OK),
        ("DBSIZE", 2),
        ("FLUSHDB FOO", SYNTAX),
        ("FLUSHDB ASYNC", OK),
        ("DBSIZE", 0),
        ("SET a 1", OK),
        ("FLUSHALL SYNC", OK),
        ("DBSIZE", 0),
        ("FLUSHALL SYNC X", SYNTAX),
    ],
    "keys_and_scan_errors": [
        ("MSET one 1 two 2 three 3", OK),
        ("KEYS t*", None),  # replaced below: order is not defined
        ("SCAN x", E("ERR invalid cursor")),
        ("SCAN -1", E("ERR invalid cursor")),
        ("SCAN 18446744073709551616", E("ERR invalid cursor")),
        ("SCAN 0 COUNT 0", SYNTAX),
        ("SCAN 0 COUNT x", INT_ERR),
        ("SCAN 0 COUNT", SYNTAX),
        ("SCAN 0 FOO 1", SYNTAX),
        ("SCAN 0 TYPE foo", E("ERR unknown type name 'foo'")),
        ("SCAN 0 TYPE list", [b"0", []]),
        ("SCAN 18446744073709551615", [b"0", []]),
    ],
    "randomkey_time": [
        ("RANDOMKEY", None),
        ("SET only 1", OK),
        ("RANDOMKEY", b"only"),
        ("TIME", [b"%d" % (NOW // 1000), b"%d" % (NOW % 1000 * 1000)]),
        ("TIME x", arity("time")),
    ],
    "unknown": [
        ("FOO", E("ERR unknown command 'FOO', with args beginning with: ")),
        ("foo a b", E("ERR unknown command 'foo', with args beginning with: 'a' 'b' ")),
    ],
}
CASES["keys_and_scan_errors"].pop(1)


@pytest.mark.parametrize("name", sorted(CASES))
def test_commands_table(name: str) -> None:
    """Each command's happy path and errors give Redis's replies, step by step."""
    run(CASES[name])


def test_commands_keys_and_scan_match() -> None:
    """KEYS and SCAN MATCH return exactly the matching keys."""
    ks = run([("MSET one 1 two 2 three 3 four 4", OK)])
    session, journal = Session(), OpJournal()
    got = execute(ks, session, [b"KEYS", b"t*"], journal, NOW)
    assert isinstance(got, list) and sorted(got) == [b"three", b"two"]  # type: ignore[type-var]
    got = execute(ks, session, [b"KEYS", b"*"], journal, NOW)
    assert isinstance(got, list) and len(got) == 4
    reply = execute(ks, session, [b"SCAN", b"0", b"MATCH", b"*o*", b"COUNT", b"100"], journal, NOW)
    assert reply == [b"0", reply[1]] and sorted(reply[1]) == [b"four", b"one", b"two"]  # type: ignore[index]


def test_commands_value_and_key_limits() -> None:
    """Values over max_value_bytes and keys over 64 KiB are refused before anything changes."""
    ks = Keyspace(now_ms=NOW, max_value_bytes=10)
    session, journal = Session(), OpJournal()
    too_long = E("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
    assert execute(ks, session, [b"SET", b"k", b"x" * 11], journal, NOW) == too_long
    assert execute(ks, session, [b"SET", b"k", b"x" * 10], journal, NOW) == OK
    assert execute(ks, session, [b"APPEND", b"k", b"y"], journal, NOW) == too_long
    assert execute(ks, session, [b"SETRANGE", b"k", b"10", b"y"], journal, NOW) == too_long
    assert execute(ks, session, [b"MSET", b"a", b"1", b"b", b"x" * 11], journal, NOW) == too_long
    assert execute(ks, session, [b"EXISTS", b"a"], journal, NOW) == 0
    big_key = b"k" * (64 * 1024 + 1)
    assert execute(ks, session, [b"SET", big_key, b"v"], journal, NOW) == E(
        "ERR key exceeds maximum allowed size"
    )
    assert execute(ks, session, [b"SET", b"k" * (64 * 1024), b"v"], journal, NOW) == OK


def test_commands_binary_safe_keys_and_values() -> None:
    """Keys and values are any bytes, CR, LF, NUL and invalid UTF-8 included."""
    ks = Keyspace(now_ms=NOW)
    session, journal = Session(), OpJournal()
    key, value = b"a\r\nb\x00\xff", b"\x00\r\n\xfe"
    assert execute(ks, session, [b"SET", key, value], journal, NOW) == OK
    assert execute(ks, session, [b"GET", key], journal, NOW) == value
    assert execute(ks, session, [b"SET", b"", b""], journal, NOW) == OK
    assert execute(ks, session, [b"EXISTS", b""], journal, NOW) == 1


def test_commands_journal_logs_effects_not_commands() -> None:
    """INCR logs the Put it produced, EXPIRE the absolute time, SET EX a Put with a deadline,
    and a multi-key command one group."""
    ks = Keyspace(now_ms=NOW)
    session, journal = Session(), OpJournal()
    for line in ["SET c 5", "INCR c", "EXPIRE c 10", "SET t v EX 3", "MSET a 1 b 2", "DEL a b",
                 "PERSIST c", "GET nope", "FLUSHDB"]:  # fmt: skip
        execute(ks, session, [w.encode() for w in line.split()], journal, NOW)
    assert journal.records == [
        [Put(b"0", b"c", b"5")],
        [Put(b"0", b"c", b"6")],
        [Expire(b"0", b"c", NOW + 10_000)],
        [Put(b"0", b"t", b"v", NOW + 3000)],
        [Put(b"0", b"a", b"1"), Put(b"0", b"b", b"2")],
        [Remove(b"0", b"a"), Remove(b"0", b"b")],
        [Expire(b"0", b"c", None)],
        [Flush(b"0")],
    ]


def test_commands_lazy_expiry_is_journaled_with_the_read() -> None:
    """A GET that finds its key past the deadline answers null and journals a Remove."""
    ks = Keyspace(now_ms=NOW)
    session, journal = Session(), OpJournal()
    execute(ks, session, [b"SET", b"k", b"v", b"PX", b"5"], journal, NOW)
    journal.clear()
    assert execute(ks, session, [b"GET", b"k"], journal, NOW + 5) is None
    assert journal.records == [[Remove(b"0", b"k")]]


def test_commands_transaction_is_one_group_and_sees_its_own_writes() -> None:
    """An EXEC runs its commands in order, keeps each result (errors too), logs one group."""
    ks = Keyspace(now_ms=NOW)
    session, journal = Session(), OpJournal()
    queued = [[b"SET", b"a", b"1"], [b"INCR", b"a"], [b"INCRBY", b"a", b"x"], [b"GET", b"a"]]
    results = execute_transaction(ks, session, queued, journal, NOW)
    assert results == [OK, 2, INT_ERR, b"2"]
    assert journal.records == [[Put(b"0", b"a", b"1"), Put(b"0", b"a", b"2")]]


def test_commands_watch_aborts_exec_after_a_touch() -> None:
    """EXEC answers None when a watched key was written between WATCH and EXEC."""
    ks = Keyspace(now_ms=NOW)
    watcher, other, journal = Session(), Session(), OpJournal()
    execute(ks, watcher, [b"WATCH", b"k"], journal, NOW)
    execute(ks, other, [b"SET", b"k", b"v"], journal, NOW)
    assert execute_transaction(ks, watcher, [[b"SET", b"k", b"w"]], journal, NOW) is None
    assert execute(ks, other, [b"GET", b"k"], journal, NOW) == b"v"
    # The watch is gone after EXEC: the next transaction runs.
    assert execute_transaction(ks, watcher, [[b"SET", b"k", b"w"]], journal, NOW) == [OK]
    assert ks.statistics().watched_keys == 0


@pytest.mark.parametrize(
    "touch",
    ["SET k x", "DEL k", "EXPIRE k 100", "PERSIST k", "FLUSHDB", "FLUSHALL", "INCR k",
     "RENAME k j", "GETDEL k", "APPEND k x"],
)  # fmt: skip
def test_commands_watch_sees_every_kind_of_touch(touch: str) -> None:
    """Writes, deletes, expiry changes and flushes of a watched key all abort the EXEC."""
    ks = run([("SET k 1 EX 50", OK)])
    watcher, other, journal = Session(), Session(), OpJournal()
    execute(ks, watcher, [b"WATCH", b"k"], journal, NOW)
    execute(ks, other, [w.encode() for w in touch.split()], journal, NOW)
    assert execute_transaction(ks, watcher, [[b"GET", b"k"]], journal, NOW) is None


def test_commands_watch_ignores_other_keys_and_failed_writes() -> None:
    """Writes to other keys, SET NX that does nothing, and reads leave a WATCH clean."""
    ks = run([("SET k 1", OK)])
    watcher, other, journal = Session(), Session(), OpJournal()
    execute(ks, watcher, [b"WATCH", b"k"], journal, NOW)
    for line in ["SET j 1", "SET k 2 NX", "GET k", "DEL nope", "SELECT 1", "FLUSHDB"]:
        execute(ks, other, [w.encode() for w in line.split()], journal, NOW)
    assert execute_transaction(ks, watcher, [[b"GET", b"k"]], journal, NOW) == [b"1"]


def test_commands_watch_sees_expiry() -> None:
    """A watched key removed by its deadline (timer or lazy) aborts the EXEC."""
    ks = run([("SET k 1 PX 10", OK)])
    watcher, journal = Session(), OpJournal()
    execute(ks, watcher, [b"WATCH", b"k"], journal, NOW)
    ks.expire_due(NOW + 10, journal)
    assert execute_transaction(ks, watcher, [[b"GET", b"k"]], journal, NOW + 10) is None


def test_commands_validate_for_queueing() -> None:
    """validate() answers unknown commands and wrong arity, None for a runnable command."""
    assert validate([b"get", b"k"]) is None
    assert validate([b"GET"]) == arity("get")
    assert validate([b"nope"]) == E("ERR unknown command 'nope', with args beginning with: ")


def test_commands_table_flags() -> None:
    """Every command is exactly one of write or readonly, or session-only (SELECT, WATCH), or
    touches no key at all (PUBLISH, SPUBLISH: neither in Redis either)."""
    session_only = {b"select", b"watch", b"unwatch", b"publish", b"spublish"}
    for name, cmd in COMMANDS.items():
        kinds = cmd.flags & {"write", "readonly"}
        assert len(kinds) == (0 if name in session_only else 1), name
