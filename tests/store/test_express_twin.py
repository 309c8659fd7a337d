"""The express lane in one C call (``store.express``) against its Python twin, the reference.

Both get the same read: the same bytes (whole, or cut anywhere), the same limit, the same
keyspace, an idle owner or not, any output room. They must take the same thing (None, or the
same commands and the same end of their plain run); what the C call serves inline must be the
Python engine's replies to those reads, counted, with nothing changed or journaled; and it
stops only where an inline read has to (a write, a case Python decides, no room). What it
runs in the loop turn's group (given the turn's journal) must be what the owner's run through
the Python engine does with those commands: the same replies, keyspace and log bytes.
"""

from __future__ import annotations

from collections import Counter
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minidb.protocol import _resp, encode_command
from minidb.server.resp._session import RUN_ARITY
from minidb.store import PLAIN_READS, Keyspace, OpJournal, _plainrun, express_python
from minidb.wal import encode_groups
from tests.store.test_plainrun_twin import (
    _CONNECTION_EXTRAS,
    NOW_MS,
    _command,
    _keyspace,
    _needs_python,
    _run,
    _state,
)

pytestmark = pytest.mark.accelerator  # tests/sanitizers/run.py runs these under ASan and UBSan
SCAN = _resp._scan_raw
needs_c = pytest.mark.skipif(
    not _plainrun.ACCELERATED or SCAN is None, reason="C twins not built"
)
MAX_COUNT, MAX_BULK = 1024 * 1024, 512 * 1024 * 1024  # the decoder's limits once authenticated
"""(The property test also draws small limits: a count of 2, a bulk of 3 bytes.)"""


def _lane(
    seed: int, watch: bool, limit: int, idle: bool, room: int, protocol: int,
    inline: bool = True, turn: bool = False,
) -> tuple[tuple[object, ...], dict[bytes, int], list[int]]:
    """A fresh keyspace and the lane over it (``turn``: with a journal of the loop turn's
    group, its last item); the counts it adds to; how often the room was asked for."""
    ks, _ = _keyspace(seed, watch)
    calls: dict[bytes, int] = {}
    asked: list[int] = []

    def room_of() -> int:
        asked.append(room)
        return room

    lane = (limit, RUN_ARITY, PLAIN_READS, ks, OpJournal(), room_of, 1 << 40, calls,
            b"0", protocol, (lambda: NOW_MS) if idle else None, inline,
            OpJournal() if turn else None)  # fmt: skip
    return lane, calls, asked


@needs_c
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10**6),
    st.booleans(),
    st.lists(st.one_of(_command(), _CONNECTION_EXTRAS, st.just([b"Get", b"a"])), max_size=10),
    st.integers(0, 12),
    st.booleans(),
    st.one_of(st.just(1 << 40), st.integers(-1, 600)),
    st.sampled_from([2, 3]),
    st.one_of(st.none(), st.integers(0, 2000)),
    st.sampled_from([(MAX_COUNT, MAX_BULK), (2, MAX_BULK), (MAX_COUNT, 3)]),
    st.booleans(),
    st.booleans(),
)
def test_c_express_equals_the_python_lane(
    seed: int, watch: bool, commands: list[list[bytes]], limit: int, idle: bool, room: int,
    protocol: int, cut: int | None, limits: tuple[int, int], inline_reads: bool, turn: bool,
) -> None:
    wire = b"".join(encode_command(c) for c in commands)
    if cut is not None:
        wire = wire[:cut]
    c_lane, c_calls, c_asked = _lane(seed, watch, limit, idle, room, protocol, inline_reads, turn)
    py_lane, py_calls, _ = _lane(seed, watch, limit, idle, room, protocol, inline_reads, turn)
    ks = cast(Keyspace, c_lane[3])
    before = _state(ks)
    c = _plainrun._c.express(SCAN, wire, *limits, c_lane)  # type: ignore[union-attr]
    python = express_python(SCAN, wire, *limits, py_lane)  # type: ignore[arg-type]
    if python is None:
        assert c is None
        return
    assert c is not None
    taken, end, served, replies, turned, turn_replies = c
    assert (taken, end) == python[:2]
    assert python[2:] == (0, b"", 0, b"")  # the reference runs nothing itself
    assert not c_lane[4].records and not c_lane[4].undo  # type: ignore[attr-defined]
    if turned != served:
        assert turn and idle and len(replies) <= room  # it begins only with room left
        _check_turn(c_lane, seed, watch, protocol, taken[served:turned], turn_replies)
        return
    assert turn_replies == b""
    assert _state(ks) == before
    inline = inline_reads and idle and end == len(taken) and taken[0][0] in PLAIN_READS
    asked = inline or (turn and idle and end == len(taken))
    assert c_asked == ([room] if asked else [])  # the room asked only when something may run
    if not inline or room < 0:
        assert (served, replies) == (0, b"") and not c_calls
        return
    # What it served answers as the engine does (_run starts at index 1: skip the PING).
    engine = _run(False, seed, watch, [[b"PING"], *taken[:served]], protocol, 1 << 40, 1 << 40)
    assert replies == engine[1]
    assert c_calls == dict(Counter(argv[0] for argv in taken[:served]))
    assert served == len(taken) or len(replies) > room or _needs_python(ks, taken[served])
    assert py_calls == {}


def _check_turn(
    lane: tuple[object, ...], seed: int, watch: bool, protocol: int,
    ran: list[list[bytes]], replies: bytes,
) -> None:
    """What the express lane ran in the turn (``ran``, after the reads it served, which
    change nothing) is what the owner's run through the Python engine does with it: the same
    replies, keyspace and log."""
    ks, journal = cast(Keyspace, lane[3]), cast(OpJournal, lane[12])
    journal.close_group()
    engine = _run(False, seed, watch, [[b"PING"], *ran], protocol, 1 << 40, 1 << 40)
    assert engine[0] == len(ran) + 1 and replies == engine[1]
    assert _state(ks)[:3] == engine[3][:3]  # type: ignore[index]
    assert encode_groups(journal.records) == engine[4]


@needs_c
def test_c_express_runs_a_set_in_the_turn_and_serves_the_gets_before_it() -> None:
    """-P 1's SET with a journal of the loop turn's group: it runs, journaled; the GETs
    before it are served at once; with no journal it runs nothing."""
    lane, calls, asked = _lane(7, False, 16, True, 1 << 40, 2, True, True)
    wire = encode_command([b"GET", b"k"]) + encode_command([b"SET", b"k", b"v"])
    c = _plainrun._c.express(SCAN, wire, MAX_COUNT, MAX_BULK, lane)  # type: ignore[union-attr]
    assert c is not None and c[1:] == (2, 1, b"$-1\r\n", 2, b"+OK\r\n")
    assert calls == {b"GET": 1, b"SET": 1} and asked == [1 << 40]
    assert len(cast(OpJournal, lane[12]).records) == 1
    # The room the reads left is the turn's: 7 bytes, 5 for the GET's reply, and the first
    # SET's reply crosses what is left, so the run stops after it.
    lane, calls, asked = _lane(7, False, 16, True, 7, 2, True, True)
    three = wire + encode_command([b"SET", b"k2", b"v"])
    c = _plainrun._c.express(SCAN, three, MAX_COUNT, MAX_BULK, lane)  # type: ignore[union-attr]
    assert c is not None and c[1:] == (3, 1, b"$-1\r\n", 2, b"+OK\r\n")
    # A turn already open: nothing is served at once, the GET runs in the turn too.
    lane, calls, asked = _lane(7, False, 16, True, 1 << 40, 2, False, True)
    c = _plainrun._c.express(SCAN, wire, MAX_COUNT, MAX_BULK, lane)  # type: ignore[union-attr]
    assert c is not None and c[1:] == (2, 0, b"", 2, b"$-1\r\n+OK\r\n")


@needs_c
@pytest.mark.parametrize("room", [-1, 0, 4])
def test_c_express_runs_nothing_in_the_turn_without_room(room: int) -> None:
    """No room at all, or none left after the reads it served (each reply here is 5 bytes):
    nothing runs in the turn, and without room the clock is not even asked."""
    lane, _, asked = _lane(7, False, 16, True, room, 2, True, True)
    asked_clock: list[int] = []
    lane = (*lane[:10], lambda: asked_clock.append(1) or NOW_MS, *lane[11:])
    wire = encode_command([b"GET", b"k"]) + encode_command([b"SET", b"k", b"v"])
    c = _plainrun._c.express(SCAN, wire, MAX_COUNT, MAX_BULK, lane)  # type: ignore[union-attr]
    assert c is not None and c[4:] == (c[2], b"") and asked == [room]
    assert not cast(OpJournal, lane[12]).records
    assert c[2] == (0 if room < 0 else 1) and len(asked_clock) == (room >= 0)


@needs_c
def test_c_express_serves_a_whole_read_of_gets_and_stops_at_a_write() -> None:
    """The -P 1 shapes: a GET served; a SET first serves nothing and asks for no room."""
    lane, calls, asked = _lane(7, False, 16, True, 1 << 40, 2)
    wire = encode_command([b"GET", b"other"]) + encode_command([b"GET", b"missing"])
    c = _plainrun._c.express(SCAN, wire, MAX_COUNT, MAX_BULK, lane)  # type: ignore[union-attr]
    assert c is not None and c[1:] == (2, 2, b"$-1\r\n$-1\r\n", 2, b"") and calls == {b"GET": 2}
    set_first = encode_command([b"SET", b"k", b"v"]) + encode_command([b"GET", b"k"])
    c = _plainrun._c.express(SCAN, set_first, MAX_COUNT, MAX_BULK, lane)  # type: ignore[union-attr]
    assert c is not None and c[1:] == (2, 0, b"", 0, b"") and asked == [1 << 40]


@needs_c
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((SCAN, "GET", MAX_COUNT, MAX_BULK, ()), r"express\(scan, bytes"),
        ((SCAN, b"", MAX_COUNT, MAX_BULK, (1,) * 11), "13-tuple"),
        ((SCAN, b"", MAX_COUNT, MAX_BULK, (1, [], frozenset(), *(None,) * 10)), "arities"),
        ((SCAN, b"", MAX_COUNT, MAX_BULK, (1, {}, set(), *(None,) * 10)), "frozenset"),
    ],
)
def test_c_express_refuses_wrong_arguments(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        _plainrun._c.express(*args)  # type: ignore[union-attr]


@needs_c
def test_c_express_passes_on_what_its_callables_raise() -> None:
    """An error of the scan, the room or the clock is raised, nothing is served."""
    lane, calls, _ = _lane(1, False, 16, True, 0, 2)

    def broken(*args: object) -> int:
        raise RuntimeError("scan")

    wire = encode_command([b"GET", b"a"])
    with pytest.raises(RuntimeError, match="scan"):
        _plainrun._c.express(broken, wire, MAX_COUNT, MAX_BULK, lane)  # type: ignore[union-attr]
    for at, name in ((10, "clock"), (5, "room")):
        def fail(name: str = name) -> int:
            raise RuntimeError(name)
        bad = (*lane[:at], fail, *lane[at + 1:])
        with pytest.raises(RuntimeError, match=name):
            _plainrun._c.express(SCAN, wire, MAX_COUNT, MAX_BULK, bad)  # type: ignore[union-attr]
    assert calls == {}


@needs_c
def test_the_c_wall_clock_reads_the_python_clock() -> None:
    """``wall_clock_ms`` (the owner's default clock, which the express lane asks once per read
    it serves) in C is ``wall_clock_ms_python``: milliseconds since the epoch, an int."""
    assert _plainrun.wall_clock_ms is not _plainrun.wall_clock_ms_python
    for _ in range(100):
        before = _plainrun.wall_clock_ms_python()
        now = _plainrun.wall_clock_ms()
        after = _plainrun.wall_clock_ms_python()
        assert type(now) is int
        assert before <= now <= after, (before, now, after)


@needs_c
def test_c_express_serves_a_read_of_gets_whole_and_runs_nothing_in_the_turn() -> None:
    """Given the turn's journal too, a read of nothing but GETs is served at once, each GET
    run and counted once: nothing runs (again) in the turn."""
    lane, calls, asked = _lane(7, False, 16, True, 1 << 40, 2, True, True)
    wire = encode_command([b"GET", b"other"]) + encode_command([b"GET", b"missing"])
    c = _plainrun._c.express(SCAN, wire, MAX_COUNT, MAX_BULK, lane)  # type: ignore[union-attr]
    assert c is not None and c[1:] == (2, 2, b"$-1\r\n$-1\r\n", 2, b"")
    assert calls == {b"GET": 2} and asked == [1 << 40]
    assert not cast(OpJournal, lane[12]).records


@needs_c
def test_c_express_asks_the_default_clock_as_c() -> None:
    """With the owner's default clock (``wall_clock_ms``, which the C call runs without the
    call protocol) the run's time is the wall clock's, as the Python clock reads it."""
    lane, _, _ = _lane(7, False, 16, True, 1 << 40, 2, True, True)
    lane = (*lane[:10], _plainrun.wall_clock_ms, *lane[11:])
    ks = cast(Keyspace, lane[3])
    wire = encode_command([b"SET", b"k", b"v"])
    before = _plainrun.wall_clock_ms_python()
    c = _plainrun._c.express(SCAN, wire, MAX_COUNT, MAX_BULK, lane)  # type: ignore[union-attr]
    after = _plainrun.wall_clock_ms_python()
    assert c is not None and c[4:] == (1, b"+OK\r\n")
    assert before <= ks._clock_ms <= after, (before, ks._clock_ms, after)
