"""A small sorted set packed in one ``bytes`` (``_zsetvalue``): its order (``PackedOrder``)
answers as the ``SortedList`` of an unpacked one, over random adds, removes, ranges and ranks;
the representation follows the encoding and the size both ways, undo included, while OBJECT
ENCODING answers as Redis; a copy shares the bytes; and a small sorted set costs what issue 19
asked of it (a memory bound that the dict-and-list layout it replaced fails)."""

from __future__ import annotations

import gc
import math
import sys
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedList

from minidb.store._encodings import LISTPACK, SKIPLIST, ZSET_MAX_LISTPACK_ENTRIES
from minidb.store._values import ZSET
from minidb.store._zsets import _TOP
from minidb.store._zsetvalue import (
    PACKED_MAX_MEMBERS,
    PackedOrder,
    ZSetValue,
    new_zset,
    zset_add,
    zset_from,
    zset_remove,
    zset_revert,
)

MEMBERS = st.sampled_from([b"", b"a", b"ab", b"b", b"ba", b"c", b"\x00", b"\xff", b"zz"])
SCORES = st.sampled_from([-math.inf, -1.5, -0.0, 0.0, 1.0, 1.5, 2.0, math.inf])
"""Few members and scores, so ties, moves and re-adds are common (-0.0 equals 0.0)."""

Op = tuple[str, bytes, float]
OPS = st.lists(
    st.tuples(st.sampled_from(["add", "add", "remove"]), MEMBERS, SCORES), max_size=60
)


def _reference(z: ZSetValue) -> SortedList:
    return SortedList((score, member) for member, score in z.items())


def _same_answers(order: PackedOrder | SortedList, ref: SortedList) -> None:
    """Every query the sorted-set commands make, answered alike by ``order`` and ``ref``."""
    assert len(order) == len(ref)
    assert list(order) == list(ref)
    for rank in range(-len(ref), len(ref)):
        assert order[rank] == ref[rank]
    for outside in (len(ref), -len(ref) - 1):
        with pytest.raises(IndexError):
            order[outside]
    for score in [-math.inf, -2.0, -0.0, 0.0, 1.0, 1.25, 1.5, 2.0, math.inf]:
        for probe in [(score,), (score, _TOP), (score, b"a"), (score, b"b"), (score, b"")]:
            assert order.bisect_left(probe) == ref.bisect_left(probe), probe
            assert order.bisect_right(probe) == ref.bisect_right(probe), probe
    for item in ref:
        assert order.index(item) == ref.index(item)
    size = len(ref)
    for start in [None, 0, 1, size // 2, size, size + 3, -1, -size - 2]:
        for stop in [None, 0, 1, size - 1, size, size + 2, -1]:
            for reverse in (False, True):
                got = list(order.islice(start, stop, reverse=reverse))
                assert got == list(ref.islice(start, stop, reverse=reverse)), (start, stop)


def _same_mapping(z: ZSetValue) -> None:
    """The mapping reads agree with each other, whatever the representation."""
    scores = dict(z.items())
    assert dict(z.scores()) == scores and len(z) == len(scores) and set(z) == set(scores)
    for member, score in scores.items():
        assert member in z and z[member] == score and z.get(member) == score
    assert b"absent" not in z and z.get(b"absent") is None and 1.0 not in z
    with pytest.raises(KeyError):
        z[b"absent"]


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_packed_order_answers_as_a_sorted_list(ops: list[Op]) -> None:
    """Random ZADDs (new members, new scores, equal scores) and ZREMs through ``zset_add`` and
    ``zset_remove``: a small listpack sorted set stays one ``bytes``, and its every rank,
    range, bisection, slice and score is the ``SortedList``'s of the same pairs."""
    z = new_zset(1, 2, 0)
    for op, member, score in ops:
        if op == "add":
            zset_add(z, [(member, score)])
        else:
            zset_remove(z, [member])
        assert z.encoding is LISTPACK and z.packed
        _same_answers(z.order, _reference(z))
        _same_mapping(z)


@settings(max_examples=100, deadline=None)
@given(OPS, OPS, st.booleans())
def test_an_undone_change_restores_the_order(
    first: list[Op], second: list[Op], big: bool
) -> None:
    """``zset_revert`` of a batch (as a failed or rolled-back group does) gives back the same
    order, packed or (``big``: a skiplist) unpacked alike."""
    z = new_zset(200 if big else 1, 2, 0)
    zset_add(z, [(m, s) for op, m, s in first if op == "add"])
    before = list(z.order)
    olds = zset_add(z, [(m, s) for op, m, s in second if op == "add"])
    olds += zset_remove(z, [m for op, m, _ in second if op == "remove"])
    zset_revert(z, olds)
    assert list(z.order) == before and z.packed is not big
    _same_answers(z.order, _reference(z))


def test_misses_raise_as_a_sorted_list_does() -> None:
    """``index`` of a pair not held: ``ValueError``, as ``SortedList``'s."""
    z = new_zset(2, 1, 0)
    zset_add(z, [(b"a", 1.0), (b"b", 2.0)])
    order = z.order
    for missing in [(1.0, b"b"), (3.0, b"c"), (-math.inf, b"a"), (math.inf, b"z")]:
        with pytest.raises(ValueError):
            order.index(missing)
    assert list(order) == [(1.0, b"a"), (2.0, b"b")]
    assert list(new_zset(1, 1, 0).order.islice(0, 5, reverse=True)) == []


def _members(count: int) -> list[tuple[bytes, float]]:
    return [(b"m%03d" % n, float(n % 7)) for n in range(count)]


def test_the_representation_follows_encoding_and_size() -> None:
    """Packed up to ``PACKED_MAX_MEMBERS``; unpacked past it while OBJECT ENCODING still says
    listpack (up to 128); packed again when it shrinks back; a skiplist (past 128 members,
    or a member past 64 bytes) is unpacked and stays a skiplist, however small."""
    pairs = _members(ZSET_MAX_LISTPACK_ENTRIES)
    z = new_zset(1, 1, 0)
    zset_add(z, pairs[:PACKED_MAX_MEMBERS])
    assert z.encoding is LISTPACK and z.packed and len(z) == PACKED_MAX_MEMBERS
    zset_add(z, pairs[PACKED_MAX_MEMBERS : PACKED_MAX_MEMBERS + 1])
    assert z.encoding is LISTPACK and not z.packed
    zset_remove(z, [pairs[0][0]])
    assert z.encoding is LISTPACK and z.packed and len(z) == PACKED_MAX_MEMBERS
    zset_add(z, pairs)
    assert z.encoding is LISTPACK and not z.packed and len(z) == ZSET_MAX_LISTPACK_ENTRIES
    zset_add(z, [(b"one-more", 0.5)])
    assert z.encoding is SKIPLIST and not z.packed
    assert list(z.order) == list(_reference(z))
    zset_remove(z, [m for m, _ in pairs])
    assert z.encoding is SKIPLIST and not z.packed and list(z.order) == [(0.5, b"one-more")]
    long = new_zset(1, 1, 0)
    zset_add(long, [(b"a", 1.0), (b"x" * 65, 0.0)])
    assert long.encoding is SKIPLIST and list(long.order) == [(0.0, b"x" * 65), (1.0, b"a")]
    big = zset_from([*pairs, (b"one-more", 0.5)], 0)
    assert big.encoding is SKIPLIST and list(big.order) == list(_reference(big))
    small = zset_from([(b"b", 1.0), (b"a", 1.0), (b"b", 0.0), (b"c", -0.0), (b"c", 0.0)], 0)
    assert small.encoding is LISTPACK and small.packed
    assert list(small.order) == [(0.0, b"b"), (-0.0, b"c"), (1.0, b"a")]  # -0 ties 0
    assert math.copysign(1.0, small[b"c"]) == -1.0  # an equal score changes nothing
    middle = zset_from(pairs[:40], 0)
    assert middle.encoding is LISTPACK and not middle.packed


def test_a_batch_past_the_listpack_converts_first() -> None:
    """More pairs than a listpack holds convert the set before they are added (Redis's
    ``zsetTypeMaybeConvert``), even when they name few members; undo and restoring the
    encoding pack it again."""
    z = new_zset(1, 1, 0)
    zset_add(z, [(b"a", 1.0)])
    olds = zset_add(z, [(b"b", float(n)) for n in range(ZSET_MAX_LISTPACK_ENTRIES + 1)])
    assert z.encoding is SKIPLIST and len(z) == 2 and z[b"b"] == 128.0
    zset_revert(z, olds)
    z.encoding = LISTPACK  # what ScoresUndo.revert does after
    assert z.packed and list(z.order) == [(1.0, b"a")]


def test_a_copy_shares_the_packed_bytes_and_is_independent() -> None:
    """A copy (COPY, a snapshot's fork) shares a packed set's immutable ``bytes`` and no
    order of an unpacked one; changing it leaves the source as it was."""
    for size in (3, 40, ZSET_MAX_LISTPACK_ENTRIES + 5):
        z = zset_from([(b"m%03d" % n, float(n)) for n in range(size)], 0)
        copy = ZSET.copy(z, 1)
        assert copy.encoding == z.encoding and list(copy.order) == list(z.order)
        assert copy == z and copy.epoch == 1 and copy.packed is z.packed
        if z.packed:
            assert copy._data is z._data
        zset_add(copy, [(b"m000", 1e9)])
        zset_remove(copy, [b"m001"])
        assert z.order[0] == (0.0, b"m000") and z.order[1] == (1.0, b"m001")
        assert copy != z


def _bytes_per_zset(build: object, keys: int = 2000) -> float:
    """tracemalloc's bytes a sorted set, over ``keys`` of them (members and scores built once
    beforehand, as the parser's bytes and floats are not the container's)."""
    gc.collect()
    tracemalloc.start()
    try:
        kept = [build() for _ in range(keys)]  # type: ignore[operator]
        used, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(kept) == keys
    return used / keys


MEMORY_BOUND = 200
"""Bytes the container of a 5-member sorted set may cost: its slotted object (48) and one
``bytes`` (144 with bench/memory.py's members), 192 in all (tracemalloc counts what was asked,
~180); the dict and plain list of members it replaced cost ~385 (and the dict alone 232)."""


def test_a_small_sorted_set_costs_little() -> None:
    """A 5-member sorted set as ZADD builds it (bench/memory.py's shape) stays under
    ``MEMORY_BOUND``, and the dict-and-list layout it replaced does not (so the bound can
    fail)."""
    pairs = [(b"alpha", 1.0), (b"bravo", 2.0), (b"charlie", 3.0), (b"delta", 4.0), (b"m7", 5.0)]

    def packed() -> ZSetValue:
        z = new_zset(len(pairs), 7, 0)
        zset_add(z, pairs)
        return z

    def dict_and_list() -> tuple[dict[bytes, float], list[bytes]]:
        return dict(pairs), [member for member, _ in pairs]

    assert packed().packed
    assert sys.getsizeof(packed()) == 48 and sys.getsizeof(packed()._data) <= 144
    assert _bytes_per_zset(packed) <= MEMORY_BOUND
    assert _bytes_per_zset(dict_and_list) > MEMORY_BOUND
