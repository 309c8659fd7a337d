"""The data and the rules for changing it: ``StoreState``, a pure class with no asyncio in it.

``StoreState.apply(request)`` applies one parsed request and returns its reply in wire form.
The data owner calls ``execute`` instead, which also notes in a ``Journal`` what a write
changed: the log record to append (its effect as encoded operations, ``minidb.wal.encode_ops``:
a SET is a ``Put``, a DEL a ``Remove``; only for writes that changed something: every SET, a DEL
only when the key existed) and how to undo it. Replay calls ``apply_ops`` with the operations
read back from the log, so a value comes back exactly as it was acknowledged, byte for byte.

Theory of operation for SCAN: keys are visited in byte order, and the cursor is ``+`` followed
by the last key returned, so a scan resumes *after* that key whatever was inserted or deleted in
between. Every key present for the whole scan is therefore returned exactly once; a key written
or deleted meanwhile may or may not be. To find "the next keys after X" cheaply, a bucket that
has been scanned keeps a sorted list of its keys, maintained on insert and delete from then on
(a bisect and a memmove); buckets that are never scanned pay nothing.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from minidb.errors import WalError
from minidb.protocol import (
    NIL,
    OK,
    SCAN_START,
    Delete,
    Get,
    Invalid,
    Request,
    Scan,
    Set,
    error_reply,
    keys_reply,
)
from minidb.wal import Expire, Flush, Op, Put, Remove, encode_put, encode_remove

_MISSING = None
"""Undo marker: the key did not exist before the write."""

UndoEntry = tuple[bytes, bytes, bytes | None]
"""(bucket, key, previous value or None) for one write, in the order the writes happened."""


class Journal:
    """What the writes of one batch did: records for the log, and how to take them back."""

    __slots__ = ("records", "undo")

    def __init__(self) -> None:
        self.records: list[bytes] = []
        self.undo: list[UndoEntry] = []

    def clear(self) -> None:
        self.records.clear()
        self.undo.clear()


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """Counts of what the state holds and what was applied to it since start."""

    buckets: int
    keys: int
    gets: int
    get_hits: int
    sets: int
    dels: int
    del_hits: int
    scans: int
    invalid: int


class StoreState:
    """Buckets of keys and values, all ``bytes``; no locks: exactly one owner calls it."""

    def __init__(self) -> None:
        self._buckets: dict[bytes, dict[bytes, bytes]] = {}
        self._sorted: dict[bytes, list[bytes]] = {}
        self._keys = 0
        self._gets = self._get_hits = self._sets = 0
        self._dels = self._del_hits = self._scans = self._invalid = 0

    # -- applying requests -------------------------------------------------------------------

    def apply(self, request: Request) -> bytes:
        """Apply one request and return its reply line (replay and tests use this)."""
        return self.execute(request, None)

    def execute(self, request: Request, journal: Journal | None) -> bytes:
        """Apply one request, noting a changing write in ``journal``; return the reply line."""
        # Dispatch on the exact type, most frequent first: this runs once per request, and an
        # ``isinstance`` chain or a ``match`` statement costs measurably more here.
        kind = type(request)
        if kind is Get:
            self._gets += 1
            bucket = self._buckets.get(request.bucket)  # type: ignore[union-attr]
            value = bucket.get(request.key) if bucket else None  # type: ignore[union-attr]
            if value is None:
                return NIL
            self._get_hits += 1
            return b"VALUE " + value + b"\n"
        if kind is Set:
            request = cast(Set, request)
            self._sets += 1
            old = self._put(request.bucket, request.key, request.value)
            if journal is not None:
                journal.records.append(encode_put(request.bucket, request.key, request.value))
                journal.undo.append((request.bucket, request.key, old))
            return OK
        if kind is Delete:
            request = cast(Delete, request)
            self._dels += 1
            old = self._remove(request.bucket, request.key)
            if old is None:
                return NIL
            self._del_hits += 1
            if journal is not None:
                journal.records.append(encode_remove(request.bucket, request.key))
                journal.undo.append((request.bucket, request.key, old))
            return OK
        if kind is Scan:
            request = cast(Scan, request)
            self._scans += 1
            return self._scan(request)
        request = cast(Invalid, request)
        self._invalid += 1
        return error_reply(request.reason)

    def apply_ops(self, ops: list[Op]) -> None:
        """Apply one log record's operations, in order (replay).

        This store keeps no expiry times, and the line protocol never sets one: an operation
        carrying one is refused with ``WalError`` rather than applied as if it had none.
        """
        for op in ops:
            if isinstance(op, Put) and op.expire_at_ms is None:
                self._put(op.bucket, op.key, op.value)
            elif isinstance(op, Remove):
                self._remove(op.bucket, op.key)
            elif isinstance(op, Flush):
                names = list(self._buckets) if op.bucket is None else [op.bucket]
                for name in names:
                    for key in list(self._buckets.get(name, ())):
                        self._remove(name, key)
            elif isinstance(op, Expire) and op.expire_at_ms is None:
                pass  # persisting a key that has no expiry changes nothing
            else:
                raise WalError(f"this store keeps no expiry times: {op!r}")

    def rollback(self, journal: Journal) -> None:
        """Take back every write noted in ``journal``, newest first."""
        for bucket, key, old in reversed(journal.undo):
            if old is _MISSING:
                self._remove(bucket, key)
            else:
                self._put(bucket, key, old)
        journal.clear()

    # -- reading the whole store -------------------------------------------------------------

    def records(self) -> Iterator[bytes]:
        """The whole store as encoded ``Put`` payloads, one per key (what a checkpoint writes)."""
        for name, bucket in self._buckets.items():
            for key, value in bucket.items():
                yield encode_put(name, key, value)

    def frozen_records(self) -> Iterator[bytes]:
        """``records()`` of the store as it is now, safe to iterate in another thread later.

        Copies each bucket's dict here (the values are immutable ``bytes``, shared, not
        copied): this copy is the whole pause a checkpoint costs the owner; encoding and
        writing the snapshot then run off the owner while writes go on.
        """
        copy = [(name, bucket.copy()) for name, bucket in self._buckets.items()]

        def generate() -> Iterator[bytes]:
            for name, bucket in copy:
                for key, value in bucket.items():
                    yield encode_put(name, key, value)

        return generate()

    def __len__(self) -> int:
        return self._keys

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(
            buckets=len(self._buckets),
            keys=self._keys,
            gets=self._gets,
            get_hits=self._get_hits,
            sets=self._sets,
            dels=self._dels,
            del_hits=self._del_hits,
            scans=self._scans,
            invalid=self._invalid,
        )

    # -- internals ---------------------------------------------------------------------------

    def _put(self, name: bytes, key: bytes, value: bytes) -> bytes | None:
        bucket = self._buckets.get(name)
        if bucket is None:
            bucket = self._buckets[name] = {}
        old = bucket.get(key)
        bucket[key] = value
        if old is None:
            self._keys += 1
            order = self._sorted.get(name)
            if order is not None:
                insort(order, key)
        return old

    def _remove(self, name: bytes, key: bytes) -> bytes | None:
        bucket = self._buckets.get(name)
        if bucket is None:
            return None
        old = bucket.pop(key, None)
        if old is None:
            return None
        self._keys -= 1
        order = self._sorted.get(name)
        if order is not None:
            del order[bisect_right(order, key) - 1]
        if not bucket:
            del self._buckets[name]
            self._sorted.pop(name, None)
        return old

    def _scan(self, request: Scan) -> bytes:
        bucket = self._buckets.get(request.bucket)
        if not bucket:
            return keys_reply(SCAN_START, [])
        order = self._sorted.get(request.bucket)
        if order is None:
            order = self._sorted[request.bucket] = sorted(bucket)
        start = 0 if request.cursor == SCAN_START else bisect_right(order, request.cursor[1:])
        page = order[start : start + request.limit]
        done = start + request.limit >= len(order)
        return keys_reply(SCAN_START if done else b"+" + page[-1], page)
