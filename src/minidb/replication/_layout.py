"""The object layout of a shipped WAL: names, records, and the restore planner (pure).

Owns everything a shipper and a restorer must agree on about the bytes in the store, and
nothing that does I/O: object keys (format and parse), the generation record and the
``current`` pointer (JSON), whole-object checksums, and ``plan_restore``, which turns one
listing plus the ``current`` pointer into the snapshot and ordered chunks that rebuild a point,
or a ``GapError`` / ``DamagedObject`` naming the object. ``docs/replication.md`` is the
specification; this module is its executable form.

Theory of operation. Keys under the store's prefix::

    current                                              the pointer: which generation ships
    generations/<gen>_<parent|root>.json                 one per server start, If-None-Match
    gen/<gen>/snap/<base>_<ms>_<size>_<crc>.snap         a checkpoint snapshot (a WAL snapshot file)
    gen/<gen>/wal/<first>-<last>_<ms>_<size>_<crc>.wal   records first..last (a WAL segment file)

``<gen>`` is ``<start unix ms, 13 digits>-<8 hex random>``, so generations sort by start time;
sequence numbers are 16 lower-case hex digits as in the data directory, so a generation's
chunks sort in log order; ``<ms>`` is the wall-clock time at which the object's newest record
was durable (decimal ms); ``<size>`` the object's length in bytes (decimal) and ``<crc>`` the
CRC32C of its bytes (8 hex). A listing alone therefore tells the planner every object's range,
time and expected size: a gap, an overlap or a truncated upload is found before a byte is read.

Every object is written once with If-None-Match and never changed; within a generation the
chunks continue each other (``next.first == prev.last + 1``). A generation may be restored
from only up to the moment its child took over (the child's start time): after that its
uploads are a fenced server's and belong to no history.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from typing import Protocol

import google_crc32c

from minidb.replication._errors import DamagedObject, GapError, RestoreError

LAYOUT_VERSION = 1
"""The version in every generation record and pointer; a reader refuses a newer one."""

CURRENT_KEY = "current"
GENERATIONS_PREFIX = "generations/"
GEN_PREFIX = "gen/"
ROOT_PARENT = "root"
"""The parent field of a generation key whose generation continues no other."""

SEQ_DIGITS = 16
"""Hex digits of a sequence number in a key (as in the data directory's file names)."""

_GEN_RE = r"\d{13}-[0-9a-f]{8}"
_SEQ_RE = r"[0-9a-f]{16}"
_TAIL_RE = r"_(\d{1,16})_(\d{1,16})_([0-9a-f]{8})"
_GENERATION_ID = re.compile(rf"^{_GEN_RE}$")
_GENERATION_KEY = re.compile(rf"^generations/({_GEN_RE})_({_GEN_RE}|{ROOT_PARENT})\.json$")
_CHUNK_KEY = re.compile(rf"^gen/({_GEN_RE})/wal/({_SEQ_RE})-({_SEQ_RE}){_TAIL_RE}\.wal$")
_SNAPSHOT_KEY = re.compile(rf"^gen/({_GEN_RE})/snap/({_SEQ_RE}){_TAIL_RE}\.snap$")
_IN_GENERATION = re.compile(rf"^gen/({_GEN_RE})/")


# -- names -------------------------------------------------------------------------------


def generation_id(started_at_ms: int, nonce: int) -> str:
    """The id of a generation started at ``started_at_ms`` (unix ms) with a random ``nonce``
    (32 bits): sorts by start time, and two starts in the same millisecond differ."""
    if not 0 <= started_at_ms < 10**13 or not 0 <= nonce < 1 << 32:
        raise ValueError(f"generation id out of range: {started_at_ms}, {nonce}")
    return f"{started_at_ms:013d}-{nonce:08x}"


def generation_started_ms(generation: str) -> int:
    """The start time (unix ms) a generation id encodes."""
    if not _GENERATION_ID.match(generation):
        raise ValueError(f"not a generation id: {generation!r}")
    return int(generation[:13])


def object_checksum(data: bytes) -> int:
    """The whole-object checksum in a chunk's or snapshot's name: CRC32C of its bytes."""
    return int(google_crc32c.value(data))


@dataclasses.dataclass(frozen=True, slots=True)
class GenerationKey:
    """A ``generations/`` key: ``generation`` continues ``parent`` (``None``: continues none)."""

    generation: str
    parent: str | None

    @property
    def started_at_ms(self) -> int:
        return generation_started_ms(self.generation)

    @property
    def key(self) -> str:
        return f"{GENERATIONS_PREFIX}{self.generation}_{self.parent or ROOT_PARENT}.json"


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkObject:
    """Records ``first..last`` (inclusive) of one generation's log, as a WAL segment file.

    The body is a version-2 segment: a file header with ``base = first``, then exactly the
    DATA records ``first..last`` (no END), so the WAL's reader and CRCs check it.
    """

    generation: str
    first: int
    last: int
    time_ms: int
    size: int
    crc: int

    @property
    def key(self) -> str:
        where = f"{GEN_PREFIX}{self.generation}/wal/{self.first:016x}-{self.last:016x}"
        return where + _tail(self.time_ms, self.size, self.crc) + ".wal"


@dataclasses.dataclass(frozen=True, slots=True)
class SnapshotObject:
    """A checkpoint snapshot: the state after every record numbered below ``base``.

    The body is the data directory's ``snapshot-<base>.snap`` file, byte for byte.
    """

    generation: str
    base: int
    time_ms: int
    size: int
    crc: int

    @property
    def key(self) -> str:
        where = f"{GEN_PREFIX}{self.generation}/snap/{self.base:016x}"
        return where + _tail(self.time_ms, self.size, self.crc) + ".snap"


def _tail(time_ms: int, size: int, crc: int) -> str:
    """The part of a chunk's or snapshot's key after its range: ``_<ms>_<size>_<crc>``."""
    return f"_{time_ms}_{size}_{crc:08x}"


ShippedObject = ChunkObject | SnapshotObject


def chunk_for(generation: str, first: int, last: int, time_ms: int, data: bytes) -> ChunkObject:
    """The chunk object (and so its key) for ``data`` holding records ``first..last``."""
    if not 0 <= first <= last:
        raise ValueError(f"a chunk holds at least one record: {first}..{last}")
    return ChunkObject(generation, first, last, time_ms, len(data), object_checksum(data))


def snapshot_for(generation: str, base: int, time_ms: int, data: bytes) -> SnapshotObject:
    """The snapshot object (and so its key) for the snapshot file ``data`` at ``base``."""
    return SnapshotObject(generation, base, time_ms, len(data), object_checksum(data))


def parse_key(key: str) -> GenerationKey | ChunkObject | SnapshotObject | None:
    """What ``key`` names, or ``None`` for a key outside the layout (``current``, foreign keys).

    A key under ``gen/<gen>/`` that does not parse is a ``DamagedObject``: nothing but the
    shipper writes there, so a stray name is damage, not something to skip silently.
    """
    if m := _CHUNK_KEY.match(key):
        gen, first, last, ms, size, crc = m.groups()
        return ChunkObject(gen, int(first, 16), int(last, 16), int(ms), int(size), int(crc, 16))
    if m := _SNAPSHOT_KEY.match(key):
        gen, base, ms, size, crc = m.groups()
        return SnapshotObject(gen, int(base, 16), int(ms), int(size), int(crc, 16))
    if m := _GENERATION_KEY.match(key):
        gen, parent = m.groups()
        return GenerationKey(gen, None if parent == ROOT_PARENT else parent)
    if m := _IN_GENERATION.match(key):
        raise DamagedObject(
            f"unexpected object {key!r} in generation {m.group(1)}",
            key=key, reason="name", generation=m.group(1),
        )
    return None


def verify_object(obj: ShippedObject, data: bytes) -> None:
    """Raise ``DamagedObject`` unless ``data`` has the size and CRC32C its name promises."""
    if len(data) != obj.size:
        raise DamagedObject(
            f"object {obj.key!r} is {len(data)} bytes, its name says {obj.size}"
            " (truncated upload?)",
            key=obj.key, reason="size", generation=obj.generation,
        )
    if (crc := object_checksum(data)) != obj.crc:
        raise DamagedObject(
            f"object {obj.key!r} has checksum {crc:08x}, its name says {obj.crc:08x}",
            key=obj.key, reason="checksum", generation=obj.generation,
        )


# -- the generation record and the pointer ------------------------------------------------


def _loads(key: str, data: bytes, kind: str) -> dict[str, object]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DamagedObject(
            f"{kind} {key!r} is not JSON: {exc}", key=key, reason="contents"
        ) from exc
    if not isinstance(doc, dict) or doc.get("layout") != LAYOUT_VERSION:
        raise DamagedObject(
            f"{kind} {key!r} is not a layout-{LAYOUT_VERSION} {kind}", key=key, reason="contents"
        )
    return doc


def _str(doc: dict[str, object], key: str, name: str) -> str:
    value = doc.get(name)
    if isinstance(value, str):
        return value
    raise DamagedObject(f"{key!r}: field {name!r} is {value!r}", key=key, reason="contents")


def _int(doc: dict[str, object], key: str, name: str) -> int:
    value = doc.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise DamagedObject(f"{key!r}: field {name!r} is {value!r}", key=key, reason="contents")


def _bool(doc: dict[str, object], key: str, name: str) -> bool:
    value = doc.get(name)
    if isinstance(value, bool):
        return value
    raise DamagedObject(f"{key!r}: field {name!r} is {value!r}", key=key, reason="contents")


@dataclasses.dataclass(frozen=True, slots=True)
class GenerationRecord:
    """Who started a generation, when, and which generation it continues.

    Stored at ``GenerationKey(generation, parent).key`` with If-None-Match: a second start
    that drew the same id fails to create it and draws again.
    """

    generation: str
    parent: str | None
    started_at_ms: int
    host: str
    pid: int
    takeover: bool
    """Whether the server was started to take the prefix over from a live ``parent``."""

    @property
    def key(self) -> str:
        return GenerationKey(self.generation, self.parent).key

    def to_json(self) -> bytes:
        return json.dumps({"layout": LAYOUT_VERSION, **dataclasses.asdict(self)},
                          sort_keys=True).encode()

    @classmethod
    def from_json(cls, key: str, data: bytes) -> GenerationRecord:
        doc = _loads(key, data, "generation record")
        return cls(
            generation=_str(doc, key, "generation"),
            parent=None if doc.get("parent") is None else _str(doc, key, "parent"),
            started_at_ms=_int(doc, key, "started_at_ms"),
            host=_str(doc, key, "host"),
            pid=_int(doc, key, "pid"),
            takeover=_bool(doc, key, "takeover"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class CurrentPointer:
    """The body of ``current``: the one generation allowed to ship.

    Created with If-None-Match by the first server, replaced only by compare-and-set. ``rev``
    grows by one at each replacement and ``write_id`` is random, so equal bytes (and so an
    equal ETag, S3's ABA) never stand for two different claims.
    """

    generation: str
    rev: int
    claimed_at_ms: int
    write_id: str

    def to_json(self) -> bytes:
        return json.dumps({"layout": LAYOUT_VERSION, **dataclasses.asdict(self)},
                          sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, key: str = CURRENT_KEY) -> CurrentPointer:
        doc = _loads(key, data, "pointer")
        generation = _str(doc, key, "generation")
        if not _GENERATION_ID.match(generation):
            raise DamagedObject(f"{key!r} names {generation!r}", key=key, reason="contents")
        return cls(
            generation=generation,
            rev=_int(doc, key, "rev"),
            claimed_at_ms=_int(doc, key, "claimed_at_ms"),
            write_id=_str(doc, key, "write_id"),
        )


# -- the catalog: one listing, sorted out ---------------------------------------------------


class Listed(Protocol):
    """What the planner needs of a listing entry (``minidb.objstore.ListEntry`` is one)."""

    @property
    def key(self) -> str: ...
    @property
    def size(self) -> int: ...


@dataclasses.dataclass(slots=True)
class GenerationObjects:
    """One generation's objects, in log order."""

    generation: str
    parent: str | None = None
    recorded: bool = False
    """Whether its generation record is in the listing."""
    chunks: list[ChunkObject] = dataclasses.field(default_factory=list)
    snapshots: list[SnapshotObject] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class Catalog:
    """Every layout object of one listing, by generation."""

    generations: dict[str, GenerationObjects]

    @classmethod
    def from_listing(cls, entries: Iterable[Listed]) -> Catalog:
        """Sort a listing out; ``DamagedObject`` for a stray name in a generation or an object
        whose listed size is not the size its name promises (a truncated upload)."""
        gens: dict[str, GenerationObjects] = {}
        for entry in entries:
            parsed = parse_key(entry.key)
            if parsed is None:
                continue
            g = gens.setdefault(parsed.generation, GenerationObjects(parsed.generation))
            if isinstance(parsed, GenerationKey):
                g.parent, g.recorded = parsed.parent, True
                continue
            if entry.size != parsed.size:
                raise DamagedObject(
                    f"object {entry.key!r} is {entry.size} bytes, its name says {parsed.size}"
                    " (truncated upload?)",
                    key=entry.key, reason="size", generation=parsed.generation,
                )
            if isinstance(parsed, ChunkObject):
                g.chunks.append(parsed)
            else:
                g.snapshots.append(parsed)
        for g in gens.values():
            g.chunks.sort(key=lambda c: (c.first, c.last))
            g.snapshots.sort(key=lambda s: s.base)
        return cls(gens)

    def lineage(self, current: str) -> list[tuple[GenerationObjects, int | None]]:
        """``current`` and its ancestors, newest first, each with the time (unix ms) up to
        which its objects count: its child's start, ``None`` for ``current`` itself."""
        out: list[tuple[GenerationObjects, int | None]] = []
        until: int | None = None
        seen: set[str] = set()
        gen: str | None = current
        while gen is not None and gen not in seen:
            seen.add(gen)
            g = self.generations.get(gen, GenerationObjects(gen))
            out.append((g, until))
            until = generation_started_ms(gen)
            gen = g.parent
        return out


# -- the restore planner ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class PlannedChunk:
    """Apply the records of ``chunk`` numbered ``apply_from..apply_to`` (inclusive) only."""

    chunk: ChunkObject
    apply_from: int
    apply_to: int


@dataclasses.dataclass(frozen=True, slots=True)
class RestorePlan:
    """Load ``snapshot`` (or start empty at 0), then apply ``chunks`` in order.

    The result is the state after record ``last_seq`` (``first_seq - 1`` when nothing is
    applied), as the primary had it at ``time_ms`` (unix ms, the newest object used).
    """

    generation: str
    snapshot: SnapshotObject | None
    chunks: tuple[PlannedChunk, ...]
    first_seq: int
    last_seq: int
    time_ms: int

    @property
    def next_seq(self) -> int:
        """The number of the first record after the restored state (the new log's base)."""
        return self.last_seq + 1

    @property
    def keys(self) -> tuple[str, ...]:
        """Every object the plan reads, in order."""
        head = (self.snapshot.key,) if self.snapshot else ()
        return head + tuple(p.chunk.key for p in self.chunks)


class _NotHere(Exception):
    """This generation holds nothing that can start the requested point (try its parent)."""


def plan_restore(
    catalog: Catalog,
    current: str,
    *,
    at_seq: int | None = None,
    at_time_ms: int | None = None,
) -> RestorePlan:
    """The plan that rebuilds the state after record ``at_seq``, or as of ``at_time_ms``, or
    the newest shipped state (neither given), following ``current``'s lineage.

    The newest generation of the lineage that can start the point is used: its newest snapshot
    at or before the point, then its chunks without a hole up to the point. A hole is a
    ``GapError`` (never a shorter restore), whatever older generations hold. By time, the
    point is the newest chunk boundary at or before ``at_time_ms`` (chunks are applied whole).
    """
    if at_seq is not None and at_time_ms is not None:
        raise ValueError("give at_seq or at_time_ms, not both")
    if at_seq is not None and at_seq < -1:
        raise ValueError(f"at_seq must be at least -1, not {at_seq}")
    for g, until in catalog.lineage(current):
        limit = until if at_time_ms is None else min(at_time_ms, until or at_time_ms)
        if at_time_ms is not None and generation_started_ms(g.generation) > at_time_ms:
            continue
        try:
            return _plan_in(g, at_seq, limit)
        except _NotHere:
            continue
    point = (f"seq {at_seq}" if at_seq is not None else
             f"time {at_time_ms}" if at_time_ms is not None else "the newest state")
    raise RestoreError(f"no generation in the lineage of {current} can restore {point}",
                       generation=current)


def _plan_in(g: GenerationObjects, at_seq: int | None, limit_ms: int | None) -> RestorePlan:
    def usable(time_ms: int) -> bool:
        return limit_ms is None or time_ms <= limit_ms

    snaps = [s for s in g.snapshots if usable(s.time_ms)
             and (at_seq is None or s.base <= at_seq + 1)]
    snapshot = snaps[-1] if snaps else None
    base = snapshot.base if snapshot else 0
    chunks = [c for c in g.chunks if c.last >= base]
    if snapshot is None and not (chunks and chunks[0].first == 0 and usable(chunks[0].time_ms)):
        raise _NotHere
    planned: list[PlannedChunk] = []
    expected = base
    time_ms = snapshot.time_ms if snapshot else 0
    previous = snapshot.key if snapshot else None
    for c in chunks:
        if at_seq is not None and expected > at_seq:
            break
        if c.last < expected:
            continue  # wholly covered by an earlier chunk
        if not usable(c.time_ms):
            break  # the point lies before this chunk: a boundary, not a hole
        if c.first > expected:
            raise GapError(
                f"generation {g.generation}: records {expected}..{c.first - 1} are in no object"
                f" (between {previous or 'the start'} and {c.key})",
                generation=g.generation, missing_first=expected, missing_last=c.first - 1,
                after=previous, before=c.key,
            )
        stop = c.last if at_seq is None else min(c.last, at_seq)
        planned.append(PlannedChunk(c, expected, stop))
        expected, time_ms, previous = stop + 1, c.time_ms, c.key
    if at_seq is not None and expected <= at_seq:
        raise GapError(
            f"generation {g.generation}: records {expected}..{at_seq} were not shipped"
            f" (the newest shipped object is {previous or 'none'})",
            generation=g.generation, missing_first=expected, missing_last=at_seq,
            after=previous, before=None,
        )
    return RestorePlan(g.generation, snapshot, tuple(planned), base, expected - 1, time_ms)
