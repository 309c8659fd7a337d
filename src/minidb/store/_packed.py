"""A flat tuple kept as ONE exact-size immutable ``bytes``: the packed form a small hash
(``_hashvalue``: field, value, ...) and a small sorted set (``_zsetvalue``: score, member, ...)
keep their contents in, in place of a dict and an object per element (issue 19).

Theory of operation
===================

The packed form is ``marshal.dumps(flat, MARSHAL_VERSION)``: ``marshal`` encodes and decodes a
tuple of ``bytes`` and ``float`` at C speed, so a reader decodes the whole tuple (``unpack``)
and a change encodes it anew (``pack``); what that costs each container, and where each stops
packing, its own module says. Its count of items is read from the header without decoding
(``length``), for ``len``.

Format 2 for both: a tuple is ``(`` and a 4-byte little-endian count, a ``bytes`` ``s``, a
4-byte length and its data, a float ``g`` and its 8 bytes, and nothing else. Formats 3 and 4
add back-references (a flag on every object referenced elsewhere, which a store's elements
always are, and a table ``dumps`` fills and ``loads`` appends to: slower both ways) and, in
4, a 1-byte count for a tuple of under 256 items. That saves 3 bytes a container, which does
not move a hash of 4 short fields or a sorted set of 5 members out of their pymalloc size
class (16 bytes: 116 -> 119 bytes for the hash is still a 128-byte block, 129 -> 132 for the
sorted set a 144-byte one), so both rows of ``bench/memory.py`` stay where they were.

The packed form lives only in memory, never in the log or a snapshot (they carry the
elements), so the version can change with the code. It is never changed in place: a copy of a
container shares it.
"""

from __future__ import annotations

import marshal
import struct
from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

MARSHAL_VERSION = 2
"""Pinned so the format, and ``length``'s reading of its header, do not drift (module
docstring: why not 4)."""

_TUPLE = ord("(")
"""marshal's type byte of a tuple with a 4-byte count (format 2 writes no reference flag)."""
_COUNT = struct.Struct("<I")
"""The tuple's item count, after its type byte."""
_HEADER = 1 + _COUNT.size

unpack: Callable[[bytes], tuple[Any, ...]] = marshal.loads
"""The flat tuple a packed ``bytes`` holds (``marshal.loads`` itself: called on every read of
a packed container, so without a Python frame around it). A buffer cut short or not written
by ``pack`` raises ``EOFError``, ``ValueError`` or ``TypeError``, as ``marshal`` does."""


def pack(flat: tuple[Any, ...]) -> bytes:
    """``flat`` (its items ``bytes`` or ``float``) packed, in a ``bytes`` of its exact size.

    Copied once more: ``marshal.dumps`` writes into a buffer of at least 1 KiB (C ``malloc``,
    past CPython's small-object allocator) and shrinks it in place; kept there, each small
    container's bytes would leave a hole in the C heap that the server's other allocations
    rarely refill (measured for packed sorted sets, 28e006f: 384 bytes a key in the server, 293
    in one process). The copy, sized exactly, lives in pymalloc's pools."""
    return bytes(memoryview(marshal.dumps(flat, MARSHAL_VERSION)))


def pack_pairs(pairs: Iterable[tuple[Any, Any]]) -> bytes:
    """``pairs`` packed flat: a, b, a, b, ..."""
    return pack(tuple(chain.from_iterable(pairs)))


def length(packed: bytes) -> int:
    """The items in ``packed``, read from its header without decoding them; ``ValueError`` if
    it does not start as ``pack`` writes."""
    if len(packed) < _HEADER or packed[0] != _TUPLE:
        raise ValueError(f"not a packed tuple: {packed[:_HEADER]!r}")
    return _COUNT.unpack_from(packed, 1)[0]  # type: ignore[no-any-return]


def pair_count(packed: bytes) -> int:
    """The pairs in ``packed`` (a packed ``pack_pairs``), from its header."""
    return length(packed) >> 1


EMPTY = pack(())
"""The packed empty tuple (one object for every empty container)."""
