"""The vocabulary of the line protocol: request objects and reply objects, nothing else.

Requests carry ``bytes`` exactly as they travel (names are ASCII by construction, values are
validated UTF-8), because the server never needs them as text: storing and answering bytes
saves a decode and an encode per request on the hot path. ``Invalid`` is a request too: a line
that failed to parse still occupies its place in the reply order, so it travels through the
same pipeline as a good request and is answered with its ``ERR`` in turn.

Replies are parsed into objects only on the client side; the server produces wire bytes
directly (see ``_line``), again to keep allocation off the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

# Limits of the protocol, in bytes.
MAX_LINE_BYTES = 8192
"""A request line longer than this (terminator excluded) is answered ``ERR line too long``."""
MAX_VALUE_BYTES = 4096
"""A ``SET`` value longer than this (UTF-8 bytes) is refused with ``ERR value too long``."""
MAX_NAME_CHARS = 64
"""Bucket and key names are 1 to this many characters from ``[A-Za-z0-9_.:/-]``."""
MAX_SCAN_COUNT = 1000
"""The largest ``count`` a ``SCAN`` accepts, so one reply line stays bounded (~65 KiB)."""
MAX_EXPIRE_SECONDS = 1_000_000_000
"""The longest time to live an ``EXPIRE`` accepts, in seconds (~31.7 years)."""

MAX_ECHO_CHARS = 128
"""A client's token quoted in an ``ERR`` reply (``invalid count <n>``...) is cut to this many
characters (and ``...``; twice the longest name, so a name one too long is still shown whole),
so a malformed 8 KiB line is not echoed back whole."""

MAX_BULK_ROWS = 1024
"""The most rows one ``BULK <n>`` frame may carry; a larger ``n`` is refused (and closes)."""
MAX_BULK_BYTES = 1024 * 1024
"""The most bytes the row lines of one ``BULK`` frame may take, terminators included, so the
server never holds more than this (and one read) for a frame not yet complete."""

SCAN_START = b"0"
"""The cursor that starts a scan, and the next-cursor that says it is finished."""


class Get(NamedTuple):
    """``GET <bucket> <key>``."""

    bucket: bytes
    key: bytes


class Set(NamedTuple):
    """``SET <bucket> <key> <value>``; ``value`` is kept byte for byte."""

    bucket: bytes
    key: bytes
    value: bytes


class Delete(NamedTuple):
    """``DEL <bucket> <key>``."""

    bucket: bytes
    key: bytes


class Scan(NamedTuple):
    """``SCAN <bucket> <cursor> <count>``.

    ``cursor`` is ``0`` or ``+<last key returned>``; ``limit`` is the count (``count`` would
    shadow ``tuple.count``).
    """

    bucket: bytes
    cursor: bytes
    limit: int


class Expire(NamedTuple):
    """``EXPIRE <bucket> <key> <seconds>``: the key expires ``seconds`` from now (0: now)."""

    bucket: bytes
    key: bytes
    seconds: int


class Ttl(NamedTuple):
    """``TTL <bucket> <key>``."""

    bucket: bytes
    key: bytes


class Persist(NamedTuple):
    """``PERSIST <bucket> <key>``: the key no longer expires."""

    bucket: bytes
    key: bytes


class Bulk(NamedTuple):
    """``BULK <n>`` and its ``n`` rows, each a ``SET`` or a ``DEL``: applied together, as one
    log record, answered ``OK <n>`` once."""

    rows: list[Set | Delete]


class Invalid(NamedTuple):
    """A line that did not parse; ``reason`` goes on the wire after ``ERR``."""

    reason: str


Request = Get | Set | Delete | Scan | Expire | Ttl | Persist | Bulk | Invalid
WRITES = (Set, Delete, Expire, Persist, Bulk)
"""Request types that change the store (and therefore need a log record)."""


@dataclass(frozen=True, slots=True)
class Ok:
    """``OK``: a write was applied (or a ``DEL`` found its key)."""


@dataclass(frozen=True, slots=True)
class Nil:
    """``NIL``: no such key."""


@dataclass(frozen=True, slots=True)
class Value:
    """``VALUE <value>``: the value of a key, as text."""

    value: str


@dataclass(frozen=True, slots=True)
class Keys:
    """``KEYS <next-cursor> <key>...``: one page of a scan; ``cursor == "0"`` when done."""

    cursor: str
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Error:
    """``ERR <reason>``."""

    reason: str


Reply = Ok | Nil | Value | Keys | Error
