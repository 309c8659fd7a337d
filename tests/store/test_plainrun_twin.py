"""The C run of plain commands (``store._cplain``) against its Python twin, the reference.

Both sides start from the same keyspace (strings with and without deadlines, passed or not,
scanned buckets, watched keys) and run the same commands: the replies must be equal byte for
byte, and so must the keyspace, the journal (its log bytes and its undo, checked by rolling
back) and the counts. The connection-level test feeds the same pipelined bytes, split at
random places, through a RESP connection's decoder and session into either run.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minidb.protocol import encode_command
from minidb.server.resp import _executor as executor_module
from minidb.server.resp._connection import RespContext, RespRequests
from minidb.server.resp._executor import OwnerSide, RespExecutor
from minidb.server.resp._info import ServerFacts
from minidb.server.resp._session import RespSession, SessionConfig
from minidb.server.resp._types import PlainRun
from minidb.store import (
    COMMANDS,
    PLAIN_ARITY,
    PLAIN_READS,
    UNBOUNDED_OUTPUT,
    Batch,
    Keyspace,
    MemoryLog,
    OpJournal,
    Session,
    StoreOwner,
    StoreState,
    _plainrun,
    execute,
    plain_arity,
    plain_end_python,
    run_plain_python,
)
from minidb.store._plainrun import answer_turn_python
from minidb.wal import encode_groups

NOW_MS = 1_700_000_000_000

pytestmark = pytest.mark.accelerator  # tests/sanitizers/run.py runs these under ASan and UBSan
needs_c = pytest.mark.skipif(not _plainrun.ACCELERATED, reason="C twin not built")

KEYS = [b"a", b"b", b"n", b"m", b"big", b"gone", b"later"]
VALUES = [b"", b"v", b"12", b"-7", b"0", b"007", b"9223372036854775807", b"x" * 300]
HOSTILE_KEYS = [b"k" * 65537, b"\x00\r\n"]  # over MAX_KEY_BYTES; bytes a line cannot hold
HOSTILE_VALUES = [b"y" * 1001, b"\r\n$-1\r\n"]  # over the test keyspace's max_value_bytes
NUMBERS = [b"1", b"-1", b"0", b"5", b"-0", b"+3", b"01", b"9223372036854775807",
           b"-9223372036854775808", b"99999999999999999999", b"x", b""]  # fmt: skip


def _command() -> st.SearchStrategy[list[bytes]]:
    key = st.sampled_from(KEYS) | st.sampled_from(HOSTILE_KEYS)
    value = st.sampled_from(VALUES) | st.sampled_from(HOSTILE_VALUES)
    number = st.sampled_from(NUMBERS)
    name = st.sampled_from([b"GET", b"get", b"Get"])
    return st.one_of(
        st.tuples(name, key).map(list),
        st.tuples(st.sampled_from([b"SET", b"set"]), key, value).map(list),
        st.tuples(st.just(b"SET"), key, value, st.sampled_from([b"NX", b"XX", b"GET", b"PX"]))
        .map(list),
        st.tuples(st.just(b"SET"), key, value, st.just(b"EX"), number).map(list),
        st.lists(key, min_size=1, max_size=4).map(lambda ks: [b"MGET", *ks]),
        st.lists(st.tuples(key, value), min_size=1, max_size=3)
        .map(lambda ps: [b"MSET", *[x for p in ps for x in p]]),
        st.tuples(st.just(b"MSET"), key).map(list),  # wrong arity: the engine's error
        st.lists(key, min_size=1, max_size=3).map(lambda ks: [b"DEL", *ks]),
        st.lists(key, min_size=1, max_size=3).map(lambda ks: [b"UNLINK", *ks]),
        st.lists(key, min_size=1, max_size=3).map(lambda ks: [b"EXISTS", *ks]),
        st.tuples(st.sampled_from([b"INCR", b"DECR", b"incr"]), key).map(list),
        st.tuples(st.sampled_from([b"INCRBY", b"DECRBY"]), key, number).map(list),
        st.tuples(st.sampled_from([b"TTL", b"PTTL"]), key).map(list),
        st.tuples(st.sampled_from([b"EXPIRE", b"PEXPIRE"]), key, number).map(list),
        st.just([b"PING"]),
    )


def _keyspace(
    seed: int, protocol_watch: bool, max_value_bytes: int = 1000
) -> tuple[Keyspace, Session]:
    """A keyspace every run starts from: made the same way for both sides."""
    ks = Keyspace(now_ms=NOW_MS, max_value_bytes=max_value_bytes, rng=random.Random(seed))
    session = Session()
    rng = random.Random(seed)
    journal = OpJournal()
    for key in KEYS:
        roll = rng.random()
        if roll < 0.2:
            continue
        value = rng.choice(VALUES)
        ks.put(b"0", key, value, None, journal)
        if roll > 0.7:  # a deadline, passed or not
            ks.set_expiry(b"0", key, NOW_MS + rng.choice([-5, 0, 1, 2500, 10**6]), journal)
    if rng.random() < 0.2:
        ks.scan(b"0", 0, 2, NOW_MS, journal)  # a SCAN index from now on
    if rng.random() < 0.2:
        ks.sorted_keys(b"0")
    if protocol_watch:
        ks.watch(b"0", [rng.choice(KEYS)])
    ks.put(b"other", b"k", b"v", None, journal)
    return ks, session


def _state(ks: Keyspace) -> tuple[object, ...]:
    return (
        sorted(ks.items()),
        len(ks),
        sorted(ks.buckets()),
        ks.statistics(),
        ks.sorted_keys(b"0") and list(ks.sorted_keys(b"0") or []),
    )


def _run(
    accelerated: bool, seed: int, watch: bool, argvs: list[list[bytes]], protocol: int,
    room: int, max_reply: int, max_value_bytes: int = 1000,
) -> tuple[object, ...]:
    ks, session = _keyspace(seed, watch, max_value_bytes)
    before = _state(ks)
    journal = OpJournal()
    executor = RespExecutor(max_reply_bytes=max_reply)
    session.protocol = protocol

    def fallback(argv: list[bytes]) -> bytes:
        return executor._command(ks, session, argv, journal, NOW_MS)

    run = _plainrun._c.run if accelerated else run_plain_python  # type: ignore[union-attr]
    start = 1 if argvs else 0
    stop, replies, left = run(
        ks, journal, argvs, start, b"0", protocol, NOW_MS, room, max_reply,
        executor.counts.raw_calls, fallback,
    )  # fmt: skip
    journal.close_group()
    after = _state(ks)
    log = encode_groups(journal.records)
    ks.rollback(journal)
    restored = _state(ks)[:3] == before[:3]  # (the statistics count what happened)
    return stop, replies, left, after, log, executor.counts.calls, restored


@needs_c
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10**6),
    st.booleans(),
    st.lists(_command(), max_size=12),
    st.sampled_from([2, 3]),
    st.one_of(st.just(1 << 40), st.integers(-1, 600)),
    st.sampled_from([1 << 40, 350, 40]),
)
def test_c_run_equals_the_python_run(
    seed: int, watch: bool, argvs: list[list[bytes]], protocol: int, room: int, max_reply: int
) -> None:
    """Same replies, stopping point, room, keyspace, log bytes, counts; rollback restores."""
    c = _run(True, seed, watch, argvs, protocol, room, max_reply)
    python = _run(False, seed, watch, argvs, protocol, room, max_reply)
    assert c == python
    assert c[-1], "rollback did not restore the keyspace"


@needs_c
def test_c_run_refuses_at_exactly_max_reply_as_python_does() -> None:
    """The boundary random sizes rarely draw: a GET's and an MGET's reply of about
    ``max_reply`` bytes, a few below, at and above it, decided alike (a value of at least
    1 KiB: Python refuses no shorter reply)."""
    value = b"v" * 2000
    get_reply = len(b"$2000\r\n" + value + b"\r\n")
    commands = (
        [[b"SET", b"big", value], [b"GET", b"big"]],
        [[b"SET", b"big", value], [b"MGET", b"big", b"big"]],
    )
    for argvs in commands:
        limits = (*range(get_reply - 3, get_reply + 4), *range(2 * get_reply, 2 * get_reply + 20))
        for max_reply in limits:
            c = _run(True, 7, False, [[b"PING"], *argvs], 2, 1 << 40, max_reply, 4096)
            python = _run(False, 7, False, [[b"PING"], *argvs], 2, 1 << 40, max_reply, 4096)
            assert c == python, (argvs[-1], max_reply)


@needs_c
def test_c_run_sees_a_bucket_made_or_emptied_inside_the_run() -> None:
    """A read after a write that made a new bucket, or emptied one, sees what it left."""
    runs = (
        [[b"GET", b"a"], [b"SET", b"a", b"1"], [b"GET", b"a"]],
        [[b"SET", b"a", b"1"], [b"DEL", b"a"], [b"GET", b"a"], [b"EXISTS", b"a"]],
        [[b"GET", b"a"], [b"DEL", b"a"], [b"GET", b"a"], [b"EXISTS", b"a"]],  # C drops it
    )
    for argvs in runs:
        for bucket in (b"new", b"other"):
            sides = []
            for run in (_plainrun._c.run, run_plain_python):  # type: ignore[union-attr]
                ks = Keyspace(now_ms=NOW_MS)
                if bucket == b"other":  # a bucket of one key, "a", before the run
                    ks.put(bucket, b"a", b"1", None, OpJournal())
                journal = OpJournal()
                session = Session()
                executor = RespExecutor()

                def fallback(argv: list[bytes], ks: Keyspace = ks, journal: OpJournal = journal,
                             session: Session = session, executor: RespExecutor = executor,
                             bucket: bytes = bucket) -> bytes:  # fmt: skip
                    session.bucket = bucket
                    return executor._command(ks, session, argv, journal, NOW_MS)

                stop, replies, _ = run(
                    ks, journal, [list(a) for a in argvs], 0, bucket, 2, NOW_MS, 1 << 40,
                    1 << 40, {}, fallback,
                )  # fmt: skip
                sides.append((stop, replies, sorted(ks.items())))
            assert sides[0] == sides[1], (argvs, bucket)
            assert sides[0][1].endswith((b"$1\r\n1\r\n", b":0\r\n"))


def test_plain_arity_matches_the_command_table() -> None:
    """A run takes only what the session would forward as it is: the same arities."""
    for name, arity in PLAIN_ARITY.items():
        if name != b"ping":
            assert COMMANDS[name].arity == arity, name


@needs_c
def test_c_run_hands_an_open_group_to_python() -> None:
    """A group left open before the run is left to Python, which decides what it becomes."""
    sides = []
    for run in (_plainrun._c.run, run_plain_python):  # type: ignore[union-attr]
        ks = Keyspace(now_ms=NOW_MS)
        journal = OpJournal()
        ks.put(b"0", b"a", b"1", None, journal)  # left open
        session = Session()

        def fallback(argv: list[bytes], ks: Keyspace = ks, journal: OpJournal = journal,
                     session: Session = session) -> bytes:  # fmt: skip
            execute(ks, session, argv, journal, NOW_MS)
            return b"+OK\r\n"

        run(ks, journal, [[b"SET", b"b", b"2"]], 0, b"0", 2, NOW_MS, 1 << 40, 1 << 40, {},
            fallback)  # fmt: skip
        sides.append([len(g) for g in journal.records])
    assert sides[0] == sides[1]


class _OneByteValues(Keyspace):
    """A keyspace whose max_value_bytes is no slot but a property: 1."""

    __slots__ = ()

    @property  # type: ignore[override]
    def max_value_bytes(self) -> int:
        return 1

    @max_value_bytes.setter
    def max_value_bytes(self, _: int) -> None:
        pass


def _set_reply(run: object, ks: Keyspace) -> bytes:
    """A SET of two bytes over a key that holds one (the C run's case), run by ``run``."""
    journal = OpJournal()
    ks.put(b"0", b"a", b"1", None, journal)
    journal.close_group()
    session = Session()
    executor = RespExecutor()

    def fallback(argv: list[bytes]) -> bytes:
        return executor._command(ks, session, argv, journal, NOW_MS)

    _, replies, _ = run(  # type: ignore[operator]
        ks, journal, [[b"SET", b"a", b"vv"]], 0, b"0", 2, NOW_MS, 1 << 40, 1 << 40, {},
        fallback,
    )  # fmt: skip
    return replies  # type: ignore[no-any-return]


@needs_c
def test_c_run_reads_slots_at_their_offsets_only_where_they_are_slots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The C run reads the keyspace's fields at their slots' offsets for the class it resolved
    them on, while that class is unchanged; a subclass that makes a field a property, or the
    class changed since, is read by attribute as Python reads it (here a max_value_bytes of 1
    refuses a SET of two bytes, which the slot's 1000 would let through)."""
    c_run = _plainrun._c.run  # type: ignore[union-attr]
    for ks_class, refused in ((Keyspace, False), (_OneByteValues, True), (Keyspace, False)):
        replies = {
            run: _set_reply(run, ks_class(now_ms=NOW_MS)) for run in (c_run, run_plain_python)
        }
        assert replies[c_run] == replies[run_plain_python], ks_class
        assert replies[c_run].startswith(b"-") == refused, (ks_class, replies)
    ks = Keyspace(now_ms=NOW_MS)  # made with the slot, then the class changes under it
    monkeypatch.setattr(Keyspace, "max_value_bytes", property(lambda self: 1), raising=True)
    assert _set_reply(c_run, ks).startswith(b"-ERR"), "a stale offset read the old slot"


# -- through a connection: decoder, session, runs ------------------------------------------


class _Env:
    def unix_time(self) -> float:
        return NOW_MS / 1000

    def snapshot(self):  # type: ignore[no-untyped-def]
        raise AssertionError("not used")

    def sessions(self):  # type: ignore[no-untyped-def]
        return []


def _connection_run(
    accelerated: bool, wire: bytes, cuts: list[int], limits: list[int], seed: int
) -> tuple[object, ...]:
    state = StoreState()
    ks, _ = _keyspace(seed, False)
    state.keyspace = ks
    executor = RespExecutor()
    context = RespContext(
        SessionConfig(ServerFacts(minidb_version="0")), executor, _Env(),
        max_bulk_bytes=1 << 20, next_id=lambda: 1,
    )  # fmt: skip
    requests = RespRequests(RespSession(1, context.config), OwnerSide(), context)
    journal = OpJournal()
    original = executor_module.run_plain
    executor_module.run_plain = original if accelerated else run_plain_python
    try:
        out = []
        pieces = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
        limit_at = 0
        for piece in pieces:
            requests.receive(piece)
            while True:
                limit = limits[limit_at % len(limits)]
                limit_at += 1
                batch = requests.next_requests(limit)
                if not batch:
                    break
                assert sum(len(r) if type(r) is PlainRun else 1 for r in batch) <= limit
                for request in batch:
                    if type(request) is bytes:
                        out.append(request)
                    else:
                        out.append(executor.execute(state, request, journal, NOW_MS))
    finally:
        executor_module.run_plain = original
    journal.close_group()
    return b"".join(out), _state(ks), encode_groups(journal.records), executor.counts.calls


_CONNECTION_EXTRAS = st.sampled_from([
    [b"ECHO", b"e"], [b"SELECT", b"1"], [b"SELECT", b"0"], [b"MULTI"], [b"EXEC"],
    [b"DISCARD"], [b"WATCH", b"a"], [b"APPEND", b"a", b"z"], [b"PING", b"p"], [b"HELLO", b"3"],
    [b"GET"], [b"NOSUCH"], [b"SETEX", b"a", b"10", b"v"],
])  # fmt: skip


@needs_c
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(_command(), _CONNECTION_EXTRAS), max_size=20),
    st.lists(st.integers(1, 400), max_size=6, unique=True),
    st.lists(st.integers(1, 8), min_size=1, max_size=4),
    st.integers(0, 1000),
)
def test_connection_runs_equal_the_python_path(
    commands: list[list[bytes]], cuts: list[int], limits: list[int], seed: int
) -> None:
    """Pipelined at random depths and split at random bytes: the same bytes back, the same
    keyspace, log and counts, with the C run as with the Python one."""
    wire = b"".join(encode_command(c) for c in commands)
    cuts = sorted(c for c in cuts if c < len(wire))
    c = _connection_run(True, wire, cuts, limits, seed)
    python = _connection_run(False, wire, cuts, limits, seed)
    assert c == python


@needs_c
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10**6),
    st.booleans(),
    st.lists(_command(), max_size=10),
    st.sampled_from([2, 3]),
    st.one_of(st.just(1 << 40), st.integers(-1, 600)),
)
def test_inline_read_runs_a_plain_prefix_and_changes_nothing(
    seed: int, watch: bool, argvs: list[list[bytes]], protocol: int, room: int
) -> None:
    """Without a fallback (an inline read) the C run stops at the first write or command that
    needs Python; what it ran answers as the Python engine does, and nothing changed."""
    ks, _ = _keyspace(seed, watch)
    before = _state(ks)
    journal = OpJournal()
    calls: dict[bytes, int] = {}
    stop, replies, left = _plainrun._c.run(  # type: ignore[union-attr]
        ks, journal, argvs, 0, b"0", protocol, NOW_MS, room, 1 << 40, calls, None
    )
    assert _state(ks) == before and not journal.records and not journal.undo
    assert all(argv[0].upper() not in _WRITE_NAMES for argv in argvs[:stop])
    python = _run(False, seed, watch, [[b"PING"], *argvs[:stop]], protocol, 1 << 40, 1 << 40)
    # (_run starts at index 1: the PING in front is not run)
    assert replies == python[1]
    assert stop == len(argvs) or left < 0 or _needs_python(ks, argvs[stop])


_WRITE_NAMES = {b"SET", b"MSET", b"DEL", b"UNLINK", b"INCR", b"DECR", b"INCRBY", b"DECRBY",
                b"EXPIRE", b"PEXPIRE"}  # fmt: skip


def _needs_python(ks: Keyspace, argv: list[bytes]) -> bool:
    """Whether an inline read was right to stop at ``argv``: a write, something the C run
    leaves to Python (options, a key past its deadline), or an unknown arity."""
    if argv[0].lower() not in PLAIN_READS:
        return True
    return any(ks.expired(b"0", key, NOW_MS) for key in argv[1:]) or (len(argv) > 2 and (
        argv[0].upper() in {b"GET", b"TTL", b"PTTL"}
    ))


# -- the owner: a run's writes are released only after the group's sync --------------------


class _SyncWatchingLog(MemoryLog):
    """A MemoryLog that notes, at each sync, how many flushes its sinks had seen."""

    def __init__(self, sink: _FlushSink) -> None:
        super().__init__()
        self.sink = sink
        self.flushes_at_sync: list[int] = []

    def sync(self) -> None:
        self.flushes_at_sync.append(self.sink.flushes)
        super().sync()


class _FlushSink:
    def __init__(self) -> None:
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1

    def output_room(self) -> int:
        return UNBOUNDED_OUTPUT


def test_run_of_writes_is_answered_only_after_its_group_is_synced() -> None:
    """Under ``always`` the replies of a C run's SETs reach the connection (flush) only after
    the log's sync of their group, and the log holds every SET."""
    sink = _FlushSink()
    log = _SyncWatchingLog(sink)
    owner = StoreOwner(StoreState(), log, mailbox=100, fsync="always", clock=lambda: NOW_MS)
    executor = RespExecutor()
    argvs = [[b"SET", b"k%d" % i, b"v"] for i in range(5)] + [[b"GET", b"k1"]]
    batch = Batch([PlainRun(argvs, b"0", 2, OwnerSide())], sink, 0.0, executor=executor,
                  size=len(argvs))  # fmt: skip
    owner.commit([batch])
    assert log.flushes_at_sync == [0] and sink.flushes == 1
    assert batch.replies == [b"+OK\r\n" * 5 + b"$1\r\nv\r\n"]
    assert len(log.synced) == 5


@needs_c
@given(
    st.lists(st.one_of(_command(), _CONNECTION_EXTRAS, st.just([])), max_size=12),
    st.integers(0, 13),
)
def test_c_plain_end_equals_the_python_scan(commands: list[list[bytes]], start: int) -> None:
    """Where a run of plain commands ends, in C as in Python (names as sent, arities)."""
    arities = plain_arity()
    start = min(start, len(commands))
    c = _plainrun._c.plain_end(commands, start, arities)  # type: ignore[union-attr]
    assert c == plain_end_python(commands, start, arities)


@needs_c
def test_c_plain_end_checks_every_arity_both_ways() -> None:
    """Each plain command with one argument too few, exactly enough, and one more (which a
    fixed arity refuses and a minimum allows), in C as in Python."""
    arities = plain_arity()
    for name, arity in arities.items():
        need = abs(arity)
        for argc in (need - 1, need, need + 1):
            if argc < 1:
                continue
            commands = [[name, *[b"x"] * (argc - 1)]]
            expected = plain_end_python(commands, 0, arities)
            assert expected == (argc == need or (arity < 0 and argc > need)), (name, argc)
            assert _plainrun._c.plain_end(commands, 0, arities) == expected, (name, argc)  # type: ignore[union-attr]


# -- the turn's answers --------------------------------------------------------------------


class _Sink:
    """Records its replies; ``then`` runs after it records one (a failure, a later entry)."""

    def __init__(self, seen: list[tuple[str, bytes]], name: str,
                 then: Callable[[], None] | None = None) -> None:  # fmt: skip
        self.seen, self.name, self.then = seen, name, then

    def turn_answered(self, replies: bytes) -> None:
        self.seen.append((self.name, replies))
        if self.then is not None:
            self.then()


def _answered(answer: Callable[[list[Any]], None], build: Callable[..., list[Any]]) -> object:
    """What ``answer`` (a twin of answer_turn) does with the turn ``build(seen)`` makes:
    the replies each sink saw, in order, and the error it raised (type and message)."""
    seen: list[tuple[str, bytes]] = []
    turn = build(seen)
    try:
        answer(turn)
    except Exception as exc:
        return seen, type(exc), str(exc)
    return seen, None, None


def _late_entry(seen: list[tuple[str, bytes]]) -> list[Any]:
    turn: list[Any] = []
    turn.append((_Sink(seen, "a", lambda: turn.append((_Sink(seen, "late"), 0, 0, b"L"))),
                 0, 0, b"A"))  # fmt: skip
    return turn


def _failing(seen: list[tuple[str, bytes]]) -> list[Any]:
    def fail() -> None:
        raise OSError("gone")

    return [(_Sink(seen, "a", fail), 0, 0, b"A"), (_Sink(seen, "b"), 0, 0, b"B")]


TURNS: dict[str, Callable[..., list[Any]]] = {
    "in order": lambda seen: [(_Sink(seen, str(i)), 0, 0, b"%d" % i) for i in range(5)],
    "empty": lambda seen: [],
    "lists": lambda seen: [[_Sink(seen, "a"), 0, 0, b"A"]],
    "an entry made during the loop": _late_entry,
    "a failing sink": _failing,
    "too long": lambda seen: [(_Sink(seen, "a"), 0, 0, b"A", 0)],
    "too short": lambda seen: [(_Sink(seen, "a"), b"A")],
    "not a sequence": lambda seen: [(_Sink(seen, "a"), 0, 0, b"A"), 7],
    "no turn_answered": lambda seen: [(object(), 0, 0, b"A")],
}


@needs_c
@pytest.mark.parametrize("case", TURNS)
def test_c_answer_turn_equals_the_python_loop(case: str) -> None:
    """Each sink answered in order, as long as the turn is when each entry is reached; an
    entry that is no 4-sequence, or a sink that fails, stops it with Python's error."""
    c = _answered(_plainrun._c.answer_turn, TURNS[case])  # type: ignore[union-attr]
    python = _answered(answer_turn_python, TURNS[case])
    assert c == python
    if case == "in order":
        assert c == ([(str(i), b"%d" % i) for i in range(5)], None, None)
