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
a scan: rotate the mask right to the slot after the current one and count trailing zeros.
Levels are searched from 0 upward; the first non-empty level holds the earliest slot, because
a level's remaining slots all start before the next slot of the level above.

Advancing (``poll``) processes due slots in order. Processing takes the whole slot first, then
looks at each entry's true deadline: due entries come out; the others are re-filed relative to
the slot's start, i.e. cascade to a lower level. Every entry therefore moves at most once per
level. Level-0 slots hold exactly one tick, so nothing is ever released before its deadline.
When time has jumped past the end of a coarse slot, its entries are released grouped by tick
instead of being cascaded one level at a time.

Costs: insert, cancel and reset are O(1): a few bit operations and one insert or delete in the
slot's ``dict``, used as an insertion-ordered set keyed by the entry itself. No search, no
rebuild, and a cancelled entry leaves nothing behind.

Ordering: entries come out in deadline order, FIFO among equal deadlines, where a reset counts
as a cancel plus a new insert. No sequence numbers are needed, because a slot's dict is always
in arrival order and arrivals are already FIFO: when a slot is processed every lower-level slot
in its span is still empty (an entry only goes to a lower level once ``elapsed`` has entered the
slot's span), so its cascade lands first, in order, and direct inserts follow. That is also why
reset unlinks and re-files (O(1) as well) rather than extending lazily in place as Tokio does:
a lazily extended entry would come round out of order and force a sort.

This module is pure: no asyncio, no clock. The loop (``_loop.py``) turns seconds into ticks and
entries into callbacks.
"""

from __future__ import annotations

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
    """What the wheel needs of an entry: two attributes it owns, and identity hashing.

    Entries are dict keys, so ``__hash__``/``__eq__`` must be identity-based (the defaults).
    """

    _wheel_tick: int  # the deadline, in ticks
    _wheel_where: int  # slot index, PENDING or UNFILED


E = TypeVar("E", bound=Entry)


class WheelEntry:
    """A ready-made entry carrying one payload, for users that need no handle class of their own."""

    __slots__ = ("__weakref__", "_wheel_tick", "_wheel_where", "payload")

    def __init__(self, payload: object = None) -> None:
        self.payload = payload
        self._wheel_tick = 0
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
        return f"<WheelEntry {self.payload!r} due={self._wheel_tick}>"


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


_tick_of = attrgetter("_wheel_tick")


class TimerWheel(Generic[E]):
    """Six levels of 64 slots of entries, advanced by ``poll(now)``; see the module docstring."""

    __slots__ = ("_count", "_elapsed", "_next", "_occupied", "_pending", "_slots")

    def __init__(self, elapsed: int = 0) -> None:
        if elapsed < 0:
            raise ValueError(f"elapsed must be >= 0, got {elapsed}")
        self._elapsed = elapsed
        self._slots: list[dict[E, None]] = [{} for _ in range(NUM_LEVELS * SLOTS)]
        self._occupied = [0] * NUM_LEVELS
        self._pending: dict[E, None] = {}
        self._count = 0
        # Cached result of _next_expiration(), or _UNKNOWN after anything that may change it.
        self._next: tuple[int, int, int] | None = None

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
        entry._wheel_tick = tick
        self._count += 1
        self._file(entry, tick)

    def remove(self, entry: E) -> None:
        """Take ``entry`` out of the wheel at once (O(1)); it must be in this wheel."""
        self._unlink(entry)
        entry._wheel_where = UNFILED
        self._count -= 1

    def reset(self, entry: E, tick: int) -> None:
        """Move ``entry``'s deadline to ``tick`` in place (O(1)); it must be in this wheel.

        The entry then ranks after entries already in the wheel with the same deadline, as if
        it had been removed and inserted again.
        """
        self._unlink(entry)
        entry._wheel_tick = tick
        self._file(entry, tick)

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
            out = sorted(pending, key=_tick_of)  # stable: FIFO among equal ticks
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
        out = list(self._pending)
        for bucket in self._slots:
            out.extend(bucket)
        self._slots = [{} for _ in range(NUM_LEVELS * SLOTS)]
        self._pending = {}
        self._occupied = [0] * NUM_LEVELS
        self._next = None
        for entry in out:
            entry._wheel_where = UNFILED
        self._count = 0
        return out

    def __iter__(self) -> Iterator[E]:
        """Every entry in the wheel, in no particular order (for introspection)."""
        yield from self._pending
        for bucket in self._slots:
            yield from bucket

    # -- internals -----------------------------------------------------------------------

    def _file(self, entry: E, tick: int) -> None:
        self._next = _UNKNOWN
        elapsed = self._elapsed
        if tick <= elapsed:
            self._pending[entry] = None
            entry._wheel_where = PENDING
            return
        bits = ((elapsed ^ tick) | SLOT_MASK).bit_length()
        level = _LEVEL_FOR_BIT_LENGTH[bits] if bits <= _LEVEL_TABLE_TOP else _TOP
        slot = (tick >> (level * SLOT_BITS)) & SLOT_MASK
        where = (level << SLOT_BITS) | slot
        self._slots[where][entry] = None
        self._occupied[level] |= 1 << slot
        entry._wheel_where = where

    def _unlink(self, entry: E) -> None:
        self._next = _UNKNOWN
        where = entry._wheel_where
        if where >= 0:
            bucket = self._slots[where]
            del bucket[entry]
            if not bucket:
                self._occupied[where >> SLOT_BITS] &= ~(1 << (where & SLOT_MASK))
                # A dict never shrinks as keys are deleted: drop the emptied one so memory held
                # by a burst of cancelled timers goes back at once.
                self._slots[where] = {}
        elif where == PENDING:
            del self._pending[entry]
            if not self._pending:
                self._pending = {}
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
        end = start + (1 << (level * SLOT_BITS))
        if level and end <= now + 1:
            self._release_whole(bucket, end, out)
            return
        slots = self._slots
        occupied = self._occupied
        released = 0
        for entry in bucket:
            tick = entry._wheel_tick
            if tick <= start:
                entry._wheel_where = UNFILED
                out.append(entry)
                released += 1
                continue
            # Cascade: _file() inlined (tick > start, so never pending).
            bits = ((start ^ tick) | SLOT_MASK).bit_length()
            lvl = _LEVEL_FOR_BIT_LENGTH[bits] if bits <= _LEVEL_TABLE_TOP else _TOP
            s = (tick >> (lvl * SLOT_BITS)) & SLOT_MASK
            target = (lvl << SLOT_BITS) | s
            slots[target][entry] = None
            occupied[lvl] |= 1 << s
            entry._wheel_where = target
        self._count -= released

    def _release_whole(self, bucket: dict[E, None], end: int, out: list[E]) -> None:
        """Release a higher-level slot whose whole span is due, without cascading it.

        When time has jumped past a coarse slot's end (a long callback, a sleeping process),
        grouping its entries by tick is several times cheaper than filing each one a level
        lower only to take it out again a moment later. Groups keep arrival (FIFO) order.
        """
        groups: dict[int, list[E]] = {}
        later: list[E] = []
        for entry in bucket:
            tick = entry._wheel_tick
            if tick >= end:  # a top-level entry for a later lap
                later.append(entry)
                continue
            entry._wheel_where = UNFILED
            group = groups.get(tick)
            if group is None:
                groups[tick] = [entry]
            else:
                group.append(entry)
        released = 0
        for tick in sorted(groups):
            group = groups[tick]
            out.extend(group)
            released += len(group)
        self._count -= released
        for entry in later:
            self._file(entry, entry._wheel_tick)
