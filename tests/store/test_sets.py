"""The set commands: replies and errors as Redis words them, encodings, what they log."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.store._results import WRONGTYPE, ErrorReply, Simple
from minidb.wal import KIND_SET, AddElements, PutContainer, Remove, RemoveElements
from tests.store.test_hashes import Client

E = ErrorReply
WRONG = E(WRONGTYPE)
B = b"0"


def test_sets_sadd_srem_and_membership() -> None:
    """SADD counts the new members, SREM the removed ones (the last deletes the key); the
    membership reads; an intset's members come sorted by value, as Redis sends them."""
    c = Client()
    assert c("SADD", "s", "3", "1", "2", "1") == 3 and c("SADD", "s", "2") == 0
    assert c("SMEMBERS", "s") == [b"1", b"2", b"3"]
    assert c("SISMEMBER", "s", "2") == 1 and c("SISMEMBER", "s", "9") == 0
    assert c("SISMEMBER", "nope", "2") == 0
    assert c("SMISMEMBER", "s", "1", "9") == [1, 0] and c("SMISMEMBER", "nope", "1") == [0]
    assert c("SCARD", "s") == 3 and c("SCARD", "nope") == 0
    assert c("SREM", "s", "1", "9", "1") == 1 and c("SREM", "nope", "1") == 0
    assert c("SREM", "s", "2", "3") == 2 and c("EXISTS", "s") == 0
    assert c("SMEMBERS", "s") == []
    ops = [op for group in c.journal.records for op in group]
    assert ops == [
        AddElements(B, b"s", KIND_SET, (b"3", b"1", b"2")),
        RemoveElements(B, b"s", KIND_SET, (b"1",)),
        RemoveElements(B, b"s", KIND_SET, (b"2", b"3")),
    ]


def test_sets_resp3_replies_are_sets() -> None:
    """SMEMBERS, SINTER, SUNION, SDIFF and SPOP with a count answer a RESP3 set."""
    c = Client(protocol=3)
    c("SADD", "a", "x", "y")
    c("SADD", "b", "y", "z")
    assert c("SMEMBERS", "a") == {b"x", b"y"} and c("SMEMBERS", "nope") == set()
    assert c("SINTER", "a", "b") == {b"y"} and c("SUNION", "a", "b") == {b"x", b"y", b"z"}
    assert c("SDIFF", "a", "b") == {b"x"} and c("SPOP", "nope", "2") == set()
    assert isinstance(c("SPOP", "a", "1"), set)


def test_sets_wrongtype_on_every_command() -> None:
    """Every set command meeting a string answers WRONGTYPE (the algebra checks every key
    first); a STORE destination of another type is replaced."""
    c = Client()
    c("SET", "str", "v")
    c("SADD", "s", "1")
    for argv in (("SADD", "str", "1"), ("SREM", "str", "1"), ("SMEMBERS", "str"),
                 ("SISMEMBER", "str", "1"), ("SMISMEMBER", "str", "1"), ("SCARD", "str"),
                 ("SPOP", "str"), ("SPOP", "str", "2"), ("SRANDMEMBER", "str"),
                 ("SRANDMEMBER", "str", "2"), ("SINTER", "s", "str"), ("SINTER", "nope", "str"),
                 ("SUNION", "s", "str"), ("SDIFF", "s", "str"), ("SINTERCARD", "2", "s", "str"),
                 ("SMOVE", "str", "s", "1"), ("SMOVE", "s", "str", "1"), ("SSCAN", "str", "0"),
                 ("SINTERSTORE", "d", "s", "str")):  # fmt: skip
        assert c(*argv) == WRONG, argv
    assert c("SMOVE", "nope", "str", "1") == 0  # a missing source answers before any type check
    assert c("SUNIONSTORE", "str", "s") == 1 and c("TYPE", "str") == Simple("set")
    assert c("SMEMBERS", "str") == [b"1"]


def test_sets_algebra_and_store_forms() -> None:
    """SINTER/SUNION/SDIFF with missing keys as empty sets; the STORE forms replace the
    destination (expiry dropped), delete it for an empty result, and log one PUT_CONTAINER."""
    c = Client()
    c("SADD", "a", "1", "2", "3", "x")
    c("SADD", "b", "2", "3", "4")
    assert sorted(c("SINTER", "a", "b")) == [b"2", b"3"]  # type: ignore[type-var]
    assert c("SINTER", "a", "nope") == [] and c("SINTER", "a") == c("SMEMBERS", "a")
    assert sorted(c("SUNION", "a", "b", "nope")) == [b"1", b"2", b"3", b"4", b"x"]  # type: ignore[type-var]
    assert sorted(c("SDIFF", "a", "b", "nope")) == [b"1", b"x"]  # type: ignore[type-var]
    assert c("SDIFF", "a", "a") == [] and c("SDIFF", "nope", "a") == []
    c("SET", "dest", "old")
    c("EXPIRE", "dest", "100")
    assert c("SINTERSTORE", "dest", "a", "b") == 2
    # (a set's elements are logged in its iteration order, which follows the string hash)
    (op,) = c.journal.records[-1]
    assert op._replace(elements=tuple(sorted(op.elements))) == PutContainer(
        B, b"dest", KIND_SET, (b"2", b"3")
    )
    assert c("TTL", "dest") == -1 and c("OBJECT", "ENCODING", "dest") == b"intset"
    assert c("SUNIONSTORE", "u", "a", "b") == 5 and c("OBJECT", "ENCODING", "u") == b"listpack"
    assert c("SDIFFSTORE", "d", "a", "b") == 2
    assert c("SINTERSTORE", "dest", "a", "nope") == 0 and c("EXISTS", "dest") == 0
    assert c.journal.records[-1] == [Remove(B, b"dest")]
    assert c("SDIFFSTORE", "a", "a", "b") == 2 and sorted(c("SMEMBERS", "a")) == [b"1", b"x"]  # type: ignore[type-var]
    assert sorted(c.replayed().items()) == sorted(c.ks.items())


def test_sets_sintercard_options_and_errors() -> None:
    """SINTERCARD counts the intersection, stopping at LIMIT; its argument errors."""
    c = Client()
    c("SADD", "a", "1", "2", "3")
    c("SADD", "b", "1", "2", "3", "4")
    assert c("SINTERCARD", "2", "a", "b") == 3 and c("SINTERCARD", "2", "a", "b", "LIMIT", "2") == 2
    assert c("SINTERCARD", "2", "a", "nope") == 0 and c("SINTERCARD", "1", "a", "LIMIT", "0") == 3
    assert c("SINTERCARD", "0", "a") == E("ERR numkeys should be greater than 0")
    assert c("SINTERCARD", "x", "a") == E("ERR numkeys should be greater than 0")
    assert c("SINTERCARD", "3", "a", "b") == E(
        "ERR Number of keys can't be greater than number of args"
    )
    assert c("SINTERCARD", "1", "a", "LIMIT", "-1") == E("ERR LIMIT can't be negative")
    assert c("SINTERCARD", "1", "a", "FOO") == E("ERR syntax error")
    assert c("SINTERCARD", "1", "a", "LIMIT") == E("ERR syntax error")


def test_sets_spop_srandmember_and_smove() -> None:
    """SPOP takes random members (all of them deletes the key, logged as one REMOVE);
    SRANDMEMBER leaves them; SMOVE moves one, creating or deleting keys as needed."""
    c = Client()
    members = {b"a", b"b", b"c", b"d"}
    c("SADD", "s", *members)
    one = c("SPOP", "s")
    assert one in members and c("SCARD", "s") == 3
    two = c("SPOP", "s", "2")
    assert isinstance(two, list) and len(two) == 2 and c("SCARD", "s") == 1
    rest = c("SPOP", "s", "5")
    assert isinstance(rest, list) and {one, *two, *rest} == members and c("EXISTS", "s") == 0
    assert c.journal.records[-1] == [Remove(B, b"s")]
    assert c("SPOP", "s") is None and c("SPOP", "s", "0") == []
    assert c("SPOP", "s", "-1") == E("ERR value is out of range, must be positive")
    assert c("SPOP", "s", "1", "2") == E("ERR syntax error")
    c("SADD", "s", *members)
    assert c("SRANDMEMBER", "s") in members and c("SRANDMEMBER", "nope") is None
    pick = c("SRANDMEMBER", "s", "3")
    assert isinstance(pick, list) and len(set(pick)) == 3 and set(pick) <= members
    many = c("SRANDMEMBER", "s", "-9")
    assert isinstance(many, list) and len(many) == 9 and set(many) <= members
    assert sorted(c("SRANDMEMBER", "s", "9")) == sorted(members)  # type: ignore[type-var]
    assert c("SRANDMEMBER", "nope", "3") == [] and c("SCARD", "s") == 4
    assert c("SMOVE", "s", "t", "a") == 1 and c("SMOVE", "s", "t", "a") == 0
    assert c("SMOVE", "s", "s", "b") == 1 and c("SMOVE", "s", "s", "a") == 0
    c("SMOVE", "s", "t", "b")
    c("SMOVE", "s", "t", "c")
    assert c("SMOVE", "s", "t", "d") == 1 and c("EXISTS", "s") == 0
    assert sorted(c("SMEMBERS", "t")) == sorted(members)  # type: ignore[type-var]
    assert sorted(c.replayed().items()) == sorted(c.ks.items())


def test_sets_encodings_follow_redis() -> None:
    """intset for integers up to 512, listpack for up to 128 short members, hashtable past
    either; an intset meeting a word becomes a listpack while small; never back."""
    c = Client()
    c("SADD", "i", *[str(n) for n in range(512)])
    assert c("OBJECT", "ENCODING", "i") == b"intset"
    c("SADD", "i", "512")
    assert c("OBJECT", "ENCODING", "i") == b"hashtable"
    c("SADD", "m", "1", "2")
    c("SADD", "m", "word")
    assert c("OBJECT", "ENCODING", "m") == b"listpack"
    c("SADD", "w", "x" * 65)
    assert c("OBJECT", "ENCODING", "w") == b"hashtable"
    c("SADD", "l", *[f"m{n}" for n in range(128)])
    assert c("OBJECT", "ENCODING", "l") == b"listpack"
    c("SADD", "l", "one more")
    c("SREM", "l", *[f"m{n}" for n in range(120)])
    assert c("OBJECT", "ENCODING", "l") == b"hashtable"
    other = Client(c.replayed())
    for key in ("i", "m", "w", "l"):
        assert other("OBJECT", "ENCODING", key) == c("OBJECT", "ENCODING", key), key


def test_sets_sscan() -> None:
    """A small set comes whole; a large one pages by cursor, every member once; NOVALUES is
    HSCAN's only."""
    c = Client()
    c("SADD", "s", "b", "a")
    assert sorted(c("SSCAN", "s", "0")[1]) == [b"a", b"b"]  # type: ignore[index]
    assert c("SSCAN", "s", "0", "NOVALUES") == E("ERR NOVALUES option can only be used in HSCAN")
    c("SADD", "big", *[f"m{n}" for n in range(300)])
    seen: list[bytes] = []
    cursor: object = b"0"
    while True:
        reply = c("SSCAN", "big", cursor, "COUNT", "25", "MATCH", "m1*")  # type: ignore[arg-type]
        assert isinstance(reply, list)
        cursor, page = reply
        seen += page  # type: ignore[arg-type]
        if cursor == b"0":
            break
    assert sorted(seen) == sorted(f"m{n}".encode() for n in range(300) if str(n).startswith("1"))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["SADD", "SREM", "SPOP", "SMOVE", "SINTERSTORE", "SUNIONSTORE",
                             "SDIFFSTORE", "DEL"]),
            st.sampled_from(["a", "b"]),
            st.lists(st.sampled_from(["1", "2", "x", "y" * 70]), min_size=1, max_size=3),
        ),
        max_size=30,
    )
)  # fmt: skip
def test_sets_any_sequence_replays_to_the_same_keyspace(
    steps: list[tuple[str, str, list[str]]],
) -> None:
    """Whatever runs (random pops included), its log replays to the same keyspace."""
    c = Client()
    for name, key, members in steps:
        other = "b" if key == "a" else "a"
        if name in ("SADD", "SREM"):
            c(name, key, *members)
        elif name == "SPOP":
            c(name, key, str(len(members)))
        elif name == "SMOVE":
            c(name, key, other, members[0])
        elif name == "DEL":
            c(name, key)
        else:
            c(name, key, key, other)
    replayed = c.replayed()
    assert sorted(replayed.items()) == sorted(c.ks.items())
    again = Client(replayed)
    for key in ("a", "b"):
        assert again("OBJECT", "ENCODING", key) == c("OBJECT", "ENCODING", key)
