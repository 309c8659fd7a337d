"""Restore: a data directory rebuilt from shipped objects, to the newest point or an earlier one.

``restore(store, data_dir, at_seq=..., at_time_ms=...)`` reads one listing of the store and the
``current`` pointer, asks the layout's planner (``plan_restore``) for the snapshot and the
chunks that make up the point, and lays them out with ``minidb.wal.Seed`` as an ordinary data
directory, which ``minidb serve`` then opens as usual. Nothing is trusted that was not checked:

- the listing: a chunk or snapshot whose listed size is not the size its name promises is a
  truncated upload, refused before a byte is read (``Catalog.from_listing``); a missing range of
  records is a ``GapError`` (the planner), never a shorter restore;
- each object's bytes: its size and whole-object CRC32C against its name (streamed for the
  snapshot, which may be large); then every record's own checksums (the WAL's reader), and a
  chunk must hold exactly the records its name says;
- the directory: it must hold no store (``Seed`` refuses), and a failed restore removes what it
  wrote, so a retry starts from an empty directory again.

Memory is bounded by one chunk (a chunk is at most one segment) and the snapshot streams to disk,
so a restore's memory does not grow with the length of the log. Every refusal is a
``RestoreError`` (``GapError``, ``DamagedObject``) naming the object.

The replica uses the same pieces (``fetch_chunk``, ``chunk_records``) to tail the log.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator

import google_crc32c

from minidb.errors import CorruptionError
from minidb.objstore import NotFound, ObjectStore
from minidb.replication._errors import DamagedObject, RestoreError
from minidb.replication._generation import read_current
from minidb.replication._layout import (
    CURRENT_KEY,
    Catalog,
    ChunkObject,
    CurrentPointer,
    RestorePlan,
    SnapshotObject,
    plan_restore,
    verify_object,
)
from minidb.replication._retention import list_catalog
from minidb.wal import Seed, holds_store, segment_copy_records
from minidb.wal._reader import Record
from minidb.wal._seed import segment_copy_offsets


@dataclasses.dataclass(frozen=True, slots=True)
class RestoreResult:
    """What a restore did: the plan it followed and what it cost."""

    plan: RestorePlan
    records: int
    """Log records written after the snapshot."""
    snapshot_records: int
    """Keys in the snapshot (0 without one)."""
    bytes_read: int
    objects_read: int
    seconds: float


async def current_pointer(store: ObjectStore) -> CurrentPointer:
    """The ``current`` pointer: which generation ships; ``RestoreError`` if nothing ever did."""
    found = await read_current(store)
    if found is None:
        raise RestoreError(
            f"nothing was ever shipped here: no {CURRENT_KEY!r} object in {store.endpoint}"
        )
    return found[0]


async def load_catalog(store: ObjectStore) -> tuple[Catalog, CurrentPointer]:
    """One listing of the store, sorted out, and the pointer (read first, so every object the
    pointer's generation had shipped by then is in the listing)."""
    current = await current_pointer(store)
    return await list_catalog(store), current


async def fetch_chunk(store: ObjectStore, chunk: ChunkObject) -> bytes:
    """The chunk's bytes, checked against the size and checksum its name promises."""
    try:
        obj = await store.get(chunk.key)
    except NotFound:
        raise DamagedObject(
            f"object {chunk.key!r} was listed but is gone", key=chunk.key, reason="missing",
            generation=chunk.generation,
        ) from None
    verify_object(chunk, obj.data)
    return obj.data


def chunk_records(chunk: ChunkObject, data: bytes) -> Iterator[Record]:
    """The records of a checked chunk, each verified by the WAL's reader: exactly
    ``chunk.first..chunk.last``; anything else is ``DamagedObject`` naming the chunk."""
    expected = chunk.first
    try:
        for record in segment_copy_records(data, chunk.first, chunk.key):
            if record.number > chunk.last:
                break
            expected = record.number + 1
            yield record
    except CorruptionError as exc:
        raise DamagedObject(
            f"object {chunk.key!r}: {exc}", key=chunk.key, reason="contents",
            generation=chunk.generation,
        ) from None
    if expected != chunk.last + 1:
        raise DamagedObject(
            f"object {chunk.key!r} holds records {chunk.first}..{expected - 1}, its name says"
            f" {chunk.first}..{chunk.last}",
            key=chunk.key, reason="contents", generation=chunk.generation,
        )


def chunk_span(chunk: ChunkObject, data: bytes, first: int, last: int) -> tuple[int, int | None]:
    """Where records ``first..last`` lie in a checked chunk: the offset of ``first``, and that of
    the record after ``last`` (None: up to the chunk's end), every record checked as
    ``chunk_records`` checks them (``DamagedObject`` likewise).

    A chunk whose records are all plainly valid is checked and located in C
    (``segment_copy_offsets``); any other, or without the accelerator, is read record by record
    by ``chunk_records``, which says what is wrong.
    """
    # The end of record chunk.last too: the chunk must hold every record its name says.
    offsets = segment_copy_offsets(data, chunk.first, sorted({first, last + 1, chunk.last + 1}))
    if offsets is not None:
        return offsets[0], offsets[1] if last < chunk.last else None
    start = end = None
    for record in chunk_records(chunk, data):
        if record.number == first:
            start = record.offset
        if record.number == last + 1:
            end = record.offset
    assert start is not None, "chunk_records checked that the chunk holds its range"
    return start, end


async def _load_snapshot(store: ObjectStore, snapshot: SnapshotObject, seed: Seed) -> int:
    """Stream the snapshot into the seed, checking size and checksum on the way; its keys."""
    crc, size = 0, 0
    out = seed.snapshot_file()
    try:
        async with await store.open_read(snapshot.key) as reader:
            async for piece in reader:
                crc = google_crc32c.extend(crc, piece)
                size += len(piece)
                out.write(piece)
    except NotFound:
        raise DamagedObject(
            f"object {snapshot.key!r} was listed but is gone", key=snapshot.key,
            reason="missing", generation=snapshot.generation,
        ) from None
    if size != snapshot.size:
        raise DamagedObject(
            f"object {snapshot.key!r} is {size} bytes, its name says {snapshot.size}"
            " (truncated upload?)",
            key=snapshot.key, reason="size", generation=snapshot.generation,
        )
    if crc != snapshot.crc:
        raise DamagedObject(
            f"object {snapshot.key!r} has checksum {crc:08x}, its name says {snapshot.crc:08x}",
            key=snapshot.key, reason="checksum", generation=snapshot.generation,
        )
    try:
        return seed.seal_snapshot(snapshot.key)
    except CorruptionError as exc:
        raise DamagedObject(
            f"object {snapshot.key!r}: {exc}", key=snapshot.key, reason="contents",
            generation=snapshot.generation,
        ) from None


async def restore(
    store: ObjectStore,
    data_dir: str | os.PathLike[str],
    *,
    at_seq: int | None = None,
    at_time_ms: int | None = None,
) -> RestoreResult:
    """Rebuild ``data_dir`` (which must hold no store) as of record ``at_seq`` (inclusive),
    or as of ``at_time_ms`` (unix ms), or the newest shipped state.

    Raises ``RestoreError`` (``GapError``, ``DamagedObject``) naming the object, and
    ``WalError`` if the directory already holds a store; the directory is left without a
    store then.
    """
    started = time.perf_counter()
    catalog, current = await load_catalog(store)
    plan = plan_restore(catalog, current.generation, at_seq=at_seq, at_time_ms=at_time_ms)
    bytes_read = objects = snapshot_keys = 0
    seed = Seed(data_dir, plan.first_seq)
    try:
        if plan.snapshot is not None:
            snapshot_keys = await _load_snapshot(store, plan.snapshot, seed)
            bytes_read += plan.snapshot.size
            objects += 1
        for planned in plan.chunks:
            data = await fetch_chunk(store, planned.chunk)
            bytes_read += len(data)
            objects += 1
            # Every record is checked; the ones applied are copied as framed (they keep
            # their numbers, so their checksums hold in the restored segment as they are).
            start, end = chunk_span(planned.chunk, data, planned.apply_from, planned.apply_to)
            seed.append_framed(planned.apply_from, planned.apply_to, data[start:end])
        seed.finish()
    except BaseException:
        seed.abandon()
        raise
    seed.close()
    return RestoreResult(
        plan, seed.records, snapshot_keys, bytes_read, objects, time.perf_counter() - started
    )


async def restore_if_empty(
    store: ObjectStore, data_dir: str | os.PathLike[str]
) -> RestoreResult | None:
    """A replica's first start: restore the newest state if ``data_dir`` holds no store yet;
    None (nothing done) if it does, e.g. a replica restarting on its own directory."""
    if holds_store(data_dir):
        return None
    return await restore(store, data_dir)
