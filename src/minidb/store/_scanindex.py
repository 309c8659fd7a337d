"""The SCAN index of a bucket: its keys in hash order, so a cursor is a stable position.

Theory of operation
===================

A bucket that has been scanned keeps a ``ScanIndex``: its keys sorted by a 64-bit hash
(``hash(key)`` of the process, which CPython caches on the bytes object), as parallel arrays
(8 bytes of hash in an ``array('Q')`` and one list slot per key: 16 bytes a key), maintained on
every insert and delete from then on with a bisect and a memmove; buckets never scanned pay
nothing, and an index can be dropped and rebuilt at any time without breaking a cursor.

The cursor is the hash to resume from: a call returns every key whose hash lies in
[cursor, next cursor), all keys of equal hash together, and the next cursor is one past the
last hash returned (0 when the end is reached). The ranges of successive calls tile the hash
space from 0 to the end whatever was inserted or deleted in between, so every key present for
the whole scan is returned exactly once, and the cursor is a plain integer below 2**64 that
stores nothing on the server. Keyed by the process's hash seed, a cursor does not survive a
restart (a scan resumed after one may miss keys).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable

_HASH_MASK = (1 << 64) - 1


def key_hash(key: bytes) -> int:
    """A key's place in a SCAN index: its hash as an unsigned 64-bit integer."""
    return hash(key) & _HASH_MASK


class ScanIndex:
    """A bucket's keys in hash order, for SCAN cursors and random picks."""

    __slots__ = ("hashes", "keys")

    def __init__(self, keys: Iterable[bytes]) -> None:
        # Equal hashes may come in any order: a page always takes them together.
        self.keys = sorted(keys, key=key_hash)
        self.hashes = array("Q", map(key_hash, self.keys))

    def insert(self, key: bytes) -> None:
        h = key_hash(key)
        at = bisect_right(self.hashes, h)
        self.hashes.insert(at, h)
        self.keys.insert(at, key)

    def remove(self, key: bytes) -> None:
        h = key_hash(key)
        at = bisect_left(self.hashes, h)
        while self.keys[at] != key:  # equal hashes: a few steps at most
            at += 1
        del self.hashes[at]
        del self.keys[at]

    def page(self, cursor: int, count: int) -> tuple[int, list[bytes]]:
        """Keys from hash ``cursor`` on: ``count`` of them, plus any sharing the last hash."""
        hashes = self.hashes
        n = len(hashes)
        start = bisect_left(hashes, cursor)
        end = min(start + count, n)
        if start < end < n:
            last = hashes[end - 1]
            while end < n and hashes[end] == last:
                end += 1
        if end >= n:
            return 0, self.keys[start:]
        return hashes[end - 1] + 1, self.keys[start:end]
