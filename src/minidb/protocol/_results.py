"""The protocol-neutral results a command engine returns, and nothing else.

A command handler answers with plain Python values; the connection's encoder turns them into
the wire form its client negotiated (RESP2 by default, RESP3 after ``HELLO 3``), so handlers
never know which protocol they speak. The vocabulary:

=====================  ========================  ==========================================
result                 RESP3                     RESP2
=====================  ========================  ==========================================
``bytes``              bulk string ``$``         bulk string ``$``
``str``                bulk string (UTF-8)       bulk string (UTF-8)
``int`` (signed 64)    integer ``:``             integer ``:``
``int`` (larger)       big number ``(``          bulk string of its digits
``bool``               boolean ``#t`` / ``#f``   integer ``:1`` / ``:0``
``float``              double ``,``              bulk string, same digits
``None``               null ``_``                null bulk ``$-1``
``NULL_ARRAY``         null ``_``                null array ``*-1``
``list`` / ``tuple``   array ``*``               array ``*``
``dict``               map ``%``                 flat array of key, value, key, value...
``set``/``frozenset``  set ``~``                 array ``*``
``Simple("OK")``       simple string ``+``       simple string ``+``
``ErrorReply("ERR")``  simple error ``-``        simple error ``-``
``Verbatim(text)``     verbatim string ``=``     bulk string
=====================  ========================  ==========================================

Text (``str`` results, ``Simple``, ``ErrorReply``, ``Verbatim``) is sent as UTF-8 with
``surrogateescape``, so bytes decoded with ``errors="surrogateescape"`` go back unchanged.

Shared instances for the hot answers: ``SIMPLE_OK``, ``SIMPLE_PONG``, ``SIMPLE_QUEUED``,
``NULL_ARRAY``. ``Simple`` and ``ErrorReply`` check at construction that their text cannot
break the framing (no CR or LF) and keep their wire form, so answering them costs nothing.

Containers nest freely. Anything else (a ``bytearray``, a custom object) is a programming error
of the engine, and the encoder raises ``TypeError`` rather than guess.
"""

from __future__ import annotations

from typing import Final, TypeAlias


class Simple:
    """A simple string (``+OK``): short status text, never binary, never CR or LF."""

    __slots__ = ("text", "wire")

    text: str
    wire: bytes

    def __init__(self, text: str) -> None:
        if "\r" in text or "\n" in text:
            raise ValueError(f"a simple string cannot contain CR or LF: {text!r}")
        self.text = text
        self.wire = b"+" + text.encode("utf-8", "surrogateescape") + b"\r\n"

    def __eq__(self, other: object) -> bool:
        return type(other) is Simple and other.text == self.text

    def __hash__(self) -> int:
        return hash((Simple, self.text))

    def __repr__(self) -> str:
        return f"Simple({self.text!r})"


class ErrorReply:
    """An error answer; ``message`` starts with its code: ``ERR ...``, ``WRONGTYPE ...``.

    Inside an array it is one element (EXEC's per-command errors); on its own it is the answer.
    """

    __slots__ = ("message", "wire")

    message: str
    wire: bytes

    def __init__(self, message: str) -> None:
        if "\r" in message or "\n" in message:
            raise ValueError(f"an error cannot contain CR or LF: {message!r}")
        self.message = message
        # surrogateescape: text decoded from raw request bytes the same way (a key quoted in a
        # message) goes back to the client byte for byte, as Redis echoes it.
        self.wire = b"-" + message.encode("utf-8", "surrogateescape") + b"\r\n"

    @property
    def code(self) -> str:
        """The first word (``ERR``, ``WRONGTYPE``, ``NOPROTO`` ...)."""
        return self.message.split(" ", 1)[0]

    def __eq__(self, other: object) -> bool:
        return type(other) is ErrorReply and other.message == self.message

    def __hash__(self) -> int:
        return hash((ErrorReply, self.message))

    def __repr__(self) -> str:
        return f"ErrorReply({self.message!r})"


class NullArray:
    """RESP2's null array (``*-1``, e.g. an aborted ``EXEC``); RESP3 has only one null."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL_ARRAY"


class Verbatim:
    """Text meant to be shown as is (``INFO``, ``CLIENT LIST``); ``format`` is 3 characters."""

    __slots__ = ("format", "text")

    text: str
    format: str

    def __init__(self, text: str, format: str = "txt") -> None:
        if len(format) != 3 or not format.isascii():
            raise ValueError(f"a verbatim format is 3 ASCII characters: {format!r}")
        self.text = text
        self.format = format

    def __eq__(self, other: object) -> bool:
        return type(other) is Verbatim and other.text == self.text and other.format == self.format

    def __hash__(self) -> int:
        return hash((Verbatim, self.text, self.format))

    def __repr__(self) -> str:
        return f"Verbatim({self.text!r}, {self.format!r})"


SIMPLE_OK: Final = Simple("OK")
SIMPLE_PONG: Final = Simple("PONG")
SIMPLE_QUEUED: Final = Simple("QUEUED")
NULL_ARRAY: Final = NullArray()

Result: TypeAlias = (
    bytes
    | str
    | int
    | float
    | Simple
    | ErrorReply
    | NullArray
    | Verbatim
    | list["Result"]
    | tuple["Result", ...]
    | dict["Result", "Result"]
    | set["Result"]
    | frozenset["Result"]
    | None
)
"""Everything a command may answer (``bool`` is an ``int`` to the type checker)."""
