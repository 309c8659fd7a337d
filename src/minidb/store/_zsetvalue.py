"""A sorted set's value: ``ZSetValue`` and the functions every sorted-set change goes through
(commands, replay and undo alike).

A sorted set maps members to scores (a ``float``, never NaN) and keeps Redis's order of them:
by score, ties by member bytes. It follows Redis 7.2's ``t_zset.c``: a ``listpack`` while it
has at most ``zset-max-listpack-entries`` (128) members of at most
``zset-max-listpack-value`` (64) bytes, a ``skiplist`` past either, one way only (a ``*STORE``
result and a snapshot's load get the encoding their contents call for).

Theory of operation
===================

The representation follows the encoding, as a list's does (``_values.ListValue``):

- *packed*: a listpack set of at most ``PACKED_MAX_MEMBERS`` members is ONE immutable
  ``bytes``, the tuple (score1, member1, score2, member2, ...) in rank order packed by
  ``_packed`` (``marshal``). With 5 short members that is about 130 bytes where a dict of
  member -> float, a float object a score and a list of the order cost about 400 (issue 19:
  bytes a key at most 2.5x Redis's).
  ``marshal`` writes a score as 9 bytes and a member as 5 plus its bytes, and reads them back
  into one tuple at C speed (~0.3 us for 5 members); every read decodes it, every change
  decodes it, changes a dict and a sorted plain list (``_open``), and writes it anew
  (``_settle``). It lives only in memory: the log and snapshots carry the members and scores
  (``zset_elements``), never this buffer.
- *unpacked*: a skiplist set, and a listpack one past ``PACKED_MAX_MEMBERS``, keeps a ``dict``
  of member -> score and a ``sortedcontainers.SortedList`` of (score, member) for O(1) scores
  and O(log n) rank and range (``_Unpacked``, which also holds the encoding).

``OBJECT ENCODING`` answers from the encoding alone, whatever the representation. Readers see
both through the same API: the mapping reads (``get``, ``[]``, ``in``, ``len``, ``items``,
``scores``: the whole mapping at once, which a command reading several members takes so it
decodes once) and ``order``, a ``SortedList``'s read API of (score, member) (``PackedOrder``
over the decoded tuple of a packed set). Only the functions here change a sorted set.

A packed ``bytes`` is never changed in place, so a copy (COPY, a snapshot's copy-on-write)
shares it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

from sortedcontainers import SortedList

from minidb.store._encodings import (
    LISTPACK,
    SKIPLIST,
    ZSET_MAX_LISTPACK_ENTRIES,
    ZSET_MAX_LISTPACK_VALUE,
)
from minidb.store._packed import EMPTY, pack_pairs, pair_count, unpack
from minidb.store._scanindex import ScanIndex
from minidb.wal._ops import decode_score, encode_score

PACKED_MAX_MEMBERS = 32
"""Members a listpack sorted set may have and stay packed; past it (up to the listpack's 128)
it keeps a dict and a ``SortedList`` while still answering ``listpack``. Every read of a
packed set decodes it and every change writes it anew, so its cost grows with its size:
measured in process (``execute``, min of 5 x 2,000 calls, pure Python, a shared 2-vCPU
machine at load 4-5, so +-30%), a packed set against the dict and list it replaced took
1.3-1.6x the time of ZADD, ZSCORE and ZRANK at 5 members, about 2x at 16 and 32, ~3x at 64
and 4-6x at 128 (``loads`` of 128 members ~5 us, ``dumps`` ~12 us). 32 keeps every operation
within about 2x; sets that small are the ones issue 19 counts."""

Item = tuple[float, bytes]
"""(score, member), as ``order`` yields them."""


class _Unpacked:
    """An unpacked sorted set's contents: its encoding, member -> score, its rank order, and
    the ``ScanIndex`` of its members once ZSCAN or a random pick built one."""

    __slots__ = ("encoding", "ranked", "scan", "scores")

    def __init__(self, encoding: str, scores: dict[bytes, float], ranked: SortedList) -> None:
        self.encoding = encoding
        self.scores = scores
        self.ranked = ranked
        self.scan: ScanIndex | None = None


class PackedOrder:
    """A packed set's rank order (its decoded flat tuple) with ``SortedList``'s read API over
    (score, member) items, so the commands do not tell it from an unpacked set's
    ``SortedList``. A snapshot: it does not follow later changes."""

    __slots__ = ("_flat",)

    def __init__(self, flat: tuple[Any, ...]) -> None:
        self._flat = flat

    def _key(self, rank: int) -> Item:
        at = rank << 1
        return self._flat[at], self._flat[at + 1]

    def __len__(self) -> int:
        return len(self._flat) >> 1

    def __iter__(self) -> Iterator[Item]:
        flat = self._flat
        return zip(flat[::2], flat[1::2], strict=True)

    def __getitem__(self, index: int) -> Item:
        size = len(self._flat) >> 1
        rank = index + size if index < 0 else index
        if not 0 <= rank < size:
            raise IndexError("list index out of range")
        return self._key(rank)

    def bisect_left(self, value: tuple[object, ...]) -> int:
        return bisect_left(range(len(self)), value, key=self._key)

    def bisect_right(self, value: tuple[object, ...]) -> int:
        return bisect_right(range(len(self)), value, key=self._key)

    def index(self, value: Item) -> int:
        """The rank of (score, member); ``ValueError`` if it is not held (as ``SortedList``).
        Found by the member, at C speed (scores are floats: only the member equals it)."""
        score, member = value
        flat = self._flat
        try:
            at = flat.index(member)  # odd: a member's place
        except ValueError:
            at = 0
        if at & 1 and flat[at - 1] == score:
            return at >> 1
        raise ValueError(f"{value!r} is not in list")

    def islice(
        self, start: int | None = None, stop: int | None = None, reverse: bool = False
    ) -> Iterator[Item]:
        """Items of ranks [start, stop) (slice rules), highest first if ``reverse``."""
        ranks = range(len(self))[start:stop]
        if not ranks:
            return iter(())
        flat = self._flat[ranks.start << 1 : ranks.stop << 1]
        items = zip(flat[::2], flat[1::2], strict=True)
        return reversed(list(items)) if reverse else items


Order: TypeAlias = "PackedOrder | SortedList"
"""A sorted set's ``order``: ``SortedList``'s read API of (score, member) either way."""


class ZSetValue:
    """A sorted set: member -> score, and ``order``, every (score, member) as Redis orders
    them. Packed in one ``bytes`` while small (see the module docstring)."""

    # Two slots: with the GC's header, 48 bytes (a third made it 64; the index lives in
    # ``_Unpacked``, as a packed set is never paged).
    __slots__ = ("_data", "epoch")
    _data: bytes | _Unpacked
    epoch: int
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by its contents

    def __init__(self, data: bytes | _Unpacked, epoch: int) -> None:
        self._data, self.epoch = data, epoch

    @property
    def scan(self) -> ScanIndex | None:
        """The ``ScanIndex`` of an unpacked set's members (``_elementscan``: ZSCAN of a
        skiplist, random picks from a large set); a packed one keeps none (ZSCAN answers it
        whole, a random pick takes a list of it), so setting one on it keeps nothing."""
        data = self._data
        return None if type(data) is bytes else data.scan  # type: ignore[union-attr]

    @scan.setter
    def scan(self, index: ScanIndex | None) -> None:
        data = self._data
        if type(data) is not bytes:
            data.scan = index  # type: ignore[union-attr]

    @property
    def encoding(self) -> str:
        data = self._data
        return LISTPACK if type(data) is bytes else data.encoding  # type: ignore[union-attr]

    @encoding.setter
    def encoding(self, encoding: str) -> None:
        """Set the encoding (undo restoring it), with the representation it calls for."""
        if encoding != self.encoding:
            scores, ranked = _open(self, encoding)
            _settle(self, encoding, scores, ranked)

    @property
    def packed(self) -> bool:
        """Whether it is one ``bytes`` (the module docstring)."""
        return type(self._data) is bytes

    @property
    def order(self) -> Order:
        """Every (score, member) in rank order, with ``SortedList``'s read API either way.
        Read it; change the set only through this module's functions."""
        data = self._data
        if type(data) is bytes:
            return PackedOrder(unpack(data))
        return data.ranked  # type: ignore[union-attr]

    def scores(self) -> Mapping[bytes, float]:
        """Member -> score, all at once (a packed set decoded once, for a reader of several
        members); read it only, and not across a change."""
        data = self._data
        if type(data) is bytes:
            flat = unpack(data)
            return dict(zip(flat[1::2], flat[::2], strict=True))
        return data.scores  # type: ignore[union-attr]

    def items(self) -> Iterable[tuple[bytes, float]]:
        """(member, score) of each member (a packed set's in rank order)."""
        data = self._data
        if type(data) is bytes:
            flat = unpack(data)
            return list(zip(flat[1::2], flat[::2], strict=True))
        return data.scores.items()  # type: ignore[union-attr]

    def get(self, member: bytes) -> float | None:
        data = self._data
        if type(data) is not bytes:
            return data.scores.get(member)  # type: ignore[union-attr]
        flat = unpack(data)
        try:
            # Scores are floats, never equal to a member, so this finds only the member.
            return flat[flat.index(member) - 1]  # type: ignore[no-any-return]
        except ValueError:
            return None

    def __getitem__(self, member: bytes) -> float:
        score = self.get(member)
        if score is None:
            raise KeyError(member)
        return score

    def __contains__(self, member: object) -> bool:
        data = self._data
        if type(data) is bytes:
            # Only a member (bytes) can equal a member: the scores are floats.
            return isinstance(member, bytes) and member in unpack(data)
        return member in data.scores  # type: ignore[union-attr]

    def __len__(self) -> int:
        data = self._data
        if type(data) is bytes:
            return pair_count(data)
        return len(data.scores)  # type: ignore[union-attr]

    def __iter__(self) -> Iterator[bytes]:
        """The members (a packed set's in rank order)."""
        data = self._data
        if type(data) is bytes:
            return iter(unpack(data)[1::2])
        return iter(data.scores)  # type: ignore[union-attr]

    def __eq__(self, other: object) -> bool:
        if type(other) is not ZSetValue:
            return NotImplemented
        return self.scores() == other.scores()

    def __repr__(self) -> str:
        return f"ZSetValue({list(self.order)!r}, encoding={self.encoding!r})"


Ranked: TypeAlias = "list[Item] | SortedList"
"""A rank order being changed: a sorted plain list (a packed set's, decoded) or a
``SortedList``."""


def _open(z: ZSetValue, encoding: str) -> tuple[dict[bytes, float], Ranked]:
    """``z``'s scores and rank order in a form that can change, for a set to end up in
    ``encoding``: a packed set's decoded into a new dict and a sorted plain list (a
    ``SortedList`` if it is to be a skiplist, so a large batch inserts in O(log n)), an
    unpacked set's own."""
    data = z._data
    if type(data) is not bytes:
        return data.scores, data.ranked  # type: ignore[union-attr]
    flat = unpack(data)
    ranked = list(zip(flat[::2], flat[1::2], strict=True))
    scores = dict(zip(flat[1::2], flat[::2], strict=True))
    return scores, SortedList(ranked) if encoding == SKIPLIST else ranked


def _settle(z: ZSetValue, encoding: str, scores: dict[bytes, float], ranked: Ranked) -> None:
    """Keep ``scores`` and ``ranked`` (from ``_open``, changed) in ``z`` as ``encoding`` and
    their size call for: packed, or unpacked."""
    if encoding == LISTPACK and len(scores) <= PACKED_MAX_MEMBERS:
        z._data = pack_pairs(ranked)
    elif type(z._data) is bytes:
        order = ranked if type(ranked) is SortedList else SortedList(ranked)
        z._data = _Unpacked(SKIPLIST if encoding == SKIPLIST else LISTPACK, scores, order)
    else:
        z._data.encoding = SKIPLIST if encoding == SKIPLIST else LISTPACK  # type: ignore[union-attr]


def _put(
    scores: dict[bytes, float], ranked: Ranked, member: bytes, score: float | None
) -> float | None:
    """Set ``member``'s score (None: remove it) in ``scores`` and ``ranked``; its score
    before (None: absent)."""
    old = scores.get(member)
    if old is not None:
        if score is not None and old == score:
            return old  # zsetAdd: an equal score (0 and -0 too) changes nothing
        if isinstance(ranked, list):
            del ranked[bisect_left(ranked, (old, member))]
        else:
            ranked.remove((old, member))
    if score is None:
        if old is not None:
            del scores[member]
    else:
        scores[member] = score
        if isinstance(ranked, list):
            insort(ranked, (score, member))
        else:
            ranked.add((score, member))
    return old


def new_zset(size_hint: int, longest: int, epoch: int) -> ZSetValue:
    """An empty sorted set as Redis's ``zsetTypeCreate`` makes it for ``size_hint`` members of
    at most ``longest`` bytes: a listpack if they would fit one, else a skiplist."""
    if size_hint <= ZSET_MAX_LISTPACK_ENTRIES and longest <= ZSET_MAX_LISTPACK_VALUE:
        return ZSetValue(EMPTY, epoch)
    return ZSetValue(_Unpacked(SKIPLIST, {}, SortedList()), epoch)


def zset_add(
    z: ZSetValue, pairs: Sequence[tuple[bytes, float]]
) -> list[tuple[bytes, float | None]]:
    """Set each member's score, in order; (member, score before or None) of each, for the
    undo. Converts as Redis's ``zsetTypeMaybeConvert`` (the batch's size) and ``zsetAdd``
    (a member too many or too long) do: a batch only adds, so checking at its end converts
    exactly when checking after each member would."""
    encoding = z.encoding
    if encoding == LISTPACK and len(pairs) > ZSET_MAX_LISTPACK_ENTRIES:
        encoding = SKIPLIST
    scores, ranked = _open(z, encoding)
    olds = [(member, _put(scores, ranked, member, score)) for member, score in pairs]
    if encoding == LISTPACK and (
        len(scores) > ZSET_MAX_LISTPACK_ENTRIES
        or any(len(member) > ZSET_MAX_LISTPACK_VALUE for member, _ in pairs)
    ):
        encoding = SKIPLIST
    if any(old is None for _, old in olds):
        z.scan = None
    _settle(z, encoding, scores, ranked)
    return olds


def zset_remove(z: ZSetValue, members: Iterable[bytes]) -> list[tuple[bytes, float | None]]:
    """Remove the members present; (member, score) of each removed, in order."""
    encoding = z.encoding
    scores, ranked = _open(z, encoding)
    olds: list[tuple[bytes, float | None]] = []
    for member in members:
        old = _put(scores, ranked, member, None)
        if old is not None:
            olds.append((member, old))
    if olds:
        z.scan = None
        _settle(z, encoding, scores, ranked)
    return olds


def zset_revert(z: ZSetValue, olds: list[tuple[bytes, float | None]]) -> None:
    """Take back a ``zset_add`` or ``zset_remove`` that returned ``olds`` (the caller restores
    the encoding)."""
    encoding = z.encoding
    scores, ranked = _open(z, encoding)
    for member, old in reversed(olds):
        _put(scores, ranked, member, old)
    z.scan = None
    _settle(z, encoding, scores, ranked)


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
    scores: dict[bytes, float] = {}
    for member, score in pairs:
        if scores.get(member) != score:  # an equal score (0 and -0 too) changes nothing
            scores[member] = score
    small = len(scores) <= ZSET_MAX_LISTPACK_ENTRIES and all(
        len(member) <= ZSET_MAX_LISTPACK_VALUE for member in scores
    )
    z = ZSetValue(EMPTY, epoch)
    ranked = sorted((score, member) for member, score in scores.items())
    _settle(z, LISTPACK if small else SKIPLIST, scores, ranked)
    return z


def zset_new_for(elements: Sequence[bytes], epoch: int) -> ZSetValue:
    return new_zset(len(elements) // 2, max(map(len, elements[::2]), default=0), epoch)


def zset_add_elements(z: Any, elements: Sequence[bytes]) -> None:
    zset_add(z, _pairs(elements))


def zset_copy(z: Any, epoch: int) -> ZSetValue:
    """A copy at ``epoch``: a packed set shares its ``bytes`` (never changed in place)."""
    data = z._data
    if type(data) is bytes:
        return ZSetValue(data, epoch)
    return ZSetValue(_Unpacked(data.encoding, dict(data.scores), SortedList(data.ranked)), epoch)


def zset_from_elements(elements: Sequence[bytes], epoch: int) -> ZSetValue:
    """A sorted set of the log's elements (member, score, ...), at an epoch."""
    return zset_from(_pairs(elements), epoch)
