"""The timer wheel against a sorted-list model, plus its edge cases at every level boundary."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.runtime._wheel import (
    MAX_SPAN,
    NUM_LEVELS,
    PENDING,
    SLOT_BITS,
    UNFILED,
    TimerWheel,
    WheelEntry,
)

try:
    from minidb.runtime import _cwheel  # type: ignore[attr-defined]
except ImportError:  # built only where a C compiler was at hand
    _cwheel = None

# Every test runs on the pure wheel and on its C twin: they must be indistinguishable.
WHEEL_CLASSES = [
    pytest.param(TimerWheel, id="pure"),
    pytest.param(
        getattr(_cwheel, "TimerWheel", None),
        id="c",
        marks=[
            pytest.mark.skipif(_cwheel is None, reason="C accelerator not built"),
            pytest.mark.accelerator,
        ],
    ),
]
pytestmark = pytest.mark.parametrize("wheel_class", WHEEL_CLASSES)
WheelClass = type[TimerWheel]


class Model:
    """The obvious implementation: a list of live entries, released sorted by (deadline, seq)."""

    def __init__(self, elapsed: int = 0) -> None:
        self.elapsed = elapsed
        self.live: dict[int, tuple[int, int]] = {}  # id -> (tick, seq)
        self.seq = itertools.count(1)

    def insert(self, ident: int, tick: int) -> None:
        self.live[ident] = (tick, next(self.seq))

    def remove(self, ident: int) -> None:
        del self.live[ident]

    def reset(self, ident: int, tick: int) -> None:
        self.live[ident] = (tick, next(self.seq))

    def poll(self, now: int) -> list[int]:
        due = sorted((v, k) for k, v in self.live.items() if v[0] <= max(now, self.elapsed))
        for _, k in due:
            del self.live[k]
        self.elapsed = max(self.elapsed, now)
        return [k for _, k in due]


def _ids(entries: list[WheelEntry]) -> list[int]:
    return [e.payload for e in entries]  # type: ignore[misc]


# Deadlines cluster around the level boundaries, where off-by-one errors live.
_BOUNDARIES = sorted(
    {(1 << (SLOT_BITS * lvl)) + d for lvl in range(NUM_LEVELS + 1) for d in (-1, 0, 1)}
)
_offsets = st.one_of(
    st.integers(0, 200),
    st.sampled_from(_BOUNDARIES),
    st.integers(0, MAX_SPAN * 3),
    st.integers(-50, 0),
)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), _offsets),
        st.tuples(st.just("cancel"), st.integers(0, 1000)),
        st.tuples(st.just("reset"), st.integers(0, 1000), _offsets),
        st.tuples(st.just("advance"), _offsets),
    ),
    max_size=120,
)


@settings(max_examples=1500, deadline=None)
@given(start=st.sampled_from([0, 1, 63, 64, 4095, MAX_SPAN - 1, 5 * MAX_SPAN + 17]), ops=_ops)
def test_wheel_matches_sorted_list_model(
    wheel_class: WheelClass, start: int, ops: list[tuple]
) -> None:
    """Random insert/cancel/reset/advance sequences fire the same entries, in the same order."""
    wheel: TimerWheel[WheelEntry] = wheel_class(start)
    model = Model(start)
    entries: dict[int, WheelEntry] = {}
    now = start
    for op in ops:
        if op[0] == "insert":
            ident = len(entries)
            entries[ident] = WheelEntry(ident)
            wheel.insert(entries[ident], now + op[1])
            model.insert(ident, now + op[1])
        elif op[0] == "cancel" and model.live:
            ident = sorted(model.live)[op[1] % len(model.live)]
            wheel.remove(entries[ident])
            model.remove(ident)
        elif op[0] == "reset" and model.live:
            ident = sorted(model.live)[op[1] % len(model.live)]
            wheel.reset(entries[ident], now + op[2])
            model.reset(ident, now + op[2])
        elif op[0] == "advance":
            now += max(op[1], 0)
            assert _ids(wheel.poll(now)) == model.poll(now), f"at tick {now}"
        assert len(wheel) == len(model.live)
    # Drain everything that is left, far in the future.
    end = now + 4 * MAX_SPAN
    assert _ids(wheel.poll(end)) == model.poll(end)
    assert len(wheel) == 0


def test_wheel_level_boundaries_fire_exactly_on_time(wheel_class: WheelClass) -> None:
    """Deadlines at, just before and just after each level span fire at that tick, not earlier."""
    for level in range(NUM_LEVELS + 1):
        for delta in (-1, 0, 1):
            tick = (1 << (SLOT_BITS * level)) + delta
            if tick <= 0:
                continue  # already due: see the past-deadline test
            wheel: TimerWheel[WheelEntry] = wheel_class()
            entry = WheelEntry(tick)
            wheel.insert(entry, tick)
            assert wheel.poll(tick - 1) == [], f"fired early at {tick - 1}"
            assert wheel.poll(tick) == [entry], f"did not fire at {tick}"
            assert entry._wheel_where == UNFILED


def test_wheel_poll_at_is_lower_bound_and_exact_on_level0(wheel_class: WheelClass) -> None:
    """poll_at() never exceeds the earliest deadline and equals it for level-0 entries."""
    wheel: TimerWheel[WheelEntry] = wheel_class()
    assert wheel.poll_at() is None
    wheel.insert(WheelEntry(), 5000)
    at = wheel.poll_at()
    assert at is not None and at <= 5000
    wheel.insert(WheelEntry(), 10)
    assert wheel.poll_at() == 10


def test_wheel_top_level_wrap_beyond_max_span(wheel_class: WheelClass) -> None:
    """Deadlines several laps past the top level's span wait their lap and fire exactly on time."""
    wheel: TimerWheel[WheelEntry] = wheel_class()
    ticks = [MAX_SPAN - 1, MAX_SPAN, MAX_SPAN + 1, 3 * MAX_SPAN + 12345, 7 * MAX_SPAN]
    entries = [WheelEntry(t) for t in ticks]
    for e, t in zip(entries, ticks, strict=True):
        wheel.insert(e, t)
    fired: list[int] = []
    for t in ticks:
        assert wheel.poll(t - 1) == []
        fired.extend(_ids(wheel.poll(t)))
    assert fired == ticks
    assert len(wheel) == 0


def test_wheel_past_deadline_is_pending_and_fires_at_next_poll(wheel_class: WheelClass) -> None:
    """A deadline at or before elapsed is due at once, in (deadline, insertion) order."""
    wheel: TimerWheel[WheelEntry] = wheel_class(1000)
    late, later, now_ = WheelEntry("late"), WheelEntry("later"), WheelEntry("now")
    wheel.insert(now_, 1000)
    wheel.insert(later, 999)
    wheel.insert(late, -5)
    assert late._wheel_where == PENDING
    assert wheel.poll_at() == 1000
    assert [e.payload for e in wheel.poll(1000)] == ["late", "later", "now"]


def test_wheel_equal_deadlines_fifo_even_after_cascade_and_reset(wheel_class: WheelClass) -> None:
    """Equal deadlines fire in insert/reset order, across cascades and lazy extensions."""
    wheel: TimerWheel[WheelEntry] = wheel_class()
    a, b, c, d = (WheelEntry(x) for x in "abcd")
    wheel.insert(a, 90)  # level 1
    wheel.insert(b, 5000)  # level 2
    wheel.insert(c, 5000)
    wheel.reset(a, 5000)  # lazily extended: stays in its level-1 slot, ranks after b and c
    wheel.poll(4990)
    wheel.insert(d, 5000)  # level 0 by now
    assert [e.payload for e in wheel.poll(5000)] == ["b", "c", "a", "d"]


def test_wheel_cancel_is_immediate_and_releases_slot(wheel_class: WheelClass) -> None:
    """remove() unlinks at once: nothing left behind, occupancy bit cleared."""
    wheel: TimerWheel[WheelEntry] = wheel_class()
    entries = [WheelEntry(i) for i in range(1000)]
    for i, e in enumerate(entries):
        wheel.insert(e, 30_000 + i)
    for e in entries:
        wheel.remove(e)
    assert len(wheel) == 0
    assert wheel.poll_at() is None
    assert wheel.statistics().per_level == (0,) * NUM_LEVELS
    with pytest.raises(ValueError):
        wheel.remove(entries[0])


def test_wheel_reset_earlier_and_later(wheel_class: WheelClass) -> None:
    """Resetting earlier fires earlier; resetting later never fires at the old deadline."""
    wheel: TimerWheel[WheelEntry] = wheel_class()
    early, late = WheelEntry("early"), WheelEntry("late")
    wheel.insert(early, 10_000)
    wheel.insert(late, 100)
    wheel.reset(early, 50)
    wheel.reset(late, 20_000)
    assert [e.payload for e in wheel.poll(50)] == ["early"]
    assert wheel.poll(19_999) == []
    assert [e.payload for e in wheel.poll(20_000)] == ["late"]


def test_wheel_reset_many_times_costs_no_new_slots(wheel_class: WheelClass) -> None:
    """Pushing a deadline out repeatedly leaves one entry in the wheel, never a trail."""
    wheel: TimerWheel[WheelEntry] = wheel_class()
    entry = WheelEntry()
    wheel.insert(entry, 30_000)
    for i in range(1, 10_000):
        wheel.reset(entry, 30_000 + i)
    assert len(wheel) == 1
    assert sum(wheel.statistics().per_level) == 1
    assert wheel.poll(40_000 - 2) == []
    assert wheel.poll(40_000 - 1) == [entry]


def test_wheel_double_insert_rejected(wheel_class: WheelClass) -> None:
    """An entry can be in one place only."""
    wheel: TimerWheel[WheelEntry] = wheel_class()
    entry = WheelEntry()
    wheel.insert(entry, 5)
    with pytest.raises(ValueError):
        wheel.insert(entry, 6)


def test_wheel_clear_returns_everything(wheel_class: WheelClass) -> None:
    """clear() empties the wheel and hands back every entry."""
    wheel: TimerWheel[WheelEntry] = wheel_class(10)
    entries = [WheelEntry(i) for i in range(5)]
    for i, e in enumerate(entries):
        wheel.insert(e, i * 1000)
    assert sorted(_ids(wheel.clear())) == list(range(5))
    assert len(wheel) == 0 and wheel.poll(10**9) == []
