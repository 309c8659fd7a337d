"""A model log shipped by hand, without a shipper: known records as the layout's objects.

The restore and replica tests need objects whose every byte they control (a gap, a flipped
byte, a truncated upload), so this writes them directly with the layout's names, the way the
shipper does: a chunk is a version-2 segment file holding exactly its records, a snapshot the
data directory's snapshot file. ``Model`` keeps the state after every record to compare with.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from minidb.objstore import ObjectStore
from minidb.replication._layout import (
    CurrentPointer,
    GenerationRecord,
    chunk_for,
    generation_id,
    snapshot_for,
)
from minidb.wal import Put, Remove, encode_ops
from minidb.wal._checkpoint import snapshot_chunks
from minidb.wal._format import FileKind, encode_header, encode_record

BUCKET = b"b"
T0_MS = 1_780_000_000_000
"""The wall-clock time of record 0 in the model (unix ms); record n is n ms later... per chunk."""


@dataclass
class Model:
    """Records 0..n-1 as payloads, and the state (key -> value) after each one."""

    payloads: list[bytes] = field(default_factory=list)
    states: list[dict[bytes, bytes]] = field(default_factory=list)

    def state_after(self, seq: int) -> dict[bytes, bytes]:
        """The state once records 0..seq are applied (``seq`` -1: empty)."""
        return dict(self.states[seq]) if seq >= 0 else {}

    @classmethod
    def random(cls, count: int, keys: int = 20, seed: int = 1) -> Model:
        rng = random.Random(seed)
        model = cls()
        state: dict[bytes, bytes] = {}
        for n in range(count):
            key = b"k%d" % rng.randrange(keys)
            if state and rng.random() < 0.2:
                ops: list[Put | Remove] = [Remove(BUCKET, key)]
                state.pop(key, None)
            else:
                value = b"v%d-%d" % (n, rng.randrange(1000))
                ops = [Put(BUCKET, key, value, None)]
                state[key] = value
            model.payloads.append(encode_ops(ops))
            model.states.append(dict(state))
        return model


def chunk_bytes(first: int, payloads: list[bytes]) -> bytes:
    """A chunk's body: a segment file header at ``first`` and the records, no END."""
    return encode_header(FileKind.SEGMENT, first) + b"".join(
        encode_record(first + i, p) for i, p in enumerate(payloads)
    )


def snapshot_bytes(base: int, state: dict[bytes, bytes]) -> bytes:
    """The snapshot file of ``state`` consistent with the log below ``base``."""
    puts = [encode_ops([Put(BUCKET, k, v, None)]) for k, v in sorted(state.items())]
    return b"".join(snapshot_chunks(base, puts))


@dataclass
class Shipped:
    """What ``ship`` wrote: the generation, and each chunk's key, range and time."""

    generation: str
    chunks: list[tuple[str, int, int, int]] = field(default_factory=list)
    snapshots: list[tuple[str, int]] = field(default_factory=list)

    def time_of(self, last: int) -> int:
        return next(t for _, _, end, t in self.chunks if end == last)


async def start_generation(
    store: ObjectStore, started_ms: int = T0_MS, parent: str | None = None, nonce: int = 1
) -> str:
    """Record a generation and point ``current`` at it."""
    gen = generation_id(started_ms, nonce)
    record = GenerationRecord(gen, parent, started_ms, "test", 1, parent is not None)
    await store.put_if_absent(record.key, record.to_json())
    await store.put("current", CurrentPointer(gen, 1, started_ms, "w").to_json())
    return gen


async def ship_chunks(
    store: ObjectStore, gen: str, model: Model, first: int, last: int, per_chunk: int,
    shipped: Shipped, time_ms: int | None = None,
) -> None:
    """Upload records ``first..last`` as chunks of ``per_chunk``; chunk times follow the
    model's clock (1 s per chunk after the generation's start) unless ``time_ms`` is given."""
    for start in range(first, last + 1, per_chunk):
        end = min(start + per_chunk - 1, last)
        data = chunk_bytes(start, model.payloads[start : end + 1])
        t = time_ms if time_ms is not None else T0_MS + 1000 * (end + 1)
        chunk = chunk_for(gen, start, end, t, data)
        await store.put_if_absent(chunk.key, data)
        shipped.chunks.append((chunk.key, start, end, t))


async def ship_snapshot(
    store: ObjectStore, gen: str, model: Model, base: int, shipped: Shipped
) -> str:
    """Upload the snapshot of the state below ``base``."""
    data = snapshot_bytes(base, model.state_after(base - 1))
    snap = snapshot_for(gen, base, T0_MS + 1000 * base, data)
    await store.put_if_absent(snap.key, data)
    shipped.snapshots.append((snap.key, base))
    return snap.key


async def ship_model(
    store: ObjectStore, model: Model, *, per_chunk: int = 10, snapshot_at: tuple[int, ...] = ()
) -> Shipped:
    """Ship the whole model as one generation: chunks of ``per_chunk``, snapshots at bases."""
    gen = await start_generation(store)
    shipped = Shipped(gen)
    await ship_chunks(store, gen, model, 0, len(model.payloads) - 1, per_chunk, shipped)
    for base in snapshot_at:
        await ship_snapshot(store, gen, model, base, shipped)
    return shipped
