"""The hash commands: replies and errors as Redis words them, encodings, what they log."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.store._args import Session
from minidb.store._commands import execute, execute_transaction
from minidb.store._journal import OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._results import OK, WRONGTYPE, ErrorReply, Result
from minidb.wal import KIND_HASH, AddElements, RemoveElements, decode_ops, encode_groups

NOW = 1_700_000_000_000
E = ErrorReply
WRONG = E(WRONGTYPE)
INT_ERR = E("ERR value is not an integer or out of range")


class Client:
    """One session on a keyspace, every change journaled (and checked against a replay)."""

    def __init__(self, ks: Keyspace | None = None, protocol: int = 2) -> None:
        self.ks = ks or Keyspace(now_ms=NOW, rng=random.Random(7))
        self.session = Session(protocol=protocol)
        self.journal = OpJournal()

    def __call__(self, *argv: str | bytes) -> Result:
        args = [a.encode() if isinstance(a, str) else a for a in argv]
        return execute(self.ks, self.session, args, self.journal, NOW)

    def replayed(self) -> Keyspace:
        """A keyspace rebuilt from the log records of everything run so far."""
        fresh = Keyspace(now_ms=NOW)
        for payload in encode_groups(self.journal.records):
            fresh.apply_ops(decode_ops(payload), NOW)
        return fresh


def test_hashes_hset_hget_and_friends() -> None:
    """HSET counts new fields (a field repeated once), HMSET answers OK, HSETNX only sets a
    missing field; HGET, HMGET, HLEN, HSTRLEN, HEXISTS, HKEYS, HVALS, HGETALL read them."""
    c = Client()
    assert c("HSET", "h", "a", "1", "b", "2", "a", "3") == 2
    assert c("HSET", "h", "b", "22", "c", "3") == 1
    assert c("HMSET", "h", "d", "4") == OK
    assert c("HSETNX", "h", "d", "x") == 0 and c("HSETNX", "h", "e", "5") == 1
    assert c("HSETNX", "new", "f", "v") == 1
    assert c("HGET", "h", "a") == b"3" and c("HGET", "h", "zz") is None
    assert c("HGET", "nope", "a") is None
    assert c("HMGET", "h", "a", "zz", "b") == [b"3", None, b"22"]
    assert c("HMGET", "nope", "a", "b") == [None, None]
    assert c("HLEN", "h") == 5 and c("HLEN", "nope") == 0
    assert c("HSTRLEN", "h", "b") == 2 and c("HSTRLEN", "h", "zz") == 0
    assert c("HEXISTS", "h", "a") == 1 and c("HEXISTS", "h", "zz") == 0
    assert c("HKEYS", "h") == [b"a", b"b", b"c", b"d", b"e"]  # a listpack keeps insertion order
    assert c("HVALS", "h") == [b"3", b"22", b"3", b"4", b"5"]
    assert c("HGETALL", "h") == {b"a": b"3", b"b": b"22", b"c": b"3", b"d": b"4", b"e": b"5"}
    assert c("HGETALL", "nope") == {} and c("HKEYS", "nope") == [] and c("HVALS", "nope") == []
    assert sorted(c.replayed().items()) == sorted(c.ks.items())


def test_hashes_arity_and_wrongtype_errors() -> None:
    """Odd HSET/HMSET arguments are an arity error; every hash command on a string is
    WRONGTYPE and changes nothing."""
    c = Client()
    assert c("HSET", "h", "a", "1", "b") == E("ERR wrong number of arguments for 'hset' command")
    assert c("HMSET", "h", "a") == E("ERR wrong number of arguments for 'hmset' command")
    assert c("HGET", "h") == E("ERR wrong number of arguments for 'hget' command")
    c("SET", "s", "v")
    for argv in (("HSET", "s", "a", "1"), ("HSETNX", "s", "a", "1"), ("HGET", "s", "a"),
                 ("HMGET", "s", "a"), ("HDEL", "s", "a"), ("HLEN", "s"), ("HSTRLEN", "s", "a"),
                 ("HEXISTS", "s", "a"), ("HGETALL", "s"), ("HKEYS", "s"), ("HVALS", "s"),
                 ("HINCRBY", "s", "a", "1"), ("HINCRBYFLOAT", "s", "a", "1"),
                 ("HRANDFIELD", "s"), ("HRANDFIELD", "s", "2"), ("HSCAN", "s", "0")):  # fmt: skip
        assert c(*argv) == WRONG, argv
    assert c("GET", "s") == b"v"


def test_hashes_hdel_deletes_fields_and_an_emptied_hash() -> None:
    """HDEL counts the fields it deleted; the last one deletes the key, logged only as the
    field removal (no separate REMOVE)."""
    c = Client()
    c("HSET", "h", "a", "1", "b", "2")
    assert c("HDEL", "h", "a", "zz", "a") == 1
    assert c("HDEL", "nope", "a") == 0 and c("HDEL", "h", "zz") == 0
    assert c("HDEL", "h", "b") == 1 and c("EXISTS", "h") == 0
    ops = [op for group in c.journal.records for op in group]
    assert ops == [
        AddElements(b"0", b"h", KIND_HASH, (b"a", b"1", b"b", b"2")),
        RemoveElements(b"0", b"h", KIND_HASH, (b"a",)),
        RemoveElements(b"0", b"h", KIND_HASH, (b"b",)),
    ]
    assert list(c.replayed().items()) == []


def test_hashes_hincrby_and_hincrbyfloat() -> None:
    """The counters in Redis's order of checks and words; the field's new value is logged."""
    c = Client()
    assert c("HINCRBY", "h", "n", "5") == 5 and c("HINCRBY", "h", "n", "-7") == -2
    assert c("HINCRBY", "h", "n", "x") == INT_ERR
    c("HSET", "h", "s", "abc", "big", "9223372036854775807")
    assert c("HINCRBY", "h", "s", "1") == E("ERR hash value is not an integer")
    assert c("HINCRBY", "h", "big", "1") == E("ERR increment or decrement would overflow")
    assert c("HINCRBYFLOAT", "h", "f", "1.5") == b"1.5"
    assert c("HINCRBYFLOAT", "h", "f", "0.25") == b"1.75"
    assert c("HINCRBYFLOAT", "h", "n", "1.5e2") == b"148"
    assert c("HINCRBYFLOAT", "h", "f", "x") == E("ERR value is not a valid float")
    assert c("HINCRBYFLOAT", "h", "f", "inf") == E("ERR value is NaN or Infinity")
    assert c("HINCRBYFLOAT", "h", "s", "1") == E("ERR hash value is not a float")
    c("HSET", "h", "huge", "1e4932")
    assert c("HINCRBYFLOAT", "h", "huge", "1e4932") == E(
        "ERR increment would produce NaN or Infinity"
    )
    assert c("HGET", "h", "f") == b"1.75"
    last = c.journal.records[-1]
    assert last == [AddElements(b"0", b"h", KIND_HASH, (b"huge", b"1e4932"))]
    assert sorted(c.replayed().items()) == sorted(c.ks.items())


def test_hashes_encoding_follows_redis_thresholds_one_way() -> None:
    """listpack until 128 fields or a field or value over 64 bytes, then hashtable for good
    (also after the hash shrinks back); a replay reproduces it."""
    c = Client()
    c("HSET", "small", "f", "x" * 64)
    assert c("OBJECT", "ENCODING", "small") == b"listpack"
    c("HSET", "long", "f", "x" * 65)
    assert c("OBJECT", "ENCODING", "long") == b"hashtable"
    for i in range(128):
        c("HSET", "many", f"f{i}", "v")
    assert c("OBJECT", "ENCODING", "many") == b"listpack"
    c("HSET", "many", "one-more", "v")
    assert c("OBJECT", "ENCODING", "many") == b"hashtable"
    c("HDEL", "many", *[f"f{i}" for i in range(100)])
    assert c("OBJECT", "ENCODING", "many") == b"hashtable"
    c("HSET", "wide", *[x for i in range(129) for x in ("f", str(i))])  # 129 pairs, one field
    assert c("HLEN", "wide") == 1 and c("OBJECT", "ENCODING", "wide") == b"hashtable"
    replayed = Client(c.replayed())
    for key in ("small", "long", "many", "wide"):
        assert replayed("OBJECT", "ENCODING", key) == c("OBJECT", "ENCODING", key), key


def test_hashes_hincrby_of_a_long_field_or_sum_converts() -> None:
    """HINCRBY(FLOAT) of a field over 64 bytes, or a float sum printed over 64 bytes, makes a
    hashtable (Redis 7.0.15 answers so: ``hashTypeSet`` checks lengths); a replay agrees."""
    c = Client()
    c("HINCRBY", "i", "F" * 65, "1")
    c("HINCRBYFLOAT", "f", "F" * 65, "1.5")
    c("HSET", "sum", "a", "1")
    c("HINCRBYFLOAT", "sum", "a", "1e60")  # 60 digits: still a listpack
    assert c("OBJECT", "ENCODING", "sum") == b"listpack"
    c("HINCRBYFLOAT", "sum", "a", "1e70")  # 71 digits
    replayed = Client(c.replayed())
    for key in ("i", "f", "sum"):
        assert c("OBJECT", "ENCODING", key) == b"hashtable", key
        assert replayed("OBJECT", "ENCODING", key) == b"hashtable", key


def test_hashes_hrandfield_counts_and_shapes() -> None:
    """One field; a positive count gives distinct fields (at most all); a negative one
    repeats; WITHVALUES pairs them, as [field, value] pairs in RESP3; range errors."""
    c = Client()
    fields = {b"a": b"1", b"b": b"2", b"c": b"3"}
    c("HSET", "h", "a", "1", "b", "2", "c", "3")
    assert c("HRANDFIELD", "h") in fields and c("HRANDFIELD", "nope") is None
    two = c("HRANDFIELD", "h", "2")
    assert isinstance(two, list) and len(set(two)) == 2 and set(two) <= set(fields)
    assert sorted(c("HRANDFIELD", "h", "10")) == sorted(fields)  # type: ignore[type-var]
    many = c("HRANDFIELD", "h", "-10")
    assert isinstance(many, list) and len(many) == 10 and set(many) <= set(fields)
    flat = c("HRANDFIELD", "h", "-4", "WITHVALUES")
    assert isinstance(flat, list) and len(flat) == 8
    assert all(fields[f] == v for f, v in zip(flat[::2], flat[1::2], strict=True))
    assert c("HRANDFIELD", "h", "0") == [] and c("HRANDFIELD", "nope", "3") == []
    r3 = Client(c.ks, protocol=3)
    pairs = r3("HRANDFIELD", "h", "2", "WITHVALUES")
    assert isinstance(pairs, list) and all(fields[p[0]] == p[1] for p in pairs)  # type: ignore[index]
    assert c("HRANDFIELD", "h", "1", "x") == E("ERR syntax error")
    assert c("HRANDFIELD", "h", "x") == INT_ERR
    assert c("HRANDFIELD", "h", "-9223372036854775808") == E(
        "ERR value is out of range, must be between -9223372036854775807 and 9223372036854775807"
    )
    assert c("HRANDFIELD", "h", "-9223372036854770000", "WITHVALUES") == E(
        "ERR value is out of range"
    )


def test_hashes_hscan_small_at_once_large_by_cursor() -> None:
    """A listpack hash comes whole with cursor 0; a hashtable one pages, every field once,
    even with fields added and removed between pages; MATCH, COUNT and NOVALUES apply."""
    c = Client()
    c("HSET", "h", "a", "1", "b", "2", "ab", "3")
    assert c("HSCAN", "h", "0") == [b"0", [b"a", b"1", b"b", b"2", b"ab", b"3"]]
    assert c("HSCAN", "h", "0", "MATCH", "a*", "COUNT", "1") == [b"0", [b"a", b"1", b"ab", b"3"]]
    assert c("HSCAN", "h", "0", "NOVALUES") == [b"0", [b"a", b"b", b"ab"]]
    assert c("HSCAN", "nope", "0") == [b"0", []]
    assert c("HSCAN", "h", "x") == E("ERR invalid cursor")
    assert c("HSCAN", "h", "0", "COUNT", "0") == E("ERR syntax error")
    assert c("HSCAN", "h", "0", "FOO") == E("ERR syntax error")
    for i in range(500):
        c("HSET", "big", f"f{i}", str(i))
    seen: list[bytes] = []
    cursor = b"0"
    steps = 0
    while True:
        reply = c("HSCAN", "big", cursor, "COUNT", "20")
        assert isinstance(reply, list)
        cursor, page = reply
        assert isinstance(page, list) and isinstance(cursor, bytes)
        seen += page[::2]
        steps += 1
        c("HSET", "big", f"new{steps}", "x")  # changes between pages
        c("HDEL", "big", f"new{steps - 1}")
        if cursor == b"0":
            break
    original = [f"f{i}".encode() for i in range(500)]
    assert steps > 10 and sorted(f for f in seen if f in set(original)) == sorted(original)


def test_hashes_transaction_rolls_back_exactly() -> None:
    """An EXEC of hash changes, rolled back (as when the log fails), leaves the keyspace and
    every hash's encoding as they were."""
    c = Client()
    c("HSET", "h", "a", "1")
    c("HSET", "g", "x", "1")
    before = sorted(c.ks.items())
    journal = OpJournal()
    queued = [[b"HSET", b"h", b"b", b"x" * 100], [b"HDEL", b"g", b"x"],
              [b"HINCRBY", b"n", b"f", b"1"], [b"RENAME", b"h", b"h2"],
              [b"HSET", b"h2", b"c", b"3"]]  # fmt: skip
    results = execute_transaction(c.ks, c.session, queued, journal, NOW)
    assert results == [1, 1, 1, OK, 1]
    c.ks.rollback(journal)
    assert sorted(c.ks.items()) == before
    assert c("OBJECT", "ENCODING", "h") == b"listpack"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["HSET", "HDEL", "HINCRBY", "HSETNX", "DEL", "RENAME"]),
            st.sampled_from(["h", "g"]),
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["1", "2", "x" * 70]),
        ),
        max_size=30,
    )
)
def test_hashes_any_sequence_replays_to_the_same_keyspace(
    steps: list[tuple[str, str, str, str]],
) -> None:
    """Whatever runs, its log replays to the same keyspace, encodings included."""
    c = Client()
    for name, key, field, value in steps:
        if name == "RENAME":
            c(name, key, "g" if key == "h" else "h")
        elif name == "DEL":
            c(name, key)
        elif name == "HDEL":
            c(name, key, field)
        else:
            c(name, key, field, value)
    replayed = c.replayed()
    assert sorted(replayed.items()) == sorted(c.ks.items())
    other = Client(replayed)
    for key in ("h", "g"):
        assert other("OBJECT", "ENCODING", key) == c("OBJECT", "ENCODING", key)
