"""``cmsgpack`` for scripts: MessagePack as Redis's bundled lua-cmsgpack writes and reads it.

``cmsgpack.pack(v1, v2, ...)`` concatenates the encodings of its arguments; ``unpack(s)``
returns every value ``s`` holds. Encoding follows lua_cmsgpack.c: a Lua number equal to an
integer is the smallest integer form, another a float32 if that is exact, else a float64;
strings as str (fixstr, str8/16/32); a table whose keys are exactly 1..n an array (an empty
one too), any other a map; nesting deeper than 16 tables, functions and other values as nil.
Decoding takes what lua-cmsgpack takes (not bin or ext), maps and arrays as tables.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import lupa.lua51 as lua

MAX_NESTING = 16
"""Tables nested deeper than this are packed as nil (lua-cmsgpack's LUACMSGPACK_MAX_NESTING)."""


class MsgpackError(Exception):
    """Lua's error for bad input; the message is lua-cmsgpack's."""


def _int(n: int) -> bytes:
    if n >= 0:
        if n <= 127:
            return bytes([n])
        for limit, code, fmt in ((0xFF, 0xCC, ">B"), (0xFFFF, 0xCD, ">H"),
                                 (0xFFFFFFFF, 0xCE, ">I")):  # fmt: skip
            if n <= limit:
                return bytes([code]) + struct.pack(fmt, n)
        return b"\xcf" + struct.pack(">Q", min(n, 2**64 - 1))
    if n >= -32:
        return struct.pack(">b", n)
    for limit, code, fmt in ((-128, 0xD0, ">b"), (-32768, 0xD1, ">h"),
                             (-2147483648, 0xD2, ">i")):  # fmt: skip
        if n >= limit:
            return bytes([code]) + struct.pack(fmt, n)
    return b"\xd3" + struct.pack(">q", max(n, -(2**63)))


def _header(size: int, fix: int, fix_limit: int, codes: tuple[int, ...]) -> bytes:
    if size <= fix_limit:
        return bytes([fix | size])
    if len(codes) == 3 and size <= 0xFF:
        return bytes([codes[0]]) + struct.pack(">B", size)
    if size <= 0xFFFF:
        return bytes([codes[-2]]) + struct.pack(">H", size)
    return bytes([codes[-1]]) + struct.pack(">I", size)


def _pack(value: Any, depth: int, out: list[bytes]) -> None:
    kind = type(value)
    if kind is bytes:
        out.append(_header(len(value), 0xA0, 31, (0xD9, 0xDA, 0xDB)))
        out.append(value)
    elif kind is bool:
        out.append(b"\xc3" if value else b"\xc2")
    elif kind is int or (kind is float and value.is_integer() and abs(value) < 2**63):
        out.append(_int(int(value)))
    elif kind is float:
        single = struct.pack(">f", value) if abs(value) < 3.4e38 or value != value else None
        if single is not None and struct.unpack(">f", single)[0] == value:
            out.append(b"\xca" + single)
        else:
            out.append(b"\xcb" + struct.pack(">d", value))
    elif value is None or lua.lua_type(value) != "table" or depth >= MAX_NESTING:
        out.append(b"\xc0")
    else:
        items = list(value.items())
        keys = [k for k, _ in items]
        if all(type(k) is int and k > 0 for k in keys) and max(keys, default=0) == len(keys):
            out.append(_header(len(items), 0x90, 15, (0xDC, 0xDD)))
            mapping = dict(items)
            for index in range(1, len(items) + 1):
                _pack(mapping[index], depth + 1, out)
        else:
            out.append(_header(len(items), 0x80, 15, (0xDE, 0xDF)))
            for key, item in items:
                _pack(key, depth + 1, out)
                _pack(item, depth + 1, out)


def pack(*values: Any) -> bytes:
    if not values:
        raise MsgpackError("bad argument #0 to 'pack' (MessagePack pack needs input.)")
    out: list[bytes] = []
    for value in values:
        _pack(value, 0, out)
    return b"".join(out)


_FIXED = {
    0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i",
    0xD3: ">q", 0xCA: ">f", 0xCB: ">d",
}  # fmt: skip
_SIZED = {0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}
"""str8/16/32; bin and ext are refused as lua-cmsgpack refuses them ("Bad data format")."""
_CONTAINERS = {0xDC: (">H", False), 0xDD: (">I", False), 0xDE: (">H", True), 0xDF: (">I", True)}


class _Reader:
    def __init__(self, data: bytes, table: Callable[[Any], Any]) -> None:
        self.data = data
        self.at = 0
        self.table = table

    def take(self, count: int) -> bytes:
        if self.at + count > len(self.data):
            raise MsgpackError("Missing bytes in input.")
        part = self.data[self.at:self.at + count]
        self.at += count
        return part

    def number(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def value(self, depth: int = 0) -> Any:
        if depth > 1000:
            raise MsgpackError("Bad data format in input.")
        code = self.take(1)[0]
        if code <= 0x7F:
            return code
        if code >= 0xE0:
            return code - 0x100
        if 0xA0 <= code <= 0xBF:
            return self.take(code & 0x1F)
        if 0x90 <= code <= 0x9F:
            return self.container(code & 0x0F, False, depth)
        if 0x80 <= code <= 0x8F:
            return self.container(code & 0x0F, True, depth)
        if code == 0xC0:
            return None
        if code in (0xC2, 0xC3):
            return code == 0xC3
        fmt = _FIXED.get(code)
        if fmt is not None:
            return self.number(fmt)
        fmt = _SIZED.get(code)
        if fmt is not None:
            return self.take(self.number(fmt))
        container = _CONTAINERS.get(code)
        if container is not None:
            return self.container(self.number(container[0]), container[1], depth)
        raise MsgpackError("Bad data format in input.")

    def container(self, size: int, is_map: bool, depth: int) -> Any:
        if size > len(self.data) - self.at:  # each element takes a byte at least
            raise MsgpackError("Missing bytes in input.")
        if not is_map:
            return self.table([self.value(depth + 1) for _ in range(size)])
        mapping = {}
        for _ in range(size):
            key = self.value(depth + 1)
            mapping[key] = self.value(depth + 1)
        return self.table({k: v for k, v in mapping.items() if k is not None and v is not None})


def unpacker(table: Callable[[Any], Any]) -> Callable[..., tuple[Any, ...]]:
    def unpack(data: Any = None, *rest: Any) -> tuple[Any, ...]:
        if type(data) is not bytes:
            raise MsgpackError("MessagePack decoding needs a string as input.")
        reader = _Reader(data, table)
        values = []
        while reader.at < len(data):
            values.append(reader.value())
        return tuple(values)

    return unpack


def cmsgpack_library(table: Callable[[Any], Any]) -> dict[bytes, Any]:
    return {b"pack": pack, b"unpack": unpacker(table)}
