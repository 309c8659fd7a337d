"""The list operations of format version 3 (tags 11-15, kind 3): encoding, decoding, refusals,
snapshots of lists."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minidb.wal import KIND_LIST, Op, PayloadError
from minidb.wal._format import STRINGS_VERSION
from minidb.wal._ops import (
    AddElements,
    ListInsert,
    ListPop,
    ListPush,
    ListRemove,
    ListSet,
    Put,
    PutContainer,
    RemoveElements,
)
from minidb.wal._payload import decode_ops, describe, encode_container, encode_ops

names = st.binary(max_size=12)
expiry = st.none() | st.integers(-(1 << 63) + 1, (1 << 63) - 1)  # what the format holds
elements = st.lists(st.binary(max_size=20), min_size=1, max_size=8).map(tuple)
positions = st.integers(0, (1 << 63) - 1)
removals = st.integers(-(1 << 63), (1 << 63) - 1).filter(bool)

list_ops = st.one_of(
    st.builds(ListPush, names, names, st.booleans(), elements),
    st.builds(ListPop, names, names, st.booleans(), st.integers(1, (1 << 32) - 1)),
    st.builds(ListSet, names, names, positions, st.binary(max_size=20)),
    st.builds(ListInsert, names, names, positions, st.binary(max_size=20)),
    st.builds(ListRemove, names, names, removals, st.binary(max_size=20)),
    st.builds(PutContainer, names, names, st.just(KIND_LIST), elements, expiry),
    st.builds(AddElements, names, names, st.just(KIND_LIST), elements),
)


@given(st.lists(list_ops | st.builds(Put, names, names, names, expiry), min_size=1, max_size=6))
def test_list_payload_round_trips_any_bytes(ops: list[Op]) -> None:
    """Any sequence of list and string operations decodes to itself, field for field, and is
    described one op per ``;``."""
    assert decode_ops(encode_ops(ops)) == ops
    assert len(describe(ops).split(" ; ")) == len(ops)


def test_list_payload_layout_of_each_operation() -> None:
    """The bytes of each list operation are the table of docs/wal-format.md."""
    push = encode_ops([ListPush(b"b", b"k", True, (b"x", b"yy"))])
    assert push == struct.pack("<BBIII", 11, 0, 1, 1, 2) + b"bk" + (
        struct.pack("<I", 1) + b"x" + struct.pack("<I", 2) + b"yy"
    )
    assert encode_ops([ListPop(b"b", b"k", False, 3)]) == struct.pack(
        "<BBIII", 12, 1, 1, 1, 3
    ) + b"bk"
    for tag, op in ((13, ListSet), (14, ListInsert), (15, ListRemove)):
        got = encode_ops([op(b"b", b"k", -2 if tag == 15 else 5, b"e")])
        assert got == struct.pack("<BqIII", tag, -2 if tag == 15 else 5, 1, 1, 1) + b"bke"
    put = encode_ops([PutContainer(b"b", b"k", KIND_LIST, (b"a",))])
    assert put[:2] == bytes([6, 3])


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (struct.pack("<BBIII", 11, 2, 1, 1, 1) + b"bk\1\0\0\0x", "unknown list side 2"),
        (struct.pack("<BBIII", 11, 0, 1, 1, 0) + b"bk", "without elements"),
        (struct.pack("<BBIII", 12, 1, 1, 1, 0) + b"bk", "without elements"),
        (struct.pack("<BBIII", 11, 0, 1, 1, 2) + b"bk\1\0\0\0x", "cut short"),
        (struct.pack("<BBIII", 12, 0, 1, 9, 1) + b"bk", "runs past the end"),
        (struct.pack("<BqIII", 13, -1, 1, 1, 1) + b"bke", "not a position"),
        (struct.pack("<BqIII", 14, -5, 1, 1, 1) + b"bke", "not a position"),
        (struct.pack("<BqIII", 15, 0, 1, 1, 1) + b"bke", "not a position or count"),
        (struct.pack("<BqIII", 13, 0, 1, 1, 4) + b"bke", "element of 4 bytes runs past"),
        (struct.pack("<BqI", 15, 1, 1), "cut short"),
        (struct.pack("<BBIII", 8, 3, 1, 1, 1) + b"bk\1\0\0\0x", "removed by position"),
        (bytes([16]), "unknown operation tag 16"),
    ],
)
def test_list_payload_malformed_is_a_payload_error(payload: bytes, reason: str) -> None:
    """Every way a list operation can fail to decode is a ``PayloadError`` (corruption)."""
    with pytest.raises(PayloadError, match=reason):
        decode_ops(payload)


@pytest.mark.parametrize(
    "op",
    [
        ListPush(b"b", b"k", True, ()),
        ListPop(b"b", b"k", True, 0),
        ListPop(b"b", b"k", True, 1 << 32),
        ListSet(b"b", b"k", -1, b"e"),
        ListInsert(b"b", b"k", -1, b"e"),
        ListRemove(b"b", b"k", 0, b"e"),
        RemoveElements(b"b", b"k", KIND_LIST, (b"e",)),
    ],
)
def test_list_payload_encoder_refuses_what_the_decoder_would(op: Op) -> None:
    """The writer never writes what replay would refuse."""
    with pytest.raises(ValueError):
        encode_ops([op])


@pytest.mark.parametrize("tag", [11, 12, 13, 14, 15])
def test_list_payload_in_a_version_2_file_is_refused(tag: int) -> None:
    """A version-2 payload may hold only the string operations."""
    op = {11: ListPush(b"b", b"k", True, (b"x",)), 12: ListPop(b"b", b"k", True, 1)}.get(
        tag, ListSet(b"b", b"k", 0, b"e")
    )
    with pytest.raises(PayloadError, match="unknown operation tag"):
        decode_ops(encode_ops([op]), STRINGS_VERSION)


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=300))
def test_list_payload_snapshot_chunks_keep_the_order(items: list[bytes]) -> None:
    """A list in a snapshot is a PutContainer then AddElements (appends at the tail), which
    hold its elements head to tail."""
    chunks = list(encode_container(b"b", b"k", KIND_LIST, iter(items), None, limit=1024))
    ops = decode_ops(b"".join(chunks))
    assert type(ops[0]) is PutContainer
    assert all(type(op) is AddElements and op.kind == KIND_LIST for op in ops[1:])
    assert [e for op in ops for e in op.elements] == items  # type: ignore[union-attr]
