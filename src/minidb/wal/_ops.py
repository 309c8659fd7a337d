"""The logical content of a log record: the effects a group of writes had on the store.

A DATA record's payload is one or more of these operations, applied in order and atomically
(a record is replayed whole or not at all, so a transaction or an ``MSET`` is one record).
They are *effects*, never commands: an ``INCR`` is logged as the ``Put`` of the value it
produced, and a relative TTL as an absolute expiry time, so that replaying the log reproduces
the store exactly whenever it is replayed.

Times are milliseconds since the Unix epoch (wall clock), because they must mean the same
instant after a restart on another boot. ``docs/wal-format.md`` specifies the byte encoding;
``_payload`` implements it.
"""

from __future__ import annotations

from typing import NamedTuple


class Put(NamedTuple):
    """Set ``key`` of ``bucket`` to ``value``; ``expire_at_ms`` None means no expiry."""

    bucket: bytes
    key: bytes
    value: bytes
    expire_at_ms: int | None = None


class Remove(NamedTuple):
    """Delete ``key`` of ``bucket`` (it existed when the write was applied)."""

    bucket: bytes
    key: bytes


class Expire(NamedTuple):
    """Change the expiry of an existing key: an absolute time, or None to persist it."""

    bucket: bytes
    key: bytes
    expire_at_ms: int | None


class Flush(NamedTuple):
    """Delete every key of ``bucket``, or of every bucket when ``bucket`` is None."""

    bucket: bytes | None


Op = Put | Remove | Expire | Flush
