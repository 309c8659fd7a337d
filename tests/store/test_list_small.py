"""A list's two representations (``ListValue.items``): a plain ``list`` while it is a
listpack, a ``deque`` once a quicklist. Random op and command sequences on lists that cross
the 8 KiB / 4 KiB boundary both ways must give what a reference Python list gives, whichever
representation holds the elements; and a short list must stay cheap (issue 19's memory goal).
"""

from __future__ import annotations

import random
import sys
import tracemalloc
from collections import deque

from minidb.store._encodings import LIST_MAX_LISTPACK_BYTES, LISTPACK, QUICKLIST
from minidb.store._results import ErrorReply
from minidb.store._values import (
    LIST,
    ListValue,
    list_apply,
    list_from,
    list_revert,
    listpack_entry_bytes,
    new_list,
)
from minidb.wal._ops import ListInsert, ListOp, ListPop, ListPush, ListRemove, ListSet
from tests.store.test_hashes import Client

B, K = b"0", b"l"
SIZES = (1, 3, 40, 700, 1800)
"""Element sizes: a few big ones push a list past 8 KiB, popping them brings it back."""


def _element(rng: random.Random) -> bytes:
    size = rng.choice(SIZES)
    return b"%d" % rng.randrange(100) if size == 3 else bytes([97 + rng.randrange(3)]) * size


def _check(lst: ListValue, ref: list[bytes]) -> None:
    """``lst`` holds ``ref``, its ``lpbytes`` add up, and its representation is its encoding
    (a listpack past 8 KiB or a quicklist under 4 KiB would be a conversion missed)."""
    assert list(lst) == ref and list(reversed(lst)) == ref[::-1] and len(lst) == len(ref)
    assert lst.lpbytes == 7 + sum(map(listpack_entry_bytes, ref))
    if lst.encoding == LISTPACK:
        assert type(lst.items) is list and lst.lpbytes <= LIST_MAX_LISTPACK_BYTES + 1800 * 3
    else:
        assert lst.encoding == QUICKLIST and type(lst.items) is deque
        assert lst.lpbytes > LIST_MAX_LISTPACK_BYTES // 2


def _random_op(rng: random.Random, ref: list[bytes]) -> tuple[ListOp, list[bytes]]:
    """A valid op on a list holding ``ref`` and what the list holds after it."""
    what = rng.choice(("lpush", "rpush", "lpop", "rpop", "set", "insert", "remove"))
    if not ref or what in ("lpush", "rpush"):
        elements = tuple(_element(rng) for _ in range(rng.randint(1, 4)))
        if what == "lpush":
            return ListPush(B, K, True, elements), list(reversed(elements)) + ref
        return ListPush(B, K, False, elements), ref + list(elements)
    if what in ("lpop", "rpop"):
        n = rng.randint(1, len(ref))
        left = what == "lpop"
        return ListPop(B, K, left, n), ref[n:] if left else ref[:-n]
    at = rng.randrange(len(ref) + (what == "insert"))
    if what == "set":
        element = _element(rng)
        return ListSet(B, K, at, element), [*ref[:at], element, *ref[at + 1 :]]
    if what == "insert":
        element = _element(rng)
        return ListInsert(B, K, at, element), [*ref[:at], element, *ref[at:]]
    element = ref[min(at, len(ref) - 1)]
    count = ref.count(element)
    n = rng.randint(1, count) * rng.choice((1, -1))
    positions = [i for i, x in enumerate(ref) if x == element]
    gone = set(positions[:n] if n > 0 else positions[n:])
    return ListRemove(B, K, n, element), [x for i, x in enumerate(ref) if i not in gone]


def test_list_small_ops_and_undo_match_a_reference_list_across_both_conversions() -> None:
    """Random list ops (as commands and replay apply them) give the reference list's result
    in both representations; each undone (as a journal rolls back: revert, then encoding
    and lpbytes restored) gives back the list as it was, representation included; and the
    sequences really convert both ways, many times."""
    conversions = {(LISTPACK, QUICKLIST): 0, (QUICKLIST, LISTPACK): 0}
    for seed in range(30):
        rng = random.Random(seed)
        lst, ref = new_list(0), []
        for _ in range(150):
            op, after = _random_op(rng, ref)
            before = (lst.encoding, lst.lpbytes, type(lst.items))
            undo = list_apply(lst, op)
            _check(lst, after)
            if rng.random() < 0.3:
                list_revert(lst, undo)
                lst.encoding, lst.lpbytes = before[0], before[1]
                assert type(lst.items) is before[2]
                _check(lst, ref)
                continue
            if before[0] != lst.encoding:
                conversions[(before[0], lst.encoding)] += 1
            ref = after
            if not ref:
                lst = new_list(0)
    assert min(conversions.values()) >= 20, conversions


def test_list_small_commands_match_a_reference_list_in_both_representations() -> None:
    """LPUSH/RPUSH/LPOP/RPOP with counts, LSET, LINSERT, LREM, LTRIM, LMOVE on itself and the
    readers (LRANGE with any bounds, LINDEX, LPOS with RANK/COUNT/MAXLEN, LLEN) answer as a
    Python list would, while the list goes past 8 KiB and back; the log replays to it."""
    rng = random.Random(19)
    c, ref = Client(), list[bytes]()
    seen = set()
    for _ in range(1500):
        what = rng.randrange(10)
        element = _element(rng)
        if what <= 2 or not ref:
            side = rng.choice(("LPUSH", "RPUSH"))
            new = [_element(rng) for _ in range(rng.randint(1, 3))]
            ref = new[::-1] + ref if side == "LPUSH" else ref + new
            assert c(side, K, *new) == len(ref)
        elif what == 3:
            n = rng.randint(1, len(ref) + 2)
            if rng.random() < 0.5:
                assert c("LPOP", K, str(n)) == ref[:n]
                ref = ref[n:]
            else:
                assert c("RPOP", K, str(n)) == ref[::-1][:n]
                ref = ref[: max(len(ref) - n, 0)]
        elif what == 4:
            at = rng.randrange(-len(ref), len(ref))
            assert not isinstance(c("LSET", K, str(at), element), ErrorReply)
            ref[at] = element
        elif what == 5:
            pivot, where = rng.choice(ref), rng.choice(("BEFORE", "AFTER"))
            at = ref.index(pivot) + (where == "AFTER")
            ref.insert(at, element)
            assert c("LINSERT", K, where, pivot, element) == len(ref)
        elif what == 6:
            target, n = rng.choice(ref), rng.randint(-2, 2)
            positions = [i for i, x in enumerate(ref) if x == target]
            gone = set(positions if n == 0 else positions[:n] if n > 0 else positions[n:])
            assert c("LREM", K, str(n), target) == len(gone)
            ref = [x for i, x in enumerate(ref) if i not in gone]
        elif what == 7:
            start, end = rng.randint(-len(ref) - 2, 3), rng.randint(-3, len(ref) + 2)
            c("LTRIM", K, str(start), str(end))
            first = max(start + len(ref) if start < 0 else start, 0)
            last = end + len(ref) if end < 0 else end
            ref = ref[first : max(last + 1, 0)]
        elif what == 8:
            left = rng.random() < 0.5
            moved = ref[0] if left else ref[-1]
            assert c("LMOVE", K, K, "LEFT" if left else "RIGHT", "RIGHT") == moved
            if left:  # RIGHT to RIGHT leaves it as it was
                ref = [*ref[1:], moved]
        else:
            first, last = rng.randint(-len(ref) - 2, len(ref) + 2), rng.randint(-3, len(ref))
            stop = last + len(ref) + 1 if last < 0 else last + 1
            assert (
                c("LRANGE", K, str(first), str(last))
                == ref[max(first + len(ref) if first < 0 else first, 0) : max(stop, 0)]
            )
            at = rng.randrange(-len(ref), len(ref))
            assert c("LINDEX", K, str(at)) == ref[at]
            rank, maxlen = rng.choice((1, 2, -1, -2)), rng.randint(0, len(ref))
            window = list(enumerate(ref))
            window = window[::-1] if rank < 0 else window
            window = window[:maxlen] if maxlen else window
            hits = [i for i, x in window if x == element][abs(rank) - 1 :]
            options = ("RANK", str(rank), "COUNT", "0", "MAXLEN", str(maxlen))
            assert c("LPOS", K, element, *options) == hits
        assert c("LLEN", K) == len(ref)
        if ref:
            encoding = c("OBJECT", "ENCODING", K)
            seen.add(encoding)
            lst = c.ks.peek(B, K)
            assert isinstance(lst, ListValue) and list(lst) == ref
            assert (type(lst.items) is list) == (encoding == b"listpack")
    assert seen == {b"listpack", b"quicklist"}
    replayed = c.replayed().peek(B, K)
    assert replayed == c.ks.peek(B, K) and (replayed is None) == (not ref)


def test_list_small_copy_equality_and_wrong_ops() -> None:
    """A copy keeps the representation and is equal but independent; equality is by
    elements; an op the list cannot take is refused, leaving it as it was."""
    small, big = list_from([b"a", b"b"], 0), list_from([b"x" * 5000, b"y" * 5000], 0)
    for lst in (small, big):
        copy = LIST.copy(lst, 3)
        assert copy == lst and copy is not lst and type(copy.items) is type(lst.items)
        assert copy.epoch == 3 and copy.encoding == lst.encoding
        list_apply(copy, ListPush(B, K, True, (b"z",)))
        assert copy != lst and len(copy) == len(lst) + 1
    assert small != [b"a", b"b"] and big.encoding == QUICKLIST and small.encoding == LISTPACK
    for bad in (ListPop(B, K, True, 3), ListSet(B, K, 2, b"c"), ListRemove(B, K, 1, b"q")):
        try:
            list_apply(small, bad)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{bad} was taken")
        assert list(small) == [b"a", b"b"] and small.encoding == LISTPACK
    c = Client()
    c("RPUSH", K, "a")
    assert isinstance(c("LSET", K, "5", "x"), ErrorReply)


def test_list_small_a_short_list_costs_a_fraction_of_a_deque() -> None:
    """A 5-element list as RPUSH makes it (empty list, one push) takes under 250 bytes
    beside its elements, where a deque alone takes ~790: measured by tracemalloc over
    2,000 of them (the elements made beforehand), and by ``sys.getsizeof``."""
    elements = [tuple(b"e%d-%d" % (i, k) for k in range(5)) for i in range(2000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        lists = []
        for five in elements:
            lst = new_list(0)
            list_apply(lst, ListPush(B, K, False, five))
            lists.append(lst)
        per_list = (tracemalloc.get_traced_memory()[0] - before) / len(lists)
    finally:
        tracemalloc.stop()
    deque_bytes = sys.getsizeof(deque(elements[0]))
    assert per_list < 250, per_list
    assert sys.getsizeof(lists[0]) + sys.getsizeof(lists[0].items) < 250 < deque_bytes
    assert all(lst.encoding == LISTPACK and len(lst) == 5 for lst in lists)
