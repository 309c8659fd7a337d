"""A sorted set's value: ``ZSetValue`` and the functions every sorted-set change goes through
(commands, replay and undo alike).

A sorted set is a ``dict`` of member -> score (a ``float``, never NaN) with a fourth slot,
``ranked``: Redis's order (by score, ties by member bytes), which ``order`` shows as a
``SortedList`` of (score, member). It follows Redis 7.2's ``t_zset.c``: a ``listpack`` while
it has at most ``zset-max-listpack-entries`` (128) members of at most
``zset-max-listpack-value`` (64) bytes, a ``skiplist`` past either, one way only (a ``*STORE``
result and a snapshot's load get the encoding their contents call for). A listpack one keeps
``ranked`` as a plain list of its members (``_zorder``: 8 bytes a member, where a
``SortedList`` costs ~300 bytes and a tuple a member); a skiplist one as a
``sortedcontainers.SortedList`` of (score, member), for O(log n) rank and range.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from sortedcontainers import SortedList

from minidb.store._encodings import (
    LISTPACK,
    SKIPLIST,
    ZSET_MAX_LISTPACK_ENTRIES,
    ZSET_MAX_LISTPACK_VALUE,
)
from minidb.store._scanindex import ScanIndex
from minidb.store._zorder import MemberOrder, sorted_members
from minidb.wal._ops import decode_score, encode_score


class ZSetValue(dict[bytes, float]):
    """A sorted set: member -> score, plus ``order``, every (score, member) sorted as Redis
    orders them (by score, ties by member bytes): O(log n) rank and range for a skiplist."""

    __slots__ = ("encoding", "epoch", "ranked", "scan")
    encoding: str
    epoch: int
    ranked: list[bytes] | SortedList
    """The members in rank order while a listpack, else a ``SortedList`` of (score, member)
    (a listpack set back from an undone conversion may keep its ``SortedList``)."""
    scan: ScanIndex | None

    @property
    def order(self) -> MemberOrder | SortedList:
        """Every (score, member) in rank order, with ``SortedList``'s API either way."""
        ranked = self.ranked
        return MemberOrder(ranked, self) if type(ranked) is list else ranked


def new_zset(size_hint: int, longest: int, epoch: int) -> ZSetValue:
    """An empty sorted set as Redis's ``zsetTypeCreate`` makes it for ``size_hint`` members of
    at most ``longest`` bytes: a listpack if they would fit one, else a skiplist."""
    z = ZSetValue()
    small = size_hint <= ZSET_MAX_LISTPACK_ENTRIES and longest <= ZSET_MAX_LISTPACK_VALUE
    z.encoding = LISTPACK if small else SKIPLIST
    z.epoch, z.ranked, z.scan = epoch, [] if small else SortedList(), None
    return z


def _zset_to_skiplist(z: ZSetValue) -> None:
    """Redis's ``zsetConvert`` to a skiplist: ``ranked`` becomes a ``SortedList``."""
    z.encoding = SKIPLIST
    if type(z.ranked) is list:
        z.ranked = SortedList((z[member], member) for member in z.ranked)


def zset_put(z: ZSetValue, member: bytes, score: float | None) -> float | None:
    """Set ``member``'s score (None: remove it), keeping ``order``; its score before (None:
    absent). Encodings are the caller's (``zset_add``)."""
    old = z.get(member)
    if old is not None:
        if score is not None and old == score:
            return old  # zsetAdd: an equal score (0 and -0 too) changes nothing
        z.order.remove((old, member))
    if score is None:
        if old is not None:
            del z[member]
            z.scan = None
    else:
        z[member] = score
        z.order.add((score, member))
        if old is None:
            z.scan = None
    return old


def zset_add(
    z: ZSetValue, pairs: Sequence[tuple[bytes, float]]
) -> list[tuple[bytes, float | None]]:
    """Set each member's score, in order; (member, score before or None) of each, for the
    undo. Converts as Redis's ``zsetTypeMaybeConvert`` and ``zsetAdd`` do."""
    if z.encoding is LISTPACK and len(pairs) > ZSET_MAX_LISTPACK_ENTRIES:
        _zset_to_skiplist(z)
    olds = []
    for member, score in pairs:
        olds.append((member, zset_put(z, member, score)))
        if z.encoding is LISTPACK and (
            len(z) > ZSET_MAX_LISTPACK_ENTRIES or len(member) > ZSET_MAX_LISTPACK_VALUE
        ):
            _zset_to_skiplist(z)
    return olds


def zset_remove(z: ZSetValue, members: Iterable[bytes]) -> list[tuple[bytes, float | None]]:
    """Remove the members present; (member, score) of each removed, in order."""
    olds: list[tuple[bytes, float | None]] = []
    for member in members:
        if member in z:
            olds.append((member, zset_put(z, member, None)))
    return olds


def zset_revert(z: ZSetValue, olds: list[tuple[bytes, float | None]]) -> None:
    """Take back a ``zset_add`` or ``zset_remove`` that returned ``olds`` (the caller restores
    the encoding)."""
    for member, old in reversed(olds):
        zset_put(z, member, old)
    z.scan = None


def zset_elements(z: ZSetValue) -> Iterator[bytes]:
    """The log's elements, member then score, in rank order."""
    for score, member in z.order:
        yield member
        yield encode_score(score)


def _pairs(elements: Sequence[bytes]) -> list[tuple[bytes, float]]:
    return [(elements[at], decode_score(elements[at + 1])) for at in range(0, len(elements), 2)]


def zset_from(pairs: Iterable[tuple[bytes, float]], epoch: int) -> ZSetValue:
    """A sorted set of ``pairs`` with the encoding its contents call for (Redis's RDB load, and
    ``zsetConvertToListpackIfNeeded`` of a ``*STORE`` result)."""
    z = new_zset(0, 0, epoch)
    for member, score in pairs:
        if z.get(member) != score:  # an equal score (0 and -0 too) changes nothing (zset_put)
            z[member] = score
    if len(z) > ZSET_MAX_LISTPACK_ENTRIES or any(len(m) > ZSET_MAX_LISTPACK_VALUE for m in z):
        z.encoding = SKIPLIST
        z.ranked = SortedList((score, member) for member, score in z.items())
    else:
        z.ranked = sorted_members(z)
    return z


def zset_new_for(elements: Sequence[bytes], epoch: int) -> ZSetValue:
    return new_zset(len(elements) // 2, max(map(len, elements[::2]), default=0), epoch)


def zset_add_elements(z: Any, elements: Sequence[bytes]) -> None:
    zset_add(z, _pairs(elements))


def zset_copy(z: Any, epoch: int) -> ZSetValue:
    copy = ZSetValue(z)
    copy.encoding, copy.epoch, copy.scan = z.encoding, epoch, None
    ranked = z.ranked
    copy.ranked = ranked.copy() if type(ranked) is list else SortedList(ranked)
    return copy


def zset_from_elements(elements: Sequence[bytes], epoch: int) -> ZSetValue:
    """A sorted set of the log's elements (member, score, ...), at an epoch."""
    return zset_from(_pairs(elements), epoch)
