"""Reading back what a shipper shipped, with the layout's planner (the tests' restore).

``shipped_state(store)`` lists the prefix, plans the newest state (or one at a sequence number)
from ``current``'s lineage, verifies every object it reads (size and CRC32C against its name,
every record's own checksum through the WAL reader) and returns the keys and values the plan
rebuilds, so a test compares them with a model.
"""

from __future__ import annotations

from minidb.objstore import ObjectStore
from minidb.replication import (
    RestorePlan,
    list_catalog,
    plan_restore,
    read_current,
    verify_object,
)
from minidb.wal import Flush, Put, Remove, decode_ops
from minidb.wal._format import FileKind
from minidb.wal._reader import closed_records, segment_records

State = dict[tuple[bytes, bytes], bytes]


async def plan(store: ObjectStore, at_seq: int | None = None) -> RestorePlan:
    """The plan of the newest shipped state (or of ``at_seq``)."""
    found = await read_current(store)
    assert found is not None, "nothing was ever shipped (no current pointer)"
    return plan_restore(await list_catalog(store), found[0].generation, at_seq=at_seq)


def _apply(state: State, payload: bytes) -> None:
    for op in decode_ops(payload):
        if isinstance(op, Put):
            state[(op.bucket, op.key)] = op.value
        elif isinstance(op, Remove):
            state.pop((op.bucket, op.key), None)
        elif isinstance(op, Flush):
            for k in [k for k in state if op.bucket is None or k[0] == op.bucket]:
                del state[k]


async def shipped_state(store: ObjectStore, at_seq: int | None = None) -> tuple[State, RestorePlan]:
    """The keys and values the shipped objects rebuild, and the plan that rebuilt them."""
    p = await plan(store, at_seq)
    state: State = {}
    if p.snapshot is not None:
        data = (await store.get(p.snapshot.key)).data
        verify_object(p.snapshot, data)
        for record in closed_records(data, FileKind.SNAPSHOT, p.snapshot.base):
            _apply(state, record.payload)
    for step in p.chunks:
        data = (await store.get(step.chunk.key)).data
        verify_object(step.chunk, data)
        reader, records = segment_records(data, step.chunk.first)
        numbers = []
        for record in records:
            numbers.append(record.number)
            if step.apply_from <= record.number <= step.apply_to:
                _apply(state, record.payload)
        assert numbers == list(range(step.chunk.first, step.chunk.last + 1)), step.chunk.key
        assert reader.good_offset == len(data), f"{step.chunk.key} has bytes after its records"
    return state, p
