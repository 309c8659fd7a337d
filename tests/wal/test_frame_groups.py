"""``frame_groups``: the owner's whole group of records encoded and framed in one call, with its
C twin (``_cpayload.frame_groups``) held byte for byte to the Python reference."""

from __future__ import annotations

import pathlib
from typing import Any

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.errors import WalError
from minidb.wal import Expire, Op, Put, Remove, _payload, encode_ops, open_log
from minidb.wal._format import MAX_PAYLOAD_BYTES, encode_records
from minidb.wal._payload import NO_EXPIRY, encode_groups, frame_groups, frame_groups_python

from .conftest import replay_all

pytestmark = pytest.mark.accelerator  # its C twin is driven by every test

_c = _payload._c_frame_groups
_needs_c = pytest.mark.skipif(_c is None, reason="the C framer is off or not built")

NAMES = st.binary(max_size=40)
EXPIRY = st.none() | st.integers(min_value=NO_EXPIRY + 1, max_value=2**63 - 1)
PLAIN_PUT = st.builds(Put, NAMES, NAMES, st.binary(max_size=200), st.none())
OP = st.one_of(
    PLAIN_PUT,
    st.builds(Put, NAMES, NAMES, st.binary(max_size=200), EXPIRY),
    st.builds(Remove, NAMES, NAMES),
    st.builds(Expire, NAMES, NAMES, EXPIRY),
)
# Mostly the groups a write leaves (one SET, an MSET's puts), some with any other op.
GROUP = st.lists(PLAIN_PUT, min_size=1, max_size=6) | st.lists(OP, min_size=1, max_size=6)
NUMBERS = st.integers(0, 2**64 - 21) | st.just(2**64 - 21)  # 20 groups at most: u64 numbers


def _outcome(call: Any, *args: Any) -> object:
    """What ``call`` returns, or the type and message of the error it raises."""
    try:
        return call(*args)
    except (ValueError, TypeError, OverflowError) as exc:
        return type(exc), str(exc)


@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(NUMBERS, st.lists(GROUP, max_size=20))
def test_frame_groups_is_each_group_framed_as_one_record(
    first: int, groups: list[list[Op]]
) -> None:
    """The reference is ``encode_records`` of ``encode_groups``, joined; the twin (C when
    built) gives the same bytes for any groups from any record number."""
    expected = b"".join(encode_records(first, [encode_ops(group) for group in groups]))
    assert frame_groups_python(first, groups) == expected
    assert frame_groups(first, groups) == expected


_NOT_ALWAYS_BYTES = NAMES | st.sampled_from(["text", bytearray(b"ba"), None, 7])
_ODD_PUT = st.builds(Put, _NOT_ALWAYS_BYTES, _NOT_ALWAYS_BYTES, _NOT_ALWAYS_BYTES, st.none())


@_needs_c
@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(
    NUMBERS,
    st.lists(
        GROUP
        | st.just([])
        | st.lists(_ODD_PUT, max_size=3)
        | st.tuples(PLAIN_PUT),
        max_size=6,
    ),
)
def test_frame_groups_in_c_fails_as_the_reference_does(first: int, groups: list[Any]) -> None:
    """An empty group, fields that are not bytes and groups that are not lists: the C twin
    returns what the reference returns or raises the same error."""
    assert _c is not None
    assert _outcome(frame_groups, first, groups) == _outcome(frame_groups_python, first, groups)


def _no_fallback(group: list[Op]) -> bytes:
    raise AssertionError(f"handed to the general encoder: {group!r}")


@_needs_c
@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(NUMBERS, st.lists(st.lists(PLAIN_PUT, min_size=1, max_size=4), max_size=8))
def test_frame_groups_in_c_encodes_plain_puts_itself(first: int, groups: list[list[Op]]) -> None:
    """Groups of puts without expiry (every SET, an MSET) never reach the general encoder."""
    assert _c is not None
    assert _c(Put, _no_fallback, first, groups) == frame_groups_python(first, groups)


@_needs_c
def test_frame_groups_in_c_checks_its_arguments() -> None:
    """Wrong types and counts are TypeErrors; an encoder that returns no bytes is refused."""
    assert _c is not None
    put = Put(b"b", b"k", b"v", None)
    with pytest.raises(TypeError):
        _c(Put, encode_ops, 0)
    with pytest.raises(TypeError):
        _c(Put, encode_ops, 0, ([put],))
    with pytest.raises(TypeError):
        _c(object, encode_ops, 0, [[put]])
    with pytest.raises(OverflowError):  # a record number is a u64 (the reference: struct.error)
        _c(Put, encode_ops, -1, [[put]])
    with pytest.raises(OverflowError):
        _c(Put, encode_ops, 2**64, [[put]])
    with pytest.raises(OverflowError):
        _c(Put, encode_ops, 2**64 - 1, [[put], [put]])
    assert _c(Put, encode_ops, 2**64 - 1, [[put]]) == frame_groups_python(2**64 - 1, [[put]])
    with pytest.raises(TypeError, match="no bytes"):
        _c(Put, lambda group: "text", 0, [[Remove(b"b", b"k")]])
    assert _c(Put, encode_ops, 0, []) == b""


@_needs_c
def test_frame_groups_in_c_refuses_a_payload_over_the_maximum() -> None:
    """A payload over ``MAX_PAYLOAD_BYTES`` is refused with the reference's words, before
    anything is copied (the 1 GiB of zeros is never touched, so never really allocated)."""
    assert _c is not None
    too_long = bytes(MAX_PAYLOAD_BYTES + 1)
    with pytest.raises(ValueError) as reference:
        encode_records(0, [too_long])
    with pytest.raises(ValueError) as twin:
        _c(Put, lambda group: too_long, 0, [[Remove(b"b", b"k")]])
    assert str(twin.value) == str(reference.value)


@_needs_c
def test_frame_groups_in_c_refuses_groups_changed_while_framed() -> None:
    """An encoder that changes the groups (a group measured before it grows, or the list of
    groups shrinks) is refused with RuntimeError, never written past."""
    assert _c is not None
    plain = [Put(b"b", b"k", b"v", None)]
    groups: list[list[Op]] = [plain, [Remove(b"b", b"k")]]

    def grow(group: list[Op]) -> bytes:
        plain.append(Put(b"b", b"k2", b"v" * 1000, None))
        return encode_ops(group)

    with pytest.raises(RuntimeError, match="changed while framed"):
        _c(Put, grow, 0, groups)

    def shrink(group: list[Op]) -> bytes:
        del groups[1:]
        return encode_ops(group)

    groups = [[Remove(b"b", b"k")], [Remove(b"b", b"k2")]]
    with pytest.raises(RuntimeError, match="changed while framed"):
        _c(Put, shrink, 0, groups)

    def add(group: list[Op]) -> bytes:
        groups.append(plain)
        return encode_ops(group)

    groups = [[Remove(b"b", b"k")]]
    with pytest.raises(RuntimeError, match="changed while framed"):
        _c(Put, add, 0, groups)


@_needs_c
@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(st.binary(max_size=100), st.integers(0, 2**32 - 1), st.integers(0, 7))
def test_cpayload_crc32c_matches_google_crc32c(data: bytes, initial: int, shift: int) -> None:
    """Both ways the framer checksums (the SSE4.2 instruction and the table) give what
    google-crc32c gives, from any starting value and at any alignment."""
    view = memoryview(bytes(shift) + data)[shift:]
    expected = google_crc32c.extend(initial, bytes(view))
    crc32c = _payload._cpayload.crc32c  # type: ignore[union-attr]
    assert crc32c(view, initial) == expected
    assert crc32c(view, initial, portable=True) == expected


def test_append_groups_replays_one_record_per_group(data_dir: pathlib.Path) -> None:
    """``append_groups`` numbers its records after what ``append`` added before, and a later
    ``append`` after them; replay gives one record per group, in order."""
    groups: list[list[Op]] = [
        [Put(b"b", b"k1", b"v1", None)],
        [Put(b"b", b"k2", b"v2", None), Put(b"b", b"k3", b"v3", None)],
        [Remove(b"b", b"k1")],
        [Put(b"b", b"k4", b"v4", 1_700_000_000_000)],
    ]
    first, last = encode_ops([Put(b"b", b"k0", b"v0")]), encode_ops([Remove(b"b", b"k0")])
    log, replay = open_log(data_dir)
    assert list(replay) == []
    log.append(first)
    log.append_groups(groups)
    log.append_groups([])
    log.append(last)
    log.sync()
    assert log.statistics().appends == len(groups) + 2
    log.close()
    log, replayed = replay_all(data_dir)
    assert log.next_number == len(groups) + 2
    log.close()
    assert replayed == [first, *encode_groups(groups), last]


def test_append_groups_refuses_a_group_that_does_not_encode(data_dir: pathlib.Path) -> None:
    """A group that does not encode refuses the whole call (nothing buffered) and the log
    stays open: the next group is logged as the first."""
    log, _ = open_log(data_dir)
    with pytest.raises(WalError, match="at least one operation"):
        log.append_groups([[Put(b"b", b"k", b"v", None)], []])
    log.append_groups([[Put(b"b", b"k", b"v", None)]])
    log.sync()
    assert log.statistics().appends == 1
    log.close()
    log, replayed = replay_all(data_dir)
    log.close()
    assert replayed == [encode_ops([Put(b"b", b"k", b"v", None)])]
