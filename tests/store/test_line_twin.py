"""The C batch of line requests (``_cplain.run_line``) against its Python twin, the reference.

``StoreState.execute_all`` runs a connection's batch in C when the accelerator is built;
``execute_all_python`` is the reference. Both sides start from the same keyspace (strings
with and without deadlines, passed or not, values the line protocol cannot carry, a hash,
scanned buckets, a watched key) and run the same requests, decoded from random lines by the
connection's own ``RequestDecoder`` (hostile ones included: over-long names and values, bad
``BULK`` rows, non-UTF-8 bytes, other verbs): the replies must be equal byte for byte, and so
must the room left, the keyspace, the statistics, the journal's log bytes, and its undo
(checked by rolling back).

The decoder's C twin (``protocol._cline``: the plain lines of a read, the rows of a frame of
plain SETs) is held to its Python code the same way: the same bytes, cut into reads at random
places and taken at random limits, give the same requests either way.
"""

from __future__ import annotations

import itertools
import random
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minidb.protocol import Bulk, Delete, Get, Request, RequestDecoder, Set
from minidb.protocol import _line as codec
from minidb.store import Keyspace, OpJournal, StoreState, _plainrun
from minidb.store._hashvalue import hash_from
from minidb.wal import encode_groups

NOW_MS = 1_700_000_000_000

pytestmark = pytest.mark.accelerator  # tests/sanitizers/run.py runs these under ASan and UBSan
needs_c = pytest.mark.skipif(_plainrun.run_line is None, reason="C twin not built")

BUCKETS = [b"b0", b"b1", b"new"]
KEYS = [b"a", b"b", b"c", b"gone", b"later", b"h", b"odd"]
STORED = [
    b"v", b"", b"x" * 4096, b"x" * 4097, b"\xff\xfe", b"\x80", b"\x7f", "é".encode(), b"l\nf",
    b"cr\r",
]  # fmt: skip
"""Values the keyspace may hold (another protocol wrote them): some no line carries."""
NAMES = [*BUCKETS, *KEYS, b"k" * 64, b"k" * 65, b"b\xff", b"bad!"]
VALUES = [
    b"1", b"value with spaces", b"x" * 4096, b"x" * 4097, b"\xff", b"\x80", b"\x7f\t",
    "é".encode(), b"v\r",
]  # fmt: skip


def _line() -> st.SearchStrategy[bytes]:
    name = st.sampled_from(NAMES)
    bucket = st.sampled_from(BUCKETS) | name
    key = st.sampled_from(KEYS) | name
    value = st.sampled_from(VALUES)
    keyed = st.tuples(st.sampled_from([b"GET", b"DEL", b"get", b"TTL", b"PERSIST"]), bucket, key)
    return st.one_of(
        keyed.map(b" ".join),
        keyed.map(b" ".join),
        st.tuples(st.sampled_from([b"SET", b"set"]), bucket, key, value).map(b" ".join),
        st.tuples(st.just(b"SET"), bucket, key, value).map(b" ".join),
        st.tuples(st.just(b"EXPIRE"), bucket, key, st.sampled_from([b"0", b"1", b"x"]))
        .map(b" ".join),
        st.tuples(st.just(b"SCAN"), bucket, st.just(b"0"), st.just(b"2")).map(b" ".join),
        st.sampled_from([b"", b"NOPE a b", b"GET  b0 a", b"GET b0", b"SET b0 a", b"\xff\xfe"]),
        st.binary(max_size=12),
    )


def _frame() -> st.SearchStrategy[bytes]:
    set_row = st.tuples(st.sampled_from(BUCKETS), st.sampled_from(KEYS), st.sampled_from(VALUES))
    row = st.one_of(
        set_row.map(lambda r: b"SET " + b" ".join(r)),
        set_row.map(lambda r: b"SET " + b" ".join(r)),
        st.tuples(st.sampled_from(BUCKETS), st.sampled_from(KEYS)).map(
            lambda r: b"DEL " + b" ".join(r)
        ),
        _line(),
    )
    return st.lists(row, min_size=1, max_size=6).map(
        lambda rows: b"\n".join([b"BULK %d" % len(rows), *rows])
    )


def _requests() -> st.SearchStrategy[list[Request]]:
    lines = st.lists(st.one_of(_line(), _line(), _frame()), max_size=14)
    return lines.map(lambda ls: RequestDecoder().feed(b"".join(line + b"\n" for line in ls)))


def _state(seed: int, watch: bool, scan: bool) -> StoreState:
    """A store every run starts from: made the same way for both sides."""
    ks = Keyspace(now_ms=NOW_MS, rng=random.Random(seed))
    rng = random.Random(seed)
    journal = OpJournal()
    for bucket in BUCKETS[:2]:
        for key in KEYS:
            roll = rng.random()
            if roll < 0.25:
                continue
            if key == b"h" and roll < 0.6:
                ks.put_container(bucket, key, hash_from([b"f", b"v"], ks.epoch), None, journal)
                continue
            ks.put(bucket, key, rng.choice(STORED) if roll < 0.4 else b"plain", None, journal)
            if roll > 0.8:  # a deadline, passed or not
                ks.set_expiry(bucket, key, NOW_MS + rng.choice([-5, 0, 1, 2500]), journal)
    if scan:
        if rng.random() < 0.5:
            ks.scan(b"b0", 0, 2, NOW_MS, journal)  # a SCAN index
        else:
            ks.sorted_keys(b"b1")  # the line protocol's SCAN order
    if watch:
        ks.watch(rng.choice(BUCKETS), [rng.choice(KEYS)])
    return StoreState(ks)


def _snapshot(state: StoreState) -> tuple[object, ...]:
    ks = state.keyspace
    return (
        sorted(ks.items()),
        len(ks),
        sorted(ks.buckets()),
        [ks.sorted_keys(b) for b in BUCKETS if b in ks._sorted],
        dict(ks._containers),
    )


def _run(
    accelerated: bool, seed: int, watch: bool, scan: bool, requests: list[Request], room: int
) -> tuple[object, ...]:
    state = _state(seed, watch, scan)
    before = _snapshot(state)
    journal = OpJournal()
    run = state.execute_all if accelerated else state.execute_all_python
    replies, left = run(requests, journal, NOW_MS, room)
    journal.close_group()
    after = _snapshot(state)
    log = encode_groups(journal.records)
    stats = (state.statistics(), state.keyspace.statistics())
    state.rollback(journal)
    restored = _snapshot(state)[:3] == before[:3]
    return replies, left, after, stats, log, restored


@needs_c
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10**6),
    st.booleans(),
    st.booleans(),
    _requests(),
    st.one_of(st.just(1 << 40), st.integers(-1, 60)),
)
def test_c_batch_equals_the_python_batch(
    seed: int, watch: bool, scan: bool, requests: list[Request], room: int
) -> None:
    """Same replies, room, keyspace, statistics, log bytes; rollback restores."""
    c = _run(True, seed, watch, scan, requests, room)
    python = _run(False, seed, watch, scan, requests, room)
    assert c == python
    assert c[-1], "rollback did not restore the keyspace"


_SET = st.builds(
    Set, st.sampled_from(BUCKETS), st.sampled_from(KEYS), st.sampled_from(STORED + VALUES)
)
_DIRECT = st.one_of(
    _SET,
    _SET,
    st.builds(Get, st.sampled_from(BUCKETS), st.sampled_from(KEYS)),
    st.builds(Delete, st.sampled_from(BUCKETS), st.sampled_from(KEYS)),
    st.lists(_SET, max_size=5).map(lambda rows: Bulk(rows)),
    st.lists(st.one_of(_SET, st.builds(Delete, st.sampled_from(BUCKETS), st.just(b"a"))),
             min_size=1, max_size=4).map(lambda rows: Bulk(rows)),
)
"""Requests as no decoder makes them (values with LF or over 4096 bytes, an empty frame):
the C twin must still do exactly what the keyspace does."""


@needs_c
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.booleans(), st.lists(_DIRECT, max_size=10))
def test_c_batch_equals_the_python_batch_on_any_request(
    seed: int, scan: bool, requests: list[Request]
) -> None:
    c = _run(True, seed, False, scan, requests, 1 << 40)
    python = _run(False, seed, False, scan, requests, 1 << 40)
    assert c == python
    assert c[-1], "rollback did not restore the keyspace"


@needs_c
def test_c_batch_runs_the_plain_cases_itself() -> None:
    """The plain GET, SET, DEL and frame never reach the fallback (else the C twin would be
    the Python path with extra steps, and these tests would prove nothing about C)."""
    state = StoreState(Keyspace(now_ms=NOW_MS))
    for key in (b"x", b"y", b"z", b"w"):
        state.keyspace.put(b"b0", key, b"1", None, None)
    state.keyspace.put(b"big", b"max", b"\x7f" * 4096, None, None)
    requests: list[Request] = [
        Get(b"big", b"max"),
        Set(b"b0", b"k", b"v"), Get(b"b0", b"k"), Get(b"b0", b"nope"), Get(b"none", b"k"),
        Delete(b"b0", b"k"), Delete(b"b0", b"nope"), Bulk([Set(b"b0", b"r", b"1")]),
        Bulk([Set(b"b0", b"s", b"2"), Delete(b"b0", b"x"), Delete(b"none", b"x")]),
    ]  # fmt: skip
    journal = OpJournal()

    def refuse(request: Request) -> bytes:
        raise AssertionError(f"fell back: {request!r}")

    assert _plainrun.run_line is not None
    replies, room, counts = _plainrun.run_line(
        state.keyspace, journal, requests, NOW_MS, 10**6, refuse
    )
    assert replies[0] == b"VALUE " + b"\x7f" * 4096 + b"\n"
    del replies[0]
    assert replies == [
        b"OK\n", b"VALUE v\n", b"NIL\n", b"NIL\n", b"OK\n", b"NIL\n", b"OK 1\n", b"OK 3\n"
    ]  # fmt: skip
    assert room == 10**6 - 4103 - sum(map(len, replies))
    assert counts == (4, 2, 3, 4, 2)
    assert len(state.keyspace) == 6


def _edge_state() -> StoreState:
    state = StoreState(Keyspace(now_ms=NOW_MS))
    ks = state.keyspace
    ks.put(b"solo", b"k", b"1", None, None)
    for key in (b"k1", b"k2"):
        ks.put(b"pair", key, b"1", None, None)
    for key, value in ((b"max", b"m" * 4096), (b"over", b"m" * 4097), (b"hi", b"\x80")):
        ks.put(b"many", key, value, None, None)
    return state


EDGES: list[list[Request]] = [
    [Delete(b"solo", b"k")],  # the last key: its bucket goes, with the keyspace's tables
    [Bulk([Delete(b"pair", b"k1"), Delete(b"pair", b"k2")])],  # a frame emptying a bucket
    [Bulk([Delete(b"pair", b"k1"), Set(b"pair", b"k3", b"v")])],
    [Bulk([Delete(b"many", b"max"), Set(b"many", b"k3", b"v"), Delete(b"many", b"no")])],
    [Get(b"many", b"max"), Get(b"many", b"over"), Get(b"many", b"hi")],
    [Set(b"solo", b"a", b"v"), Set(b"solo", b"b", b"v"), Get(b"solo", b"a")],  # cut after
]
"""Hand-made batches at the edges of the plain cases, run with the room of one reply."""


@needs_c
@pytest.mark.parametrize("requests", EDGES)
def test_c_batch_equals_the_python_batch_at_the_edges(requests: list[Request]) -> None:
    sides = []
    for accelerated in (True, False):
        state = _edge_state()
        journal = OpJournal()
        run = state.execute_all if accelerated else state.execute_all_python
        replies, room = run(requests, journal, NOW_MS, 2)
        sides.append(
            (replies, room, _snapshot(state), state.statistics(), encode_groups(journal.records))
        )
    assert sides[0] == sides[1]


@needs_c
def test_an_open_group_leaves_the_batch_to_python() -> None:
    """A group left open before the batch: Python decides what it becomes (a DEL joins it)."""
    sides = []
    for accelerated in (True, False):
        state = _state(1, False, False)
        journal = OpJournal()
        state.keyspace.put(b"b0", b"zz", b"1", None, journal)  # left open
        run = state.execute_all if accelerated else state.execute_all_python
        run([Delete(b"b0", b"zz"), Set(b"b0", b"k", b"v")], journal, NOW_MS)
        sides.append(encode_groups(journal.records))
    assert sides[0] == sides[1]


# -- the decoder: protocol._cline against the Python lines -----------------------------------

needs_c_decoder = pytest.mark.skipif(codec._decode_lines is None, reason="C twin not built")


def _decode(accelerated: bool, data: bytes, cuts: list[int], limits: list[int]) -> object:
    """What a decoder hands out for ``data`` cut at ``cuts``, taken at ``limits`` in turn."""
    decode, rows = (codec._decode_lines, codec._plain_rows) if accelerated else (None, None)
    with mock.patch.multiple(codec, _decode_lines=decode, _plain_rows=rows):
        decoder = RequestDecoder()
        taken: list[object] = []
        bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
        turn = 0
        for start, stop in itertools.pairwise(bounds):
            decoder.receive(data[start:stop])
            while decoder.has_request():
                limit = limits[turn % len(limits)]
                turn += 1
                taken.append((decoder.next_requests(limit), decoder.extra_weight))
        return taken, decoder.buffered, decoder.closing


_TEXT = st.lists(st.one_of(_line(), _line(), _frame()), max_size=14).map(
    lambda ls: b"".join(line + b"\n" for line in ls)
)


@needs_c_decoder
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _TEXT | st.binary(max_size=200),
    st.lists(st.integers(0, 10**6), max_size=5),
    st.lists(st.integers(1, 9), min_size=1, max_size=3),
)
def test_c_decoder_equals_the_python_decoder(
    data: bytes, cuts: list[int], limits: list[int]
) -> None:
    assert _decode(True, data, cuts, limits) == _decode(False, data, cuts, limits)


@needs_c_decoder
@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_line(), _frame()), max_size=8))
def test_c_plain_rows_equal_the_regex(rows: list[bytes]) -> None:
    """``plain_rows`` takes a body exactly when ``_PLAIN_ROWS`` finds every row in it."""
    body = b"".join(row + b"\n" for row in rows)
    assert codec._plain_rows is not None
    plain = codec._plain_rows(body)
    found = codec._PLAIN_ROWS(body)
    lines = body.count(b"\n")
    assert (plain is not None) == (len(found) == lines)
    if plain is not None:
        assert plain == [Set(*row) for row in found]


@needs_c_decoder
def test_c_decoder_makes_the_plain_lines_itself() -> None:
    """Plain SET, GET and DEL lines never reach ``parse`` (else the twin test would prove
    nothing about C); a value of the protocol's largest size, an empty one, names of 64."""
    name = b"N" * 64
    lines = [
        b"SET b0 k v", b"GET b0 k", b"DEL b0 k", b"SET b0 k ",
        b"SET " + name + b" k " + b"x" * 4096, b"GET a-z_.:/09 " + name, b"SET b k \x00\t\x7f",
    ]  # fmt: skip

    def refuse(line: bytes) -> Request:
        raise AssertionError(f"parsed in Python: {line!r}")

    assert codec._decode_lines is not None and codec._plain_rows is not None
    data = b"".join(line + b"\n" for line in lines) + b"GET b0 unfinished"
    requests, used, at_header = codec._decode_lines(data, 99, refuse)
    assert requests == [codec.parse_request(line) for line in lines]
    assert (used, at_header) == (data.rindex(b"\n") + 1, False)
    assert codec._decode_lines(data, 2, refuse) == (requests[:2], 20, False)
    rows = b"SET b0 k v\nSET b1 k2 w\n"
    assert codec._plain_rows(rows) == [Set(b"b0", b"k", b"v"), Set(b"b1", b"k2", b"w")]
    assert codec._plain_rows(rows[:-1]) is None  # a row without its LF is no row
    assert codec._plain_rows(b"") == []


@needs_c
def test_the_fallback_sees_the_key_count_of_what_ran_before_it() -> None:
    """What C added or removed is counted in ``len(keyspace)`` before Python runs."""
    state = StoreState(Keyspace(now_ms=NOW_MS))
    ks = state.keyspace
    for key in (b"x", b"y", b"z"):
        ks.put(b"b0", key, b"1", None, None)
    seen = []

    def fallback(request: Request) -> bytes:
        seen.append((len(ks), sum(map(ks.size, ks.buckets()))))
        return state.execute(request, journal, NOW_MS)

    journal = OpJournal()
    requests: list[Request] = [
        Set(b"b0", b"new", b"v"), Set(b"b1", b"k", b"v"), Delete(b"b0", b"x"), Get(b"b1", b"k"),
        Delete(b"b0", b"y"), Bulk([Set(b"b0", b"r", b"1")]), Bulk([Set(b"b2", b"r", b"1")]),
    ]  # fmt: skip
    assert _plainrun.run_line is not None
    _plainrun.run_line(ks, journal, requests, NOW_MS, 1 << 40, fallback)
    assert seen == [(4, 4), (4, 4)]  # the new bucket's SET, then the new bucket's frame
    assert len(ks) == sum(map(ks.size, ks.buckets())) == 5
