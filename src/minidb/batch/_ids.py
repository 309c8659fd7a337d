"""Task ids: ULIDs, their order-reversing inversion, and strict validation of ids from outside.

A task id is a ULID (https://github.com/ulid/spec): 26 Crockford base-32 digits, a 48-bit
millisecond timestamp then 80 random bits, uppercase. The generator is python-ulid's with its
strict monotonic policy, so ids made within one millisecond still sort in creation order.

``invert`` maps every digit ``d`` to ``ALPHABET[31 - ALPHABET.index(d)]``. On strings of one
length that reverses the order (and is its own inverse), so ``tasks/<invert(id)>/`` keys list
newest first although object stores list ascending (the "reverse timestamp" row key of
Bigtable schemas). An inverted id starts with one of ``RSTVWXYZ`` (the top three bits of a
ULID are zero), so an id and an inverted id can never be confused.

``parse_task_id`` is the only way an id from outside (a URL path, a storage key, a cursor)
enters: exactly 26 uppercase Crockford digits with a first digit of at most 7. Lowercase is
refused rather than normalised, so one task has one spelling (and one URL). Because the
alphabet has no ``.``, ``/``, ``\\`` or NUL, this check is also the path-traversal guard of
every key built from an id.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

import ulid

from minidb.batch._errors import InvalidTaskId

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
"""Crockford base 32, in ascending order (no I, L, O, U)."""
ID_CHARS = 26
"""Length of a task id (and of an inverted one)."""

_ID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}", re.ASCII)
_INVERTED = re.compile(r"[RSTVWXYZ][0-9A-HJKMNP-TV-Z]{25}", re.ASCII)
_INVERT = str.maketrans(ALPHABET, ALPHABET[::-1])
_ECHO_CHARS = 40
"""An invalid id is quoted in errors cut to this many characters."""


def invert(text: str) -> str:
    """The order-reversing involution on Crockford digit strings (``invert(invert(x)) == x``)."""
    if not text or any(c not in ALPHABET for c in text):
        raise InvalidTaskId("not a Crockford base-32 string", value=text[:_ECHO_CHARS])
    return text.translate(_INVERT)


def parse_task_id(value: object) -> str:
    """Return ``value`` if it is a well-formed task id, else raise ``InvalidTaskId``."""
    if not isinstance(value, str):
        raise InvalidTaskId(f"a task id is a str, not {type(value).__name__}")
    # Length first: a 10 MB "id" is refused without running a regex over it.
    if len(value) != ID_CHARS or _ID.fullmatch(value) is None:
        raise InvalidTaskId(f"malformed task id {value[:_ECHO_CHARS]!r}", value=value[:_ECHO_CHARS])
    return value


def parse_inverted_id(value: object) -> str:
    """The task id whose inversion is ``value`` (as in a storage key), or ``InvalidTaskId``."""
    if not isinstance(value, str) or len(value) != ID_CHARS or _INVERTED.fullmatch(value) is None:
        shown = value[:_ECHO_CHARS] if isinstance(value, str) else type(value).__name__
        raise InvalidTaskId(f"malformed inverted task id {shown!r}", value=str(shown))
    return value.translate(_INVERT)


def id_time_ms(task_id: str) -> int:
    """The creation time encoded in a task id, in Unix milliseconds."""
    return ulid.ULID.from_str(parse_task_id(task_id)).milliseconds


class TaskIdGenerator:
    """Makes task ids for times passed in (no clock read here), monotonic across calls.

    ``randomness`` returns 10 random bytes for a millisecond (``os.urandom`` by default; tests
    pass a seeded source). A time earlier than the previous one is treated as the previous one,
    so a wall clock stepped back never produces an id that sorts before an older task.
    """

    def __init__(self, randomness: Callable[[int], bytes] | None = None) -> None:
        self._last_ms = 0
        source = randomness or (lambda _ms: os.urandom(10))
        self._generator = ulid.ULIDGenerator(
            randomness=source, policy=ulid.StrictMonotonicPolicy()
        )

    def new(self, now_ms: int) -> str:
        """A fresh task id for the Unix time ``now_ms`` (milliseconds)."""
        self._last_ms = max(self._last_ms, now_ms)
        return str(self._generator.generate(self._last_ms))

