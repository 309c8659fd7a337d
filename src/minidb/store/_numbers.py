"""Numbers inside strings, parsed and printed exactly as Redis does.

Integers: Redis's ``string2ll`` is strict: an optional ``-``, then ``0`` alone or digits not
starting with ``0``; no ``+``, no spaces, no leading zeros, and the value within a signed
64-bit integer. Both arguments (``INCRBY k 5``) and stored values (the ``k`` of ``INCR k``)
are read that way.

Floats (``INCRBYFLOAT``): Redis computes in C ``long double`` and prints the result with
``%.17Lf`` (17 digits *after the point*), then strips trailing zeros and a trailing point,
and prints ``-0`` as ``0``. On x86-64, where redis-server runs, ``long double`` is the x87
80-bit format: a 64-bit significand. A Python ``float`` (53 bits) gives different answers
(``10.5 + 0.1`` is ``10.6`` in Redis but ``10.59999999999999964`` at 53 bits), so this module
emulates the 64-bit significand exactly with ``fractions.Fraction``: each operand is rounded
to the nearest long double as ``strtold`` rounds it, the sum is rounded once more, and printing
rounds the exact binary value to 17 decimals, half to even, as glibc's ``printf`` does.
``INCRBYFLOAT`` is rare, and exact arithmetic is the only way to agree with Redis digit for
digit. Hexadecimal float literals, which ``strtold`` also reads, are refused here.
"""

from __future__ import annotations

import re
from fractions import Fraction

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1

MAX_INTEGER_CHARS = 20
"""The longest integer ``string2ll`` reads: ``-9223372036854775808``."""
MAX_FLOAT_CHARS = 5 * 1024 - 1
"""The longest float text Redis reads (its ``MAX_LONG_DOUBLE_CHARS`` buffer, less the NUL)."""

LD_SIGNIFICAND_BITS = 64
"""Bits of an x87 extended-precision significand (the explicit integer bit included)."""
LD_MAX_EXPONENT = 16384
"""A long double below ``2**16384`` in magnitude is finite."""
LD_MIN_SCALE = -16445
"""The weight of a long double's last bit at the bottom of its subnormal range (2**-16445)."""
LD_DECIMAL_LIMITS = (-4951, 4933)
"""Decimal exponents beyond which ``strtold`` under- or overflows (ERANGE); checked before
building an exact value, so ``1e999999999`` costs nothing."""

FORMAT_DECIMALS = 17
"""Digits after the point in ``%.17Lf``."""

_INTEGER = re.compile(rb"-?[1-9][0-9]*|0")
_DECIMAL = re.compile(rb"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?")
_INFINITY = re.compile(rb"[+-]?(?:inf|infinity)", re.IGNORECASE)


def parse_int(text: bytes) -> int | None:
    """The signed 64-bit integer ``text`` spells, or None (Redis's ``string2ll``)."""
    if len(text) > MAX_INTEGER_CHARS or _INTEGER.fullmatch(text) is None:
        return None
    value = int(text)
    return value if INT64_MIN <= value <= INT64_MAX else None


def parse_uint(text: bytes) -> int | None:
    """An unsigned 64-bit integer in decimal digits (a SCAN cursor), or None."""
    if not text.isdigit() or len(text) > 20:
        return None
    value = int(text)
    return value if value <= UINT64_MAX else None


LongDouble = Fraction | float
"""An exact long double value, or a ``float`` infinity."""


def parse_long_double(text: bytes) -> LongDouble | None:
    """``text`` read as ``strtold`` reads it and rounded to a long double, or None if Redis
    would refuse it (``value is not a valid float``)."""
    if not text or len(text) > MAX_FLOAT_CHARS:
        return None
    if _INFINITY.fullmatch(text):
        return float("-inf") if text[0] == 0x2D else float("inf")
    match = _DECIMAL.fullmatch(text)
    if match is None:
        return None
    sign, whole, fraction, exponent = match.groups()
    fraction = fraction or b""
    if not whole and not fraction:
        return None
    digits = (whole + fraction).lstrip(b"0")
    if not digits:
        return Fraction(0)
    if exponent is not None and len(exponent.lstrip(b"+-")) > 12:
        return None  # astronomically out of range either way
    scale = (int(exponent) if exponent else 0) - len(fraction)
    magnitude = scale + len(digits)  # value is about 10 ** (magnitude - 1)
    low, high = LD_DECIMAL_LIMITS
    if magnitude - 1 > high or magnitude < low:
        return None  # strtold reports ERANGE, which Redis refuses
    value = Fraction(int(digits)) * Fraction(10) ** scale
    rounded = round_long_double(-value if sign == b"-" else value)
    if rounded == 0:
        return None  # underflow to zero (ERANGE)
    return rounded


def round_long_double(value: Fraction) -> LongDouble:
    """``value`` rounded to the nearest x87 long double (half to even), or an infinity."""
    if value == 0:
        return value
    negative = value < 0
    num, den = abs(value.numerator), value.denominator
    # Choose the weight 2**scale of the last significand bit: 2**63 <= |value| / 2**scale.
    scale = num.bit_length() - den.bit_length() - LD_SIGNIFICAND_BITS
    if (num << max(-scale, 0)) // (den << max(scale, 0)) >= 1 << LD_SIGNIFICAND_BITS:
        scale += 1
    scale = max(scale, LD_MIN_SCALE)
    num <<= max(-scale, 0)
    den <<= max(scale, 0)
    significand, rest = divmod(num, den)
    if 2 * rest > den or (2 * rest == den and significand & 1):
        significand += 1
    if significand.bit_length() + scale > LD_MAX_EXPONENT:
        return float("-inf") if negative else float("inf")
    result = Fraction(significand << scale) if scale >= 0 else Fraction(significand, 1 << -scale)
    return -result if negative else result


def add_long_double(a: LongDouble, b: LongDouble) -> LongDouble:
    """``a + b`` in long double arithmetic; an infinite or NaN result comes back as a float."""
    if isinstance(a, float) or isinstance(b, float):
        return float(a) + float(b)
    return round_long_double(a + b)


def format_long_double(value: Fraction) -> bytes:
    """``value`` as Redis prints an ``INCRBYFLOAT`` result (``%.17Lf``, trimmed)."""
    scaled = value * 10**FORMAT_DECIMALS
    units, rest = divmod(abs(scaled.numerator), scaled.denominator)
    twice = 2 * rest
    if twice > scaled.denominator or (twice == scaled.denominator and units & 1):
        units += 1
    whole, decimals = divmod(units, 10**FORMAT_DECIMALS)
    text = f"{whole}.{decimals:0{FORMAT_DECIMALS}d}".rstrip("0").rstrip(".")
    if value < 0 and text != "0":
        text = "-" + text
    return text.encode()
