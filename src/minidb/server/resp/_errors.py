"""The error replies of the RESP listener, worded exactly as Redis 7.2 words them.

Clients match on these texts (redis-py maps ``NOAUTH``/``WRONGPASS``/``EXECABORT`` codes to
exception classes, redis-cli prints them verbatim), so each comes from Redis's source, not
from memory. Errors that repeat client input keep Redis's bounds (``%.128s``) and replace CR
and LF by spaces so that a hostile argument cannot break the reply's framing; bytes that are
not UTF-8 are shown as ``\\xNN`` escapes (Redis sends them raw).
"""

from __future__ import annotations

from collections.abc import Sequence

from minidb.server.resp._types import ErrorReply

MAX_ERROR_ECHO_BYTES = 128
"""How much of a client's command and arguments an error repeats (Redis's ``%.128s``)."""

NOAUTH = ErrorReply("NOAUTH Authentication required.")
WRONGPASS = ErrorReply("WRONGPASS invalid username-password pair or user is disabled.")
SYNTAX = ErrorReply("ERR syntax error")
EXECABORT = ErrorReply("EXECABORT Transaction discarded because of previous errors.")
NO_PASSWORD = ErrorReply(
    "ERR AUTH <password> called without any password configured for the default user. "
    "Are you sure your configuration is correct?"
)
HELLO_NOAUTH = ErrorReply(
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
    "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
    "select the RESP protocol version at the same time"
)
READONLY = ErrorReply("READONLY You can't write against a read only replica.")
"""A write sent to a replica (Redis's ``shared.roslaveerr``)."""
BAD_CLIENT_NAME = ErrorReply(
    "ERR Client names cannot contain spaces, newlines or special characters."
)


def text(data: bytes) -> str:
    """Client bytes for an error message: UTF-8, anything else as ``\\xNN``."""
    return data.decode("utf-8", "backslashreplace")


def printable(value: bytes) -> bool:
    """Redis's ``validateClientAttr``: every byte from ``!`` to ``~`` (empty allowed)."""
    return all(0x21 <= b <= 0x7E for b in value)


def one_line(message: bytes) -> ErrorReply:
    """An error from bytes that may hold client input: CR and LF become spaces."""
    return ErrorReply(text(message.replace(b"\r", b" ").replace(b"\n", b" ")))


def unknown_command(argv: Sequence[bytes]) -> ErrorReply:
    """Redis's wording, byte for byte, trailing space included:
    ``ERR unknown command 'x', with args beginning with: 'a' 'b' ``."""
    args = b""
    for arg in argv[1:]:
        if len(args) >= MAX_ERROR_ECHO_BYTES:
            break
        args += b"'" + arg[: MAX_ERROR_ECHO_BYTES - len(args)] + b"' "
    name = argv[0][:MAX_ERROR_ECHO_BYTES]
    return one_line(b"ERR unknown command '" + name + b"', with args beginning with: " + args)


def unknown_subcommand(argv: Sequence[bytes]) -> ErrorReply:
    """``ERR unknown subcommand 'x'. Try CLIENT HELP.`` (the container as sent, upper-cased)."""
    sub = argv[1][:MAX_ERROR_ECHO_BYTES]
    return one_line(b"ERR unknown subcommand '" + sub + b"'. Try " + argv[0].upper() + b" HELP.")


def exec_abort(error: ErrorReply) -> ErrorReply:
    """Redis's ``execCommandAbort``: what a rejected ``EXEC`` answers instead of ``error``.

    Redis passes the rejection as it would have sent it: its shared errors with their code
    (``NOAUTH Authentication required.``), the ones it words itself without ``ERR``
    (``wrong number of arguments for 'exec' command``); ours all carry a code, so ``ERR `` is
    dropped to match."""
    reason = error.message.removeprefix("ERR ")
    return ErrorReply(f"EXECABORT Transaction discarded because of: {reason}")


def wrong_arity(name: str) -> ErrorReply:
    """``name`` is the full name: ``get``, ``client|setname``."""
    return ErrorReply(f"ERR wrong number of arguments for '{name}' command")
