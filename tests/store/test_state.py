"""StoreState: applying requests, journaling writes, rolling back, scanning, records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.errors import WalError
from minidb.protocol import Delete, Get, Invalid, Scan, Set, parse_reply
from minidb.protocol import Keys as KeysReply
from minidb.store import Journal, StoreState
from minidb.wal import Expire, Flush, Put, Remove, decode_ops


def test_state_set_then_get_returns_value() -> None:
    """A SET is answered OK and a later GET returns the value."""
    state = StoreState()
    assert state.apply(Set(b"users", b"alice", b"hello")) == b"OK\n"
    assert state.apply(Get(b"users", b"alice")) == b"VALUE hello\n"


def test_state_get_missing_is_nil() -> None:
    """GET of a key never set is NIL, also in a bucket that does not exist."""
    state = StoreState()
    state.apply(Set(b"users", b"alice", b"x"))
    assert state.apply(Get(b"users", b"bob")) == b"NIL\n"
    assert state.apply(Get(b"nobody", b"alice")) == b"NIL\n"


def test_state_del_answers_ok_only_if_key_existed() -> None:
    """DEL answers OK for an existing key and NIL for a missing one."""
    state = StoreState()
    state.apply(Set(b"users", b"alice", b"x"))
    assert state.apply(Delete(b"users", b"alice")) == b"OK\n"
    assert state.apply(Delete(b"users", b"alice")) == b"NIL\n"
    assert len(state) == 0


def test_state_invalid_is_answered_with_its_reason() -> None:
    """An Invalid request gets ERR and its reason."""
    assert StoreState().apply(Invalid("empty request")) == b"ERR empty request\n"


def test_state_journal_records_only_changing_writes() -> None:
    """SET always journals; DEL only when the key existed; reads never."""
    state, journal = StoreState(), Journal()
    state.execute(Set(b"b", b"k", b"v 1"), journal)
    state.execute(Get(b"b", b"k"), journal)
    state.execute(Delete(b"b", b"missing"), journal)
    state.execute(Delete(b"b", b"k"), journal)
    assert [decode_ops(r) for r in journal.records] == [
        [Put(b"b", b"k", b"v 1")], [Remove(b"b", b"k")],
    ]


def test_state_rollback_restores_previous_values() -> None:
    """Rolling back a journal undoes inserts, overwrites and deletes, newest first."""
    state = StoreState()
    state.apply(Set(b"b", b"kept", b"old"))
    state.apply(Set(b"b", b"gone", b"was-here"))
    before = sorted(state.records())
    journal = Journal()
    state.execute(Set(b"b", b"kept", b"new"), journal)
    state.execute(Set(b"b", b"fresh", b"1"), journal)
    state.execute(Set(b"b", b"fresh", b"2"), journal)
    state.execute(Delete(b"b", b"gone"), journal)
    state.rollback(journal)
    assert sorted(state.records()) == before
    assert len(state) == 2
    assert journal.records == [] and journal.undo == []


def test_state_records_replay_to_the_same_store() -> None:
    """Applying records() to a fresh state reproduces the store."""
    state = StoreState()
    for i in range(50):
        state.apply(Set(b"b%d" % (i % 3), b"k%d" % i, b"v %d " % i))
    copy = StoreState()
    for record in state.records():
        copy.apply_ops(decode_ops(record))
    assert sorted(copy.records()) == sorted(state.records())


def test_state_apply_ops_applies_put_remove_and_flush_in_order() -> None:
    """Replay applies a record's operations in order: puts, removes, and both kinds of flush."""
    state = StoreState()
    state.apply_ops([Put(b"a", b"k", b"v\r"), Put(b"b", b"k", b""), Put(b"c", b"k", b"1")])
    assert state.apply(Get(b"a", b"k")) == b"VALUE v\r\n"
    state.apply_ops([Remove(b"a", b"k"), Remove(b"a", b"missing"), Flush(b"b")])
    assert len(state) == 1 and state.apply(Get(b"c", b"k")) == b"VALUE 1\n"
    state.apply_ops([Expire(b"c", b"k", None), Flush(None)])
    assert len(state) == 0


def test_state_apply_ops_refuses_an_expiry_it_cannot_keep() -> None:
    """This store keeps no expiry times, so an op carrying one is refused, not dropped."""
    with pytest.raises(WalError, match="expiry"):
        StoreState().apply_ops([Put(b"a", b"k", b"v", 1700000000000)])
    with pytest.raises(WalError, match="expiry"):
        StoreState().apply_ops([Expire(b"a", b"k", 1700000000000)])


def _scan_all(state: StoreState, bucket: bytes, count: int) -> list[str]:
    keys: list[str] = []
    cursor = b"0"
    while True:
        reply = parse_reply(state.apply(Scan(bucket, cursor, count)))
        assert isinstance(reply, KeysReply)
        keys.extend(reply.keys)
        if reply.cursor == "0":
            return keys
        cursor = reply.cursor.encode()


def test_state_scan_pages_through_every_key_once() -> None:
    """Scanning page by page returns each key exactly once, in order."""
    state = StoreState()
    for i in range(25):
        state.apply(Set(b"users", b"u%02d" % i, b"x"))
    assert _scan_all(state, b"users", 7) == [f"u{i:02d}" for i in range(25)]
    assert state.apply(Scan(b"empty", b"0", 10)) == b"KEYS 0\n"


def test_state_scan_survives_concurrent_writes() -> None:
    """Keys present throughout appear exactly once even if others are written mid-scan."""
    state = StoreState()
    for i in range(0, 40, 2):
        state.apply(Set(b"b", b"k%02d" % i, b"x"))
    keys: list[str] = []
    cursor = b"0"
    step = 0
    while True:
        reply = parse_reply(state.apply(Scan(b"b", cursor, 3)))
        assert isinstance(reply, KeysReply)
        keys.extend(reply.keys)
        state.apply(Set(b"b", b"k%02d" % (2 * step + 1), b"new"))
        state.apply(Delete(b"b", b"k%02d" % (38 - 2 * step)))
        step += 1
        if reply.cursor == "0":
            break
        cursor = reply.cursor.encode()
    throughout = {f"k{i:02d}" for i in range(0, 40, 2)} - {
        f"k{38 - 2 * s:02d}" for s in range(step)
    }
    assert len(keys) == len(set(keys))
    assert throughout <= set(keys)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 30)), max_size=60), st.integers(1, 9))
def test_state_scan_matches_model(ops: list[tuple[bool, int]], count: int) -> None:
    """After random sets and deletes (with scans in between) a scan equals the model's keys."""
    state, model = StoreState(), set()
    for i, (is_set, k) in enumerate(ops):
        key = b"k%02d" % k
        if is_set:
            state.apply(Set(b"b", key, b"v"))
            model.add(key.decode())
        else:
            state.apply(Delete(b"b", key))
            model.discard(key.decode())
        if i % 7 == 0:
            state.apply(Scan(b"b", b"0", 1))
    assert _scan_all(state, b"b", count) == sorted(model)


def test_state_statistics_count_requests() -> None:
    """statistics() reflects keys held and requests applied."""
    state = StoreState()
    state.apply(Set(b"b", b"k", b"v"))
    state.apply(Get(b"b", b"k"))
    state.apply(Get(b"b", b"nope"))
    stats = state.statistics()
    assert (stats.keys, stats.buckets, stats.sets, stats.gets, stats.get_hits) == (1, 1, 1, 2, 1)
