"""StoreState: the line protocol over the keyspace: requests, journal, rollback, scan, records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.protocol import Bulk, Delete, Get, Invalid, Request, Scan, Set, parse_reply
from minidb.protocol import Keys as KeysReply
from minidb.store import OpJournal, Session, StoreState, execute
from minidb.wal import Put, Remove, decode_ops

NOW = 1_700_000_000_000
"""A wall-clock time in ms for the tests that journal or expire."""


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
    """SET always journals; DEL only when the key existed; reads never; one group each."""
    state, journal = StoreState(), OpJournal()
    state.execute(Set(b"b", b"k", b"v 1"), journal, NOW)
    state.execute(Get(b"b", b"k"), journal, NOW)
    state.execute(Delete(b"b", b"missing"), journal, NOW)
    state.execute(Delete(b"b", b"k"), journal, NOW)
    assert journal.records == [[Put(b"b", b"k", b"v 1")], [Remove(b"b", b"k")]]


def test_state_rollback_restores_previous_values() -> None:
    """Rolling back a journal undoes inserts, overwrites and deletes, newest first."""
    state = StoreState()
    state.apply(Set(b"b", b"kept", b"old"))
    state.apply(Set(b"b", b"gone", b"was-here"))
    before = sorted(state.keyspace.items())
    journal = OpJournal()
    state.execute(Set(b"b", b"kept", b"new"), journal, NOW)
    state.execute(Set(b"b", b"fresh", b"1"), journal, NOW)
    state.execute(Set(b"b", b"fresh", b"2"), journal, NOW)
    state.execute(Delete(b"b", b"gone"), journal, NOW)
    state.rollback(journal)
    assert sorted(state.keyspace.items()) == before
    assert len(state) == 2
    assert journal.records == [] and journal.undo == []


def test_state_snapshot_replays_to_the_same_store() -> None:
    """Applying snapshot() (expiry included) to a fresh keyspace reproduces the store."""
    state = StoreState()
    for i in range(50):
        state.apply(Set(b"b%d" % (i % 3), b"k%d" % i, b"v %d " % i))
    state.keyspace.put(b"b0", b"timed", b"t", NOW + 5000, None)
    copy = StoreState()
    for payload in state.snapshot():
        copy.keyspace.apply_ops(decode_ops(payload), NOW)
    assert sorted(copy.keyspace.items()) == sorted(state.keyspace.items())
    assert copy.keyspace.lookup(b"b0", b"timed", NOW, None) == (b"t", NOW + 5000)


def test_state_frozen_snapshot_keeps_the_keyspace_as_it_was() -> None:
    """frozen_snapshot() is not affected by writes made after it was taken, expiry included."""
    state = StoreState()
    state.keyspace.put(b"b", b"timed", b"old", NOW + 5000, None)
    state.apply(Set(b"b", b"plain", b"old"))
    frozen = state.frozen_snapshot()
    state.keyspace.put(b"b", b"timed", b"new", NOW + 9000, None)
    state.apply(Set(b"b", b"plain", b"new"))
    state.apply(Set(b"b", b"later", b"x"))
    assert sorted(op for r in frozen for op in decode_ops(r)) == [
        Put(b"b", b"plain", b"old"), Put(b"b", b"timed", b"old", NOW + 5000),
    ]


def test_state_never_returns_an_expired_key() -> None:
    """GET, DEL and SCAN treat a key past its deadline as missing, and GET removes it."""
    state = StoreState()
    state.keyspace.put(b"b", b"k", b"v", NOW + 10, None)
    state.apply(Set(b"b", b"other", b"w"))
    assert state.apply(Get(b"b", b"k"), NOW + 9) == b"VALUE v\n"
    assert state.apply(Scan(b"b", b"0", 10), NOW + 10) == b"KEYS 0 other\n"
    assert state.apply(Delete(b"b", b"k"), NOW + 10) == b"NIL\n"
    state.keyspace.put(b"b", b"k", b"v", NOW + 10, None)
    journal = OpJournal()
    assert state.execute(Get(b"b", b"k"), journal, NOW + 10) == b"NIL\n"
    assert journal.records == [[Remove(b"b", b"k")]]
    assert len(state) == 1


def test_state_refuses_what_the_line_protocol_cannot_carry() -> None:
    """A value another protocol stored that cannot travel on one line is refused by GET, and
    a key that is not a name is skipped by SCAN; neither is mangled."""
    state = StoreState()
    ks = state.keyspace
    refused = b"ERR not representable in the line protocol\n"
    for value in (b"a\nb", b"ends in lf\n", b"\xff\xfe", b"x" * 4097):
        ks.put(b"0", b"k", value, None, None)
        assert state.apply(Get(b"0", b"k")) == refused, value
    for value in (b"mid\rcr\r", "\u00e9t\u00e9".encode(), b"x" * 4096, b""):
        ks.put(b"0", b"k", value, None, None)
        assert state.apply(Get(b"0", b"k")) == b"VALUE " + value + b"\n", value
    for key in (b"has space", b"\xff", b"k" * 65, b"a\nb", b"b"):
        ks.put(b"0", key, b"v", None, None)
    assert state.apply(Scan(b"0", b"0", 1)) == b"KEYS +b b\n"
    assert state.apply(Scan(b"0", b"+b", 1)) == b"KEYS +k k\n"
    assert state.apply(Scan(b"0", b"+k", 1)) == b"KEYS 0\n"
    assert state.statistics().not_representable == 4


def test_state_and_the_command_engine_share_one_keyspace() -> None:
    """A Redis SET in bucket 0 is the line protocol's GET 0 k, and the other way round."""
    state = StoreState()
    session, journal = Session(), OpJournal()
    execute(state.keyspace, session, [b"SET", b"k", b"from-resp"], journal, NOW)
    assert state.apply(Get(b"0", b"k")) == b"VALUE from-resp\n"
    state.execute(Set(b"0", b"j", b"from-line"), journal, NOW)
    assert execute(state.keyspace, session, [b"GET", b"j"], journal, NOW) == b"from-line"
    execute(state.keyspace, session, [b"DEL", b"k"], journal, NOW)
    assert state.apply(Get(b"0", b"k")) == b"NIL\n"
    assert state.apply(Scan(b"0", b"0", 10)) == b"KEYS 0 j\n"


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


def _batch_outcome(
    requests: list[Request], one_by_one: bool, scanned: bool
) -> tuple[list[bytes], object, object]:
    """Replies, journal and keyspace after ``requests`` on a prepared state, and the keyspace
    after the rollback (``scanned``: one bucket keeps a sorted index, which turns the fast
    loop off)."""
    state, journal = StoreState(), OpJournal()
    state.apply(Set(b"b", b"old", b"1"))
    state.apply(Set(b"scanned", b"a", b"1"))
    state.keyspace.put(b"b", b"ttl", b"x", NOW + 60_000, None)
    if scanned:
        state.apply(Scan(b"scanned", b"0", 10))
    if one_by_one:
        replies = [state.execute(r, journal, NOW) for r in requests]
    else:
        replies, _room = state.execute_all(requests, journal, NOW)
    after = (journal.records, journal.undo, sorted(state.keyspace.items()), len(state))
    index = list(state.keyspace.sorted_keys(b"scanned") or []) if scanned else []
    state.rollback(journal)
    return replies, (after, index), (sorted(state.keyspace.items()), len(state))


@pytest.mark.parametrize("scanned", [False, True])
def test_execute_all_is_execute_of_each_request(scanned: bool) -> None:
    """A batch run at once (runs of SETs through ``put_commands``) answers, journals, leaves
    the keyspace and rolls back exactly as each request executed in turn."""
    requests: list[Request] = [
        Set(b"b", b"k1", b"v1"),
        Set(b"b", b"old", b"2"),
        Set(b"new-bucket", b"k", b"v"),
        Set(b"b", b"ttl", b"y"),
        Set(b"scanned", b"b", b"2"),
        Set(b"b", b"k2", b"v"),
        Get(b"b", b"k1"),
        Set(b"b", b"k1", b"v2"),
        Delete(b"b", b"old"),
        Set(b"b", b"old", b"3"),
        Invalid("x"),
    ]
    for batch in (requests, requests[:6]):
        assert _batch_outcome(batch, False, scanned) == _batch_outcome(batch, True, scanned)


_FRAME_ROWS: list[Set | Delete] = [
    Set(b"b", b"k1", b"v1"),
    Set(b"b", b"old", b"2"),
    Set(b"new-bucket", b"k", b"v"),
    Set(b"b", b"ttl", b"y"),
    Set(b"scanned", b"b", b"2"),
    Delete(b"b", b"old"),
    Delete(b"b", b"missing"),
    Set(b"b", b"k1", b"v2"),
    Set(b"new-bucket", b"k", b"w"),
    Set(b"b", b"old", b"3"),
]


@pytest.mark.parametrize("scanned", [False, True])
@pytest.mark.parametrize("rows", [_FRAME_ROWS, [r for r in _FRAME_ROWS if type(r) is Set]])
def test_state_bulk_is_its_rows_as_one_group(scanned: bool, rows: list[Set | Delete]) -> None:
    """A frame leaves the keyspace as its rows executed in turn would, notes all their ops as
    ONE group (one log record), answers ``OK <n>`` and rolls back whole."""
    replies, (after, index), rolled_back = _batch_outcome([Bulk(rows)], False, scanned)
    one_by_one = _batch_outcome(list(rows), True, scanned)
    assert replies == [b"OK %d\n" % len(rows)]
    records, _, items, size = after  # (the undo entries may be packed differently)
    (records_each, _, items_each, size_each), index_each = one_by_one[1]
    assert records == [[op for group in records_each for op in group]]
    assert (items, size, index) == (items_each, size_each, index_each)
    assert rolled_back == one_by_one[2]


def test_state_bulk_delete_of_an_expired_key_is_a_miss() -> None:
    """A frame's DEL of a key past its deadline removes it and counts no hit, as DEL does."""
    state, journal = StoreState(), OpJournal()
    state.keyspace.put(b"b", b"ttl", b"x", NOW - 1, None)
    assert state.execute(Bulk([Delete(b"b", b"ttl"), Set(b"b", b"k", b"v")]), journal, NOW) == (
        b"OK 2\n"
    )
    assert journal.records == [[Remove(b"b", b"ttl"), Put(b"b", b"k", b"v")]]
    stats = state.statistics()
    assert (stats.sets, stats.dels, stats.del_hits) == (1, 1, 0)


@pytest.mark.parametrize("journaled", [False, True])
def test_bulk_frame_counts_its_deletes_that_found_a_key(journaled: bool) -> None:
    """A frame's DEL rows count as DELs, those that found their key as hits, with a journal
    (the owner) or without (``apply``)."""
    state = StoreState()
    state.apply(Set(b"b", b"k", b"v"))
    journal = OpJournal() if journaled else None
    frame = Bulk([Delete(b"b", b"k"), Delete(b"b", b"missing"), Set(b"b", b"n", b"1")])
    assert state.execute(frame, journal, 0) == b"OK 3\n"
    stats = state.statistics()
    assert (stats.dels, stats.del_hits, stats.sets) == (2, 1, 2)
