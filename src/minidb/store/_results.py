"""What a command answers, and how a handler gives up with an error.

The results are the protocol layer's vocabulary (``minidb.protocol._results``), re-exported
here so the commands read without reaching down a layer: ``bytes``, ``int``, ``None``,
``list``, ``dict``, ``float``, ``bool``, ``Simple`` (``+OK``), ``ErrorReply`` (``-ERR ...``).
The RESP encoder takes them as they are; there is no mapping layer between store and wire.

``CommandError`` is how a command handler gives up with an error: ``execute`` turns it into
its ``ErrorReply``, so handlers can raise from deep in an argument parser.
"""

from __future__ import annotations

from minidb.errors import StoreError
from minidb.protocol._results import SIMPLE_OK as OK
from minidb.protocol._results import SIMPLE_QUEUED as QUEUED
from minidb.protocol._results import ErrorReply, Result, Simple

__all__ = [
    "OK",
    "QUEUED",
    "CommandError",
    "ErrorReply",
    "Result",
    "Simple",
]


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
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


class WrongTypeError(CommandError):
    """A command met a key holding another type than it works on (Redis's ``WRONGTYPE``)."""

    def __init__(self) -> None:
        super().__init__(WRONGTYPE)


def wrong_arity(name: str) -> str:
    return f"ERR wrong number of arguments for '{name}' command"


def invalid_expire_time(name: str) -> str:
    return f"ERR invalid expire time in '{name}' command"
