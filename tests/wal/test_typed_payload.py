"""The operations of typed values (format version 3): encoding, decoding, refusals, snapshots."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minidb.wal import (
    KIND_HASH,
    KIND_SET,
    AddElements,
    Copy,
    Op,
    PayloadError,
    Put,
    PutContainer,
    RemoveElements,
    Rename,
    decode_ops,
    encode_container,
    encode_ops,
)
from minidb.wal._format import FORMAT_VERSION, STRINGS_VERSION
from minidb.wal._payload import describe

names = st.binary(max_size=12)
elements = st.lists(st.binary(max_size=20), min_size=1, max_size=8)
expiry = st.none() | st.integers(-(1 << 63) + 1, (1 << 63) - 1)


@st.composite
def typed_ops(draw: st.DrawFn) -> Op:
    kind = draw(st.sampled_from([KIND_HASH, KIND_SET]))
    items = draw(elements)
    whole = tuple(items * 2 if kind == KIND_HASH else items)
    b, k = draw(names), draw(names)
    return draw(
        st.sampled_from(
            [
                PutContainer(b, k, kind, whole, draw(expiry)),
                AddElements(b, k, kind, whole),
                RemoveElements(b, k, kind, tuple(items)),
                Rename(b, k, draw(names)),
                Copy(b, k, draw(names), draw(names)),
            ]
        )
    )


@given(st.lists(typed_ops() | st.builds(Put, names, names, names, expiry), min_size=1, max_size=6))
def test_typed_payload_round_trips_any_bytes(ops: list[Op]) -> None:
    """Any sequence of typed and string operations decodes to itself, field for field."""
    assert decode_ops(encode_ops(ops)) == ops
    assert decode_ops(encode_ops(ops), FORMAT_VERSION) == ops


@pytest.mark.parametrize(
    "op",
    [
        PutContainer(b"0", b"h", KIND_HASH, (b"f", b"v")),
        AddElements(b"0", b"s", KIND_SET, (b"m",)),
        RemoveElements(b"0", b"s", KIND_SET, (b"m",)),
        Rename(b"0", b"a", b"b"),
        Copy(b"0", b"a", b"1", b"b"),
    ],
)
def test_typed_payload_in_a_version_2_file_is_refused(op: Op) -> None:
    """A version-2 payload may hold only the string operations (tags 1-5)."""
    payload = encode_ops([Put(b"0", b"k", b"v"), op])
    with pytest.raises(PayloadError, match="unknown operation tag"):
        decode_ops(payload, STRINGS_VERSION)


def test_typed_payload_layout_of_each_operation() -> None:
    """The bytes of each operation are the table of docs/wal-format.md, field by field."""
    put = encode_ops([PutContainer(b"b", b"k", KIND_HASH, (b"f", b"vv"), 7)])
    assert put == struct.pack("<BBqIII", 6, 1, 7, 1, 1, 2) + b"bk" + (
        struct.pack("<I", 1) + b"f" + struct.pack("<I", 2) + b"vv"
    )
    add = encode_ops([AddElements(b"b", b"k", KIND_SET, (b"m",))])
    assert add == struct.pack("<BBIII", 7, 2, 1, 1, 1) + b"bk" + struct.pack("<I", 1) + b"m"
    rem = encode_ops([RemoveElements(b"b", b"k", KIND_HASH, (b"f",))])
    assert rem == struct.pack("<BBIII", 8, 1, 1, 1, 1) + b"bk" + struct.pack("<I", 1) + b"f"
    assert encode_ops([Rename(b"b", b"k", b"n")]) == struct.pack("<BIII", 9, 1, 1, 1) + b"bkn"
    copy = encode_ops([Copy(b"b", b"k", b"c", b"d")])
    assert copy == struct.pack("<BIIII", 10, 1, 1, 1, 1) + b"bkcd"
    no_expiry = encode_ops([PutContainer(b"b", b"k", KIND_SET, (b"m",))])
    assert struct.unpack_from("<q", no_expiry, 2)[0] == -(1 << 63)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (struct.pack("<BBIII", 7, 9, 1, 1, 1) + b"bk" + b"\1\0\0\0m", "unknown container kind 9"),
        (struct.pack("<BBIII", 7, 2, 1, 1, 0) + b"bk", "without elements"),
        (struct.pack("<BBIII", 7, 1, 1, 1, 1) + b"bk" + b"\1\0\0\0f", "whole units"),
        (struct.pack("<BBqIII", 6, 1, 0, 1, 1, 3) + b"bk" + b"\0\0\0\0" * 3, "whole units"),
        (struct.pack("<BBIII", 8, 2, 1, 1, 2) + b"bk" + b"\1\0\0\0m", "cut short"),
        (struct.pack("<BBIII", 8, 2, 1, 1, 1) + b"bk" + b"\5\0\0\0m", "runs past the end"),
        (struct.pack("<BIII", 9, 1, 1, 5) + b"bkn", "runs past the end"),
        (struct.pack("<BIII", 10, 1, 1, 1), "cut short"),
        (bytes([99]), "unknown operation tag 99"),
    ],
)
def test_typed_payload_malformed_is_a_payload_error(payload: bytes, reason: str) -> None:
    """Every way a typed operation can fail to decode is a ``PayloadError`` (corruption)."""
    with pytest.raises(PayloadError, match=reason):
        decode_ops(payload)


@pytest.mark.parametrize(
    "op",
    [
        PutContainer(b"b", b"k", KIND_HASH, (b"f",)),
        PutContainer(b"b", b"k", KIND_SET, ()),
        AddElements(b"b", b"k", 4, (b"m",)),
        RemoveElements(b"b", b"k", KIND_SET, ()),
    ],
)
def test_typed_payload_encoder_refuses_what_the_decoder_would(op: Op) -> None:
    """The writer never writes what replay would refuse: no elements, half a hash pair, an
    unknown kind."""
    with pytest.raises(ValueError):
        encode_ops([op])


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=400), st.booleans(), expiry)
def test_typed_payload_container_chunks_rebuild_the_container(
    items: list[bytes], is_hash: bool, expire_at_ms: int | None
) -> None:
    """A snapshot's container, cut into 1 KiB operations, is a PutContainer then AddElements
    holding every element in order; no operation is far past the limit and a hash's field and
    value stay together."""
    kind = KIND_HASH if is_hash else KIND_SET
    flat = [x for item in items for x in ((item, item[::-1]) if is_hash else (item,))]
    chunks = list(encode_container(b"b", b"k", kind, iter(flat), expire_at_ms, limit=1024))
    ops = decode_ops(b"".join(chunks))
    assert len(ops) == len(chunks)
    first, rest = ops[0], ops[1:]
    assert first == PutContainer(b"b", b"k", kind, first.elements, expire_at_ms)  # type: ignore[union-attr]
    assert all(type(op) is AddElements and op.kind == kind for op in rest)
    got = [e for op in ops for e in op.elements]  # type: ignore[union-attr]
    assert got == flat
    for chunk in chunks[:-1]:
        assert len(chunk) < 1024 + 2 * (300 + 4) + 64


def test_typed_payload_empty_container_is_refused() -> None:
    """A snapshot never holds an empty container."""
    with pytest.raises(ValueError, match="at least one element"):
        list(encode_container(b"b", b"k", KIND_SET, []))


def test_typed_payload_describe_prints_each_operation() -> None:
    """``minidb wal dump`` words for the typed operations, binary-safe."""
    ops: list[Op] = [
        PutContainer(b"0", b"h", KIND_HASH, (b"f", b"a b"), 5),
        AddElements(b"0", b"h", KIND_HASH, (b"f", b"")),
        RemoveElements(b"0", b"h", KIND_HASH, (b"f",)),
        PutContainer(b"0", b"s", KIND_SET, (b"m",)),
        AddElements(b"0", b"s", KIND_SET, (b"\n",)),
        RemoveElements(b"0", b"s", KIND_SET, (b"m",)),
        Rename(b"0", b"s", b"t"),
        Copy(b"0", b"t", b"1", b"u"),
    ]
    assert describe(ops) == (
        'PUTHASH 0 h f a\\x20b PXAT 5 ; HSET 0 h f "" ; HDEL 0 h f ; PUTSET 0 s m ; '
        "SADD 0 s \\x0a ; SREM 0 s m ; RENAME 0 s t ; COPY 0 t 1 u"
    )
