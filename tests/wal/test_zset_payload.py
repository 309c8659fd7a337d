"""The sorted-set operations of format version 3 (kind 4 in the container ops): encoding,
decoding, refusals, snapshots of sorted sets."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minidb.wal import KIND_ZSET, Op, PayloadError, decode_score, encode_score
from minidb.wal._format import STRINGS_VERSION
from minidb.wal._ops import AddElements, Put, PutContainer, RemoveElements
from minidb.wal._payload import decode_ops, describe, encode_container, encode_ops

names = st.binary(max_size=12)
scores = st.floats(allow_nan=False)
pairs = st.lists(st.tuples(st.binary(max_size=20), scores), min_size=1, max_size=8).map(
    lambda items: tuple(e for m, s in items for e in (m, encode_score(s)))
)
members = st.lists(st.binary(max_size=20), min_size=1, max_size=8).map(tuple)
expiry = st.none() | st.integers(-(1 << 63) + 1, (1 << 63) - 1)
"""Given explicitly: ``st.builds`` would infer any int for a defaulted ``expire_at_ms``."""

zset_ops = st.one_of(
    st.builds(PutContainer, names, names, st.just(KIND_ZSET), pairs, expiry),
    st.builds(AddElements, names, names, st.just(KIND_ZSET), pairs),
    st.builds(RemoveElements, names, names, st.just(KIND_ZSET), members),
)


@given(st.lists(zset_ops | st.builds(Put, names, names, names, expiry), min_size=1, max_size=6))
def test_zset_payload_round_trips_any_bytes(ops: list[Op]) -> None:
    """Any sequence of sorted-set and string operations decodes to itself, field for field,
    and is described one op per ``;``."""
    assert decode_ops(encode_ops(ops)) == ops
    assert len(describe(ops).split(" ; ")) == len(ops)


@given(scores)
def test_zset_score_is_exact(score: float) -> None:
    """A score is carried bit for bit, infinities and -0.0 included."""
    got = decode_score(encode_score(score))
    assert got == score and math.copysign(1, got) == math.copysign(1, score)


def test_zset_payload_layout() -> None:
    """The bytes are the container table of docs/wal-format.md with kind 4."""
    add = encode_ops([AddElements(b"b", b"k", KIND_ZSET, (b"m", encode_score(1.5)))])
    assert add == struct.pack("<BBIII", 7, 4, 1, 1, 2) + b"bk" + (
        struct.pack("<I", 1) + b"m" + struct.pack("<I", 8) + struct.pack("<d", 1.5)
    )
    rem = encode_ops([RemoveElements(b"b", b"k", KIND_ZSET, (b"m",))])
    assert rem == struct.pack("<BBIII", 8, 4, 1, 1, 1) + b"bk" + struct.pack("<I", 1) + b"m"
    put = encode_ops([PutContainer(b"b", b"k", KIND_ZSET, (b"m", encode_score(-math.inf)))])
    assert put[:2] == bytes([6, 4])
    line = describe([AddElements(b"b", b"k", KIND_ZSET, (b"m", encode_score(math.inf)))])
    assert line == "ZADD b k inf m"
    assert describe([RemoveElements(b"b", b"k", KIND_ZSET, (b"m",))]) == "ZREM b k m"


_NAN = struct.pack("<d", math.nan)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (struct.pack("<BBIII", 7, 4, 1, 1, 1) + b"bk\1\0\0\0m", "whole units of kind 4"),
        (struct.pack("<BBIII", 7, 4, 1, 1, 2) + b"bk\1\0\0\0m\3\0\0\0abc", "score is 8 bytes"),
        (struct.pack("<BBIII", 7, 4, 1, 1, 2) + b"bk\1\0\0\0m\x08\0\0\0" + _NAN, "never NaN"),
        (
            struct.pack("<BBqIII", 6, 4, 5, 1, 1, 2) + b"bk\1\0\0\0m\x08\0\0\0" + _NAN,
            "never NaN",
        ),
        (struct.pack("<BBIII", 7, 4, 1, 1, 2) + b"bk\1\0\0\0m\x08\0\0\0abc", "runs past"),
        (struct.pack("<BBIII", 8, 4, 1, 1, 0) + b"bk", "without elements"),
        (struct.pack("<BBIII", 7, 6, 1, 1, 1) + b"bk\1\0\0\0m", "unknown container kind 6"),
    ],
)
def test_zset_payload_malformed_is_a_payload_error(payload: bytes, reason: str) -> None:
    """Every way a sorted-set operation can fail to decode is a ``PayloadError``."""
    with pytest.raises(PayloadError, match=reason):
        decode_ops(payload)


@pytest.mark.parametrize(
    "op",
    [
        AddElements(b"b", b"k", KIND_ZSET, (b"m",)),
        AddElements(b"b", b"k", KIND_ZSET, (b"m", b"1.5")),
        PutContainer(b"b", b"k", KIND_ZSET, (b"m", _NAN)),
        RemoveElements(b"b", b"k", KIND_ZSET, ()),
    ],
)
def test_zset_payload_encoder_refuses_what_the_decoder_would(op: Op) -> None:
    """The writer never writes what replay would refuse."""
    with pytest.raises(ValueError):
        encode_ops([op])


def test_zset_nan_score_refused() -> None:
    """No sorted set holds NaN."""
    with pytest.raises(ValueError):
        encode_score(math.nan)


def test_zset_payload_in_a_version_2_file_is_refused() -> None:
    """A version-2 payload may hold only the string operations."""
    op = AddElements(b"b", b"k", KIND_ZSET, (b"m", encode_score(1.0)))
    with pytest.raises(PayloadError, match="unknown operation tag"):
        decode_ops(encode_ops([op]), STRINGS_VERSION)


@given(st.lists(st.tuples(st.binary(max_size=300), scores), min_size=1, max_size=300))
def test_zset_payload_snapshot_chunks_keep_pairs(items: list[tuple[bytes, float]]) -> None:
    """A sorted set in a snapshot is a PutContainer then AddElements; a member and its score
    never part."""
    flat = [e for m, s in items for e in (m, encode_score(s))]
    chunks = list(encode_container(b"b", b"k", KIND_ZSET, iter(flat), None, limit=1024))
    ops = decode_ops(b"".join(chunks))
    assert type(ops[0]) is PutContainer
    assert all(type(op) is AddElements and op.kind == KIND_ZSET for op in ops[1:])
    assert [e for op in ops for e in op.elements] == flat  # type: ignore[union-attr]
