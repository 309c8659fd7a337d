"""The object layout: names round-trip, records parse, the restore planner plans or refuses."""

from __future__ import annotations

import dataclasses

import pytest

from minidb.replication import (
    Catalog,
    ChunkObject,
    CurrentPointer,
    DamagedObject,
    GapError,
    GenerationKey,
    GenerationRecord,
    RestoreError,
    SnapshotObject,
    chunk_for,
    generation_id,
    generation_started_ms,
    parse_key,
    plan_restore,
    snapshot_for,
    verify_object,
)

G1 = generation_id(1_700_000_000_000, 0x1)
G2 = generation_id(1_700_000_100_000, 0x2)
T1 = generation_started_ms(G1)


@dataclasses.dataclass(frozen=True)
class Entry:
    key: str
    size: int


def chunk(gen: str, first: int, last: int, ms: int) -> ChunkObject:
    return chunk_for(gen, first, last, ms, f"{gen}:{first}-{last}".encode())


def snap(gen: str, base: int, ms: int) -> SnapshotObject:
    return snapshot_for(gen, base, ms, f"{gen}:snap{base}".encode())


def catalog(*objects: ChunkObject | SnapshotObject | GenerationKey) -> Catalog:
    entries = [Entry(o.key, 0 if isinstance(o, GenerationKey) else o.size) for o in objects]
    return Catalog.from_listing(entries)


def test_generation_id_sorts_by_start_time() -> None:
    """Generation ids carry their start time and sort in start order, whatever the nonce."""
    a, b = generation_id(999, 0xFFFFFFFF), generation_id(1000, 0)
    assert a < b
    assert generation_started_ms(b) == 1000


def test_parse_key_round_trips_every_kind() -> None:
    """Chunk, snapshot and generation keys parse back to the objects that formatted them."""
    objects = [chunk(G1, 0, 9, 5), snap(G1, 10, 6), GenerationKey(G2, G1), GenerationKey(G1, None)]
    for obj in objects:
        assert parse_key(obj.key) == obj


def test_chunk_keys_sort_in_log_order() -> None:
    """Fixed-width hex sequence numbers make a generation's chunk keys sort like their ranges."""
    chunks = [chunk(G1, 0, 9, 1), chunk(G1, 10, 255, 1), chunk(G1, 256, 4096, 1)]
    assert sorted(c.key for c in chunks) == [c.key for c in chunks]


def test_parse_key_ignores_foreign_keys_but_refuses_strays_in_a_generation() -> None:
    """``current`` and unrelated keys are not layout objects; a bad name under gen/ is damage."""
    assert parse_key("current") is None
    assert parse_key("batch/tasks/x") is None
    with pytest.raises(DamagedObject) as info:
        parse_key(f"gen/{G1}/wal/junk")
    assert info.value.key == f"gen/{G1}/wal/junk" and info.value.reason == "name"


def test_verify_object_checks_size_and_checksum() -> None:
    """An object whose bytes are cut or changed is refused, naming it and the failed check."""
    data = b"records"
    obj = chunk_for(G1, 0, 0, 1, data)
    verify_object(obj, data)
    with pytest.raises(DamagedObject, match="truncated") as cut:
        verify_object(obj, data[:-1])
    assert cut.value.reason == "size" and cut.value.key == obj.key
    with pytest.raises(DamagedObject) as flipped:
        verify_object(obj, b"recordz")
    assert flipped.value.reason == "checksum"


def test_generation_record_and_pointer_round_trip() -> None:
    """The generation record and the pointer survive JSON and refuse a wrong field."""
    rec = GenerationRecord(G2, G1, generation_started_ms(G2), "host", 42, takeover=True)
    assert GenerationRecord.from_json(rec.key, rec.to_json()) == rec
    ptr = CurrentPointer(G2, rev=3, claimed_at_ms=7, write_id="ab")
    assert CurrentPointer.from_json(ptr.to_json()) == ptr
    with pytest.raises(DamagedObject):
        CurrentPointer.from_json(b'{"layout": 1, "generation": "x", "rev": 1}')
    with pytest.raises(DamagedObject):
        GenerationRecord.from_json(rec.key, b"not json")


def test_catalog_refuses_a_listed_size_unlike_the_name() -> None:
    """A truncated upload is found from the listing alone: its size differs from its name's."""
    c = chunk(G1, 0, 3, 1)
    with pytest.raises(DamagedObject) as info:
        Catalog.from_listing([Entry(c.key, c.size - 1)])
    assert info.value.key == c.key


def test_plan_latest_uses_newest_snapshot_and_following_chunks() -> None:
    """The newest state is the newest snapshot plus every chunk after it, in order."""
    cat = catalog(GenerationKey(G1, None), chunk(G1, 0, 9, 1), snap(G1, 10, 2),
                  chunk(G1, 10, 19, 3), chunk(G1, 20, 24, 4))
    plan = plan_restore(cat, G1)
    assert plan.snapshot == snap(G1, 10, 2)
    assert [(p.chunk.first, p.apply_from, p.apply_to) for p in plan.chunks] == [
        (10, 10, 19), (20, 20, 24)]
    assert (plan.first_seq, plan.last_seq, plan.next_seq, plan.time_ms) == (10, 24, 25, 4)


def test_plan_at_seq_stops_inside_a_chunk() -> None:
    """A sequence target applies a prefix of the chunk holding it and picks the snapshot before."""
    cat = catalog(chunk(G1, 0, 9, 1), snap(G1, 10, 2), chunk(G1, 10, 19, 3))
    plan = plan_restore(cat, G1, at_seq=14)
    assert plan.snapshot == snap(G1, 10, 2)
    assert [(p.apply_from, p.apply_to) for p in plan.chunks] == [(10, 14)]
    early = plan_restore(cat, G1, at_seq=4)
    assert early.snapshot is None and early.last_seq == 4
    at_snapshot = plan_restore(cat, G1, at_seq=9)
    assert at_snapshot.snapshot == snap(G1, 10, 2) and at_snapshot.chunks == ()


def test_plan_at_time_uses_whole_chunks_up_to_the_time() -> None:
    """A time target restores the newest chunk boundary at or before it."""
    cat = catalog(chunk(G1, 0, 9, T1 + 100), chunk(G1, 10, 19, T1 + 200),
                  chunk(G1, 20, 29, T1 + 300))
    assert plan_restore(cat, G1, at_time_ms=T1 + 250).last_seq == 19
    assert plan_restore(cat, G1, at_time_ms=T1 + 300).last_seq == 29
    assert plan_restore(cat, G1, at_time_ms=T1 + 150).time_ms == T1 + 100
    with pytest.raises(RestoreError):
        plan_restore(cat, G1, at_time_ms=T1 - 1)  # before the generation started


def test_plan_refuses_a_gap_naming_the_objects_around_it() -> None:
    """A missing chunk is a GapError naming the range and its neighbours, not a short restore."""
    before, after = chunk(G1, 0, 9, T1 + 1), chunk(G1, 20, 29, T1 + 3)
    cat = catalog(before, after)
    with pytest.raises(GapError) as info:
        plan_restore(cat, G1)
    err = info.value
    assert (err.missing_first, err.missing_last) == (10, 19)
    assert (err.after, err.before) == (before.key, after.key)
    with pytest.raises(GapError):
        plan_restore(cat, G1, at_time_ms=T1 + 5)  # the hole lies before the time asked for


def test_plan_refuses_a_target_beyond_what_was_shipped() -> None:
    """A sequence number past the newest shipped record is refused, not restored short."""
    cat = catalog(chunk(G1, 0, 9, 1))
    with pytest.raises(GapError) as info:
        plan_restore(cat, G1, at_seq=12)
    assert (info.value.missing_first, info.value.missing_last, info.value.before) == (10, 12, None)


def test_plan_without_a_start_is_refused() -> None:
    """A generation whose snapshot and first chunk are both gone cannot restore anything."""
    with pytest.raises(RestoreError):
        plan_restore(catalog(chunk(G1, 10, 19, 1)), G1)


def test_plan_follows_the_lineage_and_ignores_a_fenced_parent_after_takeover() -> None:
    """A point before the child started comes from the parent, and the parent's uploads after
    the takeover (a fenced server's) are never used."""
    t2 = generation_started_ms(G2)
    cat = catalog(
        GenerationKey(G1, None), chunk(G1, 0, 9, t2 - 10), chunk(G1, 10, 19, t2 + 10),
        GenerationKey(G2, G1), snap(G2, 10, t2), chunk(G2, 10, 14, t2 + 5),
    )
    assert plan_restore(cat, G2).generation == G2
    old = plan_restore(cat, G2, at_time_ms=t2 - 1)
    assert (old.generation, old.last_seq) == (G1, 9)
    by_seq = plan_restore(cat, G2, at_seq=5)  # G2 starts at 10: only the parent holds 5
    assert (by_seq.generation, by_seq.last_seq) == (G1, 5)
    with pytest.raises(GapError):
        plan_restore(catalog(GenerationKey(G2, G1), chunk(G1, 0, 9, t2 - 10),
                             chunk(G1, 10, 19, t2 + 10), snap(G2, 30, t2)), G2, at_seq=15)


def test_plan_ignores_generations_outside_the_lineage() -> None:
    """A generation that lost the race for the pointer is never restored from."""
    loser = generation_id(1_700_000_050_000, 0x3)
    cat = catalog(GenerationKey(G1, None), chunk(G1, 0, 9, 1),
                  GenerationKey(loser, G1), chunk(loser, 0, 99, 2))
    assert plan_restore(cat, G1).last_seq == 9
