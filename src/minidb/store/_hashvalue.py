"""A hash's value: ``HashValue`` and the functions every hash change goes through (commands,
replay and undo alike).

Encoding and representation
===========================

``encoding`` is what ``OBJECT ENCODING`` answers, following Redis 7.2's ``t_hash.c``: a
``listpack`` while the hash has at most ``hash-max-listpack-entries`` (128) fields, none of
them or their values longer than ``hash-max-listpack-value`` (64 bytes), a ``hashtable`` past
either, one way only (``hash_prepare``, ``hash_set``; a snapshot's load gets the encoding its
contents call for, as Redis's RDB load does).

The representation (``data``) follows the encoding, as a list's does (``ListValue``): a small
listpack hash keeps all its fields and values in ONE immutable ``bytes`` object, the tuple
(field, value, field, value, ...) in insertion order packed by ``_packed``. Issue 19: a
``dict`` of 4 short fields costs ~230 bytes and its 8 ``bytes`` objects ~48 each (737 bytes a
key against Redis's 136); packed, the same hash is one ~120-byte object. ``marshal`` encodes
and decodes at C speed (a 4-field hash decodes in ~0.4 us), so a read decodes the tuple and
finds the field at an even position, and a change decodes to a dict, changes it and encodes
it again: O(fields) a command, which is what a listpack costs Redis too. Past
``PACKED_MAX_ENTRIES`` fields, where decoding would cost more than a command's own overhead,
or once the encoding is ``hashtable``, ``data`` is a plain ``dict`` (O(1) a field); a listpack
hash shrinking back to ``PACKED_MAX_ENTRIES // 2`` fields is packed again (the gap keeps a hash
hovering at the threshold from converting on every command). The packed form lives in memory
only: the log and snapshots hold the elements (``hash_elements``), never this format.

So the encoding is its own slot (``_encoding``), read and set through the ``encoding``
property; setting it repacks or unpacks ``data`` (conversions and undo's restoring of the
encoding both move the fields with it).

Readers go through the mapping methods (``get``, ``in``, ``len``, iteration, ``items``,
``values``, ``mapping``), which never change ``data``: a snapshot written in another thread may
be reading any container whose ``epoch`` is below the keyspace's mark (``Keyspace``, "Snapshots
of containers"), and the owner copies such a container before its first change
(``hash_copy``). A packed hash's copy shares its ``bytes`` (immutable, so sharing is safe and
the copy is O(1)); a dict is copied.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import Any

from minidb.store._encodings import (
    HASH_MAX_LISTPACK_ENTRIES,
    HASH_MAX_LISTPACK_VALUE,
    HASHTABLE,
    LISTPACK,
)
from minidb.store._packed import EMPTY, pack, pack_pairs, pair_count, unpack
from minidb.store._scanindex import ScanIndex

PACKED_MAX_ENTRIES = 32
"""Fields a listpack hash keeps packed in one ``bytes``; past it, a ``dict``. Measured in one
process (``execute``, 2 shared cores, best of 14 x 2,000): HGET 1.1 us on a dict at any size,
2.0 / 2.5 / 3.8 us packed at 4 / 16 / 32 fields; HSET of an existing field 4.4 us on a dict,
6.0 / 8.4 / 9.3 us packed. Packed to 128 fields (listpack's own limit) a decode alone would
be ~10 us and an HSET ~25 us, a sizeable part of a command over a socket (40-100 us here,
redis-benchmark -c 4, where the packed 4-32 field figures were within the noise)."""


def _pack(table: dict[bytes, bytes]) -> bytes:
    return pack_pairs(table.items())


def _unpack(blob: bytes) -> dict[bytes, bytes]:
    flat = unpack(blob)
    return dict(zip(flat[0::2], flat[1::2], strict=True))


_packed_len = pair_count
"""Fields in a packed hash, read from its header without decoding them."""


class HashValue:
    """A hash: field -> value, in insertion order (which is a listpack's order in Redis); a
    packed ``bytes`` or a ``dict`` in ``data`` (see the module's docstring)."""

    __slots__ = ("_encoding", "data", "epoch", "scan")
    _encoding: str
    data: bytes | dict[bytes, bytes]
    epoch: int
    scan: ScanIndex | None
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by its fields

    def __init__(self, data: bytes | dict[bytes, bytes], encoding: str, epoch: int) -> None:
        self.data, self._encoding, self.epoch, self.scan = data, encoding, epoch, None

    @property
    def encoding(self) -> str:
        return self._encoding

    @encoding.setter
    def encoding(self, encoding: str) -> None:
        self._encoding = encoding
        self._settle(self.mapping())

    @property
    def packed(self) -> bool:
        """Whether the fields are packed in one ``bytes`` (else a ``dict``)."""
        return type(self.data) is bytes

    def _settle(self, table: dict[bytes, bytes]) -> None:
        """Keep ``table`` (the hash's new fields) in the representation its encoding and size
        call for; ``table`` is the caller's to give away."""
        if self._encoding == LISTPACK and len(table) <= (
            PACKED_MAX_ENTRIES if type(self.data) is bytes else PACKED_MAX_ENTRIES // 2
        ):
            self.data = _pack(table)
        else:
            self.data = table

    def mapping(self) -> dict[bytes, bytes]:
        """The fields as a dict: the hash's own when it keeps one (read it, never change it),
        else one decoded now."""
        data = self.data
        return data if isinstance(data, dict) else _unpack(data)

    def flat(self) -> Sequence[bytes]:
        """field, value, field, value, ... in order."""
        data = self.data
        if isinstance(data, dict):
            return list(chain.from_iterable(data.items()))
        return unpack(data)

    def get(self, field: bytes, default: bytes | None = None) -> bytes | None:
        data = self.data
        if isinstance(data, dict):
            return data.get(field, default)
        flat = unpack(data)
        try:
            return flat[2 * flat[0::2].index(field) + 1]  # type: ignore[no-any-return]
        except ValueError:
            return default

    def __getitem__(self, field: bytes) -> bytes:
        value = self.get(field)
        if value is None:
            raise KeyError(field)
        return value

    def __contains__(self, field: object) -> bool:
        data = self.data
        if isinstance(data, dict):
            return field in data
        return field in unpack(data)[0::2]

    def __len__(self) -> int:
        data = self.data
        return len(data) if isinstance(data, dict) else _packed_len(data)

    def __iter__(self) -> Iterator[bytes]:
        data = self.data
        return iter(data if isinstance(data, dict) else unpack(data)[0::2])

    def keys(self) -> Iterable[bytes]:
        data = self.data
        return data.keys() if isinstance(data, dict) else unpack(data)[0::2]

    def values(self) -> Iterable[bytes]:
        data = self.data
        return data.values() if isinstance(data, dict) else unpack(data)[1::2]

    def items(self) -> Iterable[tuple[bytes, bytes]]:
        data = self.data
        if isinstance(data, dict):
            return data.items()
        flat = unpack(data)
        return list(zip(flat[0::2], flat[1::2], strict=True))

    # Single-field changes, for undo (``FieldsUndo.revert``); commands use ``hash_set`` and
    # ``hash_delete``, which decode and encode once for all their fields.
    def __setitem__(self, field: bytes, value: bytes) -> None:
        table = self._table()
        table[field] = value
        self._settle(table)

    def __delitem__(self, field: bytes) -> None:
        table = self._table()
        del table[field]
        self._settle(table)

    def _table(self) -> dict[bytes, bytes]:
        """The fields as a dict the caller may change and give back to ``_settle``."""
        data = self.data
        return data if isinstance(data, dict) else _unpack(data)

    def __eq__(self, other: object) -> bool:
        if type(other) is HashValue:
            return self.mapping() == other.mapping()
        if type(other) is dict:
            return self.mapping() == other
        return NotImplemented

    def __repr__(self) -> str:
        return f"HashValue({self.mapping()!r}, encoding={self._encoding!r})"


def new_hash(epoch: int) -> HashValue:
    """An empty hash, as Redis creates one (a listpack)."""
    return HashValue(EMPTY, LISTPACK, epoch)


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
    data = h.data
    if isinstance(data, dict):
        return _set_in_table(h, data, pairs)
    # Packed: changed in place in the flat list (an existing field keeps its place, a new one
    # goes last, as in a listpack) and encoded once, without building a dict.
    flat = list(unpack(data))
    fields = flat[0::2]
    size = len(fields)
    olds: list[tuple[bytes, bytes | None]] = []
    for at in range(0, len(pairs), 2):
        field, value = pairs[at], pairs[at + 1]
        try:
            i = 2 * fields.index(field) + 1
        except ValueError:
            olds.append((field, None))
            fields.append(field)
            flat += (field, value)
        else:
            olds.append((field, flat[i]))
            flat[i] = value
    if len(fields) != size:
        h.scan = None
        if len(fields) > HASH_MAX_LISTPACK_ENTRIES:
            h._encoding = HASHTABLE
    if h._encoding == LISTPACK and len(fields) <= PACKED_MAX_ENTRIES:
        h.data = pack(tuple(flat))
    else:
        h.data = dict(zip(fields, flat[1::2], strict=True))
    return olds


def _set_in_table(
    h: HashValue, table: dict[bytes, bytes], pairs: Sequence[bytes]
) -> list[tuple[bytes, bytes | None]]:
    olds = []
    get = table.get
    size = len(table)
    for at in range(0, len(pairs), 2):
        field = pairs[at]
        olds.append((field, get(field)))
        table[field] = pairs[at + 1]
    if len(table) != size:
        h.scan = None
        if h._encoding == LISTPACK and len(table) > HASH_MAX_LISTPACK_ENTRIES:
            h._encoding = HASHTABLE
    return olds


def hash_delete(h: HashValue, fields: Iterable[bytes]) -> list[tuple[bytes, bytes | None]]:
    """Delete the fields present; (field, value) of each deleted, in order."""
    olds: list[tuple[bytes, bytes | None]] = []
    data = h.data
    if isinstance(data, dict):
        pop = data.pop
        for field in fields:
            value = pop(field, None)
            if value is not None:
                olds.append((field, value))
        if olds:
            h.scan = None
            h._settle(data)  # packed again if it shrank to half the threshold
        return olds
    flat = list(unpack(data))
    present = flat[0::2]
    for field in fields:
        try:
            i = present.index(field)
        except ValueError:
            continue
        olds.append((field, flat[2 * i + 1]))
        del present[i], flat[2 * i : 2 * i + 2]
    if olds:
        h.scan = None
        h.data = pack(tuple(flat))
    return olds


def hash_elements(h: HashValue) -> Iterable[bytes]:
    return h.flat()


def hash_from(elements: Sequence[bytes], epoch: int) -> HashValue:
    """A hash of ``elements`` (field, value, ...) with the encoding its contents call for."""
    h = new_hash(epoch)
    hash_prepare(h, elements)
    hash_set(h, elements)
    return h


def hash_add(h: Any, elements: Sequence[bytes]) -> None:
    hash_prepare(h, elements)
    hash_set(h, elements)


def hash_copy(h: HashValue, epoch: int) -> HashValue:
    """A copy at ``epoch``: a packed hash shares its immutable ``bytes``."""
    data = h.data
    return HashValue(dict(data) if isinstance(data, dict) else data, h._encoding, epoch)
