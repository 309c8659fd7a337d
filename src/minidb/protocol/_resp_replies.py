"""The RESP reply encoder: results of the vocabulary in ``_results`` to RESP2 or RESP3 wire bytes.

``RespEncoder`` belongs to one connection and knows its protocol version (2 until ``HELLO 3``
switches it). ``encode`` answers one command; ``encode_many`` answers a pipeline's worth in
one ``bytes`` so the connection makes one write per batch (at depth 16 the write, not the
encoding, is what costs).

The hot answers cost no formatting: ``+OK``, bulk headers and integers below
``_SMALL`` are precomputed, simple strings and errors carry their wire form, and a bulk is
three parts joined once (a value is copied once, into the joined reply). The table of
differences between the versions is in ``_results``; ``format_double`` writes a float as
Redis's ``d2string`` does.

Two shapes exist only for pub/sub: ``Push``, an out-of-band frame (RESP3's ``>``, an array in
RESP2: a subscribed RESP2 client tells a message from a reply by its first element), and
``Frames``, several top-level replies to one command (``SUBSCRIBE a b`` answers one frame per
channel).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

from minidb.protocol._results import (
    SIMPLE_OK,
    ErrorReply,
    NullArray,
    Result,
    Simple,
    Verbatim,
)

_CRLF: Final = b"\r\n"
_SMALL: Final = 1024  # headers and integers below this are precomputed
_BULK: Final = tuple(b"$%d\r\n" % n for n in range(_SMALL))
_ARRAY: Final = tuple(b"*%d\r\n" % n for n in range(_SMALL))
_MAP: Final = tuple(b"%%%d\r\n" % n for n in range(_SMALL))
_SET: Final = tuple(b"~%d\r\n" % n for n in range(_SMALL))
_INTEGER: Final = tuple(b":%d\r\n" % n for n in range(_SMALL))
_OK: Final = SIMPLE_OK.wire
_NO_LIMIT: Final = 1 << 62
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
# Redis prints a double through its integer path when it is integral within +-LLONG_MAX/2
# (double2ll), which is this double.
_LL_SAFE: Final = float(_INT64_MAX // 2)

_NULL = (b"$-1\r\n", b"_\r\n")
_NULL_ARRAY = (b"*-1\r\n", b"_\r\n")
_TRUE = (b":1\r\n", b"#t\r\n")
_FALSE = (b":0\r\n", b"#f\r\n")



class Push(list["Result"]):
    """A push frame: ``>n`` in RESP3, ``*n`` in RESP2 (pub/sub messages and confirmations)."""

    __slots__ = ()


class Frames(tuple["Result", ...]):
    """Several replies back to back, no header: the frames one command answers."""

    __slots__ = ()


PROTOCOLS: Final = (2, 3)
"""The protocol versions ``HELLO`` may select."""


def format_double(value: float) -> bytes:
    """``value`` as Redis's ``d2string`` writes it: ``inf``, ``-inf``, ``nan``, ``-0``, an
    integral value within +-2**62 as an integer, else the shortest round-trip digits laid out
    as Redis's fpconv (plain up to 7 zeros or 6 places, then ``1.5e+20`` / ``1e-7``).
    """
    if value != value:
        return b"nan"
    if value == math.inf:
        return b"inf"
    if value == -math.inf:
        return b"-inf"
    if value == 0:
        return b"-0" if math.copysign(1.0, value) < 0 else b"0"
    if -_LL_SAFE <= value <= _LL_SAFE and value.is_integer():
        return b"%d" % int(value)
    negative = value < 0
    text = repr(-value if negative else value)
    mantissa, _, exp = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    k = (int(exp) if exp else 0) - len(fraction)  # value == digits * 10**k
    stripped = digits.rstrip("0")
    k += len(digits) - len(stripped)
    digits = stripped
    ndigits = len(digits)
    magnitude = abs(k + ndigits - 1)
    if k >= 0 and magnitude < ndigits + 7:
        body = digits + "0" * k
    elif k < 0 and (k > -7 or magnitude < 4):
        offset = ndigits + k
        if offset <= 0:
            body = "0." + "0" * -offset + digits
        else:
            body = digits[:offset] + "." + digits[offset:]
    else:
        sign = "-" if k + ndigits - 1 < 0 else "+"
        head = digits[0] + ("." + digits[1:] if ndigits > 1 else "")
        body = f"{head}e{sign}{magnitude}"
    return ("-" + body if negative else body).encode()


def _bulk(out: list[bytes], data: bytes) -> None:
    size = len(data)
    out.append(_BULK[size] if size < _SMALL else b"$%d\r\n" % size)
    out.append(data)
    out.append(_CRLF)


def _header(table: tuple[bytes, ...], prefix: bytes, size: int) -> bytes:
    return table[size] if size < _SMALL else prefix + b"%d\r\n" % size


def _append(out: list[bytes], result: Result, v3: int) -> None:
    """Append the wire parts of ``result``; ``v3`` is 1 for RESP3, 0 for RESP2."""
    kind = type(result)
    if kind is bytes:
        _bulk(out, result)  # type: ignore[arg-type]
    elif kind is Simple or kind is ErrorReply:
        out.append(result.wire)  # type: ignore[union-attr]
    elif result is None:
        out.append(_NULL[v3])
    elif kind is int:
        number: int = result  # type: ignore[assignment]
        if 0 <= number < _SMALL:
            out.append(_INTEGER[number])
        elif _INT64_MIN <= number <= _INT64_MAX:
            out.append(b":%d\r\n" % number)
        elif v3:
            out.append(b"(%d\r\n" % number)
        else:
            _bulk(out, b"%d" % number)
    elif kind is list or kind is tuple:
        items: list[Result] = result  # type: ignore[assignment]
        out.append(_header(_ARRAY, b"*", len(items)))
        for item in items:
            _append(out, item, v3)
    elif kind is dict:
        mapping: dict[Result, Result] = result  # type: ignore[assignment]
        if v3:
            out.append(_header(_MAP, b"%", len(mapping)))
        else:
            out.append(_header(_ARRAY, b"*", 2 * len(mapping)))
        for key, value in mapping.items():
            _append(out, key, v3)
            _append(out, value, v3)
    elif kind is bool:
        out.append(_TRUE[v3] if result else _FALSE[v3])
    elif kind is float:
        digits = format_double(result)  # type: ignore[arg-type]
        if v3:
            out.append(b"," + digits + _CRLF)
        else:
            _bulk(out, digits)
    elif kind is str:
        _bulk(out, result.encode("utf-8", "surrogateescape"))  # type: ignore[union-attr]
    elif kind is set or kind is frozenset:
        members: set[Result] = result  # type: ignore[assignment]
        out.append(_header(_SET, b"~", len(members)) if v3 else _header(_ARRAY, b"*", len(members)))
        for member in members:
            _append(out, member, v3)
    elif kind is NullArray:
        out.append(_NULL_ARRAY[v3])
    elif kind is Push:
        frame: list[Result] = result  # type: ignore[assignment]
        out.append(b">%d\r\n" % len(frame) if v3 else _header(_ARRAY, b"*", len(frame)))
        for item in frame:
            _append(out, item, v3)
    elif kind is Frames:
        for item in result:  # type: ignore[union-attr]
            _append(out, item, v3)
    elif kind is Verbatim:
        verbatim: Verbatim = result  # type: ignore[assignment]
        text = verbatim.text.encode("utf-8", "surrogateescape")
        if v3:
            out.append(b"=%d\r\n%b:" % (len(text) + 4, verbatim.format.encode()))
            out.append(text)
            out.append(_CRLF)
        else:
            _bulk(out, text)
    else:
        raise TypeError(f"not a result of the protocol vocabulary: {type(result).__name__}")


class RespEncoder:
    """One connection's reply encoder; ``protocol`` is 2 or 3 and may change between replies."""

    __slots__ = ("_null", "_v3")

    def __init__(self, protocol: int = 2) -> None:
        self._v3 = 0
        self._null = _NULL[0]
        self.protocol = protocol

    @property
    def protocol(self) -> int:
        """The RESP version replies are encoded in."""
        return 3 if self._v3 else 2

    @protocol.setter
    def protocol(self, version: int) -> None:
        if version not in PROTOCOLS:
            raise ValueError(f"unsupported RESP version {version!r}")
        self._v3 = 1 if version == 3 else 0
        self._null = _NULL[self._v3]

    def encode(self, result: Result) -> bytes:
        """The wire form of one reply."""
        return self.encode_within(result, _NO_LIMIT)  # type: ignore[return-value]

    def encode_within(self, result: Result, limit: int) -> bytes | int:
        """``encode(result)``, or, if that is longer than ``limit`` bytes, its length.

        Decided before anything large exists: the parts of a reply are the stored values
        themselves (a bulk is header, value, CRLF), so they are counted before the one join
        that would copy them; a refused reply never costs its size."""
        if result is SIMPLE_OK:
            return _OK
        kind = type(result)
        if kind is bytes:
            size = len(result)  # type: ignore[arg-type]
            if size < _SMALL:
                return _BULK[size] + result + _CRLF  # type: ignore[operator]
        elif result is None:
            return self._null
        elif kind is int and 0 <= result < _SMALL:  # type: ignore[operator]
            return _INTEGER[result]  # type: ignore[index]
        out: list[bytes] = []
        _append(out, result, self._v3)
        size = sum(map(len, out))
        return size if size > limit else b"".join(out)

    def encode_many(self, results: Iterable[Result]) -> bytes:
        """The wire form of several replies, in order, as one ``bytes`` (one write)."""
        out: list[bytes] = []
        append = out.append
        v3 = self._v3
        null = self._null
        for result in results:
            # The answers of GET, SET and DEL inline; everything else through _append.
            if result is SIMPLE_OK:
                append(_OK)
            elif type(result) is bytes and len(result) < _SMALL:
                append(_BULK[len(result)])
                append(result)
                append(_CRLF)
            elif result is None:
                append(null)
            elif type(result) is int and 0 <= result < _SMALL:
                append(_INTEGER[result])
            else:
                _append(out, result, v3)
        return b"".join(out)


def encode_resp_reply(result: Result, protocol: int = 2) -> bytes:
    """The wire form of one reply in RESP ``protocol`` (a convenience for tests and tools)."""
    return RespEncoder(protocol).encode(result)
