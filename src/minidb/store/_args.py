"""What every command handler shares: the session, the handler signature, argument parsing.

A ``Session`` is the per-connection state a command can see or change: the selected bucket
(``SELECT``), the protocol version, the client's name and its WATCH. Argument helpers raise
``CommandError`` with Redis's wording, so a handler reads top to bottom as its Redis original.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from minidb.protocol import MAX_NAME_CHARS
from minidb.store._journal import OpJournal
from minidb.store._keyspace import MAX_KEY_BYTES, Keyspace, Watch
from minidb.store._numbers import INT64_MAX, parse_int
from minidb.store._results import (
    DB_OUT_OF_RANGE,
    KEY_TOO_LONG,
    NOT_AN_INTEGER,
    STRING_TOO_LONG,
    CommandError,
    Result,
    invalid_expire_time,
)

DEFAULT_BUCKET = b"0"
"""The bucket a RESP connection starts in (Redis's database 0)."""

_BUCKET_NAME = re.compile(rb"[A-Za-z0-9_.:/-]{1,%d}" % MAX_NAME_CHARS)
"""A bucket name of the line protocol; database numbers (``SELECT 3``) are such names too."""


@dataclass(slots=True)
class Session:
    """A connection's state as the commands see it."""

    bucket: bytes = DEFAULT_BUCKET
    protocol: int = 2
    """The RESP version the connection speaks (2 or 3)."""
    name: bytes | None = None
    watch: Watch | None = field(default=None, repr=False)


Handler = Callable[[Keyspace, Session, list[bytes], OpJournal, int], Result]
"""``handler(keyspace, session, argv, journal, now_ms)``: argv[0] is the command name."""


@dataclass(frozen=True, slots=True)
class Command:
    """One entry of the command table."""

    name: str
    """Lower case, as Redis prints it in errors."""
    arity: int
    """Redis's convention, the name counted: N exactly N arguments, -N at least N."""
    flags: frozenset[str]
    """``write`` (may change the keyspace) or ``readonly``; ``fast`` for O(1) commands."""
    handler: Handler


def command(name: str, arity: int, *flags: str) -> Callable[[Handler], Command]:
    """Decorator: the handler below it becomes the ``Command`` named ``name``."""

    def wrap(handler: Handler) -> Command:
        return Command(name, arity, frozenset(flags), handler)

    return wrap


def int_arg(text: bytes) -> int:
    """A signed 64-bit integer argument."""
    value = parse_int(text)
    if value is None:
        raise CommandError(NOT_AN_INTEGER)
    return value


def bucket_arg(text: bytes) -> bytes:
    """A bucket named by ``SELECT`` or ``COPY ... DB``."""
    if _BUCKET_NAME.fullmatch(text) is None:
        raise CommandError(DB_OUT_OF_RANGE)
    return text


def check_write(ks: Keyspace, key: bytes, value: bytes) -> None:
    """Refuse a key or a value over the limits before anything is changed."""
    if len(key) > MAX_KEY_BYTES:
        raise CommandError(KEY_TOO_LONG)
    if len(value) > ks.max_value_bytes:
        raise CommandError(STRING_TOO_LONG)


_TRUNCATING_INT64_MIN_OVER_1000 = -((1 << 63) // 1000)
"""C's ``LLONG_MIN / 1000``, which truncates toward zero."""


def deadline_arg(
    name: str, text: bytes, *, seconds: bool, relative: bool, now_ms: int, positive: bool
) -> int:
    """An expiry argument as an absolute deadline in ms, with Redis's range checks.

    ``positive`` (SET, GETEX, SETEX) refuses zero and negative times as Redis's
    ``getExpireMillisecondsOrReply`` does; EXPIRE and friends allow them (the key goes).
    """
    when = int_arg(text)
    if positive and when <= 0:
        raise CommandError(invalid_expire_time(name))
    if seconds:
        if when > INT64_MAX // 1000 or when < _TRUNCATING_INT64_MIN_OVER_1000:
            raise CommandError(invalid_expire_time(name))
        when *= 1000
    if relative:
        if when > INT64_MAX - now_ms:
            raise CommandError(invalid_expire_time(name))
        when += now_ms
    return when


def text_of(arg: bytes) -> str:
    """An argument quoted in an error message."""
    return arg.decode("utf-8", "replace")
