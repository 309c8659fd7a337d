"""The packed flat tuple (``_packed``) small hashes and sorted sets keep their contents in:
round trips, the header's count, the pinned format, and buffers it did not write."""

from __future__ import annotations

import math
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minidb.store._packed import EMPTY, length, pack, pack_pairs, pair_count, unpack

ITEMS = st.one_of(st.binary(max_size=80), st.floats(allow_nan=False))


@given(st.lists(ITEMS, max_size=300))
def test_packed_round_trip_keeps_items_order_and_count(items: list[bytes | float]) -> None:
    """Any tuple of bytes and floats comes back equal, in order, and its header counts it
    (past 255 items too, where marshal's format 4 would have switched header)."""
    flat = tuple(items)
    packed = pack(flat)
    assert unpack(packed) == flat
    assert length(packed) == len(flat)


def test_packed_empty_is_one_shared_value() -> None:
    """The empty tuple packs to ``EMPTY``, which holds nothing and counts no pairs."""
    assert pack(()) == EMPTY
    assert unpack(EMPTY) == ()
    assert length(EMPTY) == 0 and pair_count(EMPTY) == 0


def test_packed_pairs_flatten_in_order() -> None:
    """``pack_pairs`` writes a, b, a, b, ... and ``pair_count`` counts the pairs."""
    pairs = [(b"f1", b"v1"), (1.5, b"m"), (b"", -0.0)]
    packed = pack_pairs(pairs)
    assert unpack(packed) == (b"f1", b"v1", 1.5, b"m", b"", -0.0)
    assert pair_count(packed) == 3


def test_packed_large_values_and_counts() -> None:
    """A 1 MiB element and 100,000 items survive; the count is not limited to one byte."""
    big = b"\xff" * (1 << 20)
    assert unpack(pack((big, b"x"))) == (big, b"x")
    many = tuple(float(i) for i in range(100_000))
    packed = pack(many)
    assert length(packed) == 100_000 and pair_count(packed) == 50_000
    assert unpack(packed) == many


def test_packed_keeps_floats_exactly() -> None:
    """Scores come back bit for bit: infinities, -0.0, the smallest subnormal."""
    scores = (math.inf, -math.inf, -0.0, 5e-324, 0.1, sys.float_info.max)
    back = unpack(pack(scores))
    assert [math.copysign(1, x) for x in back] == [math.copysign(1, x) for x in scores]
    assert back == scores


def test_packed_writes_format_2_without_references() -> None:
    """An object that stands twice (the cached ``b"1"``) is written twice, not as a
    back-reference (formats 3 and 4), and the header is format 2's tuple with a 4-byte count,
    the one ``length`` reads."""
    one = b"1"
    packed = pack((b"a", one, b"b", one))
    assert packed[:5] == b"(\x04\x00\x00\x00"
    assert pair_count(packed) == 2 and unpack(packed) == (b"a", one, b"b", one)


@pytest.mark.parametrize(
    "buffer",
    [b"", b"(", b"(\x02\x00\x00", b")\x02", b"\xa9\x02", b"s\x01\x00\x00\x00x", b"N"],
    ids=["empty", "type-only", "count-cut", "small-tuple", "ref-flagged", "bytes", "none"],
)
def test_packed_length_refuses_a_buffer_it_did_not_write(buffer: bytes) -> None:
    """A buffer too short for the header, or not a format-2 tuple, is a ``ValueError``
    naming it, never a count read from the wrong bytes."""
    with pytest.raises(ValueError, match="not a packed tuple"):
        length(buffer)
    with pytest.raises(ValueError, match="not a packed tuple"):
        pair_count(buffer)


@pytest.mark.parametrize("cut", [1, 5, 6, 10, 14, 20])
def test_packed_unpack_refuses_a_truncated_buffer(cut: int) -> None:
    """A packed buffer cut short anywhere raises (marshal's ``EOFError``), it does not answer
    a shorter tuple."""
    packed = pack((b"field", b"value", 2.5))
    assert cut < len(packed)
    with pytest.raises(EOFError):
        unpack(packed[:cut])


def test_packed_unpack_refuses_garbage() -> None:
    """Bytes marshal does not know raise ``ValueError`` (a bad type code)."""
    with pytest.raises(ValueError):
        unpack(b"(\x01\x00\x00\x00\x00")
