"""A listpack sorted set's light rank order (``_zorder.MemberOrder``: a plain list of members
sorted through the dict of scores) answers as the ``SortedList`` it replaces, over random
adds, removes, ranges and ranks; a skiplist keeps its ``SortedList``; and a small sorted set
costs what issue 19 asked of it (a memory bound that the ``SortedList`` layout fails)."""

from __future__ import annotations

import gc
import math
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedList

from minidb.store._encodings import LISTPACK, SKIPLIST, ZSET_MAX_LISTPACK_ENTRIES
from minidb.store._values import ZSET
from minidb.store._zorder import MemberOrder
from minidb.store._zsets import _TOP
from minidb.store._zsetvalue import (
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


def _same_answers(order: MemberOrder | SortedList, ref: SortedList) -> None:
    """Every query the sorted-set commands make, answered alike by ``order`` and ``ref``."""
    assert len(order) == len(ref)
    assert list(order) == list(ref)
    for rank in range(-len(ref), len(ref)):
        assert order[rank] == ref[rank]
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


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_member_order_answers_as_a_sorted_list(ops: list[Op]) -> None:
    """Random ZADDs (new members, new scores, equal scores) and ZREMs through ``zset_add`` and
    ``zset_remove``: a listpack sorted set keeps a plain list, and its every rank, range,
    bisection and slice is the ``SortedList``'s of the same (score, member) pairs."""
    z = new_zset(1, 2, 0)
    for op, member, score in ops:
        if op == "add":
            zset_add(z, [(member, score)])
        else:
            zset_remove(z, [member])
        assert z.encoding is LISTPACK and type(z.ranked) is list
        _same_answers(z.order, _reference(z))


@settings(max_examples=100, deadline=None)
@given(OPS, OPS)
def test_an_undone_change_restores_the_order(first: list[Op], second: list[Op]) -> None:
    """``zset_revert`` of a batch (as a failed or rolled-back group does) gives back the same
    order, for the light list and for the ``SortedList`` alike."""
    z = new_zset(1, 2, 0)
    zset_add(z, [(m, s) for op, m, s in first if op == "add"])
    before = list(z.order)
    olds = zset_add(z, [(m, s) for op, m, s in second if op == "add"])
    olds += zset_remove(z, [m for op, m, _ in second if op == "remove"])
    zset_revert(z, olds)
    assert list(z.order) == before
    _same_answers(z.order, _reference(z))


def test_misses_raise_as_a_sorted_list_does() -> None:
    """``index`` and ``remove`` of a pair not held: ``ValueError``, as ``SortedList``'s."""
    z = new_zset(2, 1, 0)
    zset_add(z, [(b"a", 1.0), (b"b", 2.0)])
    order = z.order
    for missing in [(1.0, b"b"), (3.0, b"c"), (-math.inf, b"a")]:
        for call in (order.index, order.remove):
            try:
                call(missing)
            except ValueError:
                pass
            else:
                raise AssertionError(f"{call.__name__}({missing!r}) did not raise")
    assert list(order) == [(1.0, b"a"), (2.0, b"b")]


def test_a_skiplist_keeps_its_sorted_list() -> None:
    """Past 128 members, or a member longer than 64 bytes, the set converts to a skiplist and
    its order to a ``SortedList`` (O(log n) rank and range), with every member in place."""
    z = new_zset(1, 1, 0)
    pairs = [(b"m%03d" % n, float(n % 7)) for n in range(ZSET_MAX_LISTPACK_ENTRIES)]
    zset_add(z, pairs)
    assert z.encoding is LISTPACK and type(z.ranked) is list
    zset_add(z, [(b"one-more", 0.5)])
    assert z.encoding is SKIPLIST and type(z.ranked) is SortedList
    assert list(z.order) == list(_reference(z))
    long = new_zset(1, 1, 0)
    zset_add(long, [(b"a", 1.0), (b"x" * 65, 0.0)])
    assert long.encoding is SKIPLIST and list(long.order) == [(0.0, b"x" * 65), (1.0, b"a")]
    big = zset_from([*pairs, (b"one-more", 0.5)], 0)
    assert big.encoding is SKIPLIST and list(big.order) == list(z.order)
    small = zset_from([(b"b", 1.0), (b"a", 1.0), (b"b", 0.0), (b"c", -0.0), (b"c", 0.0)], 0)
    assert small.encoding is LISTPACK and type(small.ranked) is list
    assert list(small.order) == [(0.0, b"b"), (-0.0, b"c"), (1.0, b"a")]  # -0 ties 0
    assert math.copysign(1.0, small[b"c"]) == -1.0  # an equal score changes nothing


def test_a_copy_is_independent() -> None:
    """A copy (COPY, a snapshot's fork) shares no order with its source, small or big."""
    for size in (3, ZSET_MAX_LISTPACK_ENTRIES + 5):
        z = zset_from([(b"m%03d" % n, float(n)) for n in range(size)], 0)
        copy = ZSET.copy(z, 1)
        assert copy.encoding == z.encoding and list(copy.order) == list(z.order)
        zset_add(copy, [(b"m000", 1e9)])
        zset_remove(copy, [b"m001"])
        assert z.order[0] == (0.0, b"m000") and z.order[1] == (1.0, b"m001")


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


MEMORY_BOUND = 500
"""Bytes the container of a 5-member sorted set may cost (dict, slots and its order; ~385 with
the plain list). The ``SortedList`` layout it replaced cost ~1,080."""


def test_a_small_sorted_set_costs_little() -> None:
    """A 5-member sorted set as ZADD builds it (bench/memory.py's shape) stays under
    ``MEMORY_BOUND``, and the ``SortedList`` layout beside it does not (so the bound can
    fail)."""
    pairs = [(b"alpha", 1.0), (b"bravo", 2.0), (b"charlie", 3.0), (b"delta", 4.0), (b"m7", 5.0)]

    def light() -> ZSetValue:
        z = new_zset(len(pairs), 7, 0)
        zset_add(z, pairs)
        return z

    def sorted_list() -> tuple[ZSetValue, SortedList]:
        z = light()
        return z, SortedList((score, member) for member, score in z.items())

    assert _bytes_per_zset(light) <= MEMORY_BOUND
    assert _bytes_per_zset(sorted_list) > MEMORY_BOUND
