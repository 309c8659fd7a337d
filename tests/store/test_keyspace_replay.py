"""``Keyspace.apply_ops``'s one-SET path (a replay's common record) leaves what its loop leaves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.store._keyspace import Keyspace
from minidb.wal._ops import Expire, Flush, Op, Put, Remove

NOW = 1_700_000_000_000
NAMES = st.sampled_from([b"a", b"b", b"c"])
EXPIRY = st.none() | st.integers(NOW - 10, NOW + 10)
SET = st.builds(Put, NAMES, NAMES, st.binary(max_size=3), st.none())
OPS: st.SearchStrategy[Op] = st.one_of(
    SET,
    st.builds(Put, NAMES, NAMES, st.binary(max_size=3), EXPIRY),
    st.builds(Remove, NAMES, NAMES),
    st.builds(Expire, NAMES, NAMES, EXPIRY),
    st.builds(Flush, st.none() | NAMES),
)
# Mostly one SET a record, as a replay meets them; the rest anything.
RECORDS = st.lists(SET, min_size=1, max_size=1) | st.lists(OPS, min_size=1, max_size=2)
# Between records, in some examples: watch a key, scan a bucket (a SCAN index) or page it in
# order (a sorted list), so the one-SET path meets the states it must leave to the loop.
ASIDES = st.none() | st.tuples(NAMES, NAMES)


def state(ks: Keyspace) -> tuple[object, ...]:
    buckets = ks.buckets()
    return (
        sorted(ks.items()),
        len(ks),
        ks.statistics(),
        {b: ks.sorted_keys(b) for b in buckets if b in ks._sorted},
        {b: sorted(ks._indexes[b].keys) for b in buckets if b in ks._indexes},
    )


@settings(deadline=None, max_examples=300)
@given(
    st.lists(st.tuples(RECORDS, ASIDES), max_size=30),
    st.sampled_from(["watch", "scan", "sorted"]),
)
def test_keyspace_replay_one_set_path_matches_the_loop(
    records: list[tuple[list[Op], tuple[bytes, bytes] | None]], aside: str
) -> None:
    """Records applied as lists (a one-op list may take the one-SET path) and as tuples (always
    the general loop) leave the same keys, values, deadlines, counts, indexes and watches."""
    fast, loop = Keyspace(now_ms=NOW), Keyspace(now_ms=NOW)
    watches = []
    for ops, between in records:
        fast.apply_ops(list(ops), NOW)
        loop.apply_ops(tuple(ops), NOW)
        if between is None:
            continue
        bucket, key = between
        if aside == "watch":
            watches.append((fast.watch(bucket, [key]), loop.watch(bucket, [key])))
        elif aside == "scan":
            assert fast.scan(bucket, 0, 2, NOW, None) == loop.scan(bucket, 0, 2, NOW, None)
        else:
            assert fast.sorted_keys(bucket) == loop.sorted_keys(bucket)
    assert state(fast) == state(loop)
    assert [a.dirty for a, _ in watches] == [b.dirty for _, b in watches]
