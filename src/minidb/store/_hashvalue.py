"""A hash's value: ``HashValue`` and the functions every hash change goes through (commands,
replay and undo alike)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from minidb.store._encodings import (
    HASH_MAX_LISTPACK_ENTRIES,
    HASH_MAX_LISTPACK_VALUE,
    HASHTABLE,
    LISTPACK,
)
from minidb.store._scanindex import ScanIndex


class HashValue(dict[bytes, bytes]):
    """A hash: field -> value, in insertion order (which is a listpack's order in Redis)."""

    __slots__ = ("encoding", "epoch", "scan")
    encoding: str
    epoch: int
    scan: ScanIndex | None


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


def hash_add(h: Any, elements: Sequence[bytes]) -> None:
    hash_prepare(h, elements)
    hash_set(h, elements)


def hash_copy(h: Any, epoch: int) -> HashValue:
    copy = HashValue(h)
    copy.encoding, copy.epoch, copy.scan = h.encoding, epoch, None
    return copy
