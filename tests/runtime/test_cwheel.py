"""The C accelerator: indistinguishable from the pure wheel, and right about memory and types."""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import gc
import math
import os
import random
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minidb.runtime as rt
from minidb.runtime import _accel, _loop
from minidb.runtime._wheel import MAX_SPAN, NUM_LEVELS, SLOT_BITS, UNFILED, TimerWheel, WheelEntry

_cwheel: Any
try:
    from minidb.runtime import _cwheel  # type: ignore[attr-defined,no-redef]
except ImportError:
    _cwheel = None

pytestmark = [
    pytest.mark.skipif(_cwheel is None, reason="C accelerator not built"),
    pytest.mark.accelerator,
]

ROOT = Path(__file__).resolve().parents[2]
SUBPROCESS_TIMEOUT_S = 300
"""Ceiling for re-running the runtime test files in a child process (they take seconds)."""


def _both(start: int = 0) -> tuple[TimerWheel[WheelEntry], Any]:
    return TimerWheel(start), _cwheel.TimerWheel(start)


def _ids(entries: list[WheelEntry]) -> list[Any]:
    return [e.payload for e in entries]


_ticks = st.one_of(
    st.integers(-100, 300),
    st.sampled_from(
        sorted({(1 << (SLOT_BITS * lvl)) + d for lvl in range(NUM_LEVELS + 1) for d in (-1, 0, 1)})
    ),
    st.integers(0, 4 * MAX_SPAN),
    # Far past the C wheel's int64 range and the loop's far-future tick: filed exactly alike.
    st.sampled_from([1 << 62, (1 << 62) + 12345 * (1 << 30), 1 << 64, 3**80, -(1 << 70), -3**70]),
)


@settings(max_examples=600, deadline=None)
@given(
    start=st.sampled_from([0, 1, 63, 64, 4095, MAX_SPAN - 1, 5 * MAX_SPAN + 17]),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("insert"), _ticks),
            st.tuples(st.just("cancel"), st.integers(0, 1000)),
            st.tuples(st.just("reset"), st.integers(0, 1000), _ticks),
            st.tuples(st.just("advance"), st.integers(0, 3 * MAX_SPAN)),
        ),
        max_size=80,
    ),
)
def test_cwheel_matches_pure_wheel_step_by_step(start: int, ops: list[tuple[Any, ...]]) -> None:
    """The same operations give the same results, poll_at, statistics and entry places."""
    pure, c = _both(start)
    pure_entries: list[WheelEntry] = []
    c_entries: list[WheelEntry] = []
    now = start
    for op in ops:
        live = [i for i, e in enumerate(pure_entries) if e._wheel_where != UNFILED]
        if op[0] == "insert":
            ident = len(pure_entries)
            pure_entries.append(WheelEntry(ident))
            c_entries.append(WheelEntry(ident))
            tick = op[1] if abs(op[1]) > MAX_SPAN * 8 else now + op[1]
            pure.insert(pure_entries[ident], tick)
            c.insert(c_entries[ident], tick)
        elif op[0] == "cancel" and live:
            ident = live[op[1] % len(live)]
            pure.remove(pure_entries[ident])
            c.remove(c_entries[ident])
        elif op[0] == "reset" and live:
            ident = live[op[1] % len(live)]
            tick = op[2] if abs(op[2]) > MAX_SPAN * 8 else now + op[2]
            pure.reset(pure_entries[ident], tick)
            c.reset(c_entries[ident], tick)
        elif op[0] == "advance":
            now += op[1]
            assert _ids(c.poll(now)) == _ids(pure.poll(now)), f"at tick {now}"
        assert c.poll_at() == pure.poll_at()
        assert c.statistics() == pure.statistics()
        assert len(c) == len(pure) and bool(c) == bool(pure) and c.elapsed == pure.elapsed
        for p, q in zip(pure_entries, c_entries, strict=True):
            assert (q._wheel_where, q._wheel_tick) == (p._wheel_where, p._wheel_tick)
    assert sorted(_ids(list(c))) == sorted(_ids(list(pure)))
    assert sorted(_ids(c.clear())) == sorted(_ids(pure.clear()))


def test_cwheel_huge_and_negative_ticks() -> None:
    """Ticks beyond int64 file like the pure wheel's; very negative ones are due, in order."""
    pure, c = _both(1000)
    ticks = [1 << 62, (1 << 62) + 7 * (1 << 30), 1 << 100, -(1 << 100), -(1 << 70), -5]
    for wheel in (pure, c):
        for i, t in enumerate(ticks):
            wheel.insert(WheelEntry(i), t)
    assert c.statistics() == pure.statistics()
    assert _ids(c.poll(2000)) == _ids(pure.poll(2000)) == [3, 4, 5]
    for _ in range(3):  # the far-future ones come round lap after lap, never due
        at = pure.poll_at()
        assert at is not None and c.poll_at() == at
        assert c.poll(at) == [] and pure.poll(at) == []
    assert c.statistics() == pure.statistics()


def test_cwheel_position_beyond_int64_range_is_refused() -> None:
    """poll() and the constructor refuse a position past MAX_ELAPSED, changing nothing."""
    wheel = _cwheel.TimerWheel(5)
    entry = WheelEntry()
    wheel.insert(entry, 3)  # pending
    with pytest.raises(OverflowError):
        wheel.poll(1 << 64)
    with pytest.raises(OverflowError):
        wheel.poll(_cwheel.MAX_ELAPSED + 1)
    assert len(wheel) == 1 and wheel.poll(-(1 << 80)) == [entry]
    assert wheel.poll(_cwheel.MAX_ELAPSED) == [] and wheel.elapsed == _cwheel.MAX_ELAPSED
    with pytest.raises(OverflowError):
        _cwheel.TimerWheel(_cwheel.MAX_ELAPSED + 1)
    with pytest.raises(ValueError):
        _cwheel.TimerWheel(-1)


def test_cwheel_wrong_types_raise() -> None:
    """Non-int ticks raise TypeError, non-entries AttributeError; the wheel stays usable."""
    wheel = _cwheel.TimerWheel()
    entry = WheelEntry()
    for bad in (1.5, "7", None, fractions.Fraction(1, 2)):
        with pytest.raises(TypeError):
            wheel.insert(entry, bad)
        with pytest.raises(TypeError):
            wheel.poll(bad)
        with pytest.raises(TypeError):
            _cwheel.TimerWheel(bad)
    with pytest.raises(AttributeError):
        wheel.insert(object(), 5)
    with pytest.raises(TypeError):
        wheel.insert(entry)
    wheel.insert(entry, 5)
    with pytest.raises(TypeError):
        wheel.reset(entry, 6.0)
    with pytest.raises(ValueError):
        wheel.remove(WheelEntry())
    entry._wheel_where = 10_000  # garbage: refused, never used as an index
    with pytest.raises(ValueError):
        wheel.remove(entry)
    with pytest.raises(TypeError):
        _cwheel.schedule(None, object(), _loop.WheelTimerHandle, 1.0, print, (), None, 0.0)
    with pytest.raises(TypeError):
        _cwheel.schedule(None, wheel, WheelEntry, 1.0, print, (), None, 0.0)
    assert _cwheel.check_handle_class(int) is False
    assert _cwheel.check_handle_class(_loop.WheelTimerHandle) is True


def test_cwheel_refcounts_stable_over_many_operations() -> None:
    """Inserting, moving, cancelling and firing leaks no reference to entries or ticks."""
    wheel = _cwheel.TimerWheel()
    entries = [WheelEntry(i) for i in range(50)]
    tick = 10**30  # a big int object shared by every insert
    before = [sys.getrefcount(x) for x in entries], sys.getrefcount(tick)
    now = 0
    for rnd in range(200):
        for i, x in enumerate(entries):
            wheel.insert(x, now + (i * 977) % 5000 if i % 7 else tick)
        for x in entries[::3]:
            wheel.reset(x, now + 3 * MAX_SPAN if rnd % 2 else now - 1)
        for x in entries[1::3]:
            wheel.remove(x)
        del x
        now += 6000
        wheel.poll(now)
        assert all(x._wheel_where == UNFILED for x in wheel.clear())
    for x in entries:
        x._wheel_tick = 0  # entries keep their last tick, as on the pure wheel
    del x
    entries_after = [sys.getrefcount(x) for x in entries]
    assert (entries_after, sys.getrefcount(tick)) == before


def test_cwheel_handles_freed_after_fire_and_cancel() -> None:
    """A fired or cancelled handle dies with its last reference: the wheel keeps none."""
    loop = rt.new_event_loop()
    try:
        fired = loop.call_at(loop.time() - 1, lambda: None)
        cancelled = loop.call_later(100, lambda: None)
        refs = [weakref.ref(fired), weakref.ref(cancelled)]
        cancelled.cancel()
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert not fired._scheduled
        del fired, cancelled
        assert [r() for r in refs] == [None, None]  # no gc.collect(): plain refcounts
    finally:
        loop.close()


def test_cwheel_gc_collects_cycles_through_the_wheel() -> None:
    """A wheel whose entries point back at it is collected with them."""
    wheel = _cwheel.TimerWheel()
    entries = [WheelEntry(wheel) for _ in range(3)]
    wheel.insert(entries[0], 10)
    wheel.insert(entries[1], -1)
    wheel.insert(entries[2], 10**6)
    refs = [weakref.ref(e) for e in entries]
    del wheel, entries
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    assert any(o is not None for o in gc.get_referents(_cwheel.TimerWheel()))


def test_cwheel_entries_of_any_class() -> None:
    """Entries with a __dict__, a __setattr__ hook or a class changed later all work."""

    class DictEntry:
        def __init__(self) -> None:
            self._wheel_tick = 0
            self._wheel_where = UNFILED

    class Hooked(DictEntry):
        sets = 0

        def __setattr__(self, name: str, value: object) -> None:
            type(self).sets += 1
            super().__setattr__(name, value)

    class Slotted:
        __slots__ = ("_wheel_tick", "_wheel_where")

        def __init__(self) -> None:
            self._wheel_tick = 0
            self._wheel_where = UNFILED

    wheel = _cwheel.TimerWheel()
    a, b, c = DictEntry(), Hooked(), Slotted()
    wheel.insert(a, 5)
    wheel.insert(b, 5)
    wheel.insert(c, 5)
    Slotted.extra = 1  # type: ignore[attr-defined]  # a class change drops the cached layout
    assert wheel.poll(5) == [a, b, c]
    assert Hooked.sets > 2
    assert (a._wheel_where, b._wheel_where, c._wheel_where) == (UNFILED,) * 3


def test_cwheel_subclass_and_generic_alias() -> None:
    """The C wheel can be subclassed and subscripted like the pure generic class."""

    class Sub(_cwheel.TimerWheel):  # type: ignore[misc]
        pass

    wheel = Sub(3)
    wheel.insert(WheelEntry("x"), 4)
    assert _ids(wheel.poll(4)) == ["x"]
    assert _cwheel.TimerWheel[WheelEntry] is not None


@pytest.mark.parametrize(
    "when",
    [1000.0005, 1000.0, 1234.5678901, 0.1 + 0.2, 1000, True, fractions.Fraction(2001, 2),
     1e300, -1e300, math.inf, -math.inf, math.nan],
)
def test_cwheel_schedule_rounds_like_the_loop(when: Any) -> None:
    """The C call_at files each deadline at the tick the Python call_at computes."""
    loop = rt.new_event_loop()
    loop._wheel = _cwheel.TimerWheel(loop._wheel.elapsed)  # also under MINIDB_PURE_PYTHON=1
    try:
        handle = _cwheel.schedule(
            loop, loop._wheel, _loop.WheelTimerHandle, when, print, (1,), None, 0.0
        )
        try:
            expected = math.ceil(when * _loop.TICKS_PER_SECOND - 0.0)
        except (OverflowError, ValueError):
            expected = loop._tick_for(when)
        assert handle._wheel_tick == expected
        assert handle._when is when and handle._scheduled and not handle._cancelled
        assert (handle._callback, handle._args, handle._loop) == (print, (1,), loop)
        assert handle._source_traceback is None and handle._repr is None
        assert handle in list(loop._wheel)
        handle.cancel()
        assert len(loop._wheel) == 0
    finally:
        loop.close()
    assert _cwheel.TICKS_PER_SECOND == _loop.TICKS_PER_SECOND


def test_cwheel_schedule_errors_match_the_loop() -> None:
    """None and non-numbers fail as they do on the Python path, filing nothing."""
    loop = rt.new_event_loop()
    try:
        with pytest.raises(TypeError):
            loop.call_at(None, print)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            loop.call_at("soon", print)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            loop.call_later(None, print)  # type: ignore[arg-type]
        assert len(loop._wheel) == 0
    finally:
        loop.close()
    with pytest.raises(RuntimeError):
        loop.call_later(1, print)


def test_cwheel_reschedule_checks_like_the_loop() -> None:
    """The C reschedule refuses what the Python one refuses, with the same errors."""
    loop, other = rt.new_event_loop(), asyncio.new_event_loop()
    try:
        handle = loop.call_later(10, print)
        with pytest.raises(TypeError, match="when must be a number, not str"):
            loop.reschedule(handle, "later")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="not a timer handle"):
            loop.reschedule(object(), 1.0)
        with pytest.raises(ValueError, match="not a timer of this loop"):
            loop.reschedule(other.call_later(10, print), 1.0)
        assert loop.reschedule(handle, math.inf) and handle._when == math.inf
        assert handle._wheel_tick == _loop._FAR_FUTURE_TICK
        assert loop.reschedule(handle, math.nan) and handle._wheel_tick == 0
        assert loop.reschedule(handle, loop.time() + 5)
        handle.cancel()
        assert loop.reschedule(handle, loop.time() + 5) is False
        assert len(loop._wheel) == 0
    finally:
        loop.close()
        other.close()


def test_cwheel_cancel_like_the_python_method() -> None:
    """The C cancel unlinks, drops the callback, keeps a repr in debug mode, runs once."""
    loop = rt.new_event_loop()
    loop.set_debug(False)  # python -X dev turns it on
    try:
        handle = loop.call_later(10, print, "x")
        handle.cancel()
        handle.cancel()
        assert handle._cancelled and not handle._scheduled and len(loop._wheel) == 0
        assert (handle._callback, handle._args, handle._repr) == (None, None, None)
        loop.set_debug(True)
        handle = loop.call_later(10, print, "x")
        handle.cancel()
        assert handle._repr is not None and "print" in handle._repr

        class Sub(_loop.WheelTimerHandle):
            __slots__ = ()

        sub = Sub(loop.time() + 5, print, (), loop)
        loop._wheel.insert(sub, 10**9)
        sub._scheduled = True
        sub.cancel()  # not the exact class: the Python method runs
        assert sub._cancelled and len(loop._wheel) == 0
    finally:
        loop.close()
    if rt.ACCELERATED:
        assert type(_loop.WheelTimerHandle.cancel).__name__ == "method_descriptor"


def test_cwheel_context_copied_or_given() -> None:
    """Each handle gets its own copy of the current context unless one is passed."""
    loop = rt.new_event_loop()
    try:
        h1, h2 = loop.call_later(1, print), loop.call_later(1, print)
        assert h1._context is not h2._context
        ctx = h1._context.copy()
        assert loop.call_later(1, print, context=ctx)._context is ctx
    finally:
        loop.close()


def test_cwheel_debug_mode_keeps_the_callers_traceback() -> None:
    """In debug mode the handle's traceback ends in the caller, as on the pure path."""
    loop = rt.new_event_loop()
    try:
        loop.set_debug(True)
        for handle in (loop.call_later(1, print), loop.call_at(loop.time() + 1, print)):
            assert handle._source_traceback[-1].name == (
                "test_cwheel_debug_mode_keeps_the_callers_traceback"
            )
    finally:
        loop.close()


def test_cwheel_selected_unless_pure_python_is_asked_for() -> None:
    """ACCELERATED says which wheel the loop uses; MINIDB_PURE_PYTHON=1 forces the pure one."""
    loop = rt.new_event_loop()
    try:
        assert isinstance(loop._wheel, _cwheel.TimerWheel) == rt.ACCELERATED
    finally:
        loop.close()
    forced_pure = os.environ.get(_accel.PURE_PYTHON_ENV) == "1"
    assert rt.ACCELERATED is not forced_pure


@pytest.mark.slow  # and pointless under the sanitizers: it reruns the pure wheel
def test_cwheel_runtime_suite_passes_with_the_other_wheel_in_dev_mode() -> None:
    """The wheel, loop and paused-clock tests pass again with the other implementation, -X dev."""
    env = dict(os.environ)
    if rt.ACCELERATED:
        env[_accel.PURE_PYTHON_ENV] = "1"
    else:
        env.pop(_accel.PURE_PYTHON_ENV, None)
    files = ["test_wheel.py", "test_loop.py", "test_testing.py", "test_cwheel.py"]
    cmd = [sys.executable, "-X", "dev", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
           "-k", "not runtime_suite_passes"]
    proc = subprocess.run(
        cmd + [str(Path(__file__).parent / f) for f in files],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


async def _sleepers(n: int) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.gather(*(asyncio.sleep(0.001 * (i % 5)) for i in range(n)))
    return loop.time() - start


def test_cwheel_loop_runs_sleep_tasks() -> None:
    """asyncio.sleep on the accelerated loop wakes every task, never early."""
    assert rt.run(_sleepers(200)) >= 0.004


def test_cwheel_survives_entries_that_reenter_the_wheel() -> None:
    """Entries whose __hash__ and __setattr__ poll, clear and refill the wheel never crash it."""
    rng = random.Random(5)
    wheel = _cwheel.TimerWheel()
    pool: list[Any] = []

    def meddle() -> None:
        roll = rng.random()
        with contextlib.suppress(Exception):
            if roll < 0.1:
                wheel.clear()
            elif roll < 0.2:
                wheel.poll(wheel.elapsed + rng.randrange(5000))
            elif roll < 0.3 and pool:
                wheel.remove(rng.choice(pool))
            elif roll < 0.4:
                pool.append(WheelEntry())
                wheel.insert(pool[-1], wheel.elapsed + rng.randrange(-5, 100_000))

    class Meddler:
        def __init__(self) -> None:
            self._wheel_tick = 0
            self._wheel_where = UNFILED

        def __hash__(self) -> int:
            meddle()
            return id(self) >> 4

        def __setattr__(self, name: str, value: object) -> None:
            if rng.random() < 0.05:
                meddle()
            object.__setattr__(self, name, value)

    for _ in range(20_000):
        roll = rng.random()
        with contextlib.suppress(KeyError, ValueError, RuntimeError, AssertionError):
            if roll < 0.4:
                pool.append(Meddler() if rng.random() < 0.5 else WheelEntry())
                wheel.insert(pool[-1], wheel.elapsed + rng.randrange(-10, 300_000))
            elif roll < 0.6 and pool:
                wheel.remove(rng.choice(pool))
            elif roll < 0.8 and pool:
                wheel.reset(rng.choice(pool), wheel.elapsed + rng.randrange(-10, 300_000))
            else:
                wheel.poll(wheel.elapsed + rng.randrange(20_000))
                wheel.poll_at()
                wheel.statistics()
        del pool[:-2000]
    wheel.clear()
    assert wheel.poll(wheel.elapsed + 10**6) == []


class _Holder:
    """An object that keeps its own timer: the usual handle <-> callback owner cycle."""

    timer: Any = None

    def fire(self) -> None:
        pass


@pytest.mark.skipif(not rt.ACCELERATED, reason="the C accelerator is not built")
def test_cwheel_handles_leave_the_gc_while_filed_and_come_back_when_they_leave() -> None:
    """A filed handle is untracked by the cyclic GC; fired or cancelled, it is tracked again."""
    loop = rt.new_event_loop()
    loop.set_debug(False)  # debug mode (-X dev) schedules through the Python path
    try:
        armed = loop.call_later(100, print)
        assert not gc.is_tracked(armed) and not gc.is_tracked(armed._context)
        armed.cancel()
        assert gc.is_tracked(armed) and gc.is_tracked(armed._context)
        fired = loop.call_later(0, loop.stop)
        loop.run_forever()
        assert gc.is_tracked(fired) and gc.is_tracked(fired._context)
        closed = loop.call_later(100, print)
    finally:
        loop.close()
    assert gc.is_tracked(closed) and gc.is_tracked(closed._context)


@pytest.mark.skipif(not rt.ACCELERATED, reason="the C accelerator is not built")
@pytest.mark.parametrize("how", ["cancel", "fire", "close"])
def test_cwheel_cycles_through_handles_are_collected_once_out_of_the_wheel(how: str) -> None:
    """holder -> handle -> bound method -> holder is collected after the timer leaves the wheel."""
    loop = rt.new_event_loop()
    holder = _Holder()
    holder.timer = loop.call_later(0 if how == "fire" else 100, holder.fire)
    ref = weakref.ref(holder)
    if how == "cancel":
        holder.timer.cancel()
    elif how == "fire":
        loop.call_later(0.001, loop.stop)
        loop.run_forever()
    loop.close()
    del holder
    gc.collect()
    assert ref() is None
