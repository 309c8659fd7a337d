"""A stream's value: entries in id order plus the metadata that outlives them, and the one
function (``stream_apply``) by which the log's stream elements change it, which the commands
(``_streams``) and replay share.

Theory of operation
===================

An id is one int, ``ms << 64 | seq`` (``minidb.wal._ops``), so ids compare, sort and bisect
as ints. A ``StreamValue`` is a ``dict`` id -> the entry's fields and values packed into one
``bytes`` as the log packs them (``encode_stream_pairs``: one object where a tuple of fields
costs an object each, 320 -> about 170 bytes an entry of two short pairs; immutable, shared by
a copy; the log's ENTRY element is its id before it; unpacked only for a reply), plus
``ids``, the ids in increasing order, a plain list, of which the first ``head`` are gone.
Entries are only ever appended at the end (an id is always above the stream's ``last_id``,
which is at least every entry's id), so the list stays sorted by ``append`` alone; a range
(XRANGE, XREAD) is two bisections and a slice, O(log n + count). A trim removes a prefix:
it moves ``head`` and drops the dead slots only once they are half the list, so an exact
``XADD ... MAXLEN n`` at its cap costs O(1) amortized rather than a memmove of the list
(200 us an XADD at 200k entries). XDEL deletes by bisection (a memmove, as rare as XDEL).
The dict is the id -> fields map and is never iterated for order: an undo puts a deleted
entry back into it out of insertion order. Read the ids through ``live_ids``.

The metadata is Redis's: ``last_id`` (the greatest id ever added, which XADD's next id must
exceed and XREAD ``$`` reads), ``entries_added`` (every XADD ever) and ``max_deleted_id``
(the greatest id XDEL removed). An empty stream is a value like any other: Redis keeps a
stream whose last entry XDEL or XTRIM removed, with its metadata.

Redis 7.2 keeps a stream as a radix tree of listpacks (``t_stream.c``); ``OBJECT ENCODING``
answers ``stream`` whatever its size, and minidb says the same. The nodes are not kept: an
approximate trim (``~``) removes steps of 100 entries, the size of a node of small entries
(``_streams._trim_bound``; ``docs/commands.md``, "Streams").
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from typing import Any

from minidb.store._scanindex import ScanIndex
from minidb.wal._ops import (
    STREAM_DELETE,
    STREAM_ENTRY,
    STREAM_ENTRY_HEAD_BYTES,
    STREAM_META,
    decode_stream_element,
    decode_stream_pairs,
    encode_stream_meta,
    stream_entry_element,
)

STREAM = "stream"
"""What ``OBJECT ENCODING`` answers for a stream (Redis's ``OBJ_ENCODING_STREAM``)."""

Meta = tuple[int, int, int]
"""(last id, entries added, max deleted id): what a META element carries."""
Entry = tuple[int, bytes]
"""(id, its fields and values packed by ``encode_stream_pairs``)."""
Read = tuple[int, tuple[bytes, ...]]
"""(id, (field, value, ...)): an entry as a reply shows it."""


class StreamValue(dict[int, bytes]):
    """A stream: id -> packed fields and values, ``ids`` in increasing order, its metadata."""

    __slots__ = (
        "encoding", "entries_added", "epoch", "head", "ids", "last_id", "max_deleted_id", "scan",
    )  # fmt: skip
    encoding: str
    epoch: int
    scan: ScanIndex | None
    ids: list[int]
    head: int
    last_id: int
    entries_added: int
    max_deleted_id: int

    @property
    def last_entry_id(self) -> int | None:
        """The greatest id of an entry (not ``last_id``, which a deleted one may hold)."""
        return self.ids[-1] if len(self.ids) > self.head else None

    @property
    def meta(self) -> Meta:
        return (self.last_id, self.entries_added, self.max_deleted_id)

    def set_meta(self, meta: Meta) -> None:
        self.last_id, self.entries_added, self.max_deleted_id = meta


def new_stream(epoch: int) -> StreamValue:
    """An empty stream, its metadata all zero (what XADD creates before appending)."""
    s = StreamValue()
    s.encoding, s.epoch, s.scan, s.ids, s.head = STREAM, epoch, None, [], 0
    s.last_id = s.entries_added = s.max_deleted_id = 0
    return s


def live_ids(s: StreamValue) -> list[int]:
    """The ids of the entries, in order (a new list)."""
    return s.ids[s.head :]


def count_below(s: StreamValue, entry_id: int) -> int:
    """How many entries have an id below ``entry_id``."""
    return bisect_left(s.ids, entry_id, s.head) - s.head


def nth_id(s: StreamValue, n: int) -> int:
    """The id of the entry at position ``n`` (0: the oldest)."""
    return s.ids[s.head + n]


def stream_append(s: StreamValue, entry_id: int, packed: bytes) -> None:
    """Append an entry whose id is above every entry's (the metadata is the caller's);
    ``ValueError`` otherwise (a record replay cannot take)."""
    last = s.last_entry_id
    if last is not None and entry_id <= last:
        raise ValueError(f"stream entry id {entry_id:#x} is not above the last entry")
    s.ids.append(entry_id)
    s[entry_id] = packed


def stream_delete(s: StreamValue, entry_id: int) -> bytes | None:
    """Delete the entry of ``entry_id`` if present; its packed fields, or None."""
    packed = s.pop(entry_id, None)
    if packed is not None:
        ids = s.ids
        del ids[bisect_left(ids, entry_id, s.head)]
    return packed


def stream_trim_through(s: StreamValue, bound: int) -> list[Entry]:
    """Delete every entry whose id is at most ``bound`` (a prefix); those deleted, in order."""
    ids, head = s.ids, s.head
    cut = bisect_right(ids, bound, head)
    removed = [(entry_id, s.pop(entry_id)) for entry_id in ids[head:cut]]
    if cut * 2 >= len(ids):
        del ids[:cut]  # the dead slots are half the list: drop them (amortized O(1))
        s.head = 0
    else:
        s.head = cut
    return removed


def stream_range(
    s: StreamValue, start: int, end: int, count: int, reverse: bool = False
) -> list[Read]:
    """The entries with ``start <= id <= end``, at most ``count`` of them (0: all), from the
    lowest id (``reverse``: from the highest)."""
    ids = s.ids
    lo, hi = bisect_left(ids, start, s.head), bisect_right(ids, end, s.head)
    if lo >= hi:
        return []
    if reverse:
        stop = lo if not count or hi - lo <= count else hi - count
        chosen = ids[hi - 1 : stop - 1 if stop else None : -1]
    else:
        chosen = ids[lo : hi if not count else min(hi, lo + count)]
    return [(entry_id, decode_stream_pairs(s[entry_id])) for entry_id in chosen]


def stream_restore(s: StreamValue, meta: Meta, added: int, removed: Sequence[Entry]) -> None:
    """Take back a change: drop the ``added`` newest entries, put ``removed`` back (anywhere
    in the stream), restore the metadata. The undo of the journal (``_streams.StreamUndo``)."""
    ids = s.ids
    for _ in range(added):
        del s[ids.pop()]
    if removed:
        for entry_id, packed in removed:
            s[entry_id] = packed
        # Two sorted runs: O(n).
        ids[:] = sorted(ids[s.head :] + [entry_id for entry_id, _ in removed])
        s.head = 0
    s.set_meta(meta)


def stream_apply(s: StreamValue, elements: Sequence[bytes]) -> None:
    """Apply the log's stream elements in order (``docs/wal-format.md``, "Streams"): an ENTRY
    appended, a META set, a DELETE or TRIM that must find its entries. ``ValueError`` for an
    element the stream cannot take."""
    for element in elements:
        decoded: Any = decode_stream_element(element)
        what = decoded[0]
        if what == STREAM_ENTRY:
            stream_append(s, decoded[1], element[STREAM_ENTRY_HEAD_BYTES:])
        elif what == STREAM_META:
            s.set_meta(decoded[1:])
        elif what == STREAM_DELETE:
            if stream_delete(s, decoded[1]) is None:
                raise ValueError(f"no stream entry {decoded[1]:#x} to delete")
        elif not stream_trim_through(s, decoded[1]):
            raise ValueError(f"no stream entry at or below {decoded[1]:#x} to trim")


def stream_elements(s: StreamValue) -> Iterator[bytes]:
    """The log's elements of the whole stream: its META, then every ENTRY in id order."""
    yield encode_stream_meta(*s.meta)
    for entry_id in live_ids(s):
        yield stream_entry_element(entry_id, s[entry_id])


def stream_from(elements: Sequence[bytes], epoch: int) -> StreamValue:
    """A stream of the log's elements (a ``PutContainer``: a META, then ENTRYs)."""
    s = new_stream(epoch)
    stream_apply(s, elements)
    return s


def stream_copy(s: Any, epoch: int) -> StreamValue:
    """A copy (COPY, copy-on-write): the fields' tuples are immutable and shared."""
    copy = StreamValue(s)
    copy.encoding, copy.epoch, copy.scan, copy.head = STREAM, epoch, None, 0
    copy.ids = live_ids(s)
    copy.set_meta(s.meta)
    return copy
