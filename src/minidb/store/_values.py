"""The values a key holds: a string (``bytes``) or a container (a hash, a set), and what Redis
says of each (``TYPE``, ``OBJECT ENCODING``).

A container is a plain ``dict`` (hash: field -> value) or ``set`` (members) subclass with three
slots, so every dict and set operation runs at C speed and the C accelerators, which take
anything that is not exactly ``bytes`` for "not mine", leave them to Python:

- ``epoch``: the keyspace's copy-on-write mark (``Keyspace``, "Snapshots of containers"):
  a container whose epoch is below the keyspace's mark may be read by a snapshot being written
  in another thread, and is copied before its first change.
- ``encoding``: what ``OBJECT ENCODING`` answers. Redis keeps a small container compact
  (``listpack``, or ``intset`` for a set of few integers) and converts it to a ``hashtable``
  as it grows past its thresholds, one way only; minidb keeps Python's dict or set whatever
  the size (the memory trade is the README's) but follows the same conversions, decided by the
  functions here (Redis 7.2's ``t_hash.c`` / ``t_set.c``), so a client reading the encoding
  sees Redis's answer. A container built from a snapshot gets the encoding its contents call
  for, as Redis's own RDB load does.
- ``scan``: the ``ScanIndex`` of its elements that HSCAN/SSCAN cursors and random picks use
  (``_elementscan``), built on first use and dropped by any change to which elements it holds
  (the functions here, and undo, drop it), so a container never scanned pays nothing.

Each kind of container is one ``Kind``: its code in the log (``minidb.wal.KIND_*``), its
``TYPE`` name, and how the log's element operations build, add to and remove from it, which
is what replay (``Keyspace.apply_ops``) and the commands share. Lists, sorted sets and streams
are to plug in as more kinds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from minidb.store._numbers import parse_int
from minidb.store._scanindex import ScanIndex
from minidb.wal._ops import KIND_HASH, KIND_SET

# Redis 7.2's defaults (redis.conf); minidb's are fixed.
HASH_MAX_LISTPACK_ENTRIES = 128
"""Fields a hash holds before it converts to a hashtable (``hash-max-listpack-entries``)."""
HASH_MAX_LISTPACK_VALUE = 64
"""Longest field or value, in bytes, a listpack hash holds (``hash-max-listpack-value``)."""
SET_MAX_INTSET_ENTRIES = 512
"""Members an all-integer set holds as an intset (``set-max-intset-entries``)."""
SET_MAX_LISTPACK_ENTRIES = 128
"""Members a set holds as a listpack (``set-max-listpack-entries``)."""
SET_MAX_LISTPACK_VALUE = 64
"""Longest member, in bytes, a listpack set holds (``set-max-listpack-value``)."""
EMBSTR_MAX_BYTES = 44
"""Longest string Redis stores ``embstr`` (``OBJ_ENCODING_EMBSTR_SIZE_LIMIT``)."""

LISTPACK, HASHTABLE, INTSET = "listpack", "hashtable", "intset"


class HashValue(dict[bytes, bytes]):
    """A hash: field -> value, in insertion order (which is a listpack's order in Redis)."""

    __slots__ = ("encoding", "epoch", "scan")
    encoding: str
    epoch: int
    scan: ScanIndex | None


class SetValue(set[bytes]):
    """A set of members."""

    __slots__ = ("encoding", "epoch", "scan")
    encoding: str
    epoch: int
    scan: ScanIndex | None


Container = HashValue | SetValue
Value = bytes | HashValue | SetValue
"""What a key holds (an expiring key holds it in its ``_Expiring`` record)."""


def is_int(member: bytes) -> bool:
    """Whether Redis would store ``member`` as an integer (``string2ll``: canonical decimal,
    within a signed 64-bit integer)."""
    return len(member) <= 20 and parse_int(member) is not None


# -- hashes ----------------------------------------------------------------------------------


def new_hash(epoch: int) -> HashValue:
    """An empty hash, as Redis creates one (a listpack)."""
    h = HashValue()
    h.encoding, h.epoch, h.scan = LISTPACK, epoch, None
    return h


def hash_prepare(h: HashValue, pairs: Sequence[bytes]) -> None:
    """Redis's ``hashTypeTryConversion`` before ``pairs`` (field, value, ...) are set: too many
    new fields, or any of them or their values too long, and a listpack hash converts."""
    if h.encoding is LISTPACK and (
        len(pairs) // 2 > HASH_MAX_LISTPACK_ENTRIES
        or any(len(x) > HASH_MAX_LISTPACK_VALUE for x in pairs)
    ):
        h.encoding = HASHTABLE


def hash_set(h: HashValue, pairs: Sequence[bytes]) -> list[tuple[bytes, bytes | None]]:
    """Set each field of ``pairs`` (field, value, ...) to its value; the (field, previous value
    or None) of each, in order, for the undo. Converts as the hash grows (``hashTypeSet``)."""
    olds = []
    get = h.get
    size = len(h)
    for at in range(0, len(pairs), 2):
        field = pairs[at]
        olds.append((field, get(field)))
        h[field] = pairs[at + 1]
    if len(h) != size:
        h.scan = None
        if h.encoding is LISTPACK and len(h) > HASH_MAX_LISTPACK_ENTRIES:
            h.encoding = HASHTABLE
    return olds


def hash_delete(h: HashValue, fields: Iterable[bytes]) -> list[tuple[bytes, bytes | None]]:
    """Delete the fields present; (field, value) of each deleted, in order."""
    olds: list[tuple[bytes, bytes | None]] = []
    pop = h.pop
    for field in fields:
        value = pop(field, None)
        if value is not None:
            olds.append((field, value))
    if olds:
        h.scan = None
    return olds


def hash_elements(h: HashValue) -> Iterator[bytes]:
    for field, value in h.items():
        yield field
        yield value


def hash_from(elements: Sequence[bytes], epoch: int) -> HashValue:
    """A hash of ``elements`` (field, value, ...) with the encoding its contents call for."""
    h = new_hash(epoch)
    hash_prepare(h, elements)
    hash_set(h, elements)
    return h


def _hash_add(h: Any, elements: Sequence[bytes]) -> None:
    hash_prepare(h, elements)
    hash_set(h, elements)


def _hash_copy(h: Any, epoch: int) -> HashValue:
    copy = HashValue(h)
    copy.encoding, copy.epoch, copy.scan = h.encoding, epoch, None
    return copy


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
    for member in members:
        if member in s:
            continue
        if encoding is INTSET:
            if is_int(member):
                if len(s) + 1 > SET_MAX_INTSET_ENTRIES:
                    encoding = HASHTABLE
            elif (
                len(s) < SET_MAX_LISTPACK_ENTRIES and len(member) <= SET_MAX_LISTPACK_VALUE
            ):
                encoding = LISTPACK  # every integer has at most 20 digits: all fit
            else:
                encoding = HASHTABLE
        elif encoding is LISTPACK and (
            len(s) >= SET_MAX_LISTPACK_ENTRIES or len(member) > SET_MAX_LISTPACK_VALUE
        ):
            encoding = HASHTABLE
        s.add(member)
        added.append(member)
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
    s = SetValue(members)
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


HASH = Kind(
    HashValue, KIND_HASH, "hash", hash_elements, lambda elements, epoch: new_hash(epoch),
    hash_from, _hash_add, hash_delete, _hash_copy,
)  # fmt: skip
SET = Kind(
    SetValue, KIND_SET, "set", iter,
    lambda elements, epoch: new_set(elements[0], len(elements), epoch),
    set_from, _set_add, set_remove, _set_copy,
)  # fmt: skip
KIND_OF: dict[type, Kind] = {HashValue: HASH, SetValue: SET}
"""Container class -> its kind."""
KIND_BY_CODE: dict[int, Kind] = {HASH.code: HASH, SET.code: SET}
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
