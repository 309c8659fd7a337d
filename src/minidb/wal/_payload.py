"""The operation payload: how a DATA record's list of ``Op``s is encoded, in every version.

Pure code, bytes in and out. ``docs/wal-format.md`` ("Operation payload", "Typed values") is the
specification. Versions 2 and 3 carry any bytes exactly: a tag byte per operation, then
fixed-size fields, then the variable fields each preceded by its u32 length; version 3 adds the
operations of typed values (tags 6-10: containers, their elements, RENAME and COPY), which a
version-2 payload may not hold. Version 1 payloads are the line protocol's text (``SET <bucket>
<key> <value>`` / ``DEL <bucket> <key>``) and are only decoded, byte for byte: the value is
everything after the third space, nothing is stripped.

A payload that does not decode raises ``PayloadError``; the reader of the log has already
verified its checksum, so the caller reports it as corruption at the record's offset.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from minidb._accelerators import load
from minidb.wal._coalesce import coalesce
from minidb.wal._format import FORMAT_VERSION, LEGACY_VERSION, STRINGS_VERSION, encode_records
from minidb.wal._ops import (
    KIND_HASH,
    KIND_LIST,
    KIND_SET,
    KIND_STREAM,
    KIND_ZSET,
    KINDS,
    STREAM_DELETE,
    STREAM_ENTRY,
    STREAM_META,
    STREAM_TRIM,
    AddElements,
    Copy,
    Expire,
    Flush,
    ListInsert,
    ListPop,
    ListPush,
    ListRemove,
    ListSet,
    Op,
    Put,
    PutContainer,
    Remove,
    RemoveElements,
    Rename,
    decode_score,
    decode_stream_element,
    format_stream_id,
)

TAG_PUT = 1
TAG_REMOVE = 2
TAG_EXPIRE = 3
TAG_FLUSH = 4
TAG_FLUSH_ALL = 5
TAG_PUT_CONTAINER = 6
TAG_ADD_ELEMENTS = 7
TAG_REMOVE_ELEMENTS = 8
TAG_RENAME = 9
TAG_COPY = 10
TAG_LIST_PUSH = 11
TAG_LIST_POP = 12
TAG_LIST_SET = 13
TAG_LIST_INSERT = 14
TAG_LIST_REMOVE = 15
_LAST_TAG = TAG_LIST_REMOVE
_LAST_STRING_TAG = TAG_FLUSH_ALL
"""The highest tag a version-2 payload may hold."""

NO_EXPIRY = -(1 << 63)
"""The ``expire_at_ms`` that means "no expiry" (i64 minimum; every other i64 is a time)."""
_MAX_MS = (1 << 63) - 1

_PUT = struct.Struct("<BqIII")  # tag, expire_at_ms, bucket_len, key_len, value_len
_KEYED = struct.Struct("<BII")  # tag, bucket_len, key_len (REMOVE)
_EXPIRE = struct.Struct("<BqII")  # tag, expire_at_ms, bucket_len, key_len
_FLUSH = struct.Struct("<BI")  # tag, bucket_len
_CONTAINER = struct.Struct("<BBqIII")  # tag, kind, expire_at_ms, bucket_len, key_len, count
_ELEMENTS = struct.Struct("<BBIII")  # tag, kind, bucket_len, key_len, count (ADD/REMOVE)
_RENAME = struct.Struct("<BIII")  # tag, bucket_len, key_len, new_key_len
_COPY = struct.Struct("<BIIII")  # tag, bucket_len, key_len, to_bucket_len, to_key_len
_LENGTH = struct.Struct("<I")
_pack_length = _LENGTH.pack
_unpack_length = _LENGTH.unpack_from
_LIST_POP = struct.Struct("<BBIII")  # tag, side, bucket_len, key_len, count (PUSH: elements)
_LIST_AT = struct.Struct("<BqIII")  # tag, index or count, bucket_len, key_len, element_len
_LIST_AT_OPS: dict[int, type[ListSet | ListInsert | ListRemove]] = {
    TAG_LIST_SET: ListSet,
    TAG_LIST_INSERT: ListInsert,
    TAG_LIST_REMOVE: ListRemove,
}
_LIST_AT_TAGS: dict[type, int] = {op: tag for tag, op in _LIST_AT_OPS.items()}
_STEP = {KIND_HASH: 2, KIND_SET: 1, KIND_LIST: 1, KIND_ZSET: 2, KIND_STREAM: 1}
"""Elements per unit of each container kind: a hash's field and value go together, and a
sorted set's member and score."""
_pack_keyed = _KEYED.pack


class PayloadError(ValueError):
    """A payload that is not a valid encoding; ``position`` is the byte of the payload where
    decoding failed."""

    def __init__(self, reason: str, position: int) -> None:
        super().__init__(f"{reason} at payload byte {position}")
        self.reason = reason
        self.position = position


# The tag and the no-expiry sentinel of a PUT without TTL, packed once: the lengths are then
# the only fields packed per write.
_PUT_NO_EXPIRY = struct.pack("<Bq", TAG_PUT, NO_EXPIRY)
_pack_lengths = struct.Struct("<III").pack


def encode_put(bucket: bytes, key: bytes, value: bytes) -> bytes:
    """The payload of one ``Put`` without expiry: the store's hot path (one pack, one join)."""
    return b"".join(
        (_PUT_NO_EXPIRY, _pack_lengths(len(bucket), len(key), len(value)), bucket, key, value)
    )


def encode_groups(groups: list[list[Op]]) -> list[bytes]:
    """The payload of each group of ops (one record each), in order: ``encode_ops`` of each,
    with the common group (a lone ``Put`` without expiry, every line-protocol SET) packed here
    directly, so a group of thousands of SETs costs no call per SET."""
    join, pack = b"".join, _pack_lengths
    payloads = []
    for group in groups:
        if len(group) == 1 and type(op := group[0]) is Put and op[3] is None:
            bucket, key, value = op[0], op[1], op[2]
            payloads.append(
                join((_PUT_NO_EXPIRY, pack(len(bucket), len(key), len(value)), bucket, key, value))
            )
        else:
            payloads.append(encode_ops(group))
    return payloads


PACKED_RECORD_BYTES = 64 * 1024
"""Operations ``pack_payloads`` gathers into one record payload before starting the next."""


def pack_payloads(
    payloads: Iterable[bytes], limit: int = PACKED_RECORD_BYTES
) -> Iterator[bytes]:
    """``payloads`` concatenated into payloads of about ``limit`` bytes (a larger one stays
    whole), in order: a payload is a sequence of operations, so a concatenation is one.

    For a snapshot, whose records are always read whole: a checkpoint of a large store spent a
    third of its time (3M keys, py-spy) framing and checksumming one record per key.
    """
    return coalesce(payloads, limit)


def pack_puts(
    bucket: bytes, mapping: Mapping[bytes, object], limit: int = PACKED_RECORD_BYTES
) -> Iterator[bytes]:
    """The ``Put`` without expiry of every key of ``bucket`` in ``mapping`` whose value is
    ``bytes``, packed into payloads of about ``limit`` bytes as ``pack_payloads`` packs them, in
    the mapping's order. Items with any other value (keys with an expiry) are skipped: the
    caller encodes those.

    A snapshot's bulk. A dict is packed in C when the accelerator is built (``_cpayload.c``
    says why); the mapping must not change while the payloads are taken.
    """
    if _pack_puts_from is None or type(mapping) is not dict:
        return coalesce(
            (encode_put(bucket, k, v) for k, v in mapping.items() if type(v) is bytes), limit
        )
    return _pack_dict_puts(_pack_puts_from, bucket, mapping, limit)


def _pack_dict_puts(
    pack_from: _PackPutsFrom, bucket: bytes, mapping: dict[bytes, object], limit: int
) -> Iterator[bytes]:
    size = len(mapping)
    pos = 0
    while True:
        if len(mapping) != size:
            raise RuntimeError("the map changed size while its snapshot was being packed")
        payload, pos = pack_from(bucket, mapping, pos, limit)
        if payload is None:
            return
        yield payload


_PackPutsFrom = Callable[[bytes, dict[bytes, object], int, int], tuple[bytes | None, int]]
_EncodePlainPuts = Callable[[list[Op], type], bytes | None]

_cpayload = load("minidb.wal._cpayload")
_pack_puts_from: _PackPutsFrom | None = None if _cpayload is None else _cpayload.pack_puts_from
_encode_plain_puts: _EncodePlainPuts | None = (
    None if _cpayload is None else _cpayload.encode_plain_puts
)
ACCELERATED = _cpayload is not None
"""Whether ``pack_puts``, ``encode_ops``'s common case and ``frame_groups`` run in C."""


def frame_groups_python(first_number: int, groups: list[list[Op]]) -> bytes:
    """Each group of ops as one DATA record (``encode_ops`` of the group, framed by
    ``encode_records``), numbered from ``first_number``, joined: what the data owner logs for a
    whole group commit in one call. The reference of the C twin (``_cpayload.c``, "framing a
    group of records"), which must give the same bytes and raise the same ``ValueError``s.
    """
    return b"".join(encode_records(first_number, encode_groups(groups)))


def encode_remove(bucket: bytes, key: bytes) -> bytes:
    """The payload of one ``Remove``."""
    return b"".join((_pack_keyed(TAG_REMOVE, len(bucket), len(key)), bucket, key))


def _expiry(expire_at_ms: int | None) -> int:
    if expire_at_ms is None:
        return NO_EXPIRY
    if not NO_EXPIRY < expire_at_ms <= _MAX_MS:
        raise ValueError(f"expire_at_ms {expire_at_ms} is not an i64 time (or is the sentinel)")
    return expire_at_ms


def encode_ops(ops: Iterable[Op]) -> bytes:
    """The payload (current version) of one record holding ``ops`` (at least one), in order.

    Raises ``ValueError`` for no operations, an unrepresentable expiry, or a field of 4 GiB.
    """
    if _encode_plain_puts is not None and type(ops) is list:
        # A BULK frame's group, the common record of a load: puts without expiry, in C.
        payload = _encode_plain_puts(ops, Put)
        if payload is not None:
            return payload
    parts: list[bytes] = []
    pack_lengths = _pack_lengths
    try:
        for op in ops:
            kind = type(op)
            fields: Any = op  # unpacked by kind below (a union's unpacking types poorly)
            if kind is Put:
                b, k, v, ms = fields
                if ms is None:  # the common put (a BULK frame's rows): the prepacked head
                    parts += (_PUT_NO_EXPIRY, pack_lengths(len(b), len(k), len(v)), b, k, v)
                else:
                    parts += (_PUT.pack(TAG_PUT, _expiry(ms), len(b), len(k), len(v)), b, k, v)
            elif kind is Remove:
                b, k = fields
                parts += (_KEYED.pack(TAG_REMOVE, len(b), len(k)), b, k)
            elif kind is Expire:
                b, k, ms = fields
                parts += (_EXPIRE.pack(TAG_EXPIRE, _expiry(ms), len(b), len(k)), b, k)
            elif kind is Flush:
                (b,) = fields
                if b is None:
                    parts.append(bytes([TAG_FLUSH_ALL]))
                else:
                    parts += (_FLUSH.pack(TAG_FLUSH, len(b)), b)
            elif kind is AddElements or kind is RemoveElements:
                b, k, code, elements = fields
                tag = TAG_ADD_ELEMENTS if kind is AddElements else TAG_REMOVE_ELEMENTS
                _check_elements(code, elements, whole=kind is AddElements)
                if code == KIND_LIST and kind is RemoveElements:
                    raise ValueError("a list's elements are removed by position, not by value")
                parts += (_ELEMENTS.pack(tag, code, len(b), len(k), len(elements)), b, k)
                parts += _elements(elements)
            elif kind is PutContainer:
                b, k, code, elements, ms = fields
                _check_elements(code, elements, whole=True, put=True)
                head = _CONTAINER.pack(
                    TAG_PUT_CONTAINER, code, _expiry(ms), len(b), len(k), len(elements)
                )
                parts += (head, b, k)
                parts += _elements(elements)
            elif kind is Rename:
                b, k, n = fields
                parts += (_RENAME.pack(TAG_RENAME, len(b), len(k), len(n)), b, k, n)
            elif kind is Copy:
                b, k, tb, tk = fields
                parts += (_COPY.pack(TAG_COPY, len(b), len(k), len(tb), len(tk)), b, k, tb, tk)
            else:
                parts += _encode_list_op(op)
    except struct.error as exc:
        raise ValueError(f"operation field too long to encode: {exc}") from None
    if not parts:
        raise ValueError("a record holds at least one operation")
    return b"".join(parts)


def _encode_list_op(op: Op) -> list[bytes]:
    """The parts of one list operation (``ValueError`` for anything else, or a field replay
    would refuse)."""
    if type(op) is ListPush:
        b, k, side = op.bucket, op.key, 0 if op.left else 1
        if not op.elements:
            raise ValueError("a list push holds at least one element")
        head = _LIST_POP.pack(TAG_LIST_PUSH, side, len(b), len(k), len(op.elements))
        return [head, b, k, *_elements(op.elements)]
    if type(op) is ListPop:
        b, k, side = op.bucket, op.key, 0 if op.left else 1
        if op.n < 1:
            raise ValueError(f"a list pop takes at least one element, not {op.n}")
        return [_LIST_POP.pack(TAG_LIST_POP, side, len(b), len(k), op.n), b, k]
    if type(op) is ListSet or type(op) is ListInsert or type(op) is ListRemove:
        b, k, number, element = op
        tag = _LIST_AT_TAGS[type(op)]
        if number < 0 if tag != TAG_LIST_REMOVE else number == 0:
            raise ValueError(f"{number} is not a position or count of {type(op).__name__}")
        return [_LIST_AT.pack(tag, number, len(b), len(k), len(element)), b, k, element]
    raise ValueError(f"not an operation: {op!r}")


def _elements(elements: tuple[bytes, ...]) -> list[bytes]:
    """Each element with its u32 length before it."""
    pack = _pack_length
    parts: list[bytes] = []
    for element in elements:
        parts += (pack(len(element)), element)
    return parts


def _check_elements(
    kind: int, elements: tuple[bytes, ...], *, whole: bool, put: bool = False
) -> None:
    # What the decoder refuses, refused before it is written: an unknown kind, no elements, a
    # hash's field without its value (``whole``: the elements are units, not only fields).
    if kind not in KINDS:
        raise ValueError(f"unknown container kind {kind}")
    if not elements:
        raise ValueError("a container operation holds at least one element")
    if whole and len(elements) % _STEP[kind]:
        raise ValueError(f"{len(elements)} elements do not make whole units of kind {kind}")
    if whole and kind == KIND_ZSET:
        for score in elements[1::2]:
            decode_score(score)
    if kind == KIND_STREAM:
        check_stream_elements(elements, put=put, remove=not whole)


_STREAM_ADDS = frozenset((STREAM_META, STREAM_ENTRY))
_STREAM_REMOVES = frozenset((STREAM_META, STREAM_DELETE, STREAM_TRIM))


def check_stream_elements(elements: tuple[bytes, ...], *, put: bool, remove: bool) -> None:
    """``ValueError`` unless each element of a stream operation decodes and is of a type the
    operation takes (``docs/wal-format.md``, "Streams"): a ``PutContainer`` (``put``) a META
    then ENTRYs, an ``AddElements`` ENTRYs and METAs, a ``RemoveElements`` (``remove``)
    DELETEs, TRIMs and METAs."""
    allowed = _STREAM_REMOVES if remove else _STREAM_ADDS
    for at, element in enumerate(elements):
        what = decode_stream_element(element)[0]
        if what not in allowed or (put and (what == STREAM_META) != (at == 0)):
            raise ValueError(f"a stream element of type {what} where it cannot be")


CONTAINER_CHUNK_BYTES = 64 * 1024
"""Encoded elements after which ``encode_container`` ends an operation and starts the next
(``docs/wal-format.md``, "Snapshots"), so no operation grows with one container's size."""


def encode_container(
    bucket: bytes,
    key: bytes,
    kind: int,
    elements: Iterable[bytes],
    expire_at_ms: int | None = None,
    limit: int = CONTAINER_CHUNK_BYTES,
) -> Iterator[bytes]:
    """The payloads that write one whole container into a snapshot: a ``PutContainer`` of its
    first ``limit`` bytes of elements, then ``AddElements`` of the rest, ``limit`` bytes each
    (a hash's field and value never apart). ``elements`` are flattened as in the ops and must
    not be empty. Each payload is whole operations; join them freely."""
    if kind not in KINDS:
        raise ValueError(f"unknown container kind {kind}")
    ms = _expiry(expire_at_ms)
    step = _STEP[kind]
    pack = _pack_length
    blen, klen = len(bucket), len(key)
    first = True
    parts: list[bytes] = []
    size = count = 0
    for element in elements:
        parts += (pack(len(element)), element)
        size += 4 + len(element)
        count += 1
        if size >= limit and count % step == 0:
            if first:
                head = _CONTAINER.pack(TAG_PUT_CONTAINER, kind, ms, blen, klen, count)
            else:
                head = _ELEMENTS.pack(TAG_ADD_ELEMENTS, kind, blen, klen, count)
            yield b"".join((head, bucket, key, *parts))
            first = False
            parts = []
            size = count = 0
    if count % step:
        raise ValueError(f"{count} elements do not make whole units of kind {kind}")
    if count:
        if first:
            head = _CONTAINER.pack(TAG_PUT_CONTAINER, kind, ms, blen, klen, count)
        else:
            head = _ELEMENTS.pack(TAG_ADD_ELEMENTS, kind, blen, klen, count)
        yield b"".join((head, bucket, key, *parts))
    elif first:
        raise ValueError("a container holds at least one element")


def decode_ops(payload: bytes, version: int = FORMAT_VERSION) -> list[Op]:
    """The operations of one DATA payload of a file of format ``version``; ``PayloadError`` if
    it does not decode."""
    if version == FORMAT_VERSION:
        return _decode_v2(payload, _LAST_TAG)
    if version == STRINGS_VERSION:
        return _decode_v2(payload, _LAST_STRING_TAG)
    if version == LEGACY_VERSION:
        return [_decode_v1(payload)]
    raise PayloadError(f"unknown format version {version}", 0)


def _take(payload: bytes, pos: int, length: int, what: str) -> bytes:
    end = pos + length
    if end > len(payload):
        raise PayloadError(f"{what} of {length} bytes runs past the end", pos)
    return payload[pos:end]


def _fixed(layout: struct.Struct, payload: bytes, pos: int) -> tuple[int, ...]:
    if pos + layout.size > len(payload):
        raise PayloadError("operation header cut short", pos)
    return layout.unpack_from(payload, pos)


_unpack_put = _PUT.unpack_from
_PUT_SIZE = _PUT.size


def _decode_v2(payload: bytes, last_tag: int) -> list[Op]:
    """A payload of version 2 (``last_tag`` 5: strings only) or 3 (every tag)."""
    size = len(payload)
    if not size:
        raise PayloadError("empty payload: a record holds at least one operation", 0)
    if payload[0] == TAG_PUT and size >= _PUT_SIZE:
        # The common record (one SET, every snapshot record) without the general loop: replay
        # time is mostly this.
        _, ms, blen, klen, vlen = _unpack_put(payload)
        key_at = _PUT_SIZE + blen
        value_at = key_at + klen
        if value_at + vlen == size:
            return [
                Put(
                    payload[_PUT_SIZE:key_at],
                    payload[key_at:value_at],
                    payload[value_at:],
                    None if ms == NO_EXPIRY else ms,
                )
            ]
    ops: list[Op] = []
    pos = 0
    while pos < size:
        tag = payload[pos]
        start = pos
        if tag == TAG_PUT:
            _, ms, blen, klen, vlen = _fixed(_PUT, payload, pos)
            pos += _PUT.size
            bucket = _take(payload, pos, blen, "bucket")
            key = _take(payload, pos + blen, klen, "key")
            value = _take(payload, pos + blen + klen, vlen, "value")
            pos += blen + klen + vlen
            ops.append(Put(bucket, key, value, None if ms == NO_EXPIRY else ms))
        elif tag == TAG_REMOVE:
            _, blen, klen = _fixed(_KEYED, payload, pos)
            pos += _KEYED.size
            bucket = _take(payload, pos, blen, "bucket")
            key = _take(payload, pos + blen, klen, "key")
            pos += blen + klen
            ops.append(Remove(bucket, key))
        elif tag == TAG_EXPIRE:
            _, ms, blen, klen = _fixed(_EXPIRE, payload, pos)
            pos += _EXPIRE.size
            bucket = _take(payload, pos, blen, "bucket")
            key = _take(payload, pos + blen, klen, "key")
            pos += blen + klen
            ops.append(Expire(bucket, key, None if ms == NO_EXPIRY else ms))
        elif tag == TAG_FLUSH:
            _, blen = _fixed(_FLUSH, payload, pos)
            pos += _FLUSH.size
            bucket = _take(payload, pos, blen, "bucket")
            pos += blen
            ops.append(Flush(bucket))
        elif tag == TAG_FLUSH_ALL:
            pos += 1
            ops.append(Flush(None))
        elif tag > last_tag:
            raise PayloadError(f"unknown operation tag {tag}", start)
        else:
            pos = _decode_typed(payload, pos, ops)
    return ops


def _decode_typed(payload: bytes, pos: int, ops: list[Op]) -> int:
    """Decode the version-3 operation at ``pos`` into ``ops``; where the next one starts."""
    tag = payload[pos]
    if tag in (TAG_PUT_CONTAINER, TAG_ADD_ELEMENTS, TAG_REMOVE_ELEMENTS):
        if tag == TAG_PUT_CONTAINER:
            _, kind, ms, blen, klen, count = _fixed(_CONTAINER, payload, pos)
            at = pos + _CONTAINER.size
        else:
            _, kind, blen, klen, count = _fixed(_ELEMENTS, payload, pos)
            ms, at = NO_EXPIRY, pos + _ELEMENTS.size
        if kind not in KINDS:
            raise PayloadError(f"unknown container kind {kind}", pos)
        if count == 0:
            raise PayloadError("a container operation without elements", pos)
        if tag == TAG_REMOVE_ELEMENTS and kind == KIND_LIST:
            raise PayloadError("a list's elements are removed by position", pos)
        if tag != TAG_REMOVE_ELEMENTS and count % _STEP[kind]:
            raise PayloadError(f"{count} elements do not make whole units of kind {kind}", pos)
        bucket = _take(payload, at, blen, "bucket")
        key = _take(payload, at + blen, klen, "key")
        elements, end = _take_elements(payload, at + blen + klen, count)
        if kind == KIND_ZSET and tag != TAG_REMOVE_ELEMENTS:
            _check_scores(elements, pos)
        elif kind == KIND_STREAM:
            try:
                check_stream_elements(
                    elements, put=tag == TAG_PUT_CONTAINER, remove=tag == TAG_REMOVE_ELEMENTS
                )
            except ValueError as exc:
                raise PayloadError(f"bad stream element: {exc}", pos) from None
        if tag == TAG_PUT_CONTAINER:
            expiry = None if ms == NO_EXPIRY else ms
            ops.append(PutContainer(bucket, key, kind, elements, expiry))
        elif tag == TAG_ADD_ELEMENTS:
            ops.append(AddElements(bucket, key, kind, elements))
        else:
            ops.append(RemoveElements(bucket, key, kind, elements))
        return end
    if tag == TAG_RENAME:
        _, blen, klen, nlen = _fixed(_RENAME, payload, pos)
        at = pos + _RENAME.size
        bucket = _take(payload, at, blen, "bucket")
        key = _take(payload, at + blen, klen, "key")
        new_key = _take(payload, at + blen + klen, nlen, "new key")
        ops.append(Rename(bucket, key, new_key))
        return at + blen + klen + nlen
    if tag == TAG_COPY:
        _, blen, klen, tblen, tklen = _fixed(_COPY, payload, pos)
        at = pos + _COPY.size
        bucket = _take(payload, at, blen, "bucket")
        key = _take(payload, at + blen, klen, "key")
        to_bucket = _take(payload, at + blen + klen, tblen, "target bucket")
        to_key = _take(payload, at + blen + klen + tblen, tklen, "target key")
        ops.append(Copy(bucket, key, to_bucket, to_key))
        return at + blen + klen + tblen + tklen
    return _decode_list_op(payload, pos, ops)


def _decode_list_op(payload: bytes, pos: int, ops: list[Op]) -> int:
    """Decode the list operation (tags 11-15) at ``pos`` into ``ops``; where the next starts."""
    tag = payload[pos]
    if tag in (TAG_LIST_PUSH, TAG_LIST_POP):
        _, side, blen, klen, count = _fixed(_LIST_POP, payload, pos)
        at = pos + _LIST_POP.size
        if side > 1:
            raise PayloadError(f"unknown list side {side}", pos)
        if count == 0:
            raise PayloadError("a list push or pop without elements", pos)
        bucket = _take(payload, at, blen, "bucket")
        key = _take(payload, at + blen, klen, "key")
        if tag == TAG_LIST_POP:
            ops.append(ListPop(bucket, key, side == 0, count))
            return at + blen + klen
        elements, end = _take_elements(payload, at + blen + klen, count)
        ops.append(ListPush(bucket, key, side == 0, elements))
        return end
    make = _LIST_AT_OPS.get(tag)
    if make is None:
        raise PayloadError(f"unknown operation tag {tag}", pos)
    _, number, blen, klen, elen = _fixed(_LIST_AT, payload, pos)
    if number < 0 if tag != TAG_LIST_REMOVE else number == 0:
        raise PayloadError(f"{number} is not a position or count of {make.__name__}", pos)
    at = pos + _LIST_AT.size
    bucket = _take(payload, at, blen, "bucket")
    key = _take(payload, at + blen, klen, "key")
    element = _take(payload, at + blen + klen, elen, "element")
    ops.append(make(bucket, key, number, element))
    return at + blen + klen + elen


def _check_scores(elements: tuple[bytes, ...], pos: int) -> None:
    """Refuse a sorted set's member/score pairs whose score is not an 8-byte non-NaN double."""
    for score in elements[1::2]:
        try:
            decode_score(score)
        except ValueError as exc:
            raise PayloadError(f"bad sorted set score: {exc}", pos) from None


def _take_elements(payload: bytes, pos: int, count: int) -> tuple[tuple[bytes, ...], int]:
    """``count`` length-prefixed elements from ``pos``, and where they end."""
    size = len(payload)
    unpack = _unpack_length
    elements = []
    for _ in range(count):
        if pos + 4 > size:
            raise PayloadError("element length cut short", pos)
        (length,) = unpack(payload, pos)
        end = pos + 4 + length
        if end > size:
            raise PayloadError(f"element of {length} bytes runs past the end", pos)
        elements.append(payload[pos + 4 : end])
        pos = end
    return tuple(elements), pos


def _decode_v1(payload: bytes) -> Op:
    verb, space, rest = payload[:4], payload[3:4], payload[4:]
    if space == b" " and verb == b"SET ":
        parts = rest.split(b" ", 2)
        if len(parts) == 3 and parts[0] and parts[1]:
            return Put(parts[0], parts[1], parts[2])
    elif space == b" " and verb == b"DEL ":
        parts = rest.split(b" ")
        if len(parts) == 2 and parts[0] and parts[1]:
            return Remove(parts[0], parts[1])
    raise PayloadError(f"not a version-1 write request: {bytes(payload[:80])!r}", 0)


def escape(field: bytes) -> str:
    """``field`` printed binary-safely (``docs/wal-format.md``, "Tools"): 0x21-0x7E as
    themselves except ``\\``, ``"`` and ``;``; a backslash doubled; other bytes as ``\\xHH``;
    the empty string as ``""``."""
    if not field:
        return '""'
    return "".join(_ESCAPED[b] for b in field)


_ESCAPED = [
    "\\\\" if b == 0x5C else chr(b) if 0x21 <= b <= 0x7E and b not in b'";' else f"\\x{b:02x}"
    for b in range(256)
]


def describe(ops: Iterable[Op]) -> str:
    """One record's operations as a line of words, ``" ; "`` between operations."""
    words: list[str] = []
    for op in ops:
        if type(op) is Put:
            text = f"PUT {escape(op.bucket)} {escape(op.key)} {escape(op.value)}"
            words.append(text if op.expire_at_ms is None else f"{text} PXAT {op.expire_at_ms}")
        elif type(op) is Remove:
            words.append(f"DEL {escape(op.bucket)} {escape(op.key)}")
        elif type(op) is Expire:
            where = f"{escape(op.bucket)} {escape(op.key)}"
            ms = op.expire_at_ms
            words.append(f"PERSIST {where}" if ms is None else f"EXPIRE {where} {ms}")
        elif type(op) is Flush:
            words.append("FLUSHALL" if op.bucket is None else f"FLUSH {escape(op.bucket)}")
        elif type(op) is PutContainer or type(op) is AddElements or type(op) is RemoveElements:
            put, add, remove = _KIND_WORDS[op.kind]
            verb = put if type(op) is PutContainer else add if type(op) is AddElements else remove
            shown = op.elements
            if op.kind == KIND_ZSET and type(op) is not RemoveElements:
                shown = _scores_shown(shown)
            elif op.kind == KIND_STREAM:
                where = f"{escape(op.bucket)} {escape(op.key)}"
                words.append(f"{verb} {where} {_stream_shown(shown)}")
                continue
            text = " ".join([verb, escape(op.bucket), escape(op.key), *map(escape, shown)])
            ms = op.expire_at_ms if type(op) is PutContainer else None
            words.append(text if ms is None else f"{text} PXAT {ms}")
        elif type(op) is Rename:
            words.append(f"RENAME {escape(op.bucket)} {escape(op.key)} {escape(op.new_key)}")
        elif type(op) is Copy:
            names = (op.bucket, op.key, op.to_bucket, op.to_key)
            words.append("COPY " + " ".join(map(escape, names)))
        else:
            words.append(_describe_list_op(op))
    return " ; ".join(words)


def _scores_shown(elements: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """A sorted set's member/score pairs as ``ZADD`` takes them: score (``repr``), member."""
    shown: list[bytes] = []
    for member, score in zip(elements[::2], elements[1::2], strict=True):
        shown += (repr(decode_score(score)).encode(), member)
    return tuple(shown)


def _stream_shown(elements: tuple[bytes, ...]) -> str:
    """A stream's elements as words, ``,`` between elements (``docs/wal-format.md``)."""
    shown = []
    for element in elements:
        decoded = decode_stream_element(element)
        if decoded[0] == STREAM_META:
            _, last, added, deleted = decoded  # type: ignore[misc]
            ids = (format_stream_id(last).decode(), format_stream_id(deleted).decode())
            shown.append(f"META {ids[0]} {added} {ids[1]}")
        elif decoded[0] == STREAM_ENTRY:
            _, entry_id, pairs = decoded  # type: ignore[misc]
            shown.append(" ".join([format_stream_id(entry_id).decode(), *map(escape, pairs)]))
        else:
            verb = "DEL" if decoded[0] == STREAM_DELETE else "TRIM"
            shown.append(f"{verb} {format_stream_id(decoded[1]).decode()}")
    return " , ".join(shown)


def _describe_list_op(op: Op) -> str:
    if isinstance(op, Flush):
        raise ValueError(f"not an operation: {op!r}")
    where = f"{escape(op.bucket)} {escape(op.key)}"
    if type(op) is ListPush:
        verb = "LPUSH" if op.left else "RPUSH"
        return " ".join([verb, where, *map(escape, op.elements)])
    if type(op) is ListPop:
        return f"{'LPOP' if op.left else 'RPOP'} {where} {op.n}"
    if type(op) is ListSet or type(op) is ListInsert or type(op) is ListRemove:
        verb = {ListSet: "LSET", ListInsert: "LINSERT", ListRemove: "LREM"}[type(op)]
        return f"{verb} {where} {op[2]} {escape(op.element)}"
    raise ValueError(f"not an operation: {op!r}")


_KIND_WORDS = {
    KIND_HASH: ("PUTHASH", "HSET", "HDEL"),
    KIND_SET: ("PUTSET", "SADD", "SREM"),
    KIND_LIST: ("PUTLIST", "RPUSH", "-"),
    KIND_ZSET: ("PUTZSET", "ZADD", "ZREM"),
    KIND_STREAM: ("PUTSTREAM", "XADD", "XDEL"),
}
"""How ``describe`` names the container operations of each kind: put, add, remove."""


_c_frame_groups = getattr(_cpayload, "frame_groups", None)  # None: not built, or built before it
frame_groups: Callable[[int, list[list[Op]]], bytes] = (
    frame_groups_python
    if _c_frame_groups is None
    else functools.partial(_c_frame_groups, Put, encode_ops)
)
"""``frame_groups_python``, in C when the accelerator is built."""
FRAMES_IN_C = _c_frame_groups is not None
