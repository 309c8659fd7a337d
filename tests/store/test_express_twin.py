"""The express lane in one C call (``store.express``) against its Python twin, the reference.

Both get the same read: the same bytes (whole, or cut anywhere), the same limit, the same
keyspace, an idle owner or not, any output room. They must take the same thing (None, or the
same commands and the same end of their plain run); what the C call serves inline must be the
Python engine's replies to those reads, counted, with nothing changed or journaled; and it
stops only where an inline read has to (a write, a case Python decides, no room).
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
    seed: int, watch: bool, limit: int, idle: bool, room: int, protocol: int
) -> tuple[tuple[object, ...], dict[bytes, int], list[int]]:
    """A fresh keyspace and the lane over it; the counts it adds to; how often the room was
    asked for."""
    ks, _ = _keyspace(seed, watch)
    calls: dict[bytes, int] = {}
    asked: list[int] = []

    def room_of() -> int:
        asked.append(room)
        return room

    lane = (limit, RUN_ARITY, PLAIN_READS, ks, OpJournal(), b"0", protocol,
            (lambda: NOW_MS) if idle else None, room_of, 1 << 40, calls)  # fmt: skip
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
)
def test_c_express_equals_the_python_lane(
    seed: int, watch: bool, commands: list[list[bytes]], limit: int, idle: bool, room: int,
    protocol: int, cut: int | None, limits: tuple[int, int],
) -> None:
    wire = b"".join(encode_command(c) for c in commands)
    if cut is not None:
        wire = wire[:cut]
    c_lane, c_calls, c_asked = _lane(seed, watch, limit, idle, room, protocol)
    py_lane, py_calls, _ = _lane(seed, watch, limit, idle, room, protocol)
    ks = cast(Keyspace, c_lane[3])
    before = _state(ks)
    c = _plainrun._c.express(SCAN, wire, *limits, c_lane)  # type: ignore[union-attr]
    python = express_python(SCAN, wire, *limits, py_lane)  # type: ignore[arg-type]
    if python is None:
        assert c is None
        return
    assert c is not None
    taken, end, served, replies = c
    assert (taken, end) == python[:2]
    assert python[2:] == (0, b"")  # the reference serves nothing inline
    assert _state(ks) == before
    assert not c_lane[4].records and not c_lane[4].undo  # type: ignore[attr-defined]
    inline = idle and end == len(taken) and taken[0][0] in PLAIN_READS
    assert c_asked == ([room] if inline else [])  # the room asked only for a read served so
    if not inline or room < 0:
        assert (served, replies) == (0, b"") and not c_calls
        return
    # What it served answers as the engine does (_run starts at index 1: skip the PING).
    engine = _run(False, seed, watch, [[b"PING"], *taken[:served]], protocol, 1 << 40, 1 << 40)
    assert replies == engine[1]
    assert c_calls == dict(Counter(argv[0] for argv in taken[:served]))
    assert served == len(taken) or len(replies) > room or _needs_python(ks, taken[served])
    assert py_calls == {}


@needs_c
def test_c_express_serves_a_whole_read_of_gets_and_stops_at_a_write() -> None:
    """The -P 1 shapes: a GET served; a SET first serves nothing and asks for no room."""
    lane, calls, asked = _lane(7, False, 16, True, 1 << 40, 2)
    wire = encode_command([b"GET", b"other"]) + encode_command([b"GET", b"missing"])
    c = _plainrun._c.express(SCAN, wire, MAX_COUNT, MAX_BULK, lane)  # type: ignore[union-attr]
    assert c is not None and c[1:] == (2, 2, b"$-1\r\n$-1\r\n") and calls == {b"GET": 2}
    set_first = encode_command([b"SET", b"k", b"v"]) + encode_command([b"GET", b"k"])
    c = _plainrun._c.express(SCAN, set_first, MAX_COUNT, MAX_BULK, lane)  # type: ignore[union-attr]
    assert c is not None and c[1:] == (2, 0, b"") and asked == [1 << 40]


@needs_c
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((SCAN, "GET", MAX_COUNT, MAX_BULK, ()), r"express\(scan, bytes"),
        ((SCAN, b"", MAX_COUNT, MAX_BULK, (1,) * 10), "11-tuple"),
        ((SCAN, b"", MAX_COUNT, MAX_BULK, (1, [], frozenset(), *(None,) * 8)), "arities"),
        ((SCAN, b"", MAX_COUNT, MAX_BULK, (1, {}, set(), *(None,) * 8)), "frozenset"),
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
    for at, name in ((7, "clock"), (8, "room")):
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
