"""The hierarchical timer wheel: where every timer of a minidb loop lives.

Theory of operation
===================

Time is counted in integer *ticks* (the loop uses 1 ms). The wheel has ``NUM_LEVELS`` = 6
levels of ``SLOTS`` = 64 slots. A slot of level ``l`` spans ``64**l`` ticks, so a level spans
``64**(l+1)`` ticks: 64 ms, ~4 s, ~4 min, ~4.7 h, ~12.4 days and ~2.2 years at 1 ms.

``elapsed`` is the tick the wheel has been advanced to. An entry due at tick ``t`` is filed at
the level of the highest bit in which ``elapsed`` and ``t`` differ (the XOR odometer: like the
dials of a car's odometer, only the dials that still have to turn matter), in the slot given by
that level's six bits of ``t``. A deadline at or before ``elapsed`` is already due and goes to
the *pending* list. A deadline beyond the top level's span goes into the top level and simply
comes round again: when its slot is processed it is re-filed, possibly into the same slot for
another lap (Tokio's "pseudo-ring"), so the horizon is unbounded.

Each level keeps a 64-bit occupancy mask. The next occupied slot after "now" is found without
a scan: rotate the mask right to the slot after the current one and count trailing zeros. Levels are
searched from 0 upward; the first non-empty level holds the earliest slot, because a level's
remaining slots all start before the next slot of the level above.

Advancing (``poll``) processes due slots in order. Processing takes the whole slot first, then
looks at each entry's true deadline: due entries come out; the others are re-filed relative to
the slot's start, i.e. cascade to a lower level. Every entry therefore moves at most once per
level. Level-0 slots hold exactly one tick, so nothing is ever released before its deadline.

Costs: insert, cancel and reset are O(1) (dict insert/delete keyed by an integer, a few bit
operations, no search and no rebuild). Each slot is a ``dict`` used as an insertion-ordered set,
which gives O(1) unlink of any entry.

Reset moves a deadline in place. Moving it *later* while the entry sits in a wheel slot costs two
attribute stores: the entry stays where it is and is re-filed when its old slot comes due (Tokio's
lazy extension). That is the idle-timeout pattern, reset on every request. Moving it earlier
unlinks and re-files it.

Ordering: entries come out in deadline order, FIFO among equal deadlines. "FIFO" means by the
time of the last insert or reset, as if a reset were a cancel plus a new insert: every insert and
reset draws a fresh sequence number and the batch released from one slot is sorted by it (the
order inside a slot can be disturbed by lazy extensions and cascades).

This module is pure: no asyncio, no clock. The loop (``_loop.py``) turns seconds into ticks and
entries into callbacks.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import Generic, Protocol, TypeVar

NUM_LEVELS = 6
"""Levels of the wheel; with 64 slots each they cover ``64**6 = 2**36`` ticks before wrapping."""

SLOT_BITS = 6
SLOTS = 1 << SLOT_BITS
"""Slots per level: one bit of a 64-bit occupancy mask each."""

SLOT_MASK = SLOTS - 1
MAX_SPAN = 1 << (NUM_LEVELS * SLOT_BITS)
"""Ticks covered by one lap of the top level (2**36 ms is about 2.2 years)."""

_MASK64 = (1 << 64) - 1
_TOP = NUM_LEVELS - 1

# ``where`` codes of an entry besides a slot index (0 .. NUM_LEVELS * SLOTS - 1).
PENDING = -1
"""The entry was already due when inserted; it comes out at the next poll."""
UNFILED = -2
"""The entry is not in the wheel (never inserted, fired, or cancelled)."""

# Level of the highest differing bit, indexed by ``(elapsed ^ when | SLOT_MASK).bit_length()``;
# lengths beyond the table mean "past the top level's span", which is the top level too.
_LEVEL_FOR_BIT_LENGTH = tuple(max(n - 1, 0) // SLOT_BITS for n in range(NUM_LEVELS * SLOT_BITS + 1))
_LEVEL_TABLE_TOP = NUM_LEVELS * SLOT_BITS

_UNKNOWN = (-1, -1, -1)
"""Marks the cached next expiration as stale (a real one never has a negative level)."""


class Entry(Protocol):
    """What the wheel needs of an entry: four attributes it owns and nobody else writes."""

    _wheel_tick: int  # the true deadline, in ticks
    _wheel_seq: int  # order among equal deadlines (drawn at the last insert or reset)
    _wheel_key: int  # the key it is filed under in its slot dict
    _wheel_where: int  # slot index, PENDING or UNFILED


E = TypeVar("E", bound=Entry)


class WheelEntry:
    """A ready-made entry carrying one payload, for users that need no handle class of their own."""

    __slots__ = ("_wheel_key", "_wheel_seq", "_wheel_tick", "_wheel_where", "payload")

    def __init__(self, payload: object = None) -> None:
        self.payload = payload
        self._wheel_tick = 0
        self._wheel_seq = 0
        self._wheel_key = 0
        self._wheel_where = UNFILED

    @property
    def deadline(self) -> int:
        """The tick this entry is due at."""
        return self._wheel_tick

    @property
    def scheduled(self) -> bool:
        """Whether the entry is in a wheel now."""
        return self._wheel_where != UNFILED

    def __repr__(self) -> str:
        return f"<WheelEntry {self.payload!r} due={self._wheel_tick} seq={self._wheel_seq}>"


@dataclass(frozen=True)
class WheelStatistics:
    """A point-in-time view of a wheel."""

    elapsed: int
    """The tick the wheel has been advanced to."""
    entries: int
    """Entries in the wheel, pending ones included."""
    pending: int
    """Entries already due, waiting for the next poll."""
    per_level: tuple[int, ...]
    """Entries filed at each level, level 0 first."""
    next_expiration: int | None
    """The tick at which the next slot must be processed, or None when empty."""


_seq_of = attrgetter("_wheel_seq")
_tick_and_seq_of = attrgetter("_wheel_tick", "_wheel_seq")


class TimerWheel(Generic[E]):
    """Six levels of 64 slots of entries, advanced by ``poll(now)``; see the module docstring."""

    __slots__ = (
        "_count",
        "_disordered",
        "_elapsed",
        "_next",
        "_occupied",
        "_pending",
        "_seq",
        "_slots",
    )

    def __init__(self, elapsed: int = 0) -> None:
        if elapsed < 0:
            raise ValueError(f"elapsed must be >= 0, got {elapsed}")
        self._elapsed = elapsed
        self._slots: list[dict[int, E]] = [{} for _ in range(NUM_LEVELS * SLOTS)]
        self._occupied = [0] * NUM_LEVELS
        self._pending: dict[int, E] = {}
        self._seq = itertools.count(1)
        self._count = 0
        # Cached result of _next_expiration(), or _UNKNOWN after anything that may change it.
        self._next: tuple[int, int, int] | None = None
        # Slots that received a lazily extended entry and so may be out of sequence order.
        self._disordered: set[int] = set()

    # -- queries -------------------------------------------------------------------------

    @property
    def elapsed(self) -> int:
        """The tick the wheel has been advanced to."""
        return self._elapsed

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def poll_at(self) -> int | None:
        """The tick at which ``poll`` has work to do, or None when the wheel is empty.

        This is the start of the earliest occupied slot: a lower bound on every deadline in the
        wheel, exact for level 0. It is ``elapsed`` when entries are pending.
        """
        if not self._count:
            return None
        if self._pending:
            return self._elapsed
        found = self._next
        if found is _UNKNOWN:
            found = self._next = self._next_expiration()
        assert found is not None, f"wheel holds {self._count} entries but no slot is occupied"
        return found[2]

    def statistics(self) -> WheelStatistics:
        per_level = tuple(
            sum(len(self._slots[(level << SLOT_BITS) | s]) for s in range(SLOTS))
            for level in range(NUM_LEVELS)
        )
        return WheelStatistics(
            elapsed=self._elapsed,
            entries=self._count,
            pending=len(self._pending),
            per_level=per_level,
            next_expiration=self.poll_at(),
        )

    # -- mutation ------------------------------------------------------------------------

    def insert(self, entry: E, tick: int) -> None:
        """File ``entry`` to come due at ``tick``; a tick at or before ``elapsed`` is due now."""
        if entry._wheel_where != UNFILED:
            raise ValueError(f"{entry!r} is already in a wheel")
        seq = next(self._seq)
        entry._wheel_tick = tick
        entry._wheel_seq = seq
        entry._wheel_key = seq
        self._count += 1
        self._next = _UNKNOWN
        # _file() inlined: this is the hot path of every call_at.
        elapsed = self._elapsed
        if tick <= elapsed:
            self._pending[seq] = entry
            entry._wheel_where = PENDING
            return
        bits = ((elapsed ^ tick) | SLOT_MASK).bit_length()
        level = _LEVEL_FOR_BIT_LENGTH[bits] if bits <= _LEVEL_TABLE_TOP else _TOP
        slot = (tick >> (level * SLOT_BITS)) & SLOT_MASK
        where = (level << SLOT_BITS) | slot
        self._slots[where][seq] = entry
        self._occupied[level] |= 1 << slot
        entry._wheel_where = where

    def remove(self, entry: E) -> None:
        """Take ``entry`` out of the wheel at once (O(1)); it must be in this wheel."""
        self._unlink(entry)
        entry._wheel_where = UNFILED
        self._count -= 1

    def reset(self, entry: E, tick: int) -> None:
        """Move ``entry``'s deadline to ``tick`` in place; it must be in this wheel.

        Later deadlines are taken lazily (two stores, re-filed when the old slot comes due);
        earlier ones unlink and re-file. Either way the entry now ranks after entries already
        in the wheel with the same deadline.
        """
        where = entry._wheel_where
        if where == UNFILED:
            raise ValueError(f"{entry!r} is not in a wheel")
        seq = next(self._seq)
        if where >= 0 and tick > entry._wheel_tick:
            entry._wheel_tick = tick
            entry._wheel_seq = seq
            return
        self._unlink(entry)
        entry._wheel_tick = tick
        entry._wheel_seq = seq
        entry._wheel_key = seq
        self._file(entry, tick, seq)

    def poll(self, now: int) -> list[E]:
        """Advance to tick ``now`` and return every entry due by then.

        The result is in deadline order, FIFO among equal deadlines. Returned entries are out
        of the wheel. Moving ``now`` backwards is allowed and advances nothing.
        """
        out: list[E] = []
        if not self._count:
            if now > self._elapsed:
                self._elapsed = now
            return out
        if self._pending:
            pending = self._pending
            self._pending = {}
            out = sorted(pending.values(), key=_tick_and_seq_of)
            for entry in out:
                entry._wheel_where = UNFILED
            self._count -= len(out)
        while self._count:
            found = self._next
            if found is _UNKNOWN:
                found = self._next = self._next_expiration()
            if found is None or found[2] > now:
                break
            self._next = _UNKNOWN
            self._process(found[0], found[1], found[2], now, out)
        if now > self._elapsed:
            self._elapsed = now
        return out

    def clear(self) -> list[E]:
        """Remove and return every entry, in no particular order."""
        out = list(self._pending.values())
        for bucket in self._slots:
            out.extend(bucket.values())
            bucket.clear()
        self._pending = {}
        self._occupied = [0] * NUM_LEVELS
        self._next = None
        self._disordered.clear()
        for entry in out:
            entry._wheel_where = UNFILED
        self._count = 0
        return out

    def __iter__(self) -> Iterator[E]:
        """Every entry in the wheel, in no particular order (for introspection)."""
        yield from self._pending.values()
        for bucket in self._slots:
            yield from bucket.values()

    # -- internals -----------------------------------------------------------------------

    def _file(self, entry: E, tick: int, key: int) -> None:
        elapsed = self._elapsed
        if tick <= elapsed:
            self._pending[key] = entry
            entry._wheel_where = PENDING
            return
        bits = ((elapsed ^ tick) | SLOT_MASK).bit_length()
        level = _LEVEL_FOR_BIT_LENGTH[bits] if bits <= _LEVEL_TABLE_TOP else _TOP
        slot = (tick >> (level * SLOT_BITS)) & SLOT_MASK
        where = (level << SLOT_BITS) | slot
        self._slots[where][key] = entry
        self._occupied[level] |= 1 << slot
        entry._wheel_where = where

    def _unlink(self, entry: E) -> None:
        self._next = _UNKNOWN
        where = entry._wheel_where
        if where >= 0:
            bucket = self._slots[where]
            del bucket[entry._wheel_key]
            if not bucket:
                self._occupied[where >> SLOT_BITS] &= ~(1 << (where & SLOT_MASK))
        elif where == PENDING:
            del self._pending[entry._wheel_key]
        else:
            raise ValueError(f"{entry!r} is not in a wheel")

    def _next_expiration(self) -> tuple[int, int, int] | None:
        """(level, slot, start tick) of the earliest occupied slot, or None."""
        elapsed = self._elapsed
        for level, occupied in enumerate(self._occupied):
            if not occupied:
                continue
            shift = level * SLOT_BITS
            # Search from the slot after "now": the current slot of a level cannot hold an entry
            # (it would sit lower), except on the top level, where it means the next lap and so
            # comes last.
            first = ((elapsed >> shift) + 1) & SLOT_MASK
            rotated = ((occupied >> first) | (occupied << (SLOTS - first))) & _MASK64
            slot = ((rotated & -rotated).bit_length() - 1 + first) & SLOT_MASK
            level_span = 1 << (shift + SLOT_BITS)
            start = (elapsed & -level_span) + (slot << shift)
            if start <= elapsed:
                # Only the top level wraps: its slot behind "now" belongs to the next lap.
                assert level == _TOP, (
                    f"level {level} slot {slot} starts at {start}, not after elapsed {elapsed}"
                )
                start += level_span
            return level, slot, start
        return None

    def _process(self, level: int, slot: int, start: int, now: int, out: list[E]) -> None:
        """Release or cascade every entry of one slot whose start tick has been reached.

        Called only for the earliest occupied slot, so every lower level is empty.
        """
        where = (level << SLOT_BITS) | slot
        bucket = self._slots[where]
        self._slots[where] = {}
        self._occupied[level] &= ~(1 << slot)
        # Re-filing is relative to the slot's start, which becomes the wheel's position.
        self._elapsed = start
        disordered = where in self._disordered
        self._disordered.discard(where)
        end = start + (1 << (level * SLOT_BITS))
        if level and end <= now + 1:
            self._release_whole(bucket, end, disordered, out)
            return
        slots = self._slots
        occupied = self._occupied
        due: list[E] = []
        for entry in bucket.values():
            tick = entry._wheel_tick
            if tick <= start:
                entry._wheel_where = UNFILED
                due.append(entry)
                continue
            # Cascade: _file() inlined (tick > start, so never pending).
            seq = entry._wheel_seq
            bits = ((start ^ tick) | SLOT_MASK).bit_length()
            lvl = _LEVEL_FOR_BIT_LENGTH[bits] if bits <= _LEVEL_TABLE_TOP else _TOP
            s = (tick >> (lvl * SLOT_BITS)) & SLOT_MASK
            target = (lvl << SLOT_BITS) | s
            slots[target][seq] = entry
            occupied[lvl] |= 1 << s
            entry._wheel_where = target
            if disordered or entry._wheel_key != seq:
                # A lazily extended entry (or one from a slot that had one) may arrive after
                # entries with a later sequence number.
                self._disordered.add(target)
                entry._wheel_key = seq
        if due:
            # A slot's entries arrive in sequence order (a cascade of an ordered parent slot,
            # then fresh inserts), unless a lazily extended entry was re-filed into it.
            if disordered:
                due.sort(key=_seq_of)
            out.extend(due)
            self._count -= len(due)

    def _release_whole(
        self, bucket: dict[int, E], end: int, disordered: bool, out: list[E]
    ) -> None:
        """Release a higher-level slot whose whole span is due, without cascading it.

        When time has jumped past a coarse slot's end (a long callback, a sleeping process),
        grouping its entries by tick is several times cheaper than filing each one a level
        lower only to take it out again a moment later.
        """
        groups: dict[int, list[E]] = {}
        later: list[E] = []
        for entry in bucket.values():
            tick = entry._wheel_tick
            if tick >= end:  # lazily extended past this slot: file it again
                later.append(entry)
                continue
            entry._wheel_where = UNFILED
            if entry._wheel_key != entry._wheel_seq:
                disordered = True  # lazily extended inside this slot: its seq moved on
            group = groups.get(tick)
            if group is None:
                groups[tick] = [entry]
            else:
                group.append(entry)
        released = 0
        for tick in sorted(groups):
            group = groups[tick]
            if disordered and len(group) > 1:
                group.sort(key=_seq_of)
            out.extend(group)
            released += len(group)
        self._count -= released
        for entry in later:
            self._refile(entry, disordered)

    def _refile(self, entry: E, disordered: bool) -> None:
        """File an entry taken out of a processed slot again, under its current sequence number."""
        seq = entry._wheel_seq
        if disordered or entry._wheel_key != seq:
            entry._wheel_key = seq
            self._file(entry, entry._wheel_tick, seq)
            self._disordered.add(entry._wheel_where)
        else:
            self._file(entry, entry._wheel_tick, seq)
