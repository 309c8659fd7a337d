"""The logical content of a log record: the effects a group of writes had on the store.

A DATA record's payload is one or more of these operations, applied in order and atomically
(a record is replayed whole or not at all, so a transaction or an ``MSET`` is one record).
They are *effects*, never commands: an ``INCR`` is logged as the ``Put`` of the value it
produced, and a relative TTL as an absolute expiry time, so that replaying the log reproduces
the store exactly whenever it is replayed.

Format version 3 adds typed values: a key may hold a container (a hash, a set) instead of a
string. Its snapshot form is ``PutContainer``; a command's effect on some of its elements is
``AddElements`` / ``RemoveElements``; a key moved or copied whatever its type is ``Rename`` /
``Copy``, bounded by the names rather than the value. A list changes by position, never by
value: ``ListPush``, ``ListPop``, ``ListSet``, ``ListInsert``, ``ListRemove``. A sorted set
(kind 4) uses the container ops: members with their scores added, members removed. A stream
(kind 5) too, its elements typed by their first byte: entries and metadata added, entries
deleted by id or trimmed up to an id (``docs/wal-format.md``, "Streams").

Times are milliseconds since the Unix epoch (wall clock), because they must mean the same
instant after a restart on another boot. ``docs/wal-format.md`` specifies the byte encoding;
``_payload`` implements it.
"""

from __future__ import annotations

import math
import struct
from typing import NamedTuple


class Put(NamedTuple):
    """Set ``key`` of ``bucket`` to ``value``; ``expire_at_ms`` None means no expiry."""

    bucket: bytes
    key: bytes
    value: bytes
    expire_at_ms: int | None = None


class Remove(NamedTuple):
    """Delete ``key`` of ``bucket`` (it existed when the write was applied)."""

    bucket: bytes
    key: bytes


class Expire(NamedTuple):
    """Change the expiry of an existing key: an absolute time, or None to persist it."""

    bucket: bytes
    key: bytes
    expire_at_ms: int | None


class Flush(NamedTuple):
    """Delete every key of ``bucket``, or of every bucket when ``bucket`` is None."""

    bucket: bytes | None


KIND_HASH = 1
"""A container of field -> value: its elements are fields and values in turn."""
KIND_SET = 2
"""A container of members: elements are members."""
KIND_LIST = 3
"""A sequence of elements, head first (``AddElements`` appends at the tail; nothing is removed
by value: the ``List*`` ops change a list by position)."""
KIND_ZSET = 4
"""A sorted set: its elements are members and scores in turn, each score 8 bytes, an IEEE 754
double little-endian, never NaN (``encode_score``); removed by member."""
KIND_STREAM = 5
"""A stream: every element starts with its type byte (``STREAM_META``, ``STREAM_ENTRY``,
``STREAM_DELETE``, ``STREAM_TRIM``; ``encode_stream_*``); an emptied stream is kept."""
KINDS = (KIND_HASH, KIND_SET, KIND_LIST, KIND_ZSET, KIND_STREAM)
"""The container kinds the format defines."""

STREAM_META = 0
"""A stream element: the stream's last id, entries added and greatest deleted id."""
STREAM_ENTRY = 1
"""A stream element: an entry appended, its id and field/value pairs."""
STREAM_DELETE = 2
"""A stream element: the entry of this id deleted."""
STREAM_TRIM = 3
"""A stream element: every entry whose id is at most this one deleted."""
STREAM_ID_MAX = (1 << 128) - 1
"""The greatest stream id, ``18446744073709551615-18446744073709551615``. A stream id is held
as one int, ``ms << 64 | seq``, so ids compare as ints."""
_U64 = (1 << 64) - 1
_STREAM_ID = struct.Struct("<BQQ")
_STREAM_META = struct.Struct("<BQQQQQ")
_STREAM_ENTRY_HEAD = struct.Struct("<BQQ")
STREAM_ENTRY_HEAD_BYTES = _STREAM_ENTRY_HEAD.size
"""Where an ENTRY element's packed fields and values start (``stream_entry_element``)."""
_LEN = struct.Struct("<I")

StreamElement = (
    tuple[int, int, int, int]  # (STREAM_META, last id, entries added, max deleted id)
    | tuple[int, int, tuple[bytes, ...]]  # (STREAM_ENTRY, id, (field, value, ...))
    | tuple[int, int]  # (STREAM_DELETE or STREAM_TRIM, id)
)


def encode_stream_meta(last_id: int, entries_added: int, max_deleted_id: int) -> bytes:
    """A META element (41 bytes)."""
    return _STREAM_META.pack(
        STREAM_META, last_id >> 64, last_id & _U64, entries_added,
        max_deleted_id >> 64, max_deleted_id & _U64,
    )  # fmt: skip


def encode_stream_pairs(pairs: tuple[bytes, ...]) -> bytes:
    """An entry's fields and values, each with its u32 length: an ENTRY element's tail, and
    how a stream keeps an entry in memory (one object rather than a tuple of them)."""
    parts: list[bytes] = []
    pack = _LEN.pack
    for item in pairs:
        parts += (pack(len(item)), item)
    return b"".join(parts)


def decode_stream_pairs(packed: bytes) -> tuple[bytes, ...]:
    """The fields and values ``encode_stream_pairs`` packed; ``ValueError`` if they are cut."""
    pos, size = 0, len(packed)
    unpack = _LEN.unpack_from
    pairs = []
    while pos < size:
        if pos + 4 > size:
            raise ValueError("a stream entry's field length cut short")
        (length,) = unpack(packed, pos)
        end = pos + 4 + length
        if end > size:
            raise ValueError("a stream entry's field runs past its end")
        pairs.append(packed[pos + 4 : end])
        pos = end
    return tuple(pairs)


def stream_entry_element(entry_id: int, packed: bytes) -> bytes:
    """An ENTRY element of an entry whose fields and values are ``packed``."""
    return _STREAM_ENTRY_HEAD.pack(STREAM_ENTRY, entry_id >> 64, entry_id & _U64) + packed


def encode_stream_entry(entry_id: int, pairs: tuple[bytes, ...]) -> bytes:
    """An ENTRY element: the id, then each field and value with its u32 length."""
    return stream_entry_element(entry_id, encode_stream_pairs(pairs))


def encode_stream_id(what: int, entry_id: int) -> bytes:
    """A DELETE or TRIM element (17 bytes)."""
    return _STREAM_ID.pack(what, entry_id >> 64, entry_id & _U64)


def decode_stream_element(element: bytes) -> StreamElement:
    """What ``encode_stream_*`` wrote, as a tuple led by its type; ``ValueError`` otherwise."""
    if not element:
        raise ValueError("an empty stream element")
    what = element[0]
    if what == STREAM_META:
        if len(element) != _STREAM_META.size:
            raise ValueError(f"a stream META is {_STREAM_META.size} bytes, not {len(element)}")
        _, last_ms, last_seq, added, del_ms, del_seq = _STREAM_META.unpack(element)
        return (STREAM_META, last_ms << 64 | last_seq, added, del_ms << 64 | del_seq)
    if what in (STREAM_DELETE, STREAM_TRIM):
        if len(element) != _STREAM_ID.size:
            raise ValueError(f"a stream DELETE or TRIM is 17 bytes, not {len(element)}")
        _, ms, seq = _STREAM_ID.unpack(element)
        return (what, ms << 64 | seq)
    if what != STREAM_ENTRY:
        raise ValueError(f"unknown stream element type {what}")
    if len(element) < _STREAM_ENTRY_HEAD.size:
        raise ValueError("a stream ENTRY cut short")
    _, ms, seq = _STREAM_ENTRY_HEAD.unpack_from(element)
    pairs = decode_stream_pairs(element[_STREAM_ENTRY_HEAD.size :])
    if not pairs or len(pairs) % 2:
        raise ValueError(f"a stream ENTRY holds {len(pairs)} fields and values, not pairs")
    return (STREAM_ENTRY, ms << 64 | seq, pairs)


def format_stream_id(entry_id: int) -> bytes:
    """An id as Redis prints it, ``<ms>-<seq>``."""
    return b"%d-%d" % (entry_id >> 64, entry_id & _U64)


_SCORE = struct.Struct("<d")


def encode_score(score: float) -> bytes:
    """A sorted set's score as its element: 8 bytes, IEEE 754 double, little-endian (exact,
    ``inf`` and ``-inf`` included); ``ValueError`` for NaN, which no sorted set holds."""
    if math.isnan(score):
        raise ValueError("a sorted set's score is never NaN")
    return _SCORE.pack(score)


def decode_score(element: bytes) -> float:
    """The score ``encode_score`` wrote; ``ValueError`` for anything else."""
    if len(element) != 8:
        raise ValueError(f"a score is 8 bytes, not {len(element)}")
    (score,) = _SCORE.unpack(element)
    if math.isnan(score):
        raise ValueError("a score is never NaN")
    return float(score)


class PutContainer(NamedTuple):
    """Replace the whole state of ``key`` by a container of ``kind`` holding ``elements`` (at
    least one), with an expiry (None: none). A snapshot's container; a ``*STORE`` result."""

    bucket: bytes
    key: bytes
    kind: int
    elements: tuple[bytes, ...]
    expire_at_ms: int | None = None


class AddElements(NamedTuple):
    """Add ``elements`` to the container of ``kind`` at ``key`` (hash fields set to values, set
    members added), creating it without expiry if the key is missing; keeps its expiry."""

    bucket: bytes
    key: bytes
    kind: int
    elements: tuple[bytes, ...]


class RemoveElements(NamedTuple):
    """Remove ``elements`` (hash fields, set members) from the container of ``kind`` at
    ``key``; a container left empty is deleted with its key."""

    bucket: bytes
    key: bytes
    kind: int
    elements: tuple[bytes, ...]


class Rename(NamedTuple):
    """Move the whole state of ``key`` (value of any type, expiry) to ``new_key`` of the same
    bucket, replacing what it held."""

    bucket: bytes
    key: bytes
    new_key: bytes


class Copy(NamedTuple):
    """Copy the whole state of ``key`` to ``to_key`` of ``to_bucket``, replacing what it held."""

    bucket: bytes
    key: bytes
    to_bucket: bytes
    to_key: bytes


class ListPush(NamedTuple):
    """Push ``elements`` one at a time at the head (``left``) or the tail of the list at
    ``key``, creating it without expiry if the key is missing (``LPUSH a b`` leaves b, a)."""

    bucket: bytes
    key: bytes
    left: bool
    elements: tuple[bytes, ...]


class ListPop(NamedTuple):
    """Take ``n`` elements (at least one, at most the length) off the head (``left``) or
    the tail of the list at ``key``; a list left empty is deleted with its key."""

    bucket: bytes
    key: bytes
    left: bool
    n: int


class ListSet(NamedTuple):
    """Replace the element at ``position`` (from the head, 0-based, in range) of the list."""

    bucket: bytes
    key: bytes
    position: int
    element: bytes


class ListInsert(NamedTuple):
    """Insert ``element`` into the list so that it is at ``position`` (0 to the length)."""

    bucket: bytes
    key: bytes
    position: int
    element: bytes


class ListRemove(NamedTuple):
    """Remove the first ``n`` occurrences of ``element`` from the head (``n`` > 0) or the last
    ``-n`` from the tail (< 0); exactly that many are there. A list left empty is deleted with
    its key."""

    bucket: bytes
    key: bytes
    n: int
    element: bytes


ListOp = ListPush | ListPop | ListSet | ListInsert | ListRemove
"""The effects of the list commands, by position (``docs/wal-format.md``, "Lists")."""
LIST_OPS = (ListPush, ListPop, ListSet, ListInsert, ListRemove)
"""The classes of ``ListOp``, for ``isinstance``."""

Op = (
    Put | Remove | Expire | Flush | PutContainer | AddElements | RemoveElements | Rename | Copy
    | ListOp
)
