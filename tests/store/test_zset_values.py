"""The sorted-set type in the keyspace (step before its commands): scores set and members
removed, replayed, snapshotted and rolled back; encodings as Redis 7.2 converts them; TYPE,
OBJECT ENCODING and WRONGTYPE."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.store._encodings import LISTPACK, SKIPLIST
from minidb.store._journal import OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._results import WRONGTYPE, ErrorReply, Simple
from minidb.store._state import StoreState
from minidb.store._zsets import remove_members, set_scores
from minidb.store._zsetvalue import ZSetValue, zset_from
from minidb.wal import KIND_ZSET, AddElements, PutContainer, decode_ops, encode_groups
from minidb.wal._ops import Remove, RemoveElements, encode_score
from tests.store.test_hashes import NOW, Client

B = b"0"


def _set(ks: Keyspace, key: bytes, pairs: list[tuple[bytes, float]], j: OpJournal) -> None:
    found = ks.container(B, key, ZSetValue, NOW, j)
    set_scores(ks, B, key, found, pairs, j)
    j.close_group()


def _remove(ks: Keyspace, key: bytes, members: list[bytes], j: OpJournal) -> None:
    found = ks.container(B, key, ZSetValue, NOW, j)
    assert found is not None
    remove_members(ks, B, key, found, [m for m in members if m in found], j)
    j.close_group()


def _zsets(ks: Keyspace) -> dict[bytes, tuple[str, list[tuple[float, bytes]]]]:
    out = {}
    for key in ks.keys(B, NOW):
        value = ks.peek(B, key)
        assert isinstance(value, ZSetValue)
        assert sorted((s, m) for m, s in value.items()) == list(value.order)
        out[key] = (value.encoding, list(value.order))
    return out


def test_zset_values_scores_order_and_type() -> None:
    """Members are ordered by score then by member bytes; a new score moves a member; an
    emptied sorted set is deleted; TYPE zset, OBJECT ENCODING listpack, WRONGTYPE."""
    ks, j = Keyspace(now_ms=NOW), OpJournal()
    _set(ks, b"z", [(b"b", 1.0), (b"a", 1.0), (b"c", -math.inf), (b"d", 0.5)], j)
    z = ks.peek(B, b"z")
    assert isinstance(z, ZSetValue)
    assert list(z.order) == [(-math.inf, b"c"), (0.5, b"d"), (1.0, b"a"), (1.0, b"b")]
    _set(ks, b"z", [(b"c", math.inf)], j)
    assert list(z.order)[-1] == (math.inf, b"c") and z[b"c"] == math.inf
    c = Client(ks)
    assert c("TYPE", "z") == Simple("zset") and c("OBJECT", "ENCODING", "z") == b"listpack"
    assert c("GET", "z") == ErrorReply(WRONGTYPE) and c("LLEN", "z") == ErrorReply(WRONGTYPE)
    assert c("SCAN", "0", "TYPE", "zset") == [b"0", [b"z"]]
    assert j.records[1] == [AddElements(B, b"z", KIND_ZSET, (b"c", encode_score(math.inf)))]
    _remove(ks, b"z", [b"a", b"b", b"c", b"d"], j)
    assert ks.peek(B, b"z") is None and c("EXISTS", "z") == 0
    assert j.records[-1] == [Remove(B, b"z")]  # every member: one Remove
    _set(ks, b"z", [(b"a", 1.0), (b"b", 2.0)], j)
    _remove(ks, b"z", [b"a"], j)
    assert j.records[-1] == [RemoveElements(B, b"z", KIND_ZSET, (b"a",))]


def test_zset_values_encodings() -> None:
    """A listpack up to 128 members of at most 64 bytes, a skiplist past either, one way only;
    a snapshot's load picks what the contents call for."""
    ks, j = Keyspace(now_ms=NOW), OpJournal()
    _set(ks, b"z", [(b"%d" % i, float(i)) for i in range(128)], j)
    z = ks.peek(B, b"z")
    assert isinstance(z, ZSetValue) and z.encoding is LISTPACK
    _set(ks, b"z", [(b"x", 1.0)], j)
    assert z.encoding is SKIPLIST
    _remove(ks, b"z", [b"x", b"1", b"2"], j)
    assert z.encoding is SKIPLIST  # never back
    _set(ks, b"long", [(b"m" * 65, 1.0)], j)
    assert ks.peek(B, b"long").encoding is SKIPLIST  # type: ignore[union-attr]
    _set(ks, b"many", [(b"%d" % i, 0.0) for i in range(129)], j)
    assert ks.peek(B, b"many").encoding is SKIPLIST  # type: ignore[union-attr]
    assert zset_from([(b"a", 1.0)], 0).encoding is LISTPACK
    assert zset_from([(b"a" * 65, 1.0)], 0).encoding is SKIPLIST


def test_zset_values_equal_score_changes_nothing() -> None:
    """As ``zsetAdd``: setting a member to a score equal to its own (0 and -0 too) keeps it."""
    ks, j = Keyspace(now_ms=NOW), OpJournal()
    _set(ks, b"z", [(b"a", 0.0)], j)
    _set(ks, b"z", [(b"a", -0.0)], j)
    z = ks.peek(B, b"z")
    assert isinstance(z, ZSetValue) and math.copysign(1, z[b"a"]) == 1
    assert list(z.order) == [(0.0, b"a")]


def test_zset_values_replay_refuses_a_zset_op_on_another_type() -> None:
    """An element op of kind 4 on a key holding another type cannot come from the writer."""
    ks = Keyspace(now_ms=NOW)
    ks.apply_ops([PutContainer(B, b"s", 2, (b"m",))], NOW)
    with pytest.raises(ValueError):
        ks.apply_ops([AddElements(B, b"s", KIND_ZSET, (b"m", encode_score(1.0)))], NOW)


steps = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove", "rename", "del"]),
        st.sampled_from([b"z", b"y"]),
        st.lists(
            st.tuples(st.sampled_from([b"a", b"b", b"c", b"m" * 70]),
                      st.sampled_from([0.0, 1.5, -2.0, math.inf, -math.inf])),
            min_size=1, max_size=4,
        ),
    ),
    max_size=20,
)  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(steps, st.integers(0, 20))
def test_zset_values_replay_snapshot_and_rollback_agree(
    drawn: list[tuple[str, bytes, list[tuple[bytes, float]]]], cut: int
) -> None:
    """Whatever changes run, the log replays to the same sorted sets (encodings included), a
    snapshot reads back to them, and rolling back the changes after any point restores
    exactly the sorted sets as they were there."""
    ks, j = Keyspace(now_ms=NOW, rng=random.Random(1)), OpJournal()
    c = Client(ks)
    before: dict[bytes, tuple[str, list[tuple[float, bytes]]]] = {}
    tail = OpJournal()
    for at, (what, key, pairs) in enumerate(drawn):
        if at == cut:
            before = _zsets(ks)
        journal = tail if at >= cut else j
        exists = ks.peek(B, key) is not None
        if what == "add":
            _set(ks, key, pairs, journal)
        elif what == "remove" and exists:
            _remove(ks, key, [m for m, _ in pairs], journal)
        elif exists:
            other = b"y" if key == b"z" else b"z"
            c.journal = journal
            c(*(("RENAME", key, other) if what == "rename" else ("DEL", key)))
            journal.close_group()
    if cut >= len(drawn):
        before = _zsets(ks)
    replayed = Keyspace(now_ms=NOW)
    for payload in encode_groups(j.records + tail.records):
        replayed.apply_ops(decode_ops(payload), NOW)
    assert _zsets(replayed) == _zsets(ks)
    restored = Keyspace(now_ms=NOW)
    for payload in StoreState(ks).snapshot():
        restored.apply_ops(decode_ops(payload), NOW)
    expected = {
        k: (zset_from([(m, s) for s, m in v], 0).encoding, v) for k, (_, v) in _zsets(ks).items()
    }
    assert _zsets(restored) == expected
    ks.rollback(tail)
    assert _zsets(ks) == before


def test_zset_values_copy_on_write_and_a_chunked_snapshot() -> None:
    """A sorted set captured by a frozen snapshot is never changed afterwards; a large one
    with an expiry is written as several operations and reads back whole."""
    state = StoreState(Keyspace(now_ms=NOW))
    ks, j = state.keyspace, OpJournal()
    big = [(b"%d" % i + b"x" * 100, float(i)) for i in range(2000)]
    _set(ks, b"big", big, j)
    ks.set_expiry(B, b"big", NOW + 9000, None)
    _set(ks, b"z", [(b"a", 1.0), (b"b", 2.0)], j)
    captured = ks.peek(B, b"z")
    payloads = state.frozen_snapshot()
    _remove(ks, b"z", [b"a"], j)
    _set(ks, b"z", [(b"c", 3.0)], j)
    assert dict(captured.items()) == {b"a": 1.0, b"b": 2.0}  # type: ignore[union-attr]
    assert list(captured.order) == [(1.0, b"a"), (2.0, b"b")]  # type: ignore[union-attr]
    ops = [op for payload in payloads for op in decode_ops(payload)]
    assert sum(type(op) is AddElements for op in ops) > 1  # chunked
    restored = Keyspace(now_ms=NOW)
    restored.apply_ops(ops, NOW)
    flat = tuple(e for m, sc in big for e in (m, encode_score(sc)))
    assert sorted(restored.items()) == [
        PutContainer(B, b"big", KIND_ZSET, flat, NOW + 9000),  # rank order: scores ascend
        PutContainer(B, b"z", KIND_ZSET, (b"a", encode_score(1.0), b"b", encode_score(2.0))),
    ]
