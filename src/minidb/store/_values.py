"""The values a key holds: a string (``bytes``) or a container (a hash, a set, a list, a
sorted set), and what Redis says of each (``TYPE``, ``OBJECT ENCODING``).

A set is a plain ``set`` subclass with three slots, so every set operation runs at C speed;
a list is a small slotted object holding its elements (``ListValue``, below); a hash
(``_hashvalue``) and a sorted set (``_zsetvalue``) are slotted objects that keep a small
container packed in one ``bytes`` and a large one in a dict. The C accelerators take anything
that is not exactly ``bytes`` for "not mine" and leave it to Python. Every container has these
attributes:

- ``epoch``: the keyspace's copy-on-write mark (``Keyspace``, "Snapshots of containers"):
  a container whose epoch is below the keyspace's mark may be read by a snapshot being written
  in another thread, and is copied before its first change.
- ``encoding``: what ``OBJECT ENCODING`` answers. Redis keeps a small container compact
  (``listpack``, or ``intset`` for a set of few integers) and converts it to a ``hashtable``
  as it grows past its thresholds, one way only; minidb's representation is its own (the
  memory trade is the README's) but the encoding it reports follows the same conversions,
  decided by the functions here (Redis 7.2's ``t_hash.c`` / ``t_set.c``), so a client reading
  the encoding sees Redis's answer. A container built from a snapshot gets the encoding its
  contents call for, as Redis's own RDB load does.
- ``scan``: the ``ScanIndex`` of its elements that HSCAN/SSCAN cursors and random picks use
  (``_elementscan``), built on first use and dropped by any change to which elements it holds
  (the functions here, and undo, drop it), so a container never scanned pays nothing.

A list follows Redis 7.2's ``t_list.c``: a ``listpack`` while its listpack would stay within
``list-max-listpack-size`` (-2: 8 KiB), a ``quicklist`` past it, and back to a listpack when
a shrinking change leaves it at half that. Its fourth attribute, ``lpbytes``, is the size its
elements would take in one listpack (kept by every change, whatever the encoding), which is
what Redis weighs. Redis converts back only when its quicklist is down to a single node; minidb
has no nodes and treats every quicklist of at most 4 KiB of elements as one. The encoding is
also the representation: a listpack list keeps a plain ``list`` (a 5-element one costs ~170
bytes where a deque's first block alone is ~790), a quicklist a ``deque``. A list changes
only through ``list_apply`` of a log op (``ListPush``, ``ListPop``, ...), which commands and
replay share, so both convert alike, and every push passes there.

Each kind of container is one ``Kind``: its code in the log (``minidb.wal.KIND_*``), its
``TYPE`` name, and how the log's element operations build, add to and remove from it, which
is what replay (``Keyspace.apply_ops``) and the commands share. A stream is one more kind
(``_streamvalue``: entries by id and the metadata that outlives them; it is the only kind
kept when emptied, as Redis keeps an empty stream).

A hash's value and its functions are in ``_hashvalue``, a sorted set's in ``_zsetvalue``, a
stream's in ``_streamvalue``; what each encoding is called and where it converts, in
``_encodings``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import eq
from typing import Any

from minidb.store._encodings import (
    EMBSTR_MAX_BYTES,
    HASHTABLE,
    INTSET,
    LIST_MAX_LISTPACK_BYTES,
    LISTPACK,
    QUICKLIST,
    SET_MAX_INTSET_ENTRIES,
    SET_MAX_LISTPACK_ENTRIES,
    SET_MAX_LISTPACK_VALUE,
)
from minidb.store._hashvalue import (
    HashValue,
    hash_add,
    hash_copy,
    hash_delete,
    hash_elements,
    hash_from,
    new_hash,
)
from minidb.store._numbers import parse_int
from minidb.store._scanindex import ScanIndex
from minidb.store._streamvalue import (
    StreamValue,
    new_stream,
    stream_apply,
    stream_copy,
    stream_elements,
    stream_from,
)
from minidb.store._zsetvalue import (
    ZSetValue,
    zset_add_elements,
    zset_copy,
    zset_elements,
    zset_from_elements,
    zset_new_for,
    zset_remove,
)
from minidb.wal._ops import (
    KIND_HASH,
    KIND_LIST,
    KIND_SET,
    KIND_STREAM,
    KIND_ZSET,
    ListInsert,
    ListOp,
    ListPop,
    ListPush,
    ListRemove,
    ListSet,
)


class SetValue(set[bytes]):
    """A set of members."""

    __slots__ = ("encoding", "epoch", "scan")
    encoding: str
    epoch: int
    scan: ScanIndex | None


class ListValue:
    """A list: elements, head (left) first, in ``items``: a plain ``list`` while the encoding
    is ``listpack`` (at most 8 KiB of elements, so an insert or pop at the head moves few
    pointers, and a short list costs a few words where a deque allocates a 64-slot block), a
    ``deque`` as a ``quicklist`` (O(1) at both ends, however long). The representation *is*
    the encoding: setting ``encoding`` converts ``items`` (so ``list_apply``'s conversions and
    undo's restoring of the encoding both move the elements with it). The sequence methods
    below serve generic readers (a snapshot, SCAN of elements); this module and ``_lists``
    work on ``items`` directly."""

    __slots__ = ("epoch", "items", "lpbytes", "scan")
    items: list[bytes] | deque[bytes]
    epoch: int
    lpbytes: int
    scan: ScanIndex | None
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by its elements

    def __init__(self, elements: Iterable[bytes] = ()) -> None:
        self.items = list(elements)
        self.epoch, self.lpbytes, self.scan = 0, _LISTPACK_EMPTY, None

    @property
    def encoding(self) -> str:
        return LISTPACK if type(self.items) is list else QUICKLIST

    @encoding.setter
    def encoding(self, encoding: str) -> None:
        if encoding != self.encoding:
            self.items = list(self.items) if encoding == LISTPACK else deque(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.items)

    def __reversed__(self) -> Iterator[bytes]:
        return reversed(self.items)

    def __getitem__(self, index: int) -> bytes:
        return self.items[index]

    def __eq__(self, other: object) -> bool:
        if type(other) is not ListValue:
            return NotImplemented
        return len(self.items) == len(other.items) and all(map(eq, self.items, other.items))

    def __repr__(self) -> str:
        return f"ListValue({list(self.items)!r}, encoding={self.encoding!r})"


Container = HashValue | SetValue | ListValue | ZSetValue
"""A container of elements (``bytes``); a stream, whose elements are entries, is apart."""
Value = bytes | HashValue | SetValue | ListValue | ZSetValue | StreamValue
"""What a key holds (an expiring key holds it in its ``_Expiring`` record)."""


def is_int(member: bytes) -> bool:
    """Whether Redis would store ``member`` as an integer (``string2ll``: canonical decimal,
    within a signed 64-bit integer)."""
    return len(member) <= 20 and parse_int(member) is not None


# -- sets ------------------------------------------------------------------------------------


def new_set(first: bytes, size_hint: int, epoch: int) -> SetValue:
    """An empty set that can take ``first``, sized for about ``size_hint`` members, encoded as
    Redis's ``setTypeCreate`` would create it."""
    s = SetValue()
    if size_hint <= SET_MAX_INTSET_ENTRIES and is_int(first):
        s.encoding = INTSET
    elif size_hint <= SET_MAX_LISTPACK_ENTRIES:
        s.encoding = LISTPACK
    else:
        s.encoding = HASHTABLE
    s.epoch, s.scan = epoch, None
    return s


def set_add(s: SetValue, members: Iterable[bytes], size_hint: int) -> list[bytes]:
    """Add ``members`` (about ``size_hint`` of them); those that were new, in order. Converts
    as Redis's ``setTypeMaybeConvert`` and ``setTypeAdd`` do."""
    encoding = s.encoding
    if (encoding is LISTPACK and size_hint > SET_MAX_LISTPACK_ENTRIES) or (
        encoding is INTSET and size_hint > SET_MAX_INTSET_ENTRIES
    ):
        encoding = HASHTABLE
    added = []
    new: set[bytes] = set()
    size = len(s)
    for member in members:
        if member in s or member in new:
            continue
        if encoding is INTSET:
            if is_int(member):
                if size + 1 > SET_MAX_INTSET_ENTRIES:
                    encoding = HASHTABLE
            elif size < SET_MAX_LISTPACK_ENTRIES and len(member) <= SET_MAX_LISTPACK_VALUE:
                encoding = LISTPACK  # every integer has at most 20 digits: all fit
            else:
                encoding = HASHTABLE
        elif encoding is LISTPACK and (
            size >= SET_MAX_LISTPACK_ENTRIES or len(member) > SET_MAX_LISTPACK_VALUE
        ):
            encoding = HASHTABLE
        new.add(member)
        added.append(member)
        size += 1
    # One update from a set, not an add per member: CPython sizes the table for what a set
    # merge brings (twice the members), where adds one at a time quadruple it as it fills, so
    # a set of 5 short members takes 472 bytes instead of 728 (bench/memory.py: 1,105 -> 837
    # bytes a key at 1M sets).
    s.update(new)
    s.encoding = encoding
    if added:
        s.scan = None
    return added


def set_remove(s: SetValue, members: Iterable[bytes]) -> list[bytes]:
    """Remove the members present; those removed, in order."""
    removed = []
    for member in members:
        if member in s:
            s.discard(member)
            removed.append(member)
    if removed:
        s.scan = None
    return removed


def set_from(members: Iterable[bytes], epoch: int) -> SetValue:
    """A set of ``members`` with the encoding its contents call for (Redis's RDB load, and a
    ``*STORE`` result built by adding one member at a time to an empty set)."""
    s = SetValue(set(members))  # built from a set: its table sized as ``set_add`` sizes it
    n = len(s)
    if n <= SET_MAX_INTSET_ENTRIES and all(map(is_int, s)):
        s.encoding = INTSET
    elif n <= SET_MAX_LISTPACK_ENTRIES and all(len(m) <= SET_MAX_LISTPACK_VALUE for m in s):
        s.encoding = LISTPACK
    else:
        s.encoding = HASHTABLE
    s.epoch, s.scan = epoch, None
    return s


def set_members(s: SetValue) -> list[bytes]:
    """The members in Redis's order where it has one: an intset is sorted by value."""
    if s.encoding is INTSET:
        return sorted(s, key=int)
    return list(s)


def _set_add(s: Any, elements: Sequence[bytes]) -> None:
    set_add(s, elements, len(elements))


def _set_copy(s: Any, epoch: int) -> SetValue:
    copy = SetValue(s)
    copy.encoding, copy.epoch, copy.scan = s.encoding, epoch, None
    return copy


# -- lists -----------------------------------------------------------------------------------

_LISTPACK_EMPTY = 7
"""A listpack's header (total bytes u32, count u16) and end byte."""


def listpack_entry_bytes(element: bytes) -> int:
    """The bytes ``element`` takes in a listpack (``lpEncodeBacklen`` and the entry encodings
    of Redis's ``listpack.c``): an integer in its smallest encoding, a string with its length."""
    if len(element) <= 20 and (n := parse_int(element)) is not None:
        if 0 <= n <= 127:
            return 2
        if -4096 <= n <= 4095:
            return 3
        if -32768 <= n <= 32767:
            return 4
        if -8388608 <= n <= 8388607:
            return 5
        return 6 if -(1 << 31) <= n < 1 << 31 else 10
    size = len(element)
    size += 1 if size <= 63 else 2 if size <= 4095 else 5
    return size + (1 if size <= 127 else 2 if size < 16383 else 3 if size < 2097151 else 4)


def new_list(epoch: int) -> ListValue:
    """An empty list, as Redis creates one (a listpack)."""
    lst = ListValue()
    lst.epoch = epoch
    return lst


def _list_grow(lst: ListValue, elements: Sequence[bytes]) -> None:
    # ``listTypeTryConvertListpack``: the listpack's bytes plus the new arguments' lengths.
    if type(lst.items) is list and (
        lst.lpbytes + sum(map(len, elements)) > LIST_MAX_LISTPACK_BYTES
    ):
        lst.encoding = QUICKLIST


def _list_shrunk(lst: ListValue) -> None:
    # ``listTypeTryConvertQuicklist`` with ``shrinking``: half the limit.
    if type(lst.items) is not list and lst.lpbytes <= LIST_MAX_LISTPACK_BYTES // 2:
        lst.encoding = LISTPACK


def _put_back(items: list[bytes] | deque[bytes], left: bool, elements: Sequence[bytes]) -> None:
    """Put ``elements`` (head first) at one end of ``items``."""
    if not left:
        items.extend(elements)
    elif isinstance(items, list):
        items[0:0] = elements
    else:
        items.extendleft(reversed(elements))


def _take(items: list[bytes] | deque[bytes], left: bool, n: int) -> list[bytes]:
    """Take ``n`` elements off one end of ``items``, in the order taken."""
    if not n:
        return []
    if isinstance(items, list):
        if left:
            taken = items[:n]
            del items[:n]
        else:
            taken = items[-n:]
            del items[-n:]
            taken.reverse()
        return taken
    take = items.popleft if left else items.pop
    return [take() for _ in range(n)]


ListUndoData = tuple[str, Any, Any]
"""What ``list_apply`` changed, for ``list_revert``: (what, where, elements)."""


def list_apply(lst: ListValue, op: ListOp) -> ListUndoData:
    """Apply a list op (a command's effect, or replay) to ``lst``, converting its encoding as
    Redis does; what ``list_revert`` needs to take it back. ``ValueError`` for an op the list
    cannot take (a pop past its length, a position out of range, occurrences not there)."""
    size = listpack_entry_bytes
    lst.scan = None
    if type(op) is ListPush:
        _list_grow(lst, op.elements)
        # LPUSH a b c pushes one at a time: c ends at the head.
        _put_back(lst.items, op.left, op.elements[::-1] if op.left else op.elements)
        lst.lpbytes += sum(map(size, op.elements))
        return ("push", op.left, len(op.elements))
    if type(op) is ListPop:
        if not 0 < op.n <= len(lst.items):
            raise ValueError(f"cannot pop {op.n} of a list of {len(lst.items)}")
        popped = _take(lst.items, op.left, op.n)
        lst.lpbytes -= sum(map(size, popped))
        _list_shrunk(lst)
        return ("pop", op.left, popped)
    if type(op) is ListSet or type(op) is ListInsert:
        at = op.position
        if not 0 <= at < len(lst.items) + (type(op) is ListInsert):
            raise ValueError(f"position {at} is out of a list of {len(lst.items)}")
        _list_grow(lst, (op.element,))
        lst.lpbytes += size(op.element)
        items = lst.items
        if type(op) is ListInsert:
            items.insert(at, op.element)
            return ("insert", at, None)
        old = items[at]
        items[at] = op.element
        lst.lpbytes -= size(old)
        _list_shrunk(lst)  # lsetCommand: a big element replaced by a small one
        return ("set", at, old)
    if type(op) is ListRemove:
        positions = list_find(lst, op.element, op.n)
        if len(positions) != abs(op.n):
            raise ValueError(f"{abs(op.n)} occurrences of {op.element!r} are not in the list")
        positions.sort()
        items = lst.items
        for at in reversed(positions):
            del items[at]
        lst.lpbytes -= size(op.element) * len(positions)
        _list_shrunk(lst)
        return ("remove", positions, op.element)
    raise ValueError(f"not a list operation: {op!r}")


def list_find(lst: ListValue, element: bytes, n: int) -> list[int]:
    """The positions of up to ``n`` occurrences of ``element``: the first ones from the head
    (``n`` > 0), the last ones from the tail (< 0), all (0); in the order found."""
    found: list[int] = []
    items = lst.items
    limit = abs(n) or len(items)
    if n >= 0:
        for at, item in enumerate(items):
            if item == element:
                found.append(at)
                if len(found) == limit:
                    break
    else:
        last = len(items) - 1
        for back, item in enumerate(reversed(items)):
            if item == element:
                found.append(last - back)
                if len(found) == limit:
                    break
    return found


def list_revert(lst: ListValue, undo: ListUndoData) -> None:
    """Take back the ``list_apply`` that returned ``undo`` (the caller restores the
    encoding, which converts ``items`` back if the apply converted them, and ``lpbytes``)."""
    what, where, elements = undo
    items = lst.items
    if what == "push":
        _take(items, where, elements)
    elif what == "pop":
        _put_back(items, where, elements if where else elements[::-1])
    elif what == "set":
        items[where] = elements
    elif what == "insert":
        del items[where]
    else:
        for at in where:
            items.insert(at, elements)
    lst.scan = None


def list_from(elements: Iterable[bytes], epoch: int) -> ListValue:
    """A list of ``elements`` (head first) with the encoding its contents call for (Redis's
    RDB load converts a listpack that would exceed the limit)."""
    lst = ListValue(elements)
    lst.epoch = epoch
    lst.lpbytes += sum(map(listpack_entry_bytes, lst.items))
    if lst.lpbytes > LIST_MAX_LISTPACK_BYTES:
        lst.encoding = QUICKLIST
    return lst


def _list_add(lst: Any, elements: Sequence[bytes]) -> None:
    list_apply(lst, ListPush(b"", b"", False, tuple(elements)))


def _list_remove(lst: Any, elements: Sequence[bytes]) -> None:
    raise ValueError("a list's elements are removed by position")


def _list_copy(lst: Any, epoch: int) -> ListValue:
    copy = ListValue()
    copy.items = lst.items.copy()
    copy.epoch, copy.lpbytes = epoch, lst.lpbytes
    return copy


# -- the kinds -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of container: what the log and the generic commands need of it."""

    cls: type
    code: int
    """Its ``kind`` in the log (``minidb.wal.KIND_*``)."""
    name: str
    """What ``TYPE`` answers."""
    elements: Callable[[Any], Iterable[bytes]]
    """Its contents as the log's elements (a hash: field, value, ...)."""
    new: Callable[[Sequence[bytes], int], Any]
    """An empty container as a command adding these elements creates it, at an epoch."""
    build: Callable[[Sequence[bytes], int], Any]
    """A container of the log's elements, at an epoch (``PutContainer``)."""
    add: Callable[[Any, Sequence[bytes]], None]
    """``AddElements`` applied."""
    remove: Callable[[Any, Sequence[bytes]], object]
    """``RemoveElements`` applied."""
    copy: Callable[[Any, int], Any]
    """A copy with the same encoding, at an epoch."""
    keeps_empty: bool = False
    """Whether the key stays when its last element goes (a stream: Redis keeps it)."""


HASH = Kind(
    HashValue, KIND_HASH, "hash", hash_elements, lambda elements, epoch: new_hash(epoch),
    hash_from, hash_add, hash_delete, hash_copy,
)  # fmt: skip
SET = Kind(
    SetValue, KIND_SET, "set", iter,
    lambda elements, epoch: new_set(elements[0], len(elements), epoch),
    set_from, _set_add, set_remove, _set_copy,
)  # fmt: skip
LIST = Kind(
    ListValue, KIND_LIST, "list", iter, lambda elements, epoch: new_list(epoch),
    list_from, _list_add, _list_remove, _list_copy,
)  # fmt: skip
ZSET = Kind(
    ZSetValue, KIND_ZSET, "zset", zset_elements, zset_new_for, zset_from_elements,
    zset_add_elements, zset_remove, zset_copy,
)  # fmt: skip
STREAM = Kind(
    StreamValue, KIND_STREAM, "stream", stream_elements,
    lambda elements, epoch: new_stream(epoch), stream_from, stream_apply, stream_apply,
    stream_copy, keeps_empty=True,
)  # fmt: skip
KIND_OF: dict[type, Kind] = {
    HashValue: HASH, SetValue: SET, ListValue: LIST, ZSetValue: ZSET, StreamValue: STREAM
}  # fmt: skip
"""Container class -> its kind."""
KIND_BY_CODE: dict[int, Kind] = {
    HASH.code: HASH, SET.code: SET, LIST.code: LIST, ZSET.code: ZSET, STREAM.code: STREAM
}  # fmt: skip
"""The log's kind -> its kind."""
TYPE_NAMES = ("string", "list", "set", "zset", "hash", "stream")
"""Every type Redis names (``SCAN ... TYPE`` accepts them all, even those minidb lacks)."""


def type_name(value: Value) -> str:
    """What ``TYPE`` answers for a key holding ``value``."""
    return "string" if type(value) is bytes else KIND_OF[type(value)].name


def encoding_of(value: Value) -> str:
    """What ``OBJECT ENCODING`` answers (Redis's ``tryObjectEncoding`` for a string)."""
    if type(value) is bytes:
        if is_int(value):
            return "int"
        return "embstr" if len(value) <= EMBSTR_MAX_BYTES else "raw"
    return value.encoding  # type: ignore[union-attr]
