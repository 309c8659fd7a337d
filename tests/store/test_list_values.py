"""The list type in the keyspace (step before its commands): list ops applied, replayed,
snapshotted and rolled back; encodings as Redis 7.2 converts them; TYPE and WRONGTYPE."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.store._journal import OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._results import WRONGTYPE, ErrorReply, Simple
from minidb.store._state import StoreState
from minidb.store._values import (
    LISTPACK,
    QUICKLIST,
    ListValue,
    list_find,
    list_from,
    listpack_entry_bytes,
)
from minidb.wal import KIND_LIST, AddElements, PutContainer, decode_ops, encode_groups
from minidb.wal._ops import ListInsert, ListOp, ListPop, ListPush, ListRemove, ListSet
from tests.store.test_hashes import NOW, Client

B = b"0"


def _change(ks: Keyspace, key: bytes, op: ListOp, journal: OpJournal) -> None:
    found = ks.container(B, key, ListValue, NOW, journal)
    ks.change_list(B, key, found, op, journal)
    journal.close_group()


def _lists(ks: Keyspace) -> dict[bytes, tuple[str, list[bytes]]]:
    out = {}
    for key in ks.keys(B, NOW):
        value = ks.peek(B, key)
        assert isinstance(value, ListValue)
        out[key] = (value.encoding, list(value))
    return out


def test_list_values_ops_change_the_list_as_the_format_says() -> None:
    """Push left pushes one at a time, pop takes from a side, set/insert by position, remove
    by occurrences from either end; a list emptied is deleted; TYPE is list."""
    ks, j = Keyspace(now_ms=NOW), OpJournal()
    _change(ks, b"l", ListPush(B, b"l", True, (b"a", b"b")), j)
    _change(ks, b"l", ListPush(B, b"l", False, (b"c", b"a", b"d", b"a")), j)
    assert list(ks.peek(B, b"l")) == [b"b", b"a", b"c", b"a", b"d", b"a"]  # type: ignore[arg-type]
    _change(ks, b"l", ListRemove(B, b"l", -2, b"a"), j)
    assert list(ks.peek(B, b"l")) == [b"b", b"a", b"c", b"d"]  # type: ignore[arg-type]
    _change(ks, b"l", ListSet(B, b"l", 3, b"D"), j)
    _change(ks, b"l", ListInsert(B, b"l", 4, b"e"), j)
    _change(ks, b"l", ListPop(B, b"l", True, 2), j)
    assert list(ks.peek(B, b"l")) == [b"c", b"D", b"e"]  # type: ignore[arg-type]
    c = Client(ks)
    assert c("TYPE", "l") == Simple("list") and c("OBJECT", "ENCODING", "l") == b"listpack"
    assert c("GET", "l") == ErrorReply(WRONGTYPE) and c("HGET", "l", "f") == ErrorReply(WRONGTYPE)
    assert c("SCAN", "0", "TYPE", "list") == [b"0", [b"l"]]
    _change(ks, b"l", ListPop(B, b"l", False, 3), j)
    assert ks.peek(B, b"l") is None and c("EXISTS", "l") == 0


@pytest.mark.parametrize(
    "op",
    [
        ListPop(B, b"l", True, 3),
        ListSet(B, b"l", 2, b"x"),
        ListInsert(B, b"l", 3, b"x"),
        ListRemove(B, b"l", 2, b"a"),
        ListPop(B, b"missing", True, 1),
        ListPush(B, b"s", True, (b"x",)),
    ],
)
def test_list_values_replay_refuses_what_no_writer_logs(op: ListOp) -> None:
    """A pop past the end, a position out of range, occurrences not there, a list op on a
    missing key or on a string: replay refuses rather than guess."""
    ks = Keyspace(now_ms=NOW)
    ks.apply_ops([ListPush(B, b"l", False, (b"a", b"b")), ListPush(B, b"s", False, (b"x",))], NOW)
    ks.apply_ops([PutContainer(B, b"s", 2, (b"m",))], NOW)
    with pytest.raises(ValueError):
        ks.apply_ops([op], NOW)


def test_list_values_listpack_sizes_and_encodings() -> None:
    """Entry sizes of Redis's listpack; a list converts to a quicklist past 8 KiB (the new
    elements counted by their length) and back at 4 KiB as it shrinks."""
    assert [listpack_entry_bytes(x) for x in (b"1", b"-1", b"5000", b"70000", b"1" * 12)] == [
        2, 3, 4, 5, 10,
    ]  # fmt: skip
    assert listpack_entry_bytes(b"a" * 63) == 65 and listpack_entry_bytes(b"a" * 64) == 67
    assert listpack_entry_bytes(b"01") == 4  # not canonical: a string
    ks, j = Keyspace(now_ms=NOW), OpJournal()
    for _ in range(8):
        _change(ks, b"l", ListPush(B, b"l", False, (b"x" * 1000,)), j)
    lst = ks.peek(B, b"l")
    assert isinstance(lst, ListValue) and lst.encoding is LISTPACK
    assert lst.lpbytes == 7 + 8 * 1004
    _change(ks, b"l", ListPush(B, b"l", False, (b"y" * 200,)), j)
    assert lst.encoding is QUICKLIST
    _change(ks, b"l", ListPop(B, b"l", True, 4), j)
    assert lst.encoding is QUICKLIST
    _change(ks, b"l", ListPop(B, b"l", True, 1), j)
    assert lst.encoding is LISTPACK
    assert list_from([b"z" * 9000], 0).encoding is QUICKLIST


def test_list_values_find_occurrences() -> None:
    lst = list_from([b"a", b"b", b"a", b"a"], 0)
    assert list_find(lst, b"a", 0) == [0, 2, 3] and list_find(lst, b"a", 2) == [0, 2]
    assert list_find(lst, b"a", -2) == [3, 2] and list_find(lst, b"c", 0) == []


ops = st.one_of(
    st.builds(ListPush, st.just(B), st.sampled_from([b"l", b"m"]), st.booleans(),
              st.lists(st.sampled_from([b"a", b"1", b"x" * 3000]), min_size=1, max_size=3)
              .map(tuple)),
    st.tuples(st.sampled_from(["pop", "set", "insert", "remove", "rename", "del"]),
              st.sampled_from([b"l", b"m"]), st.integers(-3, 3), st.booleans()),
)  # fmt: skip


def _valid(ks: Keyspace, step: object) -> ListOp | None:
    """A list op the key can take, made from a drawn step (as a command would build it)."""
    if isinstance(step, ListPush):
        return step
    what, key, n, left = step  # type: ignore[misc]
    lst = ks.peek(B, key)
    if not isinstance(lst, ListValue):
        return None
    at = abs(n) % len(lst)
    if what == "pop":
        return ListPop(B, key, left, at + 1)
    if what == "set":
        return ListSet(B, key, at, b"s")
    if what == "insert":
        return ListInsert(B, key, at + left, b"i")
    if what == "remove" and n and len(list_find(lst, lst[at], n)) == abs(n):
        return ListRemove(B, key, n, lst[at])
    return None


@settings(max_examples=80, deadline=None)
@given(st.lists(ops, max_size=25), st.integers(0, 25))
def test_list_values_replay_snapshot_and_rollback_agree(steps: list[object], cut: int) -> None:
    """Whatever list ops run, the log replays to the same lists (encodings included), a
    snapshot reads back to them, and rolling back the ops after any point restores exactly
    the lists as they were there."""
    ks, j = Keyspace(now_ms=NOW, rng=random.Random(1)), OpJournal()
    c = Client(ks)
    before: dict[bytes, tuple[str, list[bytes]]] = {}
    tail = OpJournal()
    for at, step in enumerate(steps):
        if at == cut:
            before = _lists(ks)
        journal = tail if at >= cut else j
        if isinstance(step, tuple) and step[0] in ("rename", "del"):
            key = step[1]
            other = b"m" if key == b"l" else b"l"
            c.journal = journal
            c(*(("RENAME", key, other) if step[0] == "rename" else ("DEL", key)))
            journal.close_group()
            continue
        op = _valid(ks, step)
        if op is not None:
            _change(ks, op.key, op, journal)
    if cut >= len(steps):
        before = _lists(ks)
    replayed = Keyspace(now_ms=NOW)
    for payload in encode_groups(j.records + tail.records):
        replayed.apply_ops(decode_ops(payload), NOW)
    assert _lists(replayed) == _lists(ks)
    restored = Keyspace(now_ms=NOW)
    for payload in StoreState(ks).snapshot():
        restored.apply_ops(decode_ops(payload), NOW)
    # A snapshot's list gets the encoding its contents call for, as Redis's RDB load does.
    expected = {k: (list_from(v, 0).encoding, v) for k, (_, v) in _lists(ks).items()}
    assert _lists(restored) == expected
    assert all(type(op) is not PutContainer or op.kind == KIND_LIST for op in restored.items())
    ks.rollback(tail)
    assert _lists(ks) == before


def test_list_values_copy_on_write_and_a_chunked_snapshot() -> None:
    """A list captured by a frozen snapshot is never changed afterwards (the owner changes a
    copy, once); a long list with an expiry is written as several operations and reads back
    whole, in order."""
    state = StoreState(Keyspace(now_ms=NOW))
    ks, j = state.keyspace, OpJournal()
    big = tuple(b"%d" % i + b"x" * 100 for i in range(2000))
    _change(ks, b"big", ListPush(B, b"big", False, big), j)
    ks.set_expiry(B, b"big", NOW + 9000, None)
    _change(ks, b"l", ListPush(B, b"l", False, (b"a", b"b")), j)
    captured = ks.peek(B, b"l")
    payloads = state.frozen_snapshot()
    _change(ks, b"l", ListPop(B, b"l", True, 1), j)
    _change(ks, b"l", ListPush(B, b"l", False, (b"c",)), j)
    assert list(captured) == [b"a", b"b"]  # type: ignore[arg-type]
    assert ks.peek(B, b"l") is not captured and list(ks.peek(B, b"l")) == [b"b", b"c"]  # type: ignore[arg-type]
    ops = [op for payload in payloads for op in decode_ops(payload)]
    assert sum(type(op) is AddElements for op in ops) > 1  # chunked
    restored = Keyspace(now_ms=NOW)
    restored.apply_ops(ops, NOW)
    assert sorted(restored.items()) == [
        PutContainer(B, b"big", KIND_LIST, big, NOW + 9000),
        PutContainer(B, b"l", KIND_LIST, (b"a", b"b")),
    ]
