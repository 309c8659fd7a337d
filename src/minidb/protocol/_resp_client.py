"""The client's half of RESP: commands to multibulk bytes, and reply bytes back to results.

``encode_command`` is what redis-py and redis-benchmark send. ``RespReplyDecoder`` parses
RESP2 and RESP3 replies into the vocabulary of ``_results`` (the inverse of the encoder, up to
what a version cannot tell apart: RESP2 sends a map as a flat array, a double as a bulk), for
tests, benchmarks and tools. It is not on the server's hot path; it favours being simple.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from minidb.protocol._resp import RespProtocolError
from minidb.protocol._resp_fields import strict_int
from minidb.protocol._results import NULL_ARRAY, ErrorReply, Simple, Verbatim

_CRLF: Final = b"\r\n"
_COMPACT_BYTES: Final = 64 * 1024  # drop consumed bytes once this many accumulate


def encode_command(args: Sequence[bytes | str | int]) -> bytes:
    """``args`` as one multibulk command (``str`` as UTF-8, ``int`` in decimal)."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n" % len(data))
        out.append(data)
        out.append(_CRLF)
    return b"".join(out)


class _Incomplete(Exception):
    """The buffer ends inside a reply."""


def _hashable(value: Any) -> Any:
    # RESP3 allows any value as a map key or set member; Python needs them hashable.
    if isinstance(value, list):
        return tuple(_hashable(item) for item in value)
    if isinstance(value, (set, dict)):
        return frozenset(value.items() if isinstance(value, dict) else value)
    return value


class RespReplyDecoder:
    """Feed reply bytes, get complete replies as results, in order.

    Raises ``RespProtocolError`` for bytes that are no RESP reply.
    """

    __slots__ = ("_buf", "_pos")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes) -> list[Any]:
        """Take bytes; return every reply they complete."""
        self._buf += data
        out: list[Any] = []
        while self._pos < len(self._buf):
            try:
                value, self._pos = self._value(self._pos)
            except _Incomplete:
                break
            out.append(value)
        if self._pos >= _COMPACT_BYTES or self._pos == len(self._buf):
            del self._buf[: self._pos]
            self._pos = 0
        return out

    def _line(self, pos: int) -> tuple[bytes, int]:
        end = self._buf.find(_CRLF, pos)
        if end < 0:
            raise _Incomplete
        return bytes(self._buf[pos:end]), end + 2

    def _int(self, field: bytes) -> int:
        value = strict_int(field)
        if value is None:
            raise RespProtocolError(f"invalid number in reply: {field[:32]!r}")
        return value

    def _blob(self, pos: int) -> tuple[bytes | None, int]:
        field, pos = self._line(pos)
        size = self._int(field)
        if size < 0:
            return None, pos
        if len(self._buf) < pos + size + 2:
            raise _Incomplete
        if self._buf[pos + size : pos + size + 2] != _CRLF:
            raise RespProtocolError("missing CRLF after blob in reply")
        return bytes(self._buf[pos : pos + size]), pos + size + 2

    def _items(self, count: int, pos: int) -> tuple[list[Any], int]:
        items = []
        for _ in range(count):
            item, pos = self._value(pos)
            items.append(item)
        return items, pos

    def _value(self, pos: int) -> tuple[Any, int]:
        if pos >= len(self._buf):
            raise _Incomplete
        kind = bytes(self._buf[pos : pos + 1])
        pos += 1
        if kind == b"$" or kind == b"!" or kind == b"=":
            blob, pos = self._blob(pos)
            if blob is None or kind == b"$":
                return blob, pos
            text = blob.decode("utf-8", "surrogateescape")
            if kind == b"!":
                return ErrorReply(text), pos
            return Verbatim(text[4:], text[:3]), pos
        if kind in (b"*", b"~", b"%", b">"):
            field, pos = self._line(pos)
            count = self._int(field)
            if count < 0:
                return (NULL_ARRAY if kind == b"*" else None), pos
            if kind == b"%":
                flat, pos = self._items(2 * count, pos)
                return {_hashable(k): v for k, v in zip(flat[::2], flat[1::2], strict=True)}, pos
            items, pos = self._items(count, pos)
            return ({_hashable(item) for item in items} if kind == b"~" else items), pos
        if kind == b"|":  # attributes annotate the reply that follows; drop them
            field, pos = self._line(pos)
            _, pos = self._items(2 * self._int(field), pos)
            return self._value(pos)
        line, pos = self._line(pos)
        if kind == b"+":
            return Simple(line.decode("utf-8", "surrogateescape")), pos
        if kind == b"-":
            return ErrorReply(line.decode("utf-8", "surrogateescape")), pos
        if kind == b":" or kind == b"(":
            # A big number may have any length; bounded here below CPython's int-digit limit.
            if kind == b"(" and len(line) < 4000 and line.lstrip(b"-").isdigit():
                return int(line), pos
            return self._int(line), pos
        if kind == b"_" and not line:
            return None, pos
        if kind == b"#" and line in (b"t", b"f"):
            return line == b"t", pos
        if kind == b",":
            try:
                return float(line), pos
            except ValueError:
                pass
        raise RespProtocolError(f"not a RESP reply: {self._buf[pos - 1 - len(line) - 2 :][:32]!r}")
