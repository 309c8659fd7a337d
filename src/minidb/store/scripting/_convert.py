"""Redis's conversions between Lua values and replies, both ways (RESP2 rules).

A command's result -> Lua (what ``redis.call`` returns): integer -> number, bulk -> string,
nil -> false, array -> table (nested), status -> ``{ok=...}``, error -> ``{err=...}``; the
results RESP2 shows in another form are converted as RESP2 shows them (a map as a flat array,
a double as its digits in a string, a boolean as 1 or 0, a set as an array).

A script's value -> reply: number -> integer (truncated toward zero), string -> bulk, table
with an ``err`` field -> error, with an ``ok`` field -> status, else an array of its items from
1 up to the first nil; true -> 1, false and nil -> null bulk; anything else (a function) ->
null bulk.

Lua numbers given to ``redis.call`` as arguments become strings as Lua prints them
(``%.14g``): ``redis.call('set', 'k', 1.5)`` stores ``1.5``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lupa.lua51 as lua

from minidb.protocol._resp_replies import format_double
from minidb.protocol._results import NullArray, Simple, Verbatim
from minidb.store._results import ErrorReply, Result

MAX_REPLY_DEPTH = 200
"""Tables nested deeper than this in a script's reply are refused (a table holding itself
would otherwise recurse forever); Redis refuses at its Lua stack limit."""

STACK_LIMIT = "ERR reached lua stack limit"

_ERR, _OK = b"err", b"ok"


def lua_number_text(value: float) -> bytes:
    """A Lua number as Lua 5.1 prints it (``LUA_NUMBER_FMT``, ``%.14g``)."""
    return b"%.14g" % value


def _text(value: Any) -> str:
    raw = value if type(value) is bytes else str(value).encode()
    return raw.decode("utf-8", "surrogateescape").replace("\r", " ").replace("\n", " ")


def reply_of(value: Any, depth: int = 0) -> Result:
    """The reply a script's returned ``value`` stands for (see the module docstring)."""
    kind = type(value)
    if kind is bytes:
        return value  # type: ignore[no-any-return]
    if kind is bool:
        return 1 if value else None
    if kind is int:
        return value  # type: ignore[no-any-return]
    if kind is float:
        return int(value) if value == value and abs(value) < 2**63 else 0
    if value is None or lua.lua_type(value) != "table":
        return None
    if depth >= MAX_REPLY_DEPTH:
        return ErrorReply(STACK_LIMIT)
    err = value[_ERR]
    if type(err) is bytes:
        return ErrorReply(_text(err))
    ok = value[_OK]
    if type(ok) is bytes:
        return Simple(_text(ok))
    items: list[Result] = []
    index = 1
    while True:
        item = value[index]
        if item is None:
            return items
        items.append(reply_of(item, depth + 1))
        index += 1


def error_text(value: Any) -> str | None:
    """The ``err`` field of an error table, or None if ``value`` is not one."""
    if value is None or lua.lua_type(value) != "table":
        return None
    err = value[_ERR]
    return _text(err) if type(err) is bytes else None


def to_lua(result: Result, table: Callable[[Any], Any]) -> Any:
    """The Lua value a command's ``result`` becomes (``table`` makes a Lua table)."""
    kind = type(result)
    if kind is bytes or kind is int:
        return result
    if result is None or kind is NullArray:
        return False
    if kind is list or kind is tuple or kind is set or kind is frozenset:
        return table([to_lua(item, table) for item in result])  # type: ignore[union-attr]
    if kind is Simple:
        return table({_OK: result.text.encode("utf-8", "surrogateescape")})  # type: ignore[union-attr]
    if kind is ErrorReply:
        return error_table(result.message, table)  # type: ignore[union-attr]
    if kind is bool:
        return 1 if result else 0
    if kind is float:
        return format_double(result)  # type: ignore[arg-type]
    if kind is str:
        return result.encode("utf-8", "surrogateescape")  # type: ignore[union-attr]
    if kind is dict:
        flat: list[Any] = []
        for key, item in result.items():  # type: ignore[union-attr]
            flat.append(to_lua(key, table))
            flat.append(to_lua(item, table))
        return table(flat)
    if kind is Verbatim:
        return result.text.encode("utf-8", "surrogateescape")  # type: ignore[union-attr]
    raise TypeError(f"not a result of the protocol vocabulary: {kind.__name__}")


def error_table(message: str, table: Callable[[Any], Any]) -> Any:
    """``{err=message}``, as ``redis.call`` raises and ``redis.pcall`` returns."""
    return table({_ERR: message.encode("utf-8", "surrogateescape")})


def argument_of(value: Any) -> bytes | None:
    """A ``redis.call`` argument as the command sees it, or None if it is neither a string
    nor a number (Redis refuses those)."""
    kind = type(value)
    if kind is bytes:
        return value  # type: ignore[no-any-return]
    if kind is int or kind is float:
        return lua_number_text(value)
    return None
