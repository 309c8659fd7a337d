"""Hostile input to the RESP decoder's C scans: the C and the pure decoder agree on every stream.

``test_resp.py`` holds each implementation to Redis's rules and to a model; here the two are
held to each other on streams built to hurt a scanner (numbers of every shape and size, counts
and lengths past every limit, CR without LF, truncation at every byte, random read
boundaries), and the scans are called directly with any arguments. These also run under
AddressSanitizer and UBSan (``tests/sanitizers/run.py``), where a read out of bounds fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.protocol import RespDecoder, RespProtocolError, _resp, encode_command

_C_SCANS = (_resp._scan, _resp._scan_raw)
_scan, _scan_raw = _C_SCANS

pytestmark = [
    pytest.mark.skipif(_scan is None, reason="C scans not built, or MINIDB_PURE_PYTHON=1"),
    pytest.mark.accelerator,
]

_CRLF = b"\r\n"
# Numbers of every shape: signs, leading zeros, blanks, each limit and one past it, the edges
# of int32, int64 and uint64, more digits than any of them holds.
_NUMBER_SHAPES = [
    b"0", b"1", b"3", b"-1", b"-0", b"-5", b"00", b"01", b"+1", b" 1", b"1 ", b"1\x00",
    b"0x10", b"1e3", b"", b"-", b"10", b"11", b"64", b"65", b"4095", b"4096", b"16384",
    b"16385", b"1048576", b"1048577", b"2147483647", b"2147483648", b"4294967296",
    b"536870912", b"536870913", b"9223372036854775807", b"9223372036854775808",
    b"18446744073709551615", b"18446744073709551616", b"99999999999999999999",
    b"1" * 21, b"9" * 40,
]  # fmt: skip
_NUMBERS = st.sampled_from(_NUMBER_SHAPES) | st.integers(-(2**70), 2**70).map(b"%d".__mod__)
_ENDS = st.sampled_from([b"\r\n", b"\r\n", b"\r", b"\n", b"\rx", b"\r\r\n", b"", b"\n\r"])
_HEADERS = st.builds(lambda p, n, e: p + n + e, st.sampled_from([b"*", b"$"]), _NUMBERS, _ENDS)
_DATA = st.builds(
    lambda data, end: data + end,
    st.binary(max_size=12) | st.sampled_from([b"\r\n", b"\r", b"\n", b"x" * 70]),
    _ENDS,
)
_ARGVS = st.lists(st.binary(max_size=10) | st.sampled_from([b"\r\n", b"\r", b"x" * 64]),
                  min_size=1, max_size=5)  # fmt: skip
_VALID = _ARGVS.map(encode_command)
_INLINE = st.sampled_from([b"PING\r\n", b"GET 'a b'\n", b"\r\n", b'"x\n', b"\x00\n", b"  \n"])
_PIECE = _VALID | _HEADERS | _DATA | _INLINE | st.binary(max_size=6)
_STREAMS = st.lists(_PIECE, max_size=16).map(b"".join)
_LIMITS = st.sampled_from([{}, {"max_bulk_bytes": 3}, {"max_bulk_bytes": 64},
                           {"max_bulk_bytes": 4095}, {"max_multibulk_count": 2}])  # fmt: skip


@contextmanager
def _scans(c: bool) -> Iterator[None]:
    """The decoder's scans set to the C ones, or to none (the pure decoder), for the block."""
    saved = _resp._scan, _resp._scan_raw
    _resp._scan, _resp._scan_raw = _C_SCANS if c else (None, None)
    try:
        yield
    finally:
        _resp._scan, _resp._scan_raw = saved


def _outcome(
    c: bool, reads: list[bytes], limit: int, authenticated: bool, limits: dict[str, int]
) -> tuple[list[object], str | None, object]:
    """Every batch ``next_commands`` returned after each read, the error, the statistics.

    After an error ``buffered`` is left out (a count of a connection about to close): the
    pure decoder still counts the commands it returned just before the error, where the C
    scan had already consumed them."""
    batches: list[object] = []
    with _scans(c):
        decoder = RespDecoder(authenticated=authenticated, **limits)
        try:
            for data in reads:
                decoder.feed(data)
                while batch := decoder.next_commands(limit):
                    batches.append(batch)
                batches.append("read")
        except RespProtocolError as error:
            stats = decoder.statistics()
            return batches, error.reason, (stats.commands, stats.bytes_fed)
        return batches, None, decoder.statistics()


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@settings(max_examples=600, deadline=None)
@given(
    _STREAMS,
    st.lists(st.integers(min_value=0), max_size=8),
    st.sampled_from([1, 2, 5, _resp._NO_LIMIT]),
    st.booleans(),
    _LIMITS,
)
def test_hostile_streams_decode_alike_in_c_and_in_python(
    data: bytes, cuts: list[int], limit: int, authenticated: bool, limits: dict[str, int]
) -> None:
    """Any stream, split into any reads and drained ``limit`` at a time, gives the same
    batches after each read, the same error and the same counters with the C scans and
    without."""
    reads = _split(data, cuts)
    assert _outcome(True, reads, limit, authenticated, limits) == _outcome(
        False, reads, limit, authenticated, limits
    )


@settings(max_examples=40, deadline=None)
@given(st.lists(_VALID, min_size=1, max_size=3).map(b"".join), st.lists(_PIECE, max_size=3))
def test_truncation_at_every_byte_decodes_alike(valid: bytes, tail: list[bytes]) -> None:
    """Valid commands then hostile bytes, cut into two reads at every byte, or ending at every
    byte: the same outcome with the C scans and without."""
    data = valid + b"".join(tail)
    for cut in range(len(data) + 1):
        for reads in ([data[:cut], data[cut:]], [data[:cut]]):
            assert _outcome(True, reads, 3, True, {}) == _outcome(False, reads, 3, True, {}), cut


@pytest.mark.parametrize(
    "data",
    [
        b"*1048577\r\n" + encode_command([b"x"]),
        b"*1048576\r\n" + b"$1\r\nx\r\n" * 1000,
        b"*2147483647\r\n$1\r\nx\r\n",
        b"*1\r\n$536870912\r\n" + b"x" * 100_000,
        b"*1\r\n$9223372036854775807\r\nx\r\n",
        b"*1\r\n$-9223372036854775808\r\nx\r\n",
        encode_command([b"SET", b"k", b"v" * 300_000]),
        encode_command([b"v"] * 70_000),
        encode_command([b"GET", b"k"]) * 5000 + b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nab",
        b"x" * 70_000,
        b"*" + b"9" * 70_000,
        b"*1\r\n$" + b"1" * 70_000,
    ],
    ids=lambda data: repr(data[:24]),
)
def test_oversized_input_decodes_alike(data: bytes) -> None:
    """Huge counts and lengths with little behind them, very long arguments and commands, and
    headers longer than any number: the same outcome in one read and in 4 KiB reads."""
    for reads in ([data], [data[i : i + 4096] for i in range(0, len(data), 4096)]):
        for limits in ({}, {"max_bulk_bytes": 1000}):
            assert _outcome(True, reads, 16, True, limits) == _outcome(
                False, reads, 16, True, limits
            )


@pytest.mark.parametrize(
    "data",
    [
        b"*1\rX$4\r\nPING\r\n",
        b"*1\r\n$4\rXPING\r\n",
        b"*12\rX" + b"$1\r\nx\r\n" * 12,
        b"*1\r\n$10\rX0123456789\r\n",
        b"*1\r\r\n$4\r\nPING\r\n",
        b"*01\r\n$4\r\nPING\r\n",
        b"*1\r\n$04\r\nPING\r\n",
        b"*1\r\n$0\r\n\r\n",
    ],
    ids=repr,
)
def test_short_headers_decode_alike(data: bytes) -> None:
    """One- and two-digit headers (the C scan's fast path) that are not quite one: a CR not
    followed by LF, a leading zero, a zero length: the same outcome with the C scans."""
    for reads in ([data], [data[:3], data[3:]]):
        assert _outcome(True, reads, 16, True, {}) == _outcome(False, reads, 16, True, {})


_SIZES = st.integers(-3, 70) | st.sampled_from([2**31, 2**62, -(2**62), 2**63 - 1, -(2**63)])


@settings(max_examples=300, deadline=None)
@given(_STREAMS, _SIZES, _SIZES, _SIZES, _SIZES)
def test_scan_raw_takes_exactly_the_bytes_of_what_it_returns(
    buf: bytes, pos: int, limit: int, max_count: int, max_bulk: int
) -> None:
    """Called directly with any offset and limits, ``scan_raw`` returns an offset within the
    buffer (or the one it was given, past the end), and the commands it took re-encode to
    exactly the bytes between, each within the limits."""
    assert _scan_raw is not None
    out: list[list[bytes]] = []
    end = _scan_raw(buf, pos, out, limit, max_count, max_bulk)
    start = max(pos, 0)
    if start >= len(buf):
        assert (end, out) == (start, [])
        return
    assert start <= end <= len(buf)
    assert b"".join(map(encode_command, out)) == buf[start:end]
    assert len(out) <= max(limit, 0)
    assert all(1 <= len(argv) <= max_count for argv in out)
    assert all(len(arg) <= max_bulk for argv in out for arg in argv)


_LINES = st.lists(
    st.binary(max_size=8)
    | _NUMBERS.map(lambda n: b"*" + n)
    | _NUMBERS.map(lambda n: b"$" + n)
    | st.sampled_from([b"*1", b"*2", b"$0", b"$1", b"$3", b"", bytearray(b"$1"), "text", None]),
    max_size=20,
)


@settings(max_examples=300, deadline=None)
@given(_LINES, _SIZES, _SIZES, _SIZES, _SIZES, _SIZES)
def test_scan_takes_exactly_the_lines_of_what_it_returns(
    lines: list[object], i: int, last: int, limit: int, max_count: int, max_bulk: int
) -> None:
    """Called directly with any lines (some not bytes), any index, any ``last`` and any
    limits, ``scan`` never reads past the list: the commands it took are the very data lines
    between where it started and where it stopped, and re-encode to those lines."""
    assert _scan is not None
    out: list[list[bytes]] = []
    stop = _scan(lines, i, last, out, limit, max_count, max_bulk)  # type: ignore[arg-type]
    start = max(i, 0)
    if not out:
        assert stop == start
        return
    taken = lines[start:stop]
    assert all(type(line) is bytes for line in taken)
    assert b"".join(map(encode_command, out)) == _CRLF.join(taken) + _CRLF  # type: ignore[arg-type]
    at = 0
    for argv in out:  # each argument is its data line itself, not a copy
        assert all(arg is taken[at + 2 + 2 * k] for k, arg in enumerate(argv))
        at += 1 + 2 * len(argv)
    assert len(out) <= limit and stop <= min(last, len(lines) - 1)


def test_scans_refuse_arguments_that_are_not_numbers() -> None:
    """Offsets and limits that are not integers, or beyond a C ``ssize_t``, raise; nothing
    is taken."""
    assert _scan is not None and _scan_raw is not None
    buf = encode_command([b"GET", b"k"])
    for bad in ([2**64, 1, 1, 1], [0, "1", 1, 1], [0, 1, 2**64, 1], [0, 1, 1, 1.5]):
        out: list[list[bytes]] = []
        with pytest.raises((OverflowError, TypeError)):
            _scan_raw(buf, bad[0], out, *bad[1:])  # type: ignore[arg-type]
        with pytest.raises((OverflowError, TypeError)):
            _scan(buf.split(_CRLF), bad[0], 5, out, *bad[1:])  # type: ignore[arg-type]
        assert out == []
