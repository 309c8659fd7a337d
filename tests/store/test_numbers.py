"""Integers and long-double floats inside strings, read and printed as Redis does."""

from __future__ import annotations

from fractions import Fraction

import pytest

from minidb.store._numbers import (
    add_long_double,
    format_long_double,
    parse_int,
    parse_long_double,
    round_long_double,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (b"0", 0),
        (b"-1", -1),
        (b"9223372036854775807", 2**63 - 1),
        (b"-9223372036854775808", -(2**63)),
        (b"9223372036854775808", None),
        (b"-9223372036854775809", None),
        (b"00", None),
        (b"01", None),
        (b"-0", None),
        (b"+1", None),
        (b" 1", None),
        (b"1 ", None),
        (b"", None),
        (b"-", None),
        (b"1.0", None),
        (b"1e3", None),
        (b"\xd9\xa1", None),  # a non-ASCII digit is no digit
    ],
)
def test_numbers_parse_int_is_string2ll(text: bytes, value: int | None) -> None:
    """Integers parse exactly as Redis's strict string2ll parses them."""
    assert parse_int(text) == value


def incrbyfloat(stored: bytes, increment: bytes) -> bytes:
    a, b = parse_long_double(stored), parse_long_double(increment)
    assert a is not None and b is not None
    result = add_long_double(a, b)
    assert isinstance(result, Fraction)
    return format_long_double(result)


@pytest.mark.parametrize(
    ("stored", "increment", "expected"),
    [
        # From Redis's documentation and tests/unit/type/incr.tcl.
        (b"10.50", b"0.1", b"10.6"),
        (b"10.6", b"-5", b"5.6"),
        (b"5.0e3", b"2.0e2", b"5200"),
        (b"0", b"1", b"1"),
        (b"1", b"0.25", b"1.25"),
        (b"1.5", b"1.5", b"3"),
        (b"17179869184", b"1.5", b"17179869185.5"),
        (b"17179869184", b"17179869184", b"34359738368"),
        (b"1", b"-1.1", b"-0.1"),
        (b"0", b"0.024390243902439025", b"0.02439024390243902"),
        (b"0.02439024390243902", b"-0.024390243902439025", b"0"),  # no negative zero
        # 17 digits after the point, half to even on the exact binary value.
        (b"0", b"0.1", b"0.1"),
        (b"0.1", b"0.2", b"0.3"),
        (b"0", b"1e-17", b"0.00000000000000001"),
        (b"0", b"4e-18", b"0"),
        (b"0", b"-4e-18", b"0"),
        # Beyond 64 significant bits the nearest long double is printed, digit for digit.
        (b"0", b"123456789012345678901234567890", b"123456789012345678899921813504"),
        (b"3.0", b"0", b"3"),
        (b"-2.5", b"0", b"-2.5"),
    ],
)
def test_numbers_incrbyfloat_formats_as_redis(
    stored: bytes, increment: bytes, expected: bytes
) -> None:
    """Long double sums printed with Redis's %.17Lf-and-trim give Redis's exact strings."""
    assert incrbyfloat(stored, increment) == expected


@pytest.mark.parametrize(
    "text",
    [b"", b" 1", b"1 ", b" 11 ", b"1\x002", b"abc", b"nan", b"NaN", b"1_0", b"0x10", b"1e",
     b"e5", b".", b"+", b"1e99999", b"1e-99999", b"1e999999999999999"],
)  # fmt: skip
def test_numbers_parse_long_double_refuses(text: bytes) -> None:
    """Spaces, NaN, junk, overflow and underflow are not valid floats, as in Redis."""
    assert parse_long_double(text) is None


def test_numbers_infinity_parses_and_sums_to_infinity() -> None:
    """``inf`` is read (strtold reads it) and any sum with it is reported as non-finite."""
    inf = parse_long_double(b"+inf")
    assert inf == float("inf")
    assert isinstance(add_long_double(Fraction(0), inf), float)  # type: ignore[arg-type]


def test_numbers_long_double_has_a_64_bit_significand() -> None:
    """2**64 + 1 rounds to 2**64 (ties to even) but 2**63 + 1 is exact."""
    assert round_long_double(Fraction(2**63 + 1)) == 2**63 + 1
    assert round_long_double(Fraction(2**64 + 1)) == 2**64
    assert round_long_double(Fraction(2**64 + 3)) == 2**64 + 4
