"""The typed keyspace: containers beside strings, their journal and undo, copy-on-write under a
snapshot, replay of the typed ops, snapshots, and the key commands on every type."""

from __future__ import annotations

import pytest

from minidb.protocol import SCAN_START, Delete, Get, Scan, Set, Ttl
from minidb.store._args import Session
from minidb.store._commands import execute
from minidb.store._encodings import HASHTABLE, INTSET, LISTPACK
from minidb.store._hashvalue import HashValue, hash_prepare, hash_set, new_hash
from minidb.store._journal import FieldsUndo, MembersUndo, OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._results import OK, WRONGTYPE, ErrorReply, Simple, WrongTypeError
from minidb.store._state import StoreState
from minidb.store._values import SetValue, new_set, set_add
from minidb.wal import (
    KIND_HASH,
    KIND_SET,
    AddElements,
    Copy,
    Put,
    PutContainer,
    Remove,
    RemoveElements,
    Rename,
    decode_ops,
)

NOW = 1_700_000_000_000
B = b"0"
WRONG = ErrorReply(WRONGTYPE)


def hset(ks: Keyspace, key: bytes, *pairs: bytes, j: OpJournal | None = None) -> HashValue:
    """What a hash command does through the keyspace: for_change, the change, its journal."""
    found = ks.container(B, key, HashValue, NOW, j)
    h = ks.for_change(B, key, found, new_hash, j)
    encoding = h.encoding
    hash_prepare(h, pairs)
    olds = hash_set(h, pairs)
    if j is not None:
        j.undo.append(FieldsUndo(B, key, encoding, olds))
        j.add(AddElements(B, key, KIND_HASH, pairs))
    return h


def sadd(ks: Keyspace, key: bytes, *members: bytes, j: OpJournal | None = None) -> SetValue:
    found = ks.container(B, key, SetValue, NOW, j)
    s = ks.for_change(B, key, found, lambda e: new_set(members[0], len(members), e), j)
    encoding = s.encoding
    added = set_add(s, members, len(members))
    if j is not None:
        j.undo.append(MembersUndo(B, key, encoding, added, []))
        j.add(AddElements(B, key, KIND_SET, members))
    return s


def run(ks: Keyspace, line: str) -> object:
    return execute(ks, Session(), [w.encode() for w in line.split(" ")], OpJournal(), NOW)


def test_typed_keyspace_string_reads_refuse_a_container() -> None:
    """``get`` and ``lookup_string`` raise WRONGTYPE for a container; ``lookup`` and ``value``
    answer whatever the key holds."""
    ks = Keyspace(now_ms=NOW)
    h = hset(ks, b"h", b"f", b"v")
    with pytest.raises(WrongTypeError):
        ks.get(B, b"h", NOW, None)
    with pytest.raises(WrongTypeError):
        ks.lookup_string(B, b"h", NOW, None)
    assert ks.lookup(B, b"h", NOW, None) == (h, None)
    assert ks.value(B, b"h", NOW, None) is h
    with pytest.raises(WrongTypeError):
        ks.container(B, b"h", SetValue, NOW, None)
    ks.put(B, b"s", b"x", None, None)
    with pytest.raises(WrongTypeError):
        ks.container(B, b"s", HashValue, NOW, None)


def test_typed_keyspace_rollback_restores_containers_exactly() -> None:
    """A group creating, changing, emptying, replacing and renaming containers rolls back to
    the exact state before it: contents, encodings, expiry, counts."""
    ks = Keyspace(now_ms=NOW)
    hset(ks, b"h", b"a", b"1", b"b", b"2")
    sadd(ks, b"s", b"1", b"2")
    ks.set_expiry(B, b"s", NOW + 5000, None)
    before = sorted(ks.items())
    j = OpJournal()
    hset(ks, b"h", b"a", b"changed", b"c", b"x" * 100, j=j)  # converts to a hashtable
    assert ks.container(B, b"h", HashValue, NOW, j).encoding == HASHTABLE  # type: ignore[union-attr]
    sadd(ks, b"s", b"word", j=j)  # intset -> listpack
    s = ks.container(B, b"s", SetValue, NOW, j)
    assert s is not None
    removed = sorted(s)
    s = ks.for_change(B, b"s", s, new_set, j)  # type: ignore[arg-type]
    s.clear()
    j.undo.append(MembersUndo(B, b"s", s.encoding, [], removed))
    ks.drop_empty(B, b"s", j)
    hset(ks, b"new", b"f", b"v", j=j)
    ks.rename(B, b"h", b"h2", j)
    ks.copy(B, b"h2", b"1", b"h3", j)
    ks.put(B, b"new", b"string now", None, j)
    ks.rollback(j)
    assert sorted(ks.items()) == before
    assert len(ks) == 2 and ks.statistics().keys_with_expiry == 1
    h = ks.container(B, b"h", HashValue, NOW, None)
    assert h is not None and h.encoding == LISTPACK
    assert list(h.items()) == [(b"a", b"1"), (b"b", b"2")]
    assert ks.container(B, b"s", SetValue, NOW, None).encoding == INTSET  # type: ignore[union-attr]


def test_typed_keyspace_journals_effects_only() -> None:
    """Rename and Copy are one op each whatever the value; element changes are element ops;
    an emptied container logs no Remove (its element op deletes it at replay)."""
    ks = Keyspace(now_ms=NOW)
    j = OpJournal()
    hset(ks, b"h", b"f", b"v", j=j)
    ks.rename(B, b"h", b"g", j)
    ks.copy(B, b"g", b"1", b"g", j)
    assert j.open_ops == [
        AddElements(B, b"h", KIND_HASH, (b"f", b"v")),
        Rename(B, b"h", b"g"),
        Copy(B, b"g", b"1", b"g"),
    ]
    copy = ks.container(b"1", b"g", HashValue, NOW, None)
    original = ks.container(B, b"g", HashValue, NOW, None)
    assert copy == original and copy is not original


def test_typed_keyspace_copy_on_write_keeps_a_frozen_snapshot_true() -> None:
    """A container captured by a frozen snapshot is never changed afterwards: the owner
    changes a copy in the key's place, once; after ``snapshot_done`` nothing is copied."""
    state = StoreState(Keyspace(now_ms=NOW))
    ks = state.keyspace
    h = hset(ks, b"h", b"f", b"1")
    sadd(ks, b"s", b"m")
    ks.set_expiry(B, b"s", NOW + 10_000, None)
    payloads = state.frozen_snapshot()  # captured here, encoded below
    h2 = hset(ks, b"h", b"f", b"2", b"g", b"3")
    assert h2 is not h and h == {b"f": b"1"}
    assert hset(ks, b"h", b"z", b"9") is h2  # one copy per checkpoint, not per change
    sadd(ks, b"s", b"n")
    restored = Keyspace(now_ms=NOW)
    for payload in payloads:
        restored.apply_ops(decode_ops(payload), NOW)
    assert sorted(restored.items()) == [
        PutContainer(B, b"h", KIND_HASH, (b"f", b"1")),
        PutContainer(B, b"s", KIND_SET, (b"m",), NOW + 10_000),
    ]
    fresh = hset(ks, b"h", b"y", b"0")
    assert fresh is h2  # the snapshot was read to its end: no more copies


def test_typed_keyspace_snapshot_round_trips_every_type() -> None:
    """A checkpoint's payloads rebuild the same keyspace: strings, hashes and sets, with and
    without expiry, in several buckets, a large container cut into several operations."""
    state = StoreState(Keyspace(now_ms=NOW))
    ks = state.keyspace
    ks.put(B, b"str", b"v", None, None)
    ks.put(b"1", b"str2", b"w", NOW + 1000, None)
    hset(ks, b"h", b"f", b"v", b"g", b"")
    sadd(ks, b"ints", *(b"%d" % i for i in range(600)))
    big = [b"%d" % i + b"x" * 100 for i in range(2000)]
    sadd(ks, b"big", *big)
    ks.set_expiry(B, b"big", NOW + 9000, None)
    payloads = list(state.snapshot())
    ops = [op for payload in payloads for op in decode_ops(payload)]
    assert sum(isinstance(op, AddElements) for op in ops) > 1  # chunked
    restored = Keyspace(now_ms=NOW)
    for payload in payloads:
        restored.apply_ops(decode_ops(payload), NOW)
    assert sorted(restored.items()) == sorted(ks.items())
    assert restored.container(B, b"ints", SetValue, NOW, None).encoding == HASHTABLE  # type: ignore[union-attr]


def test_typed_keyspace_snapshot_after_a_rolled_back_flush_keeps_containers() -> None:
    """Rolling back a FLUSHALL brings the containers back into the snapshot too."""
    state = StoreState(Keyspace(now_ms=NOW))
    ks = state.keyspace
    hset(ks, b"h", b"f", b"v")
    j = OpJournal()
    ks.flush(None, j)
    ks.rollback(j)
    ops = [op for payload in state.snapshot() for op in decode_ops(payload)]
    assert ops == [PutContainer(B, b"h", KIND_HASH, (b"f", b"v"))]


def test_typed_keyspace_replay_applies_each_typed_op() -> None:
    """Replay builds, adds, removes (an emptied container goes), renames and copies."""
    ks = Keyspace(now_ms=NOW)
    ks.apply_ops(
        [
            PutContainer(B, b"h", KIND_HASH, (b"f", b"1", b"g", b"2"), NOW + 100),
            AddElements(B, b"h", KIND_HASH, (b"f", b"3")),
            RemoveElements(B, b"h", KIND_HASH, (b"g", b"absent")),
            AddElements(B, b"s", KIND_SET, (b"a", b"b")),
            RemoveElements(B, b"s", KIND_SET, (b"a", b"b")),
            RemoveElements(B, b"missing", KIND_SET, (b"a",)),
            Rename(B, b"h", b"h2"),
            Copy(B, b"h2", b"1", b"h3"),
        ],
        NOW,
    )
    assert sorted(ks.items()) == [
        PutContainer(B, b"h2", KIND_HASH, (b"f", b"3"), NOW + 100),
        PutContainer(b"1", b"h3", KIND_HASH, (b"f", b"3"), NOW + 100),
    ]


@pytest.mark.parametrize(
    "op",
    [
        AddElements(B, b"k", KIND_HASH, (b"f", b"v")),
        RemoveElements(B, b"k", KIND_SET, (b"m",)),
        Rename(B, b"missing", b"x"),
        Copy(B, b"missing", B, b"x"),
    ],
)
def test_typed_keyspace_replay_refuses_what_no_writer_logs(op: object) -> None:
    """An element op on a key of another type, a RENAME or COPY of a missing key: refused."""
    ks = Keyspace(now_ms=NOW)
    ks.put(B, b"k", b"string", None, None)
    with pytest.raises(ValueError, match="cannot apply"):
        ks.apply_ops([op], NOW)  # type: ignore[list-item]


def test_typed_keyspace_line_protocol_answers_wrong_type_and_scan_skips() -> None:
    """Over the line protocol a hash has no form: GET answers ERR wrong type, SCAN skips it;
    TTL and DEL work on it, and SET replaces it by a string."""
    state = StoreState(Keyspace(now_ms=NOW))
    hset(state.keyspace, b"h", b"f", b"v")
    state.keyspace.put(B, b"s", b"v", None, None)
    assert state.apply(Get(B, b"h"), NOW) == b"ERR wrong type\n"
    assert state.apply(Scan(B, SCAN_START, 10), NOW) == b"KEYS %s s\n" % SCAN_START
    assert state.apply(Ttl(B, b"h"), NOW) == b"VALUE -1\n"
    assert state.apply(Delete(B, b"h"), NOW) == b"OK\n"
    hset(state.keyspace, b"h", b"f", b"v")
    assert state.apply(Set(B, b"h", b"now a string"), NOW) == b"OK\n"
    assert state.apply(Get(B, b"h"), NOW) == b"VALUE now a string\n"
    assert state.statistics().wrong_type == 1


def test_typed_keyspace_string_commands_answer_wrongtype_on_a_container() -> None:
    """Every string command that reads the value answers WRONGTYPE and changes nothing; SET
    without GET replaces the container; MGET answers nil for it."""
    ks = Keyspace(now_ms=NOW)
    hset(ks, b"h", b"f", b"v")
    for line in ("GET h", "INCR h", "DECRBY h 2", "INCRBYFLOAT h 1", "APPEND h x", "STRLEN h",
                 "GETRANGE h 0 1", "SETRANGE h 0 x", "GETSET h x", "GETDEL h", "GETEX h",
                 "SET h x GET", "SET h x NX GET"):  # fmt: skip
        assert run(ks, line) == WRONG, line
    assert run(ks, "MGET h nope") == [None, None]
    assert run(ks, "MSETNX h 1 other 2") == 0
    assert run(ks, "SETNX h 1") == 0
    assert run(ks, "SET h x NX") is None
    assert run(ks, "TYPE h") == Simple("hash")
    assert run(ks, "SET h x") == OK and run(ks, "TYPE h") == Simple("string")


def test_typed_keyspace_key_commands_work_on_every_type() -> None:
    """DEL, EXISTS, the expiry family, RENAME, COPY, RANDOMKEY, SCAN TYPE, OBJECT ENCODING,
    DBSIZE and FLUSHDB treat a container as any key."""
    ks = Keyspace(now_ms=NOW)
    hset(ks, b"h", b"f", b"v")
    sadd(ks, b"s", b"1", b"2")
    ks.put(B, b"k", b"12", None, None)
    assert run(ks, "EXISTS h s k nope") == 3
    assert run(ks, "TYPE s") == Simple("set") and run(ks, "TYPE nope") == Simple("none")
    assert run(ks, "EXPIRE h 100") == 1 and run(ks, "TTL h") == 100
    assert run(ks, "PERSIST h") == 1 and run(ks, "PTTL h") == -1
    assert run(ks, "RENAME h h2") == OK and run(ks, "TYPE h2") == Simple("hash")
    assert run(ks, "RENAMENX s k") == 0
    assert run(ks, "COPY s s2") == 1 and run(ks, "COPY s s2") == 0
    assert run(ks, "COPY h2 s2 REPLACE") == 1 and run(ks, "TYPE s2") == Simple("hash")
    assert sorted(run(ks, "SCAN 0 TYPE hash")[1]) == [b"h2", b"s2"]  # type: ignore[index]
    assert run(ks, "SCAN 0 TYPE set")[1] == [b"s"]  # type: ignore[index]
    assert run(ks, "SCAN 0 TYPE string MATCH k*")[1] == [b"k"]  # type: ignore[index]
    assert run(ks, "SCAN 0 TYPE zset")[1] == []  # type: ignore[index]
    assert run(ks, "OBJECT ENCODING h2") == b"listpack"
    assert run(ks, "OBJECT ENCODING s") == b"intset"
    assert run(ks, "OBJECT ENCODING k") == b"int"
    assert run(ks, "OBJECT ENCODING nope") is None
    assert run(ks, "OBJECT REFCOUNT s") == 1 and run(ks, "OBJECT IDLETIME s") == 0
    assert run(ks, "OBJECT FOO s") == ErrorReply("ERR unknown subcommand 'FOO'. Try OBJECT HELP.")
    assert run(ks, "OBJECT ENCODING") == ErrorReply(
        "ERR wrong number of arguments for 'object|encoding' command"
    )
    assert run(ks, "RANDOMKEY") in (b"h2", b"s", b"s2", b"k")
    assert run(ks, "DEL h2 s") == 2 and run(ks, "DBSIZE") == 2
    assert run(ks, "FLUSHDB") == OK and run(ks, "DBSIZE") == 0 and len(ks) == 0


@pytest.mark.parametrize(
    ("value", "encoding"),
    [(b"12", "int"), (b"-9223372036854775808", "int"), (b"007", "embstr"),
     (b"x" * 44, "embstr"), (b"x" * 45, "raw"), (b"99999999999999999999", "embstr")],
)  # fmt: skip
def test_typed_keyspace_string_encodings_are_redis_names(value: bytes, encoding: str) -> None:
    """OBJECT ENCODING of a string: int, embstr up to 44 bytes, raw beyond."""
    ks = Keyspace(now_ms=NOW)
    ks.put(B, b"k", value, None, None)
    assert run(ks, "OBJECT ENCODING k") == encoding.encode()


def test_typed_keyspace_expired_container_is_removed_as_any_key() -> None:
    """A container past its deadline is gone for every read, and its removal is journaled."""
    ks = Keyspace(now_ms=NOW)
    hset(ks, b"h", b"f", b"v")
    ks.set_expiry(B, b"h", NOW + 10, None)
    j = OpJournal()
    assert ks.container(B, b"h", HashValue, NOW + 10, j) is None
    assert j.open_ops == [Remove(B, b"h")] and len(ks) == 0
    ks.rollback(j)
    assert sorted(ks.items()) == [PutContainer(B, b"h", KIND_HASH, (b"f", b"v"), NOW + 10)]
    assert Put  # the string op stays the string op
