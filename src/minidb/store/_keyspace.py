"""The keyspace: buckets of binary keys and typed values, each key with an optional expiry time.

``Keyspace`` is pure (no asyncio, no clock): every call that can observe time takes ``now_ms``,
milliseconds since the Unix epoch, from its one owner. It offers the primitive changes
(``put``, ``remove``, ``set_expiry``, ``flush``), each of which notes in an ``OpJournal`` the
logical ``Op`` it amounts to (an effect, never a command) and how to undo it, and touches any
WATCH on the key. The command engine (``_commands``) builds every Redis command from them.

Theory of operation
===================

Values and expiry. A bucket is a ``dict`` key -> value. A value is a string (``bytes``) or a
container (``_values``: a hash, a set). A key without expiry maps straight to its value, so a
string costs nothing beyond the dict entry. A key with an expiry maps to an
``_Expiring`` record holding the value, the deadline and the bucket and key names; that record
*is* the key's entry in a ``TimerWheel`` (it carries the wheel's two attributes), so an expiry
costs one small object and one slot in the wheel, and there is no separate expires dict to keep
in step. Invariant: a record is in the wheel exactly while it is the current value of its key;
``put`` over an expiring key reuses the record in place and ``reset``s it in the wheel, and
every removal takes it out of the wheel (O(1)).

Clock mapping. The wheel's tick is one millisecond and its tick *is* the Unix time in ms: the
deadline of a record is its ``_wheel_tick``. The wheel only cares which bits of "now" and a
deadline differ, so absolute epoch milliseconds (about 2**41) work as well as small numbers;
deadlines beyond the wheel's 2**36 ms span just lap. An empty wheel is moved to the current
time (noted by ``sync_clock``, which the engine calls with each command) before a deadline
goes in, so the first deadline is filed relative to now. A wall clock stepped back makes
nothing due (``poll`` never goes back); stepped forward, everything that became due comes out
in deadline order at the next ``expire_due``.

Expiry, eager and lazy. The owner calls ``expire_due(now_ms, journal)`` from a loop timer set
at ``next_expiry_ms()``: the wheel hands back exactly the records that are due, in deadline
order, and each is removed and journaled as ``Remove``, so a replica or a replay agrees. The
work is proportional to what expires; no key is ever scanned. Between the deadline and that
call, every read checks the deadline (``isinstance(value, _Expiring)`` is the only cost for a
key without one) and removes an expired key on the spot, journaled the same way: no reply ever
shows a key past its deadline. A key is expired once ``now_ms >= deadline``.

Journal. Every primitive change notes its ``Op`` and what it replaced in an ``OpJournal``
(``_journal``); ``rollback`` applies the undo entries newest first and restores values and
deadlines exactly, timers included. A lazy expiry lands in the group of the command that
found it; ``expire_due`` makes its own groups.

SCAN cursors. A bucket that has been scanned keeps a ``ScanIndex`` (``_scanindex``): a SCAN
cursor is a position in its hash order that inserts and deletes cannot shift, so every key
present for the whole scan is returned exactly once. ``RANDOMKEY`` picks a random position.
The line protocol's SCAN pages in byte order instead (its cursor is the last key returned):
a bucket it has scanned keeps its keys in a sorted list (``sorted_keys``), maintained on
insert and delete from then on (a bisect and a memmove). Either index exists only for buckets
that were scanned that way, so buckets never scanned pay nothing.

Typed values. The string commands read with ``get`` and ``lookup_string``, which raise
``WrongTypeError`` for a container; the container commands with ``container(...,
HashValue)``. A command changes a container through the keyspace in three steps:
``for_change`` (the container to change: the key's, or a new one made its value, journaled as
the key's creation), then the command's own change of its elements, noted in the journal as an
element op (``AddElements``, ``RemoveElements``) and a ``ContainerUndo`` holding what those
elements were, then ``drop_empty`` if it emptied the container (an empty container never
exists: the key goes, its element op says so at replay). A list changes in one call,
``change_list``, of the log op that is its effect (``ListPush``, ``ListPop``...), applied as
replay applies it (``_values.list_apply``). Undo is element-level, so a change
costs what it touched, never a copy of the container. Whole-key changes (``put_container``,
``rename``, ``copy``, and ``put`` / ``remove`` of any type) journal a ``KeyUndo`` holding the
old value itself, container or string. The keyspace counts the containers of each bucket
(``_containers``), so a snapshot of a bucket of strings never looks for them.

Snapshots of containers. A checkpoint captures the keyspace on the owner (``frozen_snapshot_
parts``: a shallow copy of each bucket dict) and encodes it later in another thread, while
the owner goes on changing containers in place. Copy-on-write keeps the copy true: capturing
raises ``_epoch`` and sets ``_cow_below`` to it; every container carries the epoch it was made
in, and ``for_change`` (and replay) copies a container older than ``_cow_below`` before its
first change, putting the copy in the key's place, so the captured object is never changed.
The capture costs nothing per container, and each container is copied at most once per
checkpoint, only if it changes while the snapshot is written (``snapshot_done`` ends that).

WATCH. ``watch(bucket, keys)`` returns a ``Watch`` registered per (bucket, key); every change
(write, delete, expiry, flush of an existing key) marks the watches of its key dirty. With
nobody watching, a change pays one test of an empty dict.
"""

from __future__ import annotations

import random
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar, cast

from minidb.runtime._wheel import UNFILED, TimerWheel
from minidb.store._hashvalue import HashValue
from minidb.store._journal import (
    ContainerUndo,
    FlushUndo,
    KeyUndo,
    ListUndo,
    OpJournal,
    PutsUndo,
    UndoEntry,
)
from minidb.store._results import WrongTypeError
from minidb.store._scanindex import ScanIndex
from minidb.store._streamvalue import StreamValue
from minidb.store._values import (
    KIND_BY_CODE,
    KIND_OF,
    Container,
    ListValue,
    SetValue,
    Value,
    list_apply,
    new_list,
)
from minidb.store._zsetvalue import ZSetValue
from minidb.wal._ops import (
    LIST_OPS,
    AddElements,
    Copy,
    Expire,
    Flush,
    ListOp,
    ListPush,
    Op,
    Put,
    PutContainer,
    Remove,
    RemoveElements,
    Rename,
)

MAX_KEY_BYTES = 64 * 1024
"""The longest key a command may create, in bytes."""
DEFAULT_MAX_VALUE_BYTES = 16 * 1024 * 1024
"""The longest value a command may store by default, in bytes (``max_value_bytes``)."""
DEFAULT_EXPIRE_BATCH = 10_000
"""Keys ``expire_due`` removes per call at most by default, so one call stays short; the rest
stay due and come out first at the next call."""
EXPIRE_GROUP_BYTES = 32 * 1024
"""Key bytes after which ``expire_due`` closes its journal group and opens another, so the log
records of a mass expiry stay small (their removals need not be atomic together)."""
RANDOM_KEY_TRIES = 100
"""Random picks ``random_key`` makes before giving up when it keeps hitting expired keys."""

_new_tuple = tuple.__new__


class _Expiring:
    """A value with a deadline; also its own entry in the keyspace's timer wheel."""

    __slots__ = ("_wheel_tick", "_wheel_where", "bucket", "key", "value")

    def __init__(self, bucket: bytes, key: bytes, value: Value) -> None:
        self.bucket = bucket
        self.key = key
        self.value = value
        self._wheel_tick = 0  # the deadline, ms since the epoch (set by the wheel)
        self._wheel_where = UNFILED


Stored = bytes | _Expiring | HashValue | SetValue | ListValue | ZSetValue | StreamValue
"""A bucket's entry: the value itself, or for a key with a deadline its ``_Expiring`` record."""
C = TypeVar("C", HashValue, SetValue, ListValue, ZSetValue, StreamValue)


class SnapshotParts(NamedTuple):
    """The keyspace as a snapshot encodes it (``snapshot_parts``)."""

    buckets: list[tuple[bytes, dict[bytes, object], bool]]
    """Each bucket's dict and whether it holds containers: its ``bytes`` values are the
    strings without expiry, its containers (not ``_Expiring`` records) those without expiry."""
    expiring: list[tuple[bytes, bytes, Value, int]]
    """(bucket, key, value, deadline) of every key with a deadline."""
    epoch: int
    """The copy-on-write epoch of a frozen capture (0 for a live one)."""


class Watch:
    """One connection's WATCH: ``dirty`` turns True when a watched key is touched."""

    __slots__ = ("dirty", "keys")

    def __init__(self) -> None:
        self.dirty = False
        self.keys: set[tuple[bytes, bytes]] = set()


@dataclass(frozen=True, slots=True)
class KeyspaceStatistics:
    """What the keyspace holds and what expiry has done since start."""

    buckets: int
    keys: int
    keys_with_expiry: int
    expired_lazily: int
    """Keys removed by a read that found them past their deadline."""
    expired_by_timer: int
    """Keys removed by ``expire_due``."""
    expiry_examined: int
    """Records ``expire_due`` looked at: equals what it removed, because the wheel hands back
    only due keys (no scan)."""
    scan_indexes: int
    watched_keys: int


class Keyspace:
    """Buckets of keys and values with expiry; exactly one owner calls it (no locks)."""

    # Slots: the C run (``_cplain``) reads several of these per run, and a slot's lookup skips
    # the instance dict (scripting keeps a weak reference to the keyspace).
    __slots__ = (
        "__weakref__", "_buckets", "_clock_ms", "_containers", "_cow_below", "_epoch",
        "_examined", "_expired_by_timer", "_expired_lazily", "_indexes", "_keys", "_rng",
        "_sorted", "_watched", "_wheel", "max_value_bytes",
    )

    def __init__(
        self,
        *,
        now_ms: int = 0,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        rng: random.Random | None = None,
    ) -> None:
        self.max_value_bytes = max_value_bytes
        self._buckets: dict[bytes, dict[bytes, Stored]] = {}
        self._indexes: dict[bytes, ScanIndex] = {}
        self._sorted: dict[bytes, list[bytes]] = {}
        self._wheel: TimerWheel[_Expiring] = TimerWheel(max(now_ms, 0))
        self._clock_ms = now_ms
        self._watched: dict[tuple[bytes, bytes], set[Watch]] = {}
        self._rng = rng or random.Random()
        self._keys = 0
        self._expired_lazily = self._expired_by_timer = self._examined = 0
        self._containers: dict[bytes, int] = {}
        """Bucket -> keys holding a container (absent: none)."""
        self._epoch = 0
        """The copy-on-write epoch new containers are made in (see the module docstring)."""
        self._cow_below = 0
        """Containers of an epoch below this may be read by a snapshot: copy before changing."""

    # -- reading -----------------------------------------------------------------------------

    def get(
        self, bucket: bytes, key: bytes, now_ms: int, journal: OpJournal | None
    ) -> bytes | None:
        """The string value of a live key, or None; an expired key found here is removed.
        ``WrongTypeError`` if the key holds a container."""
        found = self._live(bucket, key, now_ms, journal)
        if found is None or type(found) is bytes:
            return found
        if type(found) is _Expiring and type(found.value) is bytes:
            return found.value
        raise WrongTypeError()

    def lookup(
        self, bucket: bytes, key: bytes, now_ms: int, journal: OpJournal | None
    ) -> tuple[Value, int | None] | None:
        """(value of any type, deadline or None) of a live key, or None."""
        found = self._live(bucket, key, now_ms, journal)
        if found is None:
            return None
        if isinstance(found, _Expiring):
            return found.value, found._wheel_tick
        return found, None

    def lookup_string(
        self, bucket: bytes, key: bytes, now_ms: int, journal: OpJournal | None
    ) -> tuple[bytes, int | None] | None:
        """``lookup`` of a key that must hold a string: ``WrongTypeError`` otherwise."""
        found = self.lookup(bucket, key, now_ms, journal)
        if found is not None and type(found[0]) is not bytes:
            raise WrongTypeError()
        return found  # type: ignore[return-value]

    def value(
        self, bucket: bytes, key: bytes, now_ms: int, journal: OpJournal | None
    ) -> Value | None:
        """The value of a live key, whatever its type, or None."""
        found = self._live(bucket, key, now_ms, journal)
        if isinstance(found, _Expiring):
            return found.value
        return found

    def container(
        self, bucket: bytes, key: bytes, cls: type[C], now_ms: int, journal: OpJournal | None
    ) -> C | None:
        """The container of class ``cls`` at a live key, or None if the key is missing;
        ``WrongTypeError`` if it holds another type. Read it; change it via ``for_change``."""
        found = self.value(bucket, key, now_ms, journal)
        if found is None or type(found) is cls:
            return found
        raise WrongTypeError()

    def peek(self, bucket: bytes, key: bytes) -> Value | None:
        """The value of a key as it is (expired or not, nothing removed): for a caller that
        just had the key from a read that checked its deadline (``scan``, ``keys``)."""
        found = self._buckets.get(bucket)
        stored = found.get(key) if found else None
        return stored.value if isinstance(stored, _Expiring) else stored

    @property
    def rng(self) -> random.Random:
        """The keyspace's source of randomness (RANDOMKEY, HRANDFIELD, SPOP...)."""
        return self._rng

    @property
    def epoch(self) -> int:
        """The epoch a container made now belongs to (``_values``'s constructors take it)."""
        return self._epoch

    def exists(self, bucket: bytes, key: bytes, now_ms: int, journal: OpJournal | None) -> bool:
        return self._live(bucket, key, now_ms, journal) is not None

    def expired(self, bucket: bytes, key: bytes, now_ms: int) -> bool:
        """Whether the key exists but is past its deadline; removes nothing (a read that
        cannot change the keyspace, for a caller walking one of its indexes)."""
        found = self._buckets.get(bucket)
        stored = found.get(key) if found else None
        return isinstance(stored, _Expiring) and stored._wheel_tick <= now_ms

    def size(self, bucket: bytes) -> int:
        """Keys in ``bucket``, counting expired ones not yet removed (as Redis's DBSIZE)."""
        found = self._buckets.get(bucket)
        return len(found) if found else 0

    def keys(self, bucket: bytes, now_ms: int) -> Iterator[bytes]:
        """Every live key of ``bucket`` (what KEYS walks); expired ones are skipped, not removed."""
        for key, stored in list(self._buckets.get(bucket, {}).items()):
            if type(stored) is not _Expiring or stored._wheel_tick > now_ms:
                yield key

    def scan(
        self, bucket: bytes, cursor: int, count: int, now_ms: int, journal: OpJournal | None
    ) -> tuple[int, list[bytes]]:
        """(next cursor, live keys) of one SCAN step; see the module docstring."""
        index = self._index(bucket)
        if index is None:
            return 0, []
        next_cursor, page = index.page(cursor, count)
        found = self._buckets[bucket]
        live = []
        for key in page:
            stored = found[key]
            if type(stored) is not _Expiring or stored._wheel_tick > now_ms:
                live.append(key)
            else:
                self._expire(bucket, key, journal)
        return next_cursor, live

    def random_key(self, bucket: bytes, now_ms: int, journal: OpJournal | None) -> bytes | None:
        """A live key of ``bucket`` picked at random, or None."""
        for _ in range(RANDOM_KEY_TRIES):
            index = self._index(bucket)
            if index is None:
                return None
            key = index.keys[self._rng.randrange(len(index.keys))]
            if self._live(bucket, key, now_ms, journal) is not None:
                return key
        return None

    def items(self) -> Iterator[Put | PutContainer]:
        """The whole keyspace as ops, each key's expiry included, in no order of keys: a
        ``Put`` per string, a ``PutContainer`` per container with its elements in a canonical
        order (a hash by field, a set sorted), so two equal keyspaces give equal items."""
        for name, bucket in self._buckets.items():
            for key, stored in bucket.items():
                value, deadline = (
                    (stored.value, stored._wheel_tick)
                    if isinstance(stored, _Expiring)
                    else (stored, None)
                )
                if type(value) is bytes:
                    yield Put(name, key, value, deadline)
                elif type(value) is HashValue:
                    flat = tuple(x for pair in sorted(value.items()) for x in pair)
                    yield PutContainer(name, key, KIND_OF[HashValue].code, flat, deadline)
                elif type(value) in (ListValue, ZSetValue, StreamValue):
                    kind = KIND_OF[type(value)]  # a sorted set in rank order, a stream by id
                    yield PutContainer(name, key, kind.code, tuple(kind.elements(value)), deadline)
                else:
                    members = tuple(sorted(cast(SetValue, value)))
                    yield PutContainer(name, key, KIND_OF[SetValue].code, members, deadline)

    def snapshot_parts(self) -> SnapshotParts:
        """The keyspace as a snapshot encodes it (see ``SnapshotParts``). Live objects: read
        them before the next change."""
        buckets = cast(list[tuple[bytes, dict[bytes, object]]], list(self._buckets.items()))
        has = self._containers
        return SnapshotParts(
            [(name, bucket, bool(has.get(name))) for name, bucket in buckets],
            [(r.bucket, r.key, r.value, r._wheel_tick) for r in self._wheel],
            0,
        )

    def frozen_snapshot_parts(self) -> SnapshotParts:
        """``snapshot_parts()`` of the keyspace as it is now, safe to read in another thread
        later, until ``snapshot_done``.

        Copies each bucket's dict here (strings are immutable ``bytes``, shared, not copied;
        containers are shared too, and copied on write from now on: see the docstring), and
        the value and deadline of each key with an expiry, because ``put`` updates such a
        record in place: this copy is the whole pause a checkpoint costs the owner; encoding
        and writing the snapshot then run off the owner while writes go on.
        """
        parts = self.snapshot_parts()
        self._epoch += 1
        self._cow_below = self._epoch
        return SnapshotParts(
            [(name, bucket.copy(), has) for name, bucket, has in parts.buckets],
            parts.expiring,
            self._epoch,
        )

    def snapshot_done(self, parts: SnapshotParts) -> None:
        """The snapshot of ``parts`` (a frozen capture) has been read: its containers need no
        copying any more. Any thread may call it: the one assignment is atomic, and a copy
        made meanwhile is merely unneeded."""
        if parts.epoch and self._cow_below == parts.epoch:
            self._cow_below = 0

    def sorted_keys(self, bucket: bytes) -> list[bytes] | None:
        """The keys of ``bucket`` in byte order (expired ones not yet removed included), or
        None if it is empty; kept up to date from the first call on (see the docstring).
        The caller must not change the list."""
        found = self._buckets.get(bucket)
        if not found:
            return None
        order = self._sorted.get(bucket)
        if order is None:
            order = self._sorted[bucket] = sorted(found)
        return order

    def __len__(self) -> int:
        return self._keys

    def buckets(self) -> list[bytes]:
        return list(self._buckets)

    # -- changing ----------------------------------------------------------------------------

    def put(
        self,
        bucket: bytes,
        key: bytes,
        value: bytes,
        expire_at_ms: int | None,
        journal: OpJournal | None,
    ) -> None:
        """Set the key's whole state: its value and its deadline (None: no expiry)."""
        if journal is not None:
            found = self._buckets.get(bucket)
            old = found.get(key) if found is not None else None
            if isinstance(old, _Expiring):
                journal.undo.append(KeyUndo(bucket, key, old.value, old._wheel_tick))
            else:
                journal.undo.append(KeyUndo(bucket, key, old, None))
            journal._open.append(Put(bucket, key, value, expire_at_ms))
        self._store(bucket, key, value, expire_at_ms)

    def put_command(
        self, bucket: bytes, key: bytes, value: bytes, journal: OpJournal | None
    ) -> None:
        """``put`` without expiry as a journal group of its own: a command that is one SET.

        The line protocol's SET is the hottest write, so the common case (the bucket exists,
        the key is missing or holds a plain value, nobody watches) is done here in one call,
        with the same effects as ``put`` and ``close_group``; anything else goes through them.
        """
        found = self._buckets.get(bucket)
        old = found.get(key) if found is not None else None
        if found is None or self._watched or not (old is None or type(old) is bytes):
            self.put(bucket, key, value, None, journal)
            if journal is not None:
                journal.close_group()
            return
        found[key] = value
        if old is None:
            self._keys += 1
            if self._indexes or self._sorted:
                index = self._indexes.get(bucket)
                if index is not None:
                    index.insert(key)
                order = self._sorted.get(bucket)
                if order is not None:
                    insort(order, key)
        if journal is not None:
            if journal._open:
                journal.close_group()
            # tuple.__new__ builds the named tuples without their Python-level __new__ (half
            # the cost of a line SET was these two constructors).
            journal.undo.append(_new_tuple(KeyUndo, (bucket, key, old, None)))
            journal.records.append([_new_tuple(Put, (bucket, key, value, None))])

    def put_commands(
        self, sets: Iterable[tuple[bytes, bytes, bytes]], journal: OpJournal | None
    ) -> None:
        """``put_command`` of each ``(bucket, key, value)``, in order: a pipelined run of SETs
        (a bulk load sends thousands) in one call, each still its own journal group.

        The loop is ``put_command``'s common case with the lookups bound once; a SET outside
        it (a new bucket, an expiring or indexed key, watchers) goes through ``put_command``.
        """
        if journal is None or self._watched or self._indexes or self._sorted:
            for bucket, key, value in sets:
                self.put_command(bucket, key, value, journal)
            return
        journal.close_group()
        buckets = self._buckets
        note_undo = journal.undo.append
        note_record = journal.records.append
        for bucket, key, value in sets:
            found = buckets.get(bucket)
            old = found.get(key) if found is not None else None
            if found is None or not (old is None or type(old) is bytes):
                self.put_command(bucket, key, value, journal)  # closes its own group
                continue
            found[key] = value
            if old is None:
                self._keys += 1
            note_undo(_new_tuple(KeyUndo, (bucket, key, old, None)))
            note_record([_new_tuple(Put, (bucket, key, value, None))])

    def write_group(
        self,
        writes: Sequence[tuple[bytes, bytes, bytes] | tuple[bytes, bytes]],
        now_ms: int,
        journal: OpJournal | None,
    ) -> int:
        """Apply ``writes`` in order as ONE journal group, so one log record, replayed whole or
        not at all: a ``(bucket, key, value)`` is a put without expiry, a ``(bucket, key)`` the
        removal of a live key (one past its deadline is removed too, as a read would); how many
        removals found their key.

        A group of puts only (a bulk load's frame) takes ``put_commands``'s loop, noting into
        the one open group; a put outside its common case (a new bucket, an expiring key,
        watchers, an index) and every removal go through ``put`` and ``remove``, which note
        into the same group.
        """
        if journal is not None:
            journal.close_group()  # what came before is a group of its own
        if (
            journal is None
            or self._watched
            or self._indexes
            or self._sorted
            or sum(map(len, writes)) != 3 * len(writes)  # not puts only (counted in C)
        ):
            found_keys = 0
            for write in writes:
                if len(write) == 3:
                    self.put(*write, None, journal)
                elif self._live(write[0], write[1], now_ms, journal) is not None:
                    self.remove(write[0], write[1], journal)
                    found_keys += 1
            if journal is not None:
                journal.close_group()
            return found_keys
        # The old values go into one list (``PutsUndo``), not a tuple per put; a put that
        # leaves the fast case ends the run, so undo entries stay in order.
        buckets = self._buckets
        note_op = journal._open.append
        olds: list[bytes | None] = []
        note_old = olds.append
        start = added = 0
        for at, (bucket, key, value) in enumerate(writes):  # type: ignore[misc]
            found = buckets.get(bucket)
            if found is not None:
                old = found.get(key)
                if old is None or type(old) is bytes:
                    found[key] = value
                    if old is None:
                        added += 1
                    note_old(old)
                    note_op(_new_tuple(Put, (bucket, key, value, None)))
                    continue
            if olds:
                journal.undo.append(PutsUndo(writes, start, olds))
                olds = []
                note_old = olds.append
            self._keys += added
            added = 0
            self.put(bucket, key, value, None, journal)
            start = at + 1
        if olds:
            journal.undo.append(PutsUndo(writes, start, olds))
        self._keys += added
        journal.close_group()
        return 0

    def remove(self, bucket: bytes, key: bytes, journal: OpJournal | None) -> bool:
        """Delete the key if it exists (expired or not); whether it did."""
        found = self._buckets.get(bucket)
        if found is None or key not in found:
            return False
        if journal is not None:
            journal.undo.append(self._state_of(bucket, key))
            journal.add(Remove(bucket, key))
        self._delete(bucket, key)
        return True

    def set_expiry(
        self, bucket: bytes, key: bytes, expire_at_ms: int | None, journal: OpJournal | None
    ) -> None:
        """Give an existing key a deadline, or none (persist it)."""
        before = self._state_of(bucket, key)
        assert before.value is not None, f"set_expiry of missing key {bucket!r} {key!r}"
        if journal is not None:
            journal.undo.append(before)
            journal.add(Expire(bucket, key, expire_at_ms))
        self._store(bucket, key, before.value, expire_at_ms)

    def for_change(
        self,
        bucket: bytes,
        key: bytes,
        found: C | None,
        make: Callable[[int], C],
        journal: OpJournal | None,
    ) -> C:
        """The container to change at ``key``: ``found`` (what ``container`` returned, None
        for a missing key) as it stands, or copied first if a snapshot may be reading it; for
        a missing key, ``make(epoch)`` made its value, without expiry, journaled as the key's
        creation (its log op is the caller's element op). Watchers are touched: the caller
        changes it now, noting the element op and its ``ContainerUndo``."""
        if found is None:
            made = make(self._epoch)
            if journal is not None:
                journal.undo.append(KeyUndo(bucket, key, None, None))
            self._store(bucket, key, made, None)
            return made
        return self._changing(bucket, key)  # type: ignore[return-value]

    def drop_empty(self, bucket: bytes, key: bytes, journal: OpJournal | None) -> None:
        """Delete a key whose container a change just emptied. Only the undo is journaled:
        the change's ``RemoveElements`` deletes it at replay too (an empty container never
        exists)."""
        if journal is not None:
            journal.undo.append(self._state_of(bucket, key))
        self._delete(bucket, key)

    def change_list(
        self, bucket: bytes, key: bytes, found: ListValue | None, op: ListOp, journal: OpJournal
    ) -> ListValue:
        """Apply ``op`` to the list at ``key`` (``found``: what ``container`` returned; None
        only for a push, which creates the list), journaled as ``op`` with its ``ListUndo``;
        a list it empties is deleted. Every change of a list's elements comes here."""
        lst = self.for_change(bucket, key, found, new_list, journal)
        encoding, lpbytes = lst.encoding, lst.lpbytes
        journal.undo.append(ListUndo(bucket, key, encoding, lpbytes, list_apply(lst, op)))
        journal.add(op)
        if not lst:
            self.drop_empty(bucket, key, journal)
        return lst

    def put_container(
        self,
        bucket: bytes,
        key: bytes,
        container: Container,
        expire_at_ms: int | None,
        journal: OpJournal | None,
    ) -> None:
        """Set the key's whole state to a new, non-empty ``container`` (made at ``epoch``),
        journaled as one ``PutContainer`` of all its elements (a ``*STORE`` result)."""
        assert container, "an empty container never exists"
        if journal is not None:
            kind = KIND_OF[type(container)]
            journal.undo.append(self._state_of(bucket, key))
            elements = tuple(kind.elements(container))
            journal.add(PutContainer(bucket, key, kind.code, elements, expire_at_ms))
        self._store(bucket, key, container, expire_at_ms)

    def rename(self, bucket: bytes, key: bytes, new_key: bytes, journal: OpJournal | None) -> None:
        """Move an existing key's whole state (any type, its deadline) to ``new_key``,
        replacing what that held; one ``Rename`` op, whatever the value's size."""
        source = self._state_of(bucket, key)
        assert source.value is not None, f"rename of missing key {bucket!r} {key!r}"
        if key == new_key:
            return
        if journal is not None:
            journal.undo.append(self._state_of(bucket, new_key))
            journal.undo.append(source)
            journal.add(Rename(bucket, key, new_key))
        self._store(bucket, new_key, source.value, source.expire_at_ms)
        self._delete(bucket, key)

    def copy(
        self,
        bucket: bytes,
        key: bytes,
        to_bucket: bytes,
        to_key: bytes,
        journal: OpJournal | None,
    ) -> None:
        """Copy an existing key's whole state to ``(to_bucket, to_key)``, replacing what that
        held (a container is copied, not shared); one ``Copy`` op."""
        source = self._state_of(bucket, key)
        value = source.value
        assert value is not None, f"copy of missing key {bucket!r} {key!r}"
        if (bucket, key) == (to_bucket, to_key):
            return
        if journal is not None:
            journal.undo.append(self._state_of(to_bucket, to_key))
            journal.add(Copy(bucket, key, to_bucket, to_key))
        if type(value) is not bytes:
            value = KIND_OF[type(value)].copy(value, self._epoch)
        self._store(to_bucket, to_key, value, source.expire_at_ms)

    def flush(self, bucket: bytes | None, journal: OpJournal | None) -> int:
        """Delete every key of ``bucket`` (every bucket if None); how many there were."""
        if bucket is None:
            dropped = self._buckets
        else:
            found = self._buckets.get(bucket)
            dropped = {bucket: found} if found else {}
        removed = sum(len(d) for d in dropped.values())
        if not removed:
            return 0
        if journal is not None:
            journal.undo.append(FlushUndo(dropped))
            journal.add(Flush(bucket))
        if self._watched:
            for name, keys in dropped.items():
                for watched in [wk for wk in self._watched if wk[0] == name and wk[1] in keys]:
                    self._touch(watched)
        if bucket is None:
            self._buckets = {}
            self._indexes = {}
            self._sorted = {}
            self._containers = {}
            self._wheel.clear()
        else:
            del self._buckets[bucket]
            self._indexes.pop(bucket, None)
            self._sorted.pop(bucket, None)
            self._containers.pop(bucket, None)
            wheel = self._wheel
            for stored in dropped[bucket].values():
                if isinstance(stored, _Expiring):
                    wheel.remove(stored)
        self._keys -= removed
        return removed

    def rollback(self, journal: OpJournal) -> None:
        """Take back every change noted in ``journal``, newest first, then clear it."""
        self._undo(journal.undo)
        journal.clear()

    def rollback_to(self, journal: OpJournal, mark: tuple[int, int, int]) -> None:
        """Take back the changes noted in ``journal`` since ``journal.mark()`` was ``mark``
        (one command's, when it failed half way) and forget them; what came before stays."""
        undo_mark, records_mark, ops_mark = mark
        self._undo(journal.undo[undo_mark:])
        del journal.undo[undo_mark:]
        journal.truncate(records_mark, ops_mark)

    def _undo(self, entries: list[UndoEntry]) -> None:
        for entry in reversed(entries):
            if isinstance(entry, PutsUndo):
                writes, start = entry.writes, entry.start
                for at in range(len(entry.olds) - 1, -1, -1):
                    bucket, key = writes[start + at][:2]
                    old = entry.olds[at]
                    if old is None:
                        self._delete(bucket, key)
                    else:
                        self._store(bucket, key, old, None)
            elif isinstance(entry, FlushUndo):
                self._restore_buckets(entry.buckets)
            elif isinstance(entry, ContainerUndo):
                entry.revert(self._changing(entry.bucket, entry.key))
            elif entry.value is None:
                self._delete(entry.bucket, entry.key)
            else:
                self._store(entry.bucket, entry.key, entry.value, entry.expire_at_ms)

    # -- expiry ------------------------------------------------------------------------------

    def expire_due(
        self, now_ms: int, journal: OpJournal | None, limit: int = DEFAULT_EXPIRE_BATCH
    ) -> list[tuple[bytes, bytes]]:
        """Remove up to ``limit`` keys whose deadline is at or before ``now_ms``, in deadline
        order, each journaled as ``Remove`` (in groups of up to ``EXPIRE_GROUP_BYTES`` of key
        names); return their (bucket, key)."""
        due = self._wheel.poll(now_ms)
        if len(due) > limit:
            # Not now: back into the wheel, where a past deadline waits as pending and comes
            # out first, in deadline order, at the next call.
            for record in due[limit:]:
                self._wheel.insert(record, record._wheel_tick)
            del due[limit:]
        self._examined += len(due)
        self._expired_by_timer += len(due)
        expired = []
        group_bytes = 0
        for record in due:
            bucket, key = record.bucket, record.key
            assert self._buckets[bucket][key] is record, f"stale wheel entry {bucket!r} {key!r}"
            if journal is not None:
                journal.undo.append(KeyUndo(bucket, key, record.value, record._wheel_tick))
                journal.add(Remove(bucket, key))
                group_bytes += len(bucket) + len(key)
                if group_bytes >= EXPIRE_GROUP_BYTES:
                    journal.close_group()
                    group_bytes = 0
            self._drop(bucket, key)  # poll already took the record out of the wheel
            expired.append((bucket, key))
        if journal is not None:
            journal.close_group()
        return expired

    def next_expiry_ms(self) -> int | None:
        """When ``expire_due`` next has work (a lower bound on the earliest deadline), or None."""
        return self._wheel.poll_at()

    # -- WATCH -------------------------------------------------------------------------------

    def watch(self, bucket: bytes, keys: Iterable[bytes], into: Watch | None = None) -> Watch:
        """Register a watch on ``keys`` of ``bucket`` (adding to ``into`` if given)."""
        handle = into if into is not None else Watch()
        for key in keys:
            pair = (bucket, key)
            handle.keys.add(pair)
            self._watched.setdefault(pair, set()).add(handle)
        return handle

    def unwatch(self, handle: Watch) -> None:
        """Forget ``handle``'s keys (UNWATCH, EXEC, DISCARD, a closed connection)."""
        for pair in handle.keys:
            watchers = self._watched.get(pair)
            if watchers is not None:
                watchers.discard(handle)
                if not watchers:
                    del self._watched[pair]
        handle.keys.clear()

    # -- replay ------------------------------------------------------------------------------

    def apply_ops(self, ops: Iterable[Op], now_ms: int) -> None:
        """Apply logged ops (recovery, a replica) as the effects they are, without journaling.

        A key whose deadline has passed by ``now_ms`` is never served (reads check deadlines),
        and ``purge_expired`` drops every such key once the whole log is in. It must not be
        dropped earlier, op by op: ``Put(k, v, at)`` followed in a later record by
        ``Expire(k, None)`` (a PERSIST made before ``at``) leaves ``k`` alive for good, and the
        PERSIST needs the value the Put brought.
        """
        self.sync_clock(now_ms)
        if type(ops) is list and len(ops) == 1 and not (
            self._watched or self._indexes or self._sorted
        ):
            # The common record of a replay, one SET: what ``_store`` does for a put without
            # expiry over a missing or plain key of an existing bucket, without its calls
            # (a third of a replay's time; the log's C reader made the rest cheap).
            op = ops[0]
            if type(op) is Put and op[3] is None:
                found = self._buckets.get(op[0])
                if found is not None:
                    key = op[1]
                    old = found.get(key)
                    if old is None or type(old) is bytes:
                        found[key] = op[2]
                        if old is None:
                            self._keys += 1
                        return
        for op in ops:
            if isinstance(op, Put):
                self._store(op.bucket, op.key, op.value, op.expire_at_ms)
            elif isinstance(op, Remove):
                self.remove(op.bucket, op.key, None)
            elif isinstance(op, Expire):
                state = self._state_of(op.bucket, op.key)
                if state.value is not None:
                    self._store(op.bucket, op.key, state.value, op.expire_at_ms)
            elif isinstance(op, Flush):
                self.flush(op.bucket, None)
            else:
                self._apply_typed(op)

    def _apply_typed(self, op: Op) -> None:
        """Replay one op of typed values (``docs/wal-format.md``, "Typed values")."""
        if isinstance(op, PutContainer):
            kind = KIND_BY_CODE[op.kind]
            self._store(op.bucket, op.key, kind.build(op.elements, self._epoch), op.expire_at_ms)
        elif isinstance(op, AddElements | RemoveElements):
            kind = KIND_BY_CODE[op.kind]
            value = self.peek(op.bucket, op.key)
            if value is not None and type(value) is not kind.cls:
                raise ValueError(f"cannot apply {op!r}: the key holds a {type(value).__name__}")
            if isinstance(op, AddElements):
                if value is None:
                    self._store(op.bucket, op.key, kind.new(op.elements, self._epoch), None)
                kind.add(self._changing(op.bucket, op.key), op.elements)
            elif value is not None:
                container = self._changing(op.bucket, op.key)
                kind.remove(container, op.elements)
                if not container and not kind.keeps_empty:
                    self._delete(op.bucket, op.key)
        elif isinstance(op, LIST_OPS):
            value = self.peek(op.bucket, op.key)
            if type(value) is not ListValue and (value is not None or type(op) is not ListPush):
                raise ValueError(f"cannot apply {op!r}: the key holds no list")
            if value is None:
                self._store(op.bucket, op.key, new_list(self._epoch), None)
            lst = cast(ListValue, self._changing(op.bucket, op.key))
            list_apply(lst, op)
            if not lst:
                self._delete(op.bucket, op.key)
        elif isinstance(op, Rename | Copy):
            if self.peek(op.bucket, op.key) is None:
                raise ValueError(f"cannot apply {op!r}: the key does not exist")
            if isinstance(op, Rename):
                self.rename(op.bucket, op.key, op.new_key, None)
            else:
                self.copy(op.bucket, op.key, op.to_bucket, op.to_key, None)
        else:
            raise ValueError(f"not an operation: {op!r}")

    def purge_expired(self, now_ms: int) -> int:
        """Drop, without journaling, every key due by ``now_ms`` (after a replay: the log
        already implies their expiry, and replaying it again drops them again)."""
        due = self._wheel.poll(now_ms)
        for record in due:
            self._drop(record.bucket, record.key)
        return len(due)

    def sync_clock(self, now_ms: int) -> None:
        """Note the time, so that a deadline filed into an empty wheel is filed relative to
        now (an empty wheel may still stand where it stopped long ago)."""
        self._clock_ms = now_ms

    # -- statistics --------------------------------------------------------------------------

    def expiring_by_bucket(self) -> dict[bytes, int]:
        """Bucket -> keys in it with a deadline (INFO keyspace's ``expires``). Walks the
        expiry wheel: O(keys with a deadline), for an occasional INFO, not a hot path."""
        counts: dict[bytes, int] = {}
        for record in self._wheel:
            counts[record.bucket] = counts.get(record.bucket, 0) + 1
        return counts

    def statistics(self) -> KeyspaceStatistics:
        return KeyspaceStatistics(
            buckets=len(self._buckets),
            keys=self._keys,
            keys_with_expiry=len(self._wheel),
            expired_lazily=self._expired_lazily,
            expired_by_timer=self._expired_by_timer,
            expiry_examined=self._examined,
            scan_indexes=len(self._indexes),
            watched_keys=len(self._watched),
        )

    # -- internals ---------------------------------------------------------------------------

    def _live(
        self, bucket: bytes, key: bytes, now_ms: int, journal: OpJournal | None
    ) -> Stored | None:
        found = self._buckets.get(bucket)
        if found is None:
            return None
        stored = found.get(key)
        if stored is None or type(stored) is not _Expiring:
            return stored
        if stored._wheel_tick > now_ms:
            return stored
        self._expire(bucket, key, journal)
        return None

    def _expire(self, bucket: bytes, key: bytes, journal: OpJournal | None) -> None:
        self._expired_lazily += 1
        self.remove(bucket, key, journal)

    def _changing(self, bucket: bytes, key: bytes) -> Container | StreamValue:
        """The container at an existing key, about to change in place: first copied into the
        key's place if a snapshot being written may read it (see the docstring); watchers
        touched."""
        stored = self._buckets[bucket][key]
        record = stored if isinstance(stored, _Expiring) else None
        value = cast(Container | StreamValue, record.value if record is not None else stored)
        if value.epoch < self._cow_below:
            value = KIND_OF[type(value)].copy(value, self._epoch)
            if record is not None:
                record.value = value
            else:
                self._buckets[bucket][key] = value
        if self._watched:
            self._touch((bucket, key))
        return value

    def _state_of(self, bucket: bytes, key: bytes) -> KeyUndo:
        found = self._buckets.get(bucket)
        stored = found.get(key) if found else None
        if isinstance(stored, _Expiring):
            return KeyUndo(bucket, key, stored.value, stored._wheel_tick)
        return KeyUndo(bucket, key, stored, None)

    def _store(self, name: bytes, key: bytes, value: Value, expire_at_ms: int | None) -> None:
        """Set a key's value and deadline, keeping the wheel, the index and watches in step."""
        bucket = self._buckets.get(name)
        if bucket is None:
            bucket = self._buckets[name] = {}
        old = bucket.get(key)
        old_value = old.value if isinstance(old, _Expiring) else old
        if type(value) is not bytes or (old_value is not None and type(old_value) is not bytes):
            delta = (type(value) is not bytes) - (
                old_value is not None and type(old_value) is not bytes
            )
            if delta:
                self._containers[name] = self._containers.get(name, 0) + delta
        if isinstance(old, _Expiring):
            record: _Expiring = old
            if expire_at_ms is None:
                self._wheel.remove(record)
                bucket[key] = value
            else:
                record.value = value
                if record._wheel_tick != expire_at_ms:
                    self._wheel.reset(record, expire_at_ms)
        elif expire_at_ms is None:
            bucket[key] = value
        else:
            record = _Expiring(name, key, value)
            if not self._wheel:
                self._wheel.poll(self._clock_ms)
            self._wheel.insert(record, expire_at_ms)
            bucket[key] = record
        if old is None:
            self._keys += 1
            index = self._indexes.get(name)
            if index is not None:
                index.insert(key)
            order = self._sorted.get(name)
            if order is not None:
                insort(order, key)
        if self._watched:
            self._touch((name, key))

    def _delete(self, name: bytes, key: bytes) -> None:
        old = self._buckets[name][key]
        if isinstance(old, _Expiring):
            self._wheel.remove(old)
        self._drop(name, key)

    def _drop(self, name: bytes, key: bytes) -> None:
        """Forget a key whose record (if any) is already out of the wheel."""
        bucket = self._buckets[name]
        old = bucket.pop(key)
        if type(old) is not bytes and (type(old) is not _Expiring or type(old.value) is not bytes):
            self._containers[name] -= 1
        self._keys -= 1
        index = self._indexes.get(name)
        if index is not None:
            index.remove(key)
        order = self._sorted.get(name)
        if order is not None:
            del order[bisect_left(order, key)]
        if not bucket:
            del self._buckets[name]
            self._indexes.pop(name, None)
            self._sorted.pop(name, None)
            self._containers.pop(name, None)
        if self._watched:
            self._touch((name, key))

    def _restore_buckets(self, dropped: dict[bytes, dict[bytes, Stored]]) -> None:
        for name, bucket in dropped.items():
            assert name not in self._buckets, f"bucket {name!r} reappeared before its undo"
            self._buckets[name] = bucket
            self._indexes.pop(name, None)
            self._sorted.pop(name, None)
            self._keys += len(bucket)
            containers = 0
            for stored in bucket.values():
                if isinstance(stored, _Expiring):
                    self._wheel.insert(stored, stored._wheel_tick)
                    containers += type(stored.value) is not bytes
                else:
                    containers += type(stored) is not bytes
            if containers:
                self._containers[name] = containers

    def _index(self, bucket: bytes) -> ScanIndex | None:
        found = self._buckets.get(bucket)
        if not found:
            return None
        index = self._indexes.get(bucket)
        if index is None:
            index = self._indexes[bucket] = ScanIndex(found)
        return index

    def _touch(self, pair: tuple[bytes, bytes]) -> None:
        watchers = self._watched.get(pair)
        if watchers:
            for handle in watchers:
                handle.dirty = True
