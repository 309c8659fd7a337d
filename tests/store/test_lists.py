"""The list commands: replies and errors as Redis words them, encodings, what they log."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.protocol._results import NULL_ARRAY
from minidb.store._commands import execute_transaction
from minidb.store._journal import OpJournal
from minidb.store._results import OK, WRONGTYPE, ErrorReply, Simple
from minidb.wal import Remove
from minidb.wal._ops import ListInsert, ListPop, ListPush, ListRemove, ListSet
from tests.store.test_hashes import INT_ERR, NOW, Client

E = ErrorReply
WRONG = E(WRONGTYPE)
B = b"0"
POSITIVE = E("ERR value is out of range, must be positive")


def test_lists_push_pop_range_and_log() -> None:
    """Pushes answer the length (LPUSH reverses its arguments), pops take from their end,
    the last pop deletes the key; each command logs its effect by position."""
    c = Client()
    assert c("LPUSH", "l", "a", "b") == 2 and c("RPUSH", "l", "c") == 3
    assert c("LRANGE", "l", "0", "-1") == [b"b", b"a", b"c"]
    assert c("LPUSHX", "nope", "x") == 0 and c("RPUSHX", "l", "d") == 4
    assert c("LPOP", "l") == b"b" and c("RPOP", "l", "2") == [b"d", b"c"]
    assert c("LPOP", "l", "0") == [] and c("LLEN", "l") == 1
    assert c("RPOP", "l", "5") == [b"a"] and c("EXISTS", "l") == 0
    assert c("LPOP", "l") is None and c("LPOP", "l", "1") is NULL_ARRAY
    assert c("LPOP", "l", "-1") == POSITIVE and c("LPOP", "l", "x") == POSITIVE
    assert c("LPOP", "l", "1", "2") == E("ERR wrong number of arguments for 'lpop' command")
    assert c("TYPE", "nope") == Simple("none")
    ops = [op for group in c.journal.records for op in group]
    assert ops == [
        ListPush(B, b"l", True, (b"a", b"b")),
        ListPush(B, b"l", False, (b"c",)),
        ListPush(B, b"l", False, (b"d",)),
        ListPop(B, b"l", True, 1),
        ListPop(B, b"l", False, 2),
        ListPop(B, b"l", False, 1),
    ]


def test_lists_lrange_lindex_bounds() -> None:
    c = Client()
    c("RPUSH", "l", *"abcdef")
    assert c("LRANGE", "l", "1", "2") == [b"b", b"c"] and c("LRANGE", "l", "-2", "100") == [
        b"e", b"f",
    ]  # fmt: skip
    assert c("LRANGE", "l", "4", "1") == [] and c("LRANGE", "l", "-100", "0") == [b"a"]
    assert c("LRANGE", "l", "9", "10") == [] and c("LRANGE", "nope", "0", "-1") == []
    assert c("LRANGE", "l", "x", "1") == INT_ERR and c("LRANGE", "nope", "0", "x") == INT_ERR
    assert c("LINDEX", "l", "0") == b"a" and c("LINDEX", "l", "-1") == b"f"
    assert c("LINDEX", "l", "6") is None and c("LINDEX", "l", "-7") is None
    assert c("LINDEX", "nope", "x") is None and c("LINDEX", "l", "x") == INT_ERR


def test_lists_lset_linsert_lrem_ltrim() -> None:
    c = Client()
    c("RPUSH", "l", "a", "b", "a", "c", "a")
    assert c("LSET", "l", "-1", "z") == OK and c("LSET", "l", "5", "z") == E(
        "ERR index out of range"
    )
    assert c("LSET", "nope", "0", "z") == E("ERR no such key")
    assert c("LSET", "nope", "x", "z") == E("ERR no such key")
    assert c("LINSERT", "l", "BEFORE", "b", "x") == 6 and c("LINSERT", "l", "after", "z", "y") == 7
    assert c("LINSERT", "l", "before", "q", "x") == -1
    assert c("LINSERT", "no", "before", "q", "x") == 0
    assert c("LINSERT", "l", "middle", "a", "x") == E("ERR syntax error")
    assert c("LRANGE", "l", "0", "-1") == [b"a", b"x", b"b", b"a", b"c", b"z", b"y"]
    assert c("LREM", "l", "-1", "a") == 1 and c("LREM", "l", "0", "q") == 0
    assert c("LREM", "l", "x", "a") == INT_ERR
    assert c("LTRIM", "l", "1", "-2") == OK and c("LRANGE", "l", "0", "-1") == [
        b"x", b"b", b"c", b"z",
    ]  # fmt: skip
    assert c("LTRIM", "nope", "0", "1") == OK
    assert c("LTRIM", "l", "5", "1") == OK and c("EXISTS", "l") == 0
    ops = [op for group in c.journal.records[1:] for op in group]
    assert ops == [
        ListSet(B, b"l", 4, b"z"),
        ListInsert(B, b"l", 1, b"x"),
        ListInsert(B, b"l", 6, b"y"),
        ListRemove(B, b"l", -1, b"a"),
        ListPop(B, b"l", True, 1),
        ListPop(B, b"l", False, 1),
        Remove(B, b"l"),
    ]


def test_lists_lpos_options() -> None:
    c = Client()
    c("RPUSH", "l", "a", "b", "c", "1", "2", "3", "c", "c")
    assert c("LPOS", "l", "c") == 2 and c("LPOS", "l", "c", "RANK", "2") == 6
    assert c("LPOS", "l", "c", "RANK", "-1") == 7 and c("LPOS", "l", "c", "COUNT", "0") == [2, 6, 7]
    assert c("LPOS", "l", "c", "RANK", "-1", "COUNT", "2") == [7, 6]
    assert c("LPOS", "l", "c", "COUNT", "0", "MAXLEN", "3") == [2]
    assert c("LPOS", "l", "x") is None and c("LPOS", "l", "x", "COUNT", "2") == []
    assert c("LPOS", "nope", "x") is None and c("LPOS", "nope", "x", "COUNT", "1") == []
    assert c("LPOS", "l", "c", "RANK", "0") == E(
        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... "
        "or use negative to start from the end of the list"
    )
    assert c("LPOS", "l", "c", "COUNT", "-1") == E("ERR COUNT can't be negative")
    assert c("LPOS", "l", "c", "MAXLEN", "x") == E("ERR MAXLEN can't be negative")
    assert c("LPOS", "l", "c", "COUNT") == E("ERR syntax error")


def test_lists_lmove_rpoplpush_lmpop() -> None:
    """LMOVE is one record of a pop and a push (a rotation on one key); LMPOP the first
    non-empty list's pop, as [key, elements]."""
    c = Client()
    c("RPUSH", "a", "1", "2", "3")
    c.journal = OpJournal()
    assert c("LMOVE", "a", "b", "LEFT", "RIGHT") == b"1" and c("RPOPLPUSH", "a", "b") == b"3"
    assert c("LRANGE", "b", "0", "-1") == [b"3", b"1"]
    assert c("LMOVE", "b", "b", "left", "right") == b"3" and c("LRANGE", "b", "0", "-1") == [
        b"1", b"3",
    ]  # fmt: skip
    assert c("LMOVE", "a", "a", "left", "left") == b"2"  # one element: nothing changes
    assert c("LMOVE", "nope", "b", "left", "left") is None
    assert c("LMOVE", "a", "b", "up", "left") == E("ERR syntax error")
    assert c.journal.records[0] == [ListPop(B, b"a", True, 1), ListPush(B, b"b", False, (b"1",))]
    assert c("LMPOP", "2", "nope", "b", "LEFT", "COUNT", "5") == [b"b", [b"1", b"3"]]
    assert c("LMPOP", "1", "nope", "RIGHT") is NULL_ARRAY and c("EXISTS", "b") == 0
    assert c("LMPOP", "0", "a", "LEFT") == E("ERR numkeys should be greater than 0")
    assert c("LMPOP", "x", "a", "LEFT") == E("ERR numkeys should be greater than 0")
    assert c("LMPOP", "2", "a", "LEFT") == E("ERR syntax error")
    assert c("LMPOP", "1", "a", "LEFT", "COUNT", "0") == E("ERR count should be greater than 0")
    assert c("LMPOP", "1", "a", "LEFT", "COUNT", "1", "COUNT", "1") == E("ERR syntax error")
    assert c("LMPOP", "1", "a", "RIGHT", "COUNT", "2") == [b"a", [b"2"]]


def test_lists_wrongtype_on_every_command() -> None:
    c = Client()
    c("SET", "str", "v")
    c("RPUSH", "l", "1")
    for argv in (("LPUSH", "str", "1"), ("RPUSH", "str", "1"), ("LPUSHX", "str", "1"),
                 ("RPUSHX", "str", "1"), ("LPOP", "str"), ("RPOP", "str", "1"), ("LLEN", "str"),
                 ("LRANGE", "str", "0", "1"), ("LINDEX", "str", "0"), ("LSET", "str", "0", "x"),
                 ("LREM", "str", "0", "x"), ("LTRIM", "str", "0", "1"),
                 ("LINSERT", "str", "before", "a", "b"), ("LPOS", "str", "x"),
                 ("LMOVE", "str", "l", "left", "left"), ("LMOVE", "l", "str", "left", "left"),
                 ("RPOPLPUSH", "l", "str"), ("LMPOP", "2", "nope", "str", "left"),
                 ("GET", "l"), ("SADD", "l", "x"), ("HSET", "l", "f", "v")):  # fmt: skip
        assert c(*argv) == WRONG, argv
    assert c("LRANGE", "l", "0", "-1") == [b"1"] and c("TYPE", "l") == Simple("list")


def test_lists_encoding_follows_redis_thresholds() -> None:
    """A listpack past 8 KiB is a quicklist, back to a listpack at 4 KiB as it shrinks."""
    c = Client()
    c("RPUSH", "l", "a")
    assert c("OBJECT", "ENCODING", "l") == b"listpack"
    c("RPUSH", "l", "x" * 8200)
    assert c("OBJECT", "ENCODING", "l") == b"quicklist"
    c("RPOP", "l")
    assert c("OBJECT", "ENCODING", "l") == b"listpack"


def test_lists_transaction_rolls_back_exactly() -> None:
    """An EXEC of list changes, rolled back (as when the log fails), leaves the keyspace and
    every list's encoding as they were."""
    c = Client()
    c("RPUSH", "l", "a", "b", "a")
    c("RPUSH", "m", "x")
    c("PEXPIRE", "m", "100000")
    before = sorted(c.ks.items())
    journal = OpJournal()
    queued = [[b"LPUSH", b"l", b"y" * 9000], [b"LREM", b"l", b"0", b"a"],
              [b"LMOVE", b"m", b"l", b"LEFT", b"LEFT"], [b"LSET", b"l", b"0", b"q"],
              [b"LINSERT", b"l", b"AFTER", b"b", b"c"], [b"LTRIM", b"l", b"1", b"1"],
              [b"RPUSH", b"n", b"1"]]  # fmt: skip
    results = execute_transaction(c.ks, c.session, queued, journal, NOW)
    assert results == [4, 2, b"x", OK, 4, OK, 1]
    c.ks.rollback(journal)
    assert sorted(c.ks.items()) == before
    assert c("OBJECT", "ENCODING", "l") == b"listpack" and c("PTTL", "m") == 100000


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["LPUSH", "RPUSH", "LPOP", "RPOP", "LSET", "LINSERT", "LREM",
                             "LTRIM", "LMOVE", "LMPOP", "DEL", "RPUSHX"]),
            st.sampled_from(["a", "b"]),
            st.integers(-3, 3),
            st.lists(st.sampled_from(["1", "2", "x", "y" * 3000]), min_size=1, max_size=3),
        ),
        max_size=30,
    )
)  # fmt: skip
def test_lists_any_sequence_replays_to_the_same_keyspace(
    steps: list[tuple[str, str, int, list[str]]],
) -> None:
    """Whatever runs, its log replays to the same keyspace, encodings included."""
    c = Client()
    for name, key, n, items in steps:
        other = "b" if key == "a" else "a"
        if name in ("LPUSH", "RPUSH", "RPUSHX"):
            c(name, key, *items)
        elif name in ("LPOP", "RPOP"):
            c(name, key, str(abs(n)))
        elif name == "LSET":
            c(name, key, str(n), items[0])
        elif name == "LINSERT":
            c(name, key, "BEFORE" if n > 0 else "AFTER", items[0], items[-1])
        elif name == "LREM":
            c(name, key, str(n), items[0])
        elif name == "LTRIM":
            c(name, key, str(n), str(-abs(n) - 1))
        elif name == "LMOVE":
            c(name, key, other if n else key, "LEFT" if n > 0 else "RIGHT", "RIGHT")
        elif name == "LMPOP":
            c(name, "2", key, other, "LEFT", "COUNT", str(abs(n) + 1))
        else:
            c(name, key)
    replayed = c.replayed()
    assert sorted(replayed.items()) == sorted(c.ks.items())
    again = Client(replayed)
    for key in ("a", "b"):
        assert again("OBJECT", "ENCODING", key) == c("OBJECT", "ENCODING", key)
