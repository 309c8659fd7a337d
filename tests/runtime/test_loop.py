"""Timer semantics of WheelEventLoop: never early, bounded lateness, FIFO, cancel, reschedule."""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import random
import sys
import threading
import time
import traceback
from typing import Any

import pytest

import minidb.runtime as rt
from minidb.runtime import WheelEventLoop


class _SteppingSelector:
    """Wraps a real selector; every wait advances the owning loop's fake clock instead."""

    def __init__(self, loop: SteppedLoop, inner: Any) -> None:
        self._loop = loop
        self._inner = inner
        self.waits: list[float | None] = []

    def select(self, timeout: float | None = None) -> Any:
        self.waits.append(timeout)
        events = self._inner.select(0)
        if not events and timeout:
            self._loop.fake_now += timeout
        elif not events and timeout is None:
            raise AssertionError("the loop would block forever")
        self._loop.fake_now += self._loop.turn_cost
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class SteppedLoop(WheelEventLoop):
    """A WheelEventLoop on a fake clock that moves exactly as long as the loop asks to wait."""

    def __init__(self, start: float = 1000.0, turn_cost: float = 0.0) -> None:
        self.fake_now = start
        self.turn_cost = turn_cost
        super().__init__()
        self.stepping = _SteppingSelector(self, self._selector)
        self._selector = self.stepping

    def time(self) -> float:
        return self.fake_now


@pytest.fixture
def stepped() -> Any:
    loop = SteppedLoop()
    yield loop
    loop.close()


def test_loop_timers_never_fire_early_and_at_most_one_tick_late(stepped: SteppedLoop) -> None:
    """Every timer fires at or after its `when` and no more than 1 ms (one tick) after it."""
    rng = random.Random(7)
    lateness: list[float] = []

    def check(when: float) -> None:
        lateness.append(stepped.time() - when)

    for _ in range(2000):
        when = stepped.time() + rng.uniform(-0.01, 30.0)
        stepped.call_at(when, check, when)
    stepped.call_at(stepped.time() + 31, stepped.stop)
    stepped.run_forever()
    assert len(lateness) == 2000
    assert min(lateness) >= 0, f"a timer fired {-min(lateness)} s early"
    assert max(lateness) <= 0.001 + 0.01 + 1e-9  # the negative delays are due "now": 10 ms late max
    assert max(x for x in lateness if x < 0.0015) <= 0.001 + 1e-9


def test_loop_never_early_on_the_real_clock() -> None:
    """On the real monotonic clock a timer never observes loop.time() before its `when`."""
    loop = rt.new_event_loop()
    early: list[float] = []
    fired = 0

    def check(when: float) -> None:
        nonlocal fired
        fired += 1
        if loop.time() < when:
            early.append(when - loop.time())

    rng = random.Random(3)
    for _ in range(300):
        when = loop.time() + rng.uniform(0, 0.05)
        loop.call_at(when, check, when)
    loop.run_until_complete(asyncio.wait_for(_until(lambda: fired >= 300), 10))
    loop.close()
    assert fired == 300
    assert early == []


async def _until(predicate: Any) -> None:
    while not predicate():
        await asyncio.sleep(0.001)


def test_loop_lateness_includes_at_most_one_turn(stepped: SteppedLoop) -> None:
    """With each loop turn costing 3 ms, a timer is late by at most one tick plus one turn."""
    stepped.turn_cost = 0.003
    seen: list[float] = []
    for i in range(50):
        when = stepped.time() + 0.0005 + i * 0.0071
        stepped.call_at(when, lambda w=when: seen.append(stepped.time() - w))
    stepped.call_at(stepped.time() + 1, stepped.stop)
    stepped.run_forever()
    assert len(seen) == 50
    assert min(seen) >= 0 and max(seen) <= 0.001 + 0.003 + 1e-9


def test_loop_equal_deadlines_run_in_scheduling_order(stepped: SteppedLoop) -> None:
    """Callbacks with the same `when` run in the order they were scheduled."""
    order: list[int] = []
    when = stepped.time() + 5.0
    for i in range(500):
        stepped.call_at(when, order.append, i)
    stepped.call_at(when + 0.01, stepped.stop)
    stepped.run_forever()
    assert order == list(range(500))


def test_loop_deadlines_run_in_deadline_order(stepped: SteppedLoop) -> None:
    """Timers in different ticks run in deadline order, whatever order they were scheduled in."""
    order: list[float] = []
    rng = random.Random(11)
    delays = [rng.randrange(1, 100_000) / 1000 for _ in range(1000)]
    for d in delays:
        stepped.call_later(d, order.append, d)
    stepped.call_later(101, stepped.stop)
    stepped.run_forever()
    assert order == sorted(delays)


def test_loop_cancel_inside_callback_of_same_tick(stepped: SteppedLoop) -> None:
    """A callback can cancel another timer due in the same tick; it then does not run."""
    ran: list[str] = []
    when = stepped.time() + 1.0
    victim: asyncio.TimerHandle

    def first() -> None:
        ran.append("first")
        victim.cancel()

    stepped.call_at(when, first)
    victim = stepped.call_at(when, ran.append, "victim")
    stepped.call_at(when + 0.5, stepped.stop)
    stepped.run_forever()
    assert ran == ["first"]


def test_loop_cancel_removes_timer_at_once() -> None:
    """Cancelling unlinks the handle from the wheel immediately: nothing is left to sweep."""
    loop = rt.new_event_loop()
    try:
        handles = [loop.call_later(30 + i / 1000, lambda: None) for i in range(10_000)]
        assert loop.timer_statistics().entries == 10_000
        for h in handles:
            h.cancel()
        stats = loop.timer_statistics()
        assert stats.entries == 0 and sum(stats.per_level) == 0
        assert loop._scheduled == []
    finally:
        loop.close()


def test_loop_reschedule_later_and_earlier(stepped: SteppedLoop) -> None:
    """reschedule() moves the same handle; later and earlier both fire at the new time only."""
    fired: list[tuple[str, float]] = []
    start = stepped.time()
    later = stepped.call_at(start + 1, lambda: fired.append(("later", stepped.time() - start)))
    earlier = stepped.call_at(start + 9, lambda: fired.append(("earlier", stepped.time() - start)))
    assert stepped.reschedule(later, start + 5)
    assert stepped.reschedule(earlier, start + 2)
    assert later.when() == start + 5 and earlier.when() == start + 2
    stepped.call_at(start + 10, stepped.stop)
    stepped.run_forever()
    assert fired == [("earlier", pytest.approx(2.0)), ("later", pytest.approx(5.0))]


def test_loop_reschedule_many_times_keeps_one_entry(stepped: SteppedLoop) -> None:
    """An idle deadline pushed out 10,000 times is one wheel entry and fires once, on time."""
    start = stepped.time()
    fired: list[float] = []
    handle = stepped.call_at(start + 30, lambda: fired.append(stepped.time() - start))
    for i in range(10_000):
        assert stepped.reschedule(handle, start + 30 + i * 0.001)
    assert stepped.timer_statistics().entries == 1
    stepped.call_at(start + 60, stepped.stop)
    stepped.run_forever()
    assert fired == [pytest.approx(30 + 9.999)]


def test_loop_reschedule_after_fire_or_cancel_returns_false(stepped: SteppedLoop) -> None:
    """A timer that already fired or was cancelled is not re-armed; the caller learns it."""
    handle = stepped.call_later(0.001, lambda: None)
    stepped.call_later(0.002, stepped.stop)
    stepped.run_forever()
    assert stepped.reschedule(handle, stepped.time() + 1) is False
    cancelled = stepped.call_later(1, lambda: None)
    cancelled.cancel()
    assert stepped.reschedule(cancelled, stepped.time() + 2) is False


def test_loop_reschedule_rejects_foreign_and_non_timer_handles(stepped: SteppedLoop) -> None:
    """reschedule() refuses a call_soon handle and a timer of another loop with a clear error."""
    soon = stepped.call_soon(lambda: None)
    with pytest.raises(TypeError):
        stepped.reschedule(soon, stepped.time() + 1)
    other = rt.new_event_loop()
    try:
        foreign = other.call_later(10, lambda: None)
        with pytest.raises(ValueError):
            stepped.reschedule(foreign, stepped.time() + 1)
    finally:
        other.close()


def test_loop_huge_infinite_and_negative_delays(stepped: SteppedLoop) -> None:
    """Past deadlines fire on the next turn; huge and infinite ones wait and can be cancelled."""
    ran: list[str] = []
    stepped.call_later(-5, ran.append, "negative")
    stepped.call_at(float("-inf"), ran.append, "minus-infinity")
    huge = stepped.call_later(1e12, ran.append, "huge")
    inf = stepped.call_later(float("inf"), ran.append, "inf")
    stepped.call_later(0, stepped.stop)
    stepped.run_forever()
    assert ran == ["minus-infinity", "negative"]
    stepped.fake_now += 3 * 365 * 24 * 3600.0  # past the top level's 2.2-year lap
    stepped.call_soon(stepped.stop)
    stepped.run_forever()
    assert ran == ["minus-infinity", "negative"]
    huge.cancel()
    inf.cancel()
    assert stepped.timer_statistics().entries == 0


def test_loop_time_is_the_stock_clock_and_a_subclass_may_replace_it() -> None:
    """loop.time() reads time.monotonic, as the stock loop's does; a subclass's own ``time``
    (the paused clock's) and a patched instance attribute still win."""

    class Fixed(rt.WheelEventLoop):
        def time(self) -> float:
            return 42.0

    loop, fixed = rt.new_event_loop(), Fixed()
    try:
        for _ in range(100):
            before = time.monotonic()
            now = loop.time()
            assert before <= now <= time.monotonic()
        assert fixed.time() == 42.0
        loop.time = lambda: 7.0  # type: ignore[method-assign]
        assert loop.time() == 7.0
    finally:
        loop.close()
        fixed.close()


def test_loop_time_is_monotonic() -> None:
    """loop.time() never goes backwards across turns and timers."""
    loop = rt.new_event_loop()
    seen: list[float] = []

    async def sample() -> None:
        for _ in range(200):
            seen.append(loop.time())
            await asyncio.sleep(0)
        for _ in range(20):
            seen.append(loop.time())
            await asyncio.sleep(0.0005)

    loop.run_until_complete(asyncio.wait_for(sample(), 10))
    loop.close()
    assert seen == sorted(seen)


# Clock readings (seconds since boot) at which the wait to the next tick, computed as
# ``tick / 1000 - now``, falls a rounding error short of the tick: found by search, a few in
# every thousand readings a day or more past boot are like them.
_SHORT_BY_ROUNDING = (535053.2217679787, 531459.167461633, 1060293.1498451566, 1073508.4290077502)


@pytest.mark.parametrize("start", _SHORT_BY_ROUNDING)
def test_loop_wait_reaches_its_tick_on_a_clock_long_past_boot(start: float) -> None:
    """The wait to a tick that rounding puts just out of reach is found in a few steps.

    Stepping the wait one float at a time took some 10**8 steps at these readings, so a loop a
    day past boot spent seconds inside one turn (``sleep(0.0005)`` took 10 s). The loop runs in
    a thread so that a relapse fails against the deadline instead of hanging the run.
    """
    fired: list[int] = []
    failure: list[BaseException] = []

    def run() -> None:
        loop = SteppedLoop(start=start)
        try:
            tick = math.floor(start * 1000) + 1
            loop.call_later(0.0001, lambda: fired.append(loop._now_tick()))
            loop.run_until_complete(asyncio.sleep(0.0002))
            first_wait = next(w for w in loop.stepping.waits if w)
            assert first_wait == pytest.approx(tick / 1000 - start, abs=1e-9)
        except BaseException as exc:  # reported by the test's thread below
            failure.append(exc)
        finally:
            loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5.0)
    assert not thread.is_alive(), f"the loop at clock {start} was still turning after 5 s"
    assert not failure, failure
    assert fired == [math.floor(start * 1000) + 1]


def test_loop_no_wakeups_when_nothing_is_due(stepped: SteppedLoop) -> None:
    """A loop with one 10 s timer waits in a handful of long selects, not a tick at a time."""
    stepped.run_until_complete(asyncio.sleep(10))
    waits = [w for w in stepped.stepping.waits if w]
    # One wait per wheel level the timer cascades through, never a periodic tick.
    assert len(waits) <= 4, waits
    assert sum(waits) == pytest.approx(10, abs=0.002)


def test_loop_idle_without_timers_blocks_forever() -> None:
    """With no timers and nothing ready, the selector is asked to block with no timeout."""
    loop = rt.new_event_loop()
    try:
        assert loop._select_timeout() is None
        loop.call_later(100, lambda: None).cancel()
        assert loop._select_timeout() is None
    finally:
        loop.close()


def test_loop_sleep_wait_for_and_timeout_go_through_the_wheel(stepped: SteppedLoop) -> None:
    """asyncio.sleep, wait_for and asyncio.timeout all use the wheel and the fake clock."""

    async def main() -> float:
        start = stepped.time()
        await asyncio.sleep(1.5)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(10), 0.25)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.25):
                await asyncio.sleep(10)
        return stepped.time() - start

    assert stepped.run_until_complete(main()) == pytest.approx(2.0, abs=0.003)


def test_loop_runtime_timeout_reschedules_in_place(stepped: SteppedLoop) -> None:
    """minidb.runtime.timeout().reschedule() keeps the same handle and still times out."""

    async def main() -> None:
        async with rt.timeout(1.0) as cm:
            handle = cm._timeout_handler
            for _ in range(5):
                await asyncio.sleep(0.5)
                cm.reschedule(stepped.time() + 1.0)
                assert cm._timeout_handler is handle
                assert cm.when() == pytest.approx(stepped.time() + 1.0)
        start = stepped.time()
        with pytest.raises(TimeoutError):
            async with rt.timeout(0.1) as cm:
                cm.reschedule(stepped.time() + 0.3)
                await asyncio.sleep(5)
        assert stepped.time() - start == pytest.approx(0.3, abs=0.0015)
        async with rt.timeout(None) as cm:
            cm.reschedule(stepped.time() + 0.5)
            cm.reschedule(None)
            await asyncio.sleep(1)

    stepped.run_until_complete(main())


def test_loop_runtime_timeout_on_stock_loop_behaves_like_asyncio() -> None:
    """On a loop without reschedule(), minidb.runtime.timeout falls back to the stock path."""

    async def main() -> None:
        with pytest.raises(TimeoutError):
            async with rt.timeout(0.01) as cm:
                cm.reschedule(asyncio.get_running_loop().time() + 0.02)
                await asyncio.sleep(1)

    asyncio.run(main())


def test_loop_close_drops_all_timers() -> None:
    """close() empties the wheel and marks its handles unscheduled."""
    loop = rt.new_event_loop()
    handles = [loop.call_later(i, lambda: None) for i in range(1, 100)]
    loop.close()
    assert all(not h._scheduled for h in handles)
    assert loop.timer_statistics().entries == 0


def test_loop_cancelled_handles_are_freed() -> None:
    """A cancelled timer's handle is not kept alive by the loop."""
    import weakref

    loop = rt.new_event_loop()
    handle = loop.call_later(100, lambda: None)
    ref = weakref.ref(handle)
    handle.cancel()
    del handle
    gc.collect()
    assert ref() is None
    loop.close()


def test_loop_debug_mode_logs_slow_callbacks(caplog: pytest.LogCaptureFixture) -> None:
    """In debug mode a callback over slow_callback_duration is logged, as on the stock loop."""
    import time

    loop = rt.new_event_loop()
    loop.set_debug(True)
    loop.slow_callback_duration = 0.01
    loop.call_later(0.001, time.sleep, 0.02)
    loop.call_later(0.05, loop.stop)
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.run_forever()
    loop.close()
    assert any("took" in r.getMessage() for r in caplog.records)


def test_loop_entry_points_run_policy_and_runner() -> None:
    """run(), the policy and Runner/asyncio.run(loop_factory=) all give a WheelEventLoop."""

    async def kind() -> str:
        return type(asyncio.get_running_loop()).__name__

    assert rt.run(kind()) == "WheelEventLoop"
    with asyncio.Runner(loop_factory=rt.new_event_loop) as runner:
        assert runner.run(kind()) == "WheelEventLoop"
    if sys.version_info >= (3, 12):
        assert asyncio.run(kind(), loop_factory=rt.new_event_loop) == "WheelEventLoop"
    policy = asyncio.get_event_loop_policy()
    try:
        asyncio.set_event_loop_policy(rt.EventLoopPolicy())
        assert asyncio.run(kind()) == "WheelEventLoop"
    finally:
        asyncio.set_event_loop_policy(policy)


# -- printed timer handles: exactly as stock asyncio prints its TimerHandle ---------------

_STATES = ("pending", "cancelled", "ran", "ran-then-cancelled")
_LOOP_FACTORIES = (rt.new_event_loop, asyncio.SelectorEventLoop)


class _StandingClock:
    """A loop clock that stands still unless a callback moves it, the same on every loop."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.calls: list[tuple[object, ...]] = []

    def time(self) -> float:
        return self.now

    def note(self, *args: object) -> None:
        self.calls.append(args)

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def fail(self) -> None:
        raise ValueError("the timer's callback failed")


def _standing_start() -> float:
    """A whole second ahead of the monotonic clock, so no loop made after it is past it."""
    return float(math.ceil(time.monotonic()) + 10)


def _printed_timer(
    loop: asyncio.AbstractEventLoop, start: float, *, debug: bool, via: str, delay: float,
    state: str,
) -> tuple[str, str, str]:
    """repr(), str() and creation stack (as the exception handler prints it) of a timer of
    ``loop`` in ``state``, on a clock standing at ``start``."""
    clock = _StandingClock(start)
    loop.time = clock.time  # type: ignore[method-assign]
    loop.set_debug(debug)
    try:
        if state.startswith("ran"):
            delay = -delay
        # The same lines for every loop: in debug mode the handles are "created at" them.
        if via == "call_later":
            handle = loop.call_later(delay, clock.note, "x", 1)
        else:
            handle = loop.call_at(int(start) + delay, clock.note, "x", 1)
        if state.startswith("ran"):
            loop.call_soon(loop.stop)
            loop.run_forever()  # one turn: the stop and the due timer both run in it
            assert clock.calls == [("x", 1)]
        if state.endswith("cancelled"):
            handle.cancel()
        stack = traceback.format_list(handle._source_traceback or [])
        return repr(handle), str(handle), "".join(stack)
    finally:
        loop.close()


@pytest.mark.parametrize("state", _STATES)
@pytest.mark.parametrize("via", ["call_at", "call_later"])
@pytest.mark.parametrize("delay", [3600.25, 3600])
@pytest.mark.parametrize("debug", [False, True])
def test_loop_timer_handles_print_as_stock(debug: bool, delay: float, via: str, state: str) -> None:
    """A timer's repr and str equal stock asyncio's for the same when, callback, args and state."""
    start = _standing_start()
    case: dict[str, Any] = {"debug": debug, "via": via, "delay": delay, "state": state}
    # One line for both loops, so that their handles' creation stacks can be equal.
    ours, stock = [_printed_timer(make(), start, **case) for make in _LOOP_FACTORIES]
    assert ours == stock
    assert ours[0].startswith("<TimerHandle ")
    assert bool(ours[2]) == debug


def test_loop_timer_handle_subclasses_print_their_own_name() -> None:
    """A subclass of the loop's handle prints its own name, as subclasses of asyncio's do."""

    class Sub(rt.WheelTimerHandle):
        __slots__ = ()

    loop = rt.new_event_loop()
    loop.set_debug(False)  # python -X dev turns it on
    try:
        assert repr(Sub(12.5, print, (), loop)) == "<Sub when=12.5 print()>"
    finally:
        loop.close()


def test_loop_debug_messages_print_timer_handles_as_stock(caplog: pytest.LogCaptureFixture) -> None:
    """The slow-callback warning and the exception handler's message name timers as stock does."""
    start = _standing_start()
    logged: list[list[str]] = []
    for loop in (asyncio.SelectorEventLoop(), rt.new_event_loop()):
        clock = _StandingClock(start)
        loop.time = clock.time  # type: ignore[method-assign]
        loop.set_debug(True)
        loop.slow_callback_duration = 0.1
        caplog.clear()
        try:
            with caplog.at_level(logging.WARNING, logger="asyncio"):
                # The same lines for both loops: the handles are "created at" them.
                loop.call_at(start - 2, clock.advance, 0.3)
                loop.call_later(-1, clock.fail)
                loop.call_soon(loop.stop)
                loop.run_forever()  # one turn: both timers are due
        finally:
            loop.close()
        logged.append([r.getMessage() for r in caplog.records if r.name == "asyncio"])
    stock, ours = logged
    assert ours == stock
    assert ours[0].startswith("Executing <TimerHandle when=") and ours[0].endswith(
        "took 0.300 seconds"
    )
    assert "\nhandle: <TimerHandle when=" in ours[1]
