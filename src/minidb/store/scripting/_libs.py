"""The libraries Redis gives scripts beside ``redis.call``: ``cjson``, ``bit`` and the
helpers of the ``redis`` table (``sha1hex``, ``log``, ``error_reply``, ``status_reply``...).

lupa ships none of Redis's bundled C libraries, so these are Python, called from Lua.

``cjson`` follows Redis's lua-cjson 2.1: a table whose keys are all positive integers is an
array (holes become ``null``; an excessively sparse one, largest index over 10 and over twice
the count, is refused), any other non-empty table an object, an empty table ``{}``; numbers
as ``%.14g``; ``/`` escaped as ``\\/``; ``cjson.null`` is the one value that encodes as, and
decodes from, ``null``. ``cjson.encode_keep_buffer`` and the configuration functions are
accepted and do nothing. ``cmsgpack`` is ``_msgpack``'s; ``struct`` is not provided.

``bit`` follows LuaBitOp: every operation on 32-bit two's complement integers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable
from typing import Any

import lupa.lua51 as lua

from minidb.store.scripting._convert import lua_number_text

logger = logging.getLogger("minidb.scripting")

MAX_JSON_DEPTH = 1000
"""Nesting cjson encodes or decodes at most (lua-cjson's default)."""

LOG_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.INFO, 3: logging.WARNING}
"""``redis.LOG_DEBUG`` .. ``redis.LOG_WARNING`` -> the server log's levels."""


class JsonNull:
    """``cjson.null``: one instance, opaque to scripts (lupa's attribute filter)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "cjson.null"


NULL = JsonNull()


class ScriptLibraryError(Exception):
    """A library call refused its arguments; the message is Lua's error."""


def _string(value: Any) -> str:
    return bytes(value).decode("utf-8", "surrogateescape")


def _encode(value: Any, depth: int) -> str:
    if depth > MAX_JSON_DEPTH:
        raise ScriptLibraryError(f"Cannot serialise, excessive nesting ({depth})")
    kind = type(value)
    if kind is bytes:
        return json.dumps(_string(value), ensure_ascii=False).replace("/", "\\/")
    if kind is bool:
        return "true" if value else "false"
    if kind is int or kind is float:
        if kind is float and (math.isinf(value) or math.isnan(value)):
            raise ScriptLibraryError("Cannot serialise number: must not be NaN or Inf")
        return lua_number_text(value).decode()
    if value is None or value is NULL:
        return "null"
    if lua.lua_type(value) != "table":
        raise ScriptLibraryError(
            f"Cannot serialise {lua.lua_type(value)}: type not supported"
        )
    items = list(value.items())
    if not items:
        return "{}"
    keys = [k for k, _ in items]
    if all(type(k) is int and k > 0 for k in keys):
        largest = max(keys)
        if largest > 10 and largest > 2 * len(keys):
            raise ScriptLibraryError("Cannot serialise table: excessively sparse array")
        mapping = dict(items)
        slots = (_encode(mapping.get(i), depth + 1) for i in range(1, largest + 1))
        return "[" + ",".join(slots) + "]"
    parts = []
    for key, item in items:
        if type(key) is bytes:
            name = _encode(key, depth + 1)
        elif type(key) in (int, float):
            name = '"' + lua_number_text(key).decode() + '"'
        else:
            raise ScriptLibraryError("Cannot serialise table: table key must be a number or string")
        parts.append(name + ":" + _encode(item, depth + 1))
    return "{" + ",".join(parts) + "}"


def cjson_encode(value: Any = None, *rest: Any) -> bytes:
    return _encode(value, 1).encode("utf-8", "surrogateescape")


def _decoded(value: Any, table: Callable[[Any], Any], depth: int) -> Any:
    if depth > MAX_JSON_DEPTH:
        raise ScriptLibraryError(f"Found too many nested data structures ({depth})")
    if value is None:
        return NULL
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, list):
        return table([_decoded(item, table, depth + 1) for item in value])
    if isinstance(value, dict):
        return table({
            key.encode("utf-8", "surrogateescape"): _decoded(item, table, depth + 1)
            for key, item in value.items()
        })
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def cjson_decoder(table: Callable[[Any], Any]) -> Callable[..., Any]:
    def decode(text: Any = None, *rest: Any) -> Any:
        if type(text) is not bytes:
            raise ScriptLibraryError("bad argument #1 to 'decode' (string expected)")
        try:
            parsed = json.loads(_string(text))
        except json.JSONDecodeError as exc:
            raise ScriptLibraryError(
                f"Expected value but found invalid token at character {exc.pos + 1}"
            ) from None
        except RecursionError:
            raise ScriptLibraryError("Found too many nested data structures") from None
        return _decoded(parsed, table, 1)

    return decode


def _ignore(*args: Any) -> None:
    return None


def cjson_library(table: Callable[[Any], Any]) -> dict[bytes, Any]:
    return {
        b"encode": cjson_encode,
        b"decode": cjson_decoder(table),
        b"null": NULL,
        b"encode_keep_buffer": _ignore,
        b"encode_max_depth": _ignore,
        b"decode_max_depth": _ignore,
        b"encode_invalid_numbers": _ignore,
        b"decode_invalid_numbers": _ignore,
    }


# -- bit ------------------------------------------------------------------------------------


def _tobit(value: Any) -> int:
    if type(value) not in (int, float):
        raise ScriptLibraryError("bad argument #1 to 'tobit' (number expected)")
    number = int(value) & 0xFFFFFFFF
    return number - (1 << 32) if number >= 1 << 31 else number


def _fold(op: Callable[[int, int], int]) -> Callable[..., int]:
    def fold(first: Any = None, *rest: Any) -> int:
        result = _tobit(first)
        for value in rest:
            result = _tobit(op(result, _tobit(value)))
        return result

    return fold


def _shift(op: Callable[[int, int], int]) -> Callable[..., int]:
    def shift(value: Any = None, count: Any = None) -> int:
        return _tobit(op(_tobit(value) & 0xFFFFFFFF, _tobit(count) & 31))

    return shift


def _arshift(value: Any = None, count: Any = None) -> int:
    return _tobit(_tobit(value) >> (_tobit(count) & 31))


def _rol(value: Any = None, count: Any = None) -> int:
    bits, n = _tobit(value) & 0xFFFFFFFF, _tobit(count) & 31
    return _tobit((bits << n) | (bits >> (32 - n)))


def _ror(value: Any = None, count: Any = None) -> int:
    bits, n = _tobit(value) & 0xFFFFFFFF, _tobit(count) & 31
    return _tobit((bits >> n) | (bits << (32 - n)))


def _bswap(value: Any = None) -> int:
    return _tobit(int.from_bytes((_tobit(value) & 0xFFFFFFFF).to_bytes(4, "little"), "big"))


def _tohex(value: Any = None, digits: Any = 8) -> bytes:
    n = _tobit(digits) if digits is not None else 8
    bits = _tobit(value) & 0xFFFFFFFF
    width = min(abs(n), 8) or 8
    text = f"{bits:08x}"
    text = text[-width:]
    return (text.upper() if n < 0 else text).encode()


BIT_LIBRARY: dict[bytes, Any] = {
    b"tobit": lambda value=None: _tobit(value),
    b"bnot": lambda value=None: _tobit(~_tobit(value)),
    b"band": _fold(lambda a, b: a & b),
    b"bor": _fold(lambda a, b: a | b),
    b"bxor": _fold(lambda a, b: a ^ b),
    b"lshift": _shift(lambda a, n: a << n),
    b"rshift": _shift(lambda a, n: a >> n),
    b"arshift": _arshift,
    b"rol": _rol,
    b"ror": _ror,
    b"bswap": _bswap,
    b"tohex": _tohex,
}


# -- redis helpers ---------------------------------------------------------------------------


def sha1hex(text: Any = None, *rest: Any) -> bytes:
    if type(text) not in (bytes, int, float) or rest:
        raise ScriptLibraryError("wrong number of arguments")
    data = text if type(text) is bytes else lua_number_text(text)
    return hashlib.sha1(data).hexdigest().encode()


def redis_log(level: Any = None, *message: Any) -> None:
    if not message:
        raise ScriptLibraryError("redis.log() requires two arguments or more.")
    if type(level) not in (int, float) or int(level) not in LOG_LEVELS:
        raise ScriptLibraryError("Invalid debug level.")
    parts = [
        _string(part) if type(part) is bytes else lua_number_text(part).decode()
        for part in message
        if type(part) in (bytes, int, float)
    ]
    logger.log(LOG_LEVELS[int(level)], "script %s", " ".join(parts))


def error_reply_of(table: Callable[[Any], Any]) -> Callable[..., Any]:
    """``redis.error_reply(msg)``: ``{err=msg}``; as Redis 7's ``luaPushErrorBuff``, the
    first word is the code (a leading ``-`` dropped) unless ``msg`` is one word, which gets
    ``ERR``."""

    def error_reply(text: Any = None, *rest: Any) -> Any:
        if type(text) is not bytes or rest:
            raise ScriptLibraryError("wrong number or type of arguments")
        code, space, message = text.removeprefix(b"-").partition(b" ")
        if not space:
            code, message = b"ERR", code
        return table({b"err": code + b" " + message.strip(b"\r\n")})

    return error_reply


def status_reply_of(table: Callable[[Any], Any]) -> Callable[..., Any]:
    def status_reply(text: Any = None, *rest: Any) -> Any:
        if type(text) is not bytes or rest:
            raise ScriptLibraryError("wrong number or type of arguments")
        return table({b"ok": text})

    return status_reply


def redis_set_repl(mode: Any = None, *rest: Any) -> None:
    """``redis.set_repl``: accepted and ignored (a script's effects are always logged whole)."""
    if type(mode) not in (int, float) or not 0 <= int(mode) <= 3 or rest:
        raise ScriptLibraryError(
            "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."
        )
