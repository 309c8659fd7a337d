"""The keyspace: expiry on the wheel, lazy expiry, journal and rollback, replay, SCAN, WATCH."""

from __future__ import annotations

import bisect
import gc
import random
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.runtime._wheel import UNFILED
from minidb.store import _scanindex
from minidb.store._args import Session
from minidb.store._commands import execute
from minidb.store._journal import OpJournal
from minidb.store._keyspace import Keyspace, _Expiring
from minidb.wal._ops import Expire, Put, Remove

NOW = 1_700_000_000_000
"""The fake wall clock's start, ms since the epoch."""


State = dict[tuple[bytes, bytes], tuple[bytes, int | None]]


def dump(ks: Keyspace, now_ms: int | None = None) -> State:
    """Every key's (value, deadline); only the live ones at ``now_ms`` if given."""
    return {
        (op.bucket, op.key): (op.value, op.expire_at_ms)
        for op in ks.items()
        if now_ms is None or op.expire_at_ms is None or op.expire_at_ms > now_ms
    }


def check_invariants(ks: Keyspace) -> None:
    """The wheel holds exactly the expiring records, counts and SCAN indexes are in step."""
    records = 0
    total = 0
    for name, bucket in ks._buckets.items():
        assert bucket, f"empty bucket {name!r} kept"
        total += len(bucket)
        for key, stored in bucket.items():
            if isinstance(stored, _Expiring):
                records += 1
                assert stored._wheel_where != UNFILED, f"{key!r} not in the wheel"
                assert (stored.bucket, stored.key) == (name, key)
        index = ks._indexes.get(name)
        if index is not None:
            assert sorted(index.keys) == sorted(bucket), f"index of {name!r} out of step"
            assert list(index.hashes) == sorted(index.hashes)
    assert set(ks._indexes) <= set(ks._buckets)
    assert len(ks._wheel) == records
    assert len(ks) == total


def put(ks: Keyspace, key: bytes, deadline: int | None, journal: OpJournal | None = None) -> None:
    ks.put(b"0", key, b"v", deadline, journal)


# -- expiry ------------------------------------------------------------------------------------


def test_keyspace_lazy_expiry_on_read_before_the_timer() -> None:
    """A key past its deadline is never returned, even though expire_due has not run."""
    ks = Keyspace(now_ms=NOW)
    journal = OpJournal()
    put(ks, b"k", NOW + 100)
    assert ks.get(b"0", b"k", NOW + 99, journal) == b"v"
    assert ks.get(b"0", b"k", NOW + 100, journal) is None
    assert journal.open_ops == [Remove(b"0", b"k")]
    assert ks.statistics().expired_lazily == 1
    assert ks.expire_due(NOW + 1000, journal) == []  # the timer has nothing left to do
    check_invariants(ks)


def test_keyspace_expire_due_releases_only_due_keys_and_journals_removes() -> None:
    """expire_due removes exactly the keys due by now, as one group of Removes."""
    ks = Keyspace(now_ms=NOW)
    journal = OpJournal()
    put(ks, b"a", NOW + 10)
    put(ks, b"b", NOW + 20)
    put(ks, b"c", None)
    assert ks.next_expiry_ms() is not None and ks.next_expiry_ms() <= NOW + 10  # type: ignore[operator]
    assert ks.expire_due(NOW + 9, journal) == []
    assert ks.expire_due(NOW + 15, journal) == [(b"0", b"a")]
    assert ks.expire_due(NOW + 20, journal) == [(b"0", b"b")]
    assert journal.records == [[Remove(b"0", b"a")], [Remove(b"0", b"b")]]
    assert dump(ks) == {(b"0", b"c"): (b"v", None)}
    assert ks.next_expiry_ms() is None
    check_invariants(ks)


def test_keyspace_expire_due_limit_keeps_the_rest_due_in_order() -> None:
    """Over its limit, expire_due leaves the rest due and returns them first next time."""
    ks = Keyspace(now_ms=NOW)
    for i in range(10):
        put(ks, b"%d" % i, NOW + 10 - i)
    first = ks.expire_due(NOW + 100, None, limit=4)
    rest = ks.expire_due(NOW + 100, None, limit=100)
    assert [k for _, k in first + rest] == [b"%d" % i for i in reversed(range(10))]
    check_invariants(ks)


def test_keyspace_clock_stepped_back_expires_nothing() -> None:
    """A wall clock moved backwards makes nothing due; moved forward again, the keys go."""
    ks = Keyspace(now_ms=NOW)
    put(ks, b"k", NOW + 50)
    assert ks.expire_due(NOW + 40, None) == []
    assert ks.expire_due(NOW - 10_000, None) == []
    assert ks.expire_due(NOW + 50, None) == [(b"0", b"k")]


def test_keyspace_rewriting_an_expiring_key_moves_its_timer() -> None:
    """A new deadline replaces the old one in the wheel; no expiry fires for the old one."""
    ks = Keyspace(now_ms=NOW)
    put(ks, b"k", NOW + 10)
    put(ks, b"k", NOW + 100)
    assert ks.expire_due(NOW + 50, None) == []
    put(ks, b"k", None)
    assert ks.expire_due(NOW + 1000, None) == []
    assert ks.get(b"0", b"k", NOW + 1000, None) == b"v"
    check_invariants(ks)


@pytest.mark.slow
def test_keyspace_million_keys_expire_in_deadline_order_without_a_scan() -> None:
    """1M keys with random TTLs come out in deadline order, each call examining only what it
    removes, and every key due by each call's time is gone after it."""
    n = 1_000_000
    rng = random.Random(7)
    ks = Keyspace(now_ms=NOW)
    deadlines = [NOW + rng.randrange(1, 3_600_000) for _ in range(n)]
    for i, deadline in enumerate(deadlines):
        ks.put(b"0", b"%d" % i, b"v", deadline, None)
    ordered = sorted(deadlines)
    now, last, removed = NOW, 0, 0
    while len(ks):
        now += rng.randrange(1, 20_000)
        before = ks.statistics().expiry_examined
        out = ks.expire_due(now, None, limit=n)
        examined = ks.statistics().expiry_examined - before
        assert examined == len(out), "expire_due looked at keys it did not remove"
        for _, key in out:
            deadline = deadlines[int(key)]
            assert last <= deadline <= now, "out of deadline order or early"
            last = deadline
        removed += len(out)
        assert removed == bisect.bisect_right(ordered, now), "a due key was left behind"
    assert removed == n


@pytest.mark.slow
def test_keyspace_memory_returns_after_expiry() -> None:
    """After 100k expiring keys have all expired, traced memory is back near where it was."""
    keys = [b"key:%d" % i for i in range(100_000)]
    ks = Keyspace(now_ms=NOW)
    rng = random.Random(3)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for key in keys:
            ks.put(b"0", key, b"value", NOW + rng.randrange(1, 600_000), None)
        full = tracemalloc.get_traced_memory()[0]
        now = NOW
        while len(ks):
            now += 10_000
            ks.expire_due(now, None, limit=len(keys))
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert full - base > 10_000_000  # the keys did take room
    assert after - base < 64 * 1024, f"{after - base} bytes left after every key expired"


def _bytes_per_key(with_ttl: bool, n: int = 100_000) -> float:
    keys = [b"key:%08d" % i for i in range(n)]
    ks = Keyspace(now_ms=NOW)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i, key in enumerate(keys):
            ks.put(b"0", key, b"v", NOW + 1000 + 37 * i if with_ttl else None, None)
        return (tracemalloc.get_traced_memory()[0] - base) / n
    finally:
        tracemalloc.stop()


def test_keyspace_bytes_per_key() -> None:
    """Overhead per key (key and value objects excluded): a dict entry, plus about one record
    and one wheel slot for a key with a TTL."""
    plain, expiring = _bytes_per_key(False), _bytes_per_key(True)
    print(f"bytes per key: {plain:.0f} without TTL, {expiring:.0f} with")
    assert plain < 80
    assert expiring < 260


# -- journal, rollback, replay -----------------------------------------------------------------

KEYS = [b"a", b"b", b"c"]
TEMPLATES = [
    "SET {k} v{n}", "SET {k} v{n} PX {n}", "SET {k} w KEEPTTL", "SET {k} x NX EX 1",
    "SET {k} y XX GET", "DEL {k} {o}", "INCR {k}", "APPEND {k} z", "EXPIRE {k} {n}",
    "PEXPIRE {k} {m}", "PEXPIRE {k} {n} GT", "PERSIST {k}", "GETEX {k} PX {n}", "GETDEL {k}",
    "RENAME {k} {o}", "COPY {k} {o} DB 1 REPLACE", "MSET {k} 1 {o} 2", "FLUSHDB",
    "FLUSHALL", "SELECT 1", "SELECT 0", "GET {k}", "SETRANGE {k} 2 zz",
    "INCRBYFLOAT {k} 1.5", "GETSET {k} q", "SETEX {k} 1 s", "MSETNX {k} 1 {o} 2",
]  # fmt: skip

step = st.tuples(
    st.sampled_from(TEMPLATES),
    st.sampled_from(KEYS),
    st.sampled_from(KEYS),
    st.integers(0, 6),  # a TTL in ms (0 refused by SET, allowed by EXPIRE)
    st.integers(0, 4),  # clock advance before the step
    st.booleans(),  # run expire_due before the step
)
Steps = list[tuple[str, bytes, bytes, int, int, bool]]


def play(ks: Keyspace, session: Session, steps: Steps, journal: OpJournal, now: int) -> int:
    for template, key, other, n, advance, tick in steps:
        now += advance
        if tick:
            ks.expire_due(now, journal)
        line = template.format(k=key.decode(), o=other.decode(), n=n, m=n - 2)
        execute(ks, session, [w.encode() for w in line.split()], journal, now)
    return now


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=40))
def test_keyspace_replay_of_the_journal_reproduces_the_state(steps: Steps) -> None:
    """Ops journaled by any command sequence, replayed record by record into a fresh keyspace
    and purged, give the same live keys, values and deadlines."""
    ks = Keyspace(now_ms=NOW)
    journal = OpJournal()
    end = play(ks, Session(), steps, journal, NOW)
    check_invariants(ks)
    assert not journal.open_ops
    fresh = Keyspace(now_ms=end)
    for record in journal.records:
        fresh.apply_ops(record, end)
    fresh.purge_expired(end)
    check_invariants(fresh)
    assert dump(fresh) == dump(ks, end)


def test_keyspace_replay_keeps_a_key_persisted_before_its_deadline() -> None:
    """Put with a deadline, then PERSIST before it: replayed after the deadline, the key lives."""
    fresh = Keyspace(now_ms=NOW)
    fresh.apply_ops([Put(b"0", b"k", b"v", NOW + 10)], NOW + 50)
    fresh.apply_ops([Expire(b"0", b"k", None)], NOW + 50)
    fresh.purge_expired(NOW + 50)
    assert dump(fresh) == {(b"0", b"k"): (b"v", None)}


def test_keyspace_replay_never_serves_a_key_past_its_deadline() -> None:
    """A key whose deadline passed while the server was down is gone on load."""
    fresh = Keyspace(now_ms=NOW)
    fresh.apply_ops([Put(b"0", b"old", b"v", NOW - 1), Put(b"0", b"new", b"v", NOW + 1)], NOW)
    assert fresh.get(b"0", b"old", NOW, None) is None
    fresh.apply_ops([Put(b"0", b"old2", b"v", NOW - 5)], NOW)
    assert fresh.purge_expired(NOW) == 1
    assert dump(fresh) == {(b"0", b"new"): (b"v", NOW + 1)}


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=15), st.lists(step, max_size=25))
def test_keyspace_rollback_restores_values_and_ttls_exactly(before: Steps, after: Steps) -> None:
    """Whatever a journaled group did (expiry included), rollback gives back every key with
    its value and deadline, and the wheel and indexes in step."""
    ks = Keyspace(now_ms=NOW)
    session = Session()
    now = play(ks, session, before, OpJournal(), NOW)
    execute(ks, session, [b"SCAN", b"0"], OpJournal(), now)  # an index to keep in step too
    snapshot = dump(ks)
    journal = OpJournal()
    play(ks, session, after, journal, now)
    ks.rollback(journal)
    assert dump(ks) == snapshot
    assert not journal.records and not journal.undo
    check_invariants(ks)


def test_keyspace_rollback_of_flush_puts_timers_back() -> None:
    """A rolled-back FLUSHALL restores its keys, and their deadlines fire again."""
    ks = Keyspace(now_ms=NOW)
    put(ks, b"a", NOW + 10)
    put(ks, b"b", None)
    journal = OpJournal()
    ks.flush(None, journal)
    assert len(ks) == 0 and ks.next_expiry_ms() is None
    ks.rollback(journal)
    check_invariants(ks)
    assert ks.expire_due(NOW + 10, None) == [(b"0", b"a")]


# -- SCAN ---------------------------------------------------------------------------------------

names = st.binary(min_size=0, max_size=4)


@settings(max_examples=200, deadline=None)
@given(
    stable=st.sets(names, max_size=40),
    transient=st.sets(names, max_size=40),
    actions=st.lists(st.tuples(st.booleans(), names, st.integers(1, 7)), max_size=60),
)
def test_keyspace_scan_returns_every_key_present_throughout(
    stable: set[bytes], transient: set[bytes], actions: list[tuple[bool, bytes, int]]
) -> None:
    """Keys present for the whole scan are all returned, whatever is inserted or deleted
    between the calls; nothing returned was never there."""
    transient -= stable
    ks = Keyspace(now_ms=NOW)
    for key in stable | transient:
        put(ks, key, None)
    seen: set[bytes] = set()
    ever = set(stable | transient)
    cursor, steps = 0, iter(actions)
    while True:
        insert, key, count = next(steps, (False, b"", 3))
        if key not in stable:
            if insert:
                put(ks, key, None)
                ever.add(key)
            else:
                ks.remove(b"0", key, None)
        cursor, page = ks.scan(b"0", cursor, count, NOW, None)
        seen.update(page)
        if cursor == 0:
            break
    assert stable <= seen
    assert seen <= ever
    check_invariants(ks)


def test_keyspace_scan_keeps_equal_hashes_in_one_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """With hashes forced to collide, a page takes every key of its last hash, so a cursor
    never splits a group and the scan still returns every key."""
    monkeypatch.setattr(_scanindex, "key_hash", lambda key: len(key) % 3)
    ks = Keyspace(now_ms=NOW)
    keys = {b"k" * n for n in range(1, 13)}
    for key in keys:
        put(ks, key, None)
    seen: list[bytes] = []
    cursor = 0
    while True:
        cursor, page = ks.scan(b"0", cursor, 1, NOW, None)
        seen += page
        put(ks, b"x" * (len(seen) + 20), None)  # inserted between calls, colliding too
        if cursor == 0:
            break
    assert keys <= set(seen) and len(set(seen)) == len(seen)
    check_invariants(ks)


def test_keyspace_scan_skips_and_expires_keys_past_their_deadline() -> None:
    """SCAN never returns an expired key and removes it, journaled."""
    ks = Keyspace(now_ms=NOW)
    put(ks, b"live", None)
    put(ks, b"dead", NOW + 1)
    journal = OpJournal()
    assert ks.scan(b"0", 0, 10, NOW + 1, journal) == (0, [b"live"])
    assert journal.open_ops == [Remove(b"0", b"dead")]


def test_keyspace_random_key_is_live_and_from_the_bucket() -> None:
    """RANDOMKEY picks among live keys only, and eventually picks each."""
    ks = Keyspace(now_ms=NOW, rng=random.Random(5))
    for key in (b"a", b"b", b"c"):
        put(ks, key, None)
    put(ks, b"dead", NOW)
    picks = {ks.random_key(b"0", NOW, None) for _ in range(200)}
    assert picks == {b"a", b"b", b"c"}


# -- WATCH --------------------------------------------------------------------------------------


def test_keyspace_watch_costs_nothing_when_unwatched() -> None:
    """Without watchers the registry stays empty; unwatch removes every registration."""
    ks = Keyspace(now_ms=NOW)
    handle = ks.watch(b"0", [b"a", b"b"])
    assert ks.statistics().watched_keys == 2
    put(ks, b"a", None)
    assert handle.dirty
    ks.unwatch(handle)
    assert ks.statistics().watched_keys == 0 and not ks._watched


def test_keyspace_mass_expiry_is_journaled_in_bounded_groups() -> None:
    """expire_due of many keys splits its Removes into groups of bounded size, none lost."""
    ks = Keyspace(now_ms=NOW)
    for i in range(5000):
        put(ks, b"key:%020d" % i, NOW + 1)
    journal = OpJournal()
    assert len(ks.expire_due(NOW + 1, journal)) == 5000
    assert len(journal.records) > 1
    assert sum(len(group) for group in journal.records) == 5000
    assert all(sum(len(op.key) + 1 for op in group) < 40 * 1024 for group in journal.records)


def test_keyspace_counts_keys_with_a_deadline_per_bucket() -> None:
    """expiring_by_bucket counts, per bucket, the keys that have a deadline."""
    ks = Keyspace()
    ks.put(b"0", b"plain", b"v", None, None)
    ks.put(b"0", b"timed", b"v", 5_000, None)
    ks.put(b"3", b"a", b"v", 5_000, None)
    ks.put(b"3", b"b", b"v", 6_000, None)
    ks.put(b"3", b"b", b"v", None, None)  # persisted again
    assert ks.expiring_by_bucket() == {b"0": 1, b"3": 1}
