"""Protocol-neutral results of a command, for the wire codecs to encode.

A command returns one of: ``bytes`` (a bulk string), ``int``, ``None`` (null), ``list``
(an array of results), ``dict`` (a map), ``float`` (a double), ``bool``, or one of the two small
classes here: ``Simple`` (a simple status string such as ``+OK``) and ``ErrorReply`` (an error,
``-ERR ...``). Both carry their text exactly as it goes on the wire after the type byte, so an
encoder maps them with one format each and needs to know nothing about the commands.

``CommandError`` is how a command handler gives up with an error: ``execute`` turns it into
its ``ErrorReply``, so handlers can raise from deep in an argument parser.
"""

from __future__ import annotations

from typing import NamedTuple, TypeAlias

from minidb.errors import StoreError


class Simple(NamedTuple):
    """A simple string reply (RESP ``+text``); ``text`` never contains CR or LF."""

    text: str


class ErrorReply(NamedTuple):
    """An error reply (RESP ``-text``): ``text`` starts with its code, e.g. ``ERR syntax error``."""

    text: str


OK = Simple("OK")
QUEUED = Simple("QUEUED")

Result: TypeAlias = (
    "bytes | int | float | bool | Simple | ErrorReply | list[Result] | dict[Result, Result] | None"
)
"""Anything a command can answer."""


class CommandError(StoreError):
    """A command failed; ``reply`` is what the client is answered."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.reply = ErrorReply(text)


# The errors shared by several commands, worded exactly as Redis words them.
SYNTAX_ERROR = "ERR syntax error"
NOT_AN_INTEGER = "ERR value is not an integer or out of range"
NOT_A_FLOAT = "ERR value is not a valid float"
OVERFLOW = "ERR increment or decrement would overflow"
NAN_OR_INFINITY = "ERR increment would produce NaN or Infinity"
NO_SUCH_KEY = "ERR no such key"
SAME_OBJECT = "ERR source and destination objects are the same"
DB_OUT_OF_RANGE = "ERR DB index is out of range"
STRING_TOO_LONG = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
KEY_TOO_LONG = "ERR key exceeds maximum allowed size"
INVALID_CURSOR = "ERR invalid cursor"


def wrong_arity(name: str) -> str:
    return f"ERR wrong number of arguments for '{name}' command"


def invalid_expire_time(name: str) -> str:
    return f"ERR invalid expire time in '{name}' command"
