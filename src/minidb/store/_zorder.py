"""A small sorted set's rank order without a ``SortedList``: its members in one plain ``list``,
kept sorted by (score, member) through the set's own dict of scores (``bisect`` with ``key=``).

A ``SortedList`` of (score, member) tuples costs about 300 bytes empty plus a 56-byte tuple a
member; this costs the list's 8 bytes a member. It is only for a ``listpack`` sorted set (at
most ``zset-max-listpack-entries``, 128, members), where an insert's O(n) move of pointers is
the same O(n) Redis's listpack pays; a ``skiplist`` keeps its ``SortedList`` for O(log n)
rank and range. ``MemberOrder`` answers the part of ``SortedList``'s API the sorted-set code
uses, with the same (score, member) items, so callers do not tell the two apart.

A ``MemberOrder`` is a short-lived view (``ZSetValue.order`` makes one per use): holding the
dict from inside the dict's own slot would be a reference cycle, freed only by the cyclic GC.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping

Item = tuple[float, bytes]
"""(score, member), as a ``SortedList`` of a sorted set holds them."""


class MemberOrder:
    """``members`` (sorted by (score, member), scores from ``scores``) seen as a ``SortedList``
    of (score, member). ``add`` and ``remove`` must run while ``scores`` holds the member's
    score that placed it (``remove`` before the score changes), as ``_values.zset_put`` does."""

    __slots__ = ("_members", "_scores")

    def __init__(self, members: list[bytes], scores: Mapping[bytes, float]) -> None:
        self._members = members
        self._scores = scores

    def _key(self, member: bytes) -> Item:
        return self._scores[member], member

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[Item]:
        scores = self._scores
        return ((scores[m], m) for m in self._members)

    def __getitem__(self, index: int) -> Item:
        member = self._members[index]
        return self._scores[member], member

    def bisect_left(self, value: tuple[object, ...]) -> int:
        return bisect_left(self._members, value, key=self._key)

    def bisect_right(self, value: tuple[object, ...]) -> int:
        return bisect_right(self._members, value, key=self._key)

    def index(self, value: Item) -> int:
        """The rank of (score, member); ``ValueError`` if it is not held (as ``SortedList``)."""
        at = self.bisect_left(value)
        if at < len(self._members) and self._key(self._members[at]) == value:
            return at
        raise ValueError(f"{value!r} is not in list")

    def islice(
        self, start: int | None = None, stop: int | None = None, reverse: bool = False
    ) -> Iterator[Item]:
        """Items of ranks [start, stop) (slice rules), highest first if ``reverse``."""
        members = self._members[start:stop]
        scores = self._scores
        return ((scores[m], m) for m in (reversed(members) if reverse else members))

    def add(self, value: Item) -> None:
        """Insert (score, member); the member must not be held (``scores`` may hold it yet)."""
        self._members.insert(self.bisect_left(value), value[1])

    def remove(self, value: Item) -> None:
        """Drop (score, member); ``ValueError`` if it is not held."""
        del self._members[self.index(value)]


def sorted_members(scores: Mapping[bytes, float]) -> list[bytes]:
    """The members of ``scores`` in rank order (by score, ties by member bytes)."""
    return sorted(scores, key=lambda m: (scores[m], m))
