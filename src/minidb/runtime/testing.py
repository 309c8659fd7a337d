"""minidb.runtime.testing: a ``WheelEventLoop`` whose clock only moves when the program waits.

Time-dependent code (timeouts, retries with backoff, idle connections) is tested on a *paused*
clock: ``loop.time()`` starts at 0.0 and stands still while anything can run. When every task
is waiting and the next thing that can happen is a timer, the loop jumps straight to that
timer's tick (auto-advance), so a thirty-second idle timeout is tested in milliseconds and the
test can assert elapsed times with ``==``.

The rules, in the order the loop applies them each time it would block:

1. Callbacks ready to run always run first (the loop never blocks then).
2. I/O wins over a jump: the selector is polled without blocking first, and a socket with data
   waiting is served at the current virtual time.
3. While ``run_in_executor`` work (``asyncio.to_thread``, ``getaddrinfo``) is pending the clock
   does not jump: the loop waits in real time, because the thread cannot see the virtual clock
   and its result may cancel the timer we would jump to (Tokio's ``spawn_blocking`` rule).
4. With ``autojump_threshold`` > 0 the loop first waits that long in real time for outside
   I/O (another process answering), as trio's ``MockClock`` does; the default 0 jumps at once.
5. Otherwise the clock jumps to the wheel's next slot. Jumps land on whole 1 ms ticks, so
   ``await asyncio.sleep(1.5)`` from 0 ends with ``loop.time() == 1.5`` exactly.
6. With no timer at all nothing can happen but outside I/O: the loop waits for it in real time
   for at most ``idle_limit`` seconds, then raises ``PausedClockStuck`` naming the waiting
   tasks, instead of hanging the test.

``advance(seconds)`` moves the clock by hand from inside a coroutine: every timer that falls
due is fired in deadline order, each group at its own tick, and the callbacks it makes ready
(and the ones those make ready) run before the next group.

The trap: work that blocks without awaiting a timer is invisible to the clock. A CPU loop or
``time.sleep`` inside a coroutine takes real time and no virtual time; a thread started by hand
(not through ``run_in_executor``) that calls back with ``call_soon_threadsafe`` later is not
waited for, so a pending ``wait_for`` jumps past it. Deadlines are rounded to the 1 ms tick
with a nanosecond of tolerance, so ``0.1 + 0.2`` seconds of sleeping ends at exactly ``0.3``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar, TypeVarTuple, Unpack

from minidb.runtime._loop import TICKS_PER_SECOND, WheelEventLoop

__all__ = [
    "DEFAULT_IDLE_LIMIT_S",
    "PausedClockStatistics",
    "PausedClockStuck",
    "PausedEventLoop",
    "advance",
    "new_paused_loop",
    "run_paused",
]

DEFAULT_IDLE_LIMIT_S = 5.0
"""Real seconds a paused loop waits with no timer, nothing ready and no I/O before it gives up."""

EXECUTOR_POLL_S = 0.05
"""Real seconds between looks at the selector while executor work holds the clock."""

TICK_TOLERANCE = 1e-6
"""Fraction of a tick ignored when rounding a deadline up (a nanosecond at 1 ms ticks).

Sums of decimal delays are rarely exact in binary (``0.1 + 0.2`` is ``0.30000000000000004``);
without a tolerance such a deadline would round up to the next millisecond and the test's
``==`` would fail by 1 ms. Firing up to a nanosecond "early" is far inside the clock
resolution stock asyncio already allows.
"""

MAX_DRAIN_TURNS = 10_000
"""Loop turns ``advance`` gives ready callbacks to settle before it moves on regardless.

A task that yields with ``sleep(0)`` forever never settles; this bounds the wait for it.
"""

_Ts = TypeVarTuple("_Ts")
T = TypeVar("T")


class PausedClockStuck(RuntimeError):
    """The paused loop has nothing it can ever do: no timer, nothing ready, no I/O arriving."""


@dataclass(frozen=True)
class PausedClockStatistics:
    """How a paused loop's clock has moved."""

    now: float
    """``loop.time()``, in virtual seconds."""
    jumps: int
    """Times the clock moved forward (auto-advance and ``advance`` steps)."""
    auto_advanced_s: float
    """Virtual seconds skipped by auto-advance."""
    advanced_s: float
    """Virtual seconds moved by ``advance()``."""
    real_waits: int
    """Times the loop waited in real time (executor work, autojump threshold, no timers)."""


class _PausedSelector:
    """Wraps the loop's selector: a wait becomes a clock jump, under the rules in the docstring."""

    def __init__(self, loop: PausedEventLoop, inner: Any) -> None:
        self._loop = loop
        self._inner = inner

    def select(self, timeout: float | None = None) -> Any:
        inner = self._inner
        events = inner.select(0)
        if events or timeout == 0:
            return events
        loop = self._loop
        if loop._executor_pending:
            loop._real_waits += 1
            return inner.select(EXECUTOR_POLL_S)
        if loop.autojump_threshold > 0:
            loop._real_waits += 1
            events = inner.select(loop.autojump_threshold)
            if events or loop._executor_pending:
                return events
        at = loop._wheel.poll_at()
        if at is None:
            return self._wait_for_outside_io(inner)
        before = loop._now
        loop._jump_to_tick(at)
        loop._auto_advanced_s += loop._now - before
        return []

    def _wait_for_outside_io(self, inner: Any) -> Any:
        loop = self._loop
        loop._real_waits += 1
        limit = loop.idle_limit
        deadline = time.monotonic() + limit
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PausedClockStuck(
                    f"paused loop stuck at t={loop.time():g}: no timers, nothing ready and no "
                    f"I/O for {limit:g} s of real time; waiting tasks: {loop._describe_tasks()}"
                )
            events = inner.select(remaining)
            if events:
                return events

    def __getattr__(self, name: str) -> Any:
        # register/unregister/modify/get_key/get_map/close go to the real selector.
        return getattr(self._inner, name)


class PausedEventLoop(WheelEventLoop):
    """A ``WheelEventLoop`` on a virtual clock that jumps when every task waits for a timer."""

    # call_at, call_later and reschedule round deadlines to ticks with this tolerance.
    _tick_tolerance = TICK_TOLERANCE

    def __init__(
        self,
        *,
        start: float = 0.0,
        idle_limit: float = DEFAULT_IDLE_LIMIT_S,
        autojump_threshold: float = 0.0,
        selector: Any = None,
    ) -> None:
        if start < 0:
            raise ValueError(f"start must be >= 0, got {start}")
        # The clock must exist before the base class reads it to place the wheel.
        self._now = 0.0
        self._tick = 0
        self._set_time(start)
        self.idle_limit = idle_limit
        self.autojump_threshold = autojump_threshold
        self._executor_pending: set[asyncio.Future[Any]] = set()
        self._jumps = 0
        self._auto_advanced_s = 0.0
        self._advanced_s = 0.0
        self._real_waits = 0
        super().__init__(selector)
        self._selector = _PausedSelector(self, self._selector)

    # -- the clock -----------------------------------------------------------------------

    def time(self) -> float:
        return self._now

    def _now_tick(self) -> int:
        # Exact, not floor(time() * 1000): tick / 1000 * 1000 is not always tick again.
        return self._tick

    def _set_time(self, when: float) -> None:
        self._now = when
        self._tick = math.floor(when * TICKS_PER_SECOND + TICK_TOLERANCE)

    def _jump_to_tick(self, tick: int) -> None:
        """Move the clock forward to exactly ``tick`` (never backward)."""
        if tick > self._tick or (tick == self._tick and self._now < tick / TICKS_PER_SECOND):
            self._now = tick / TICKS_PER_SECOND
            self._tick = tick
            self._jumps += 1

    def statistics(self) -> PausedClockStatistics:
        """How far and how often the clock has moved."""
        return PausedClockStatistics(
            now=self._now,
            jumps=self._jumps,
            auto_advanced_s=self._auto_advanced_s,
            advanced_s=self._advanced_s,
            real_waits=self._real_waits,
        )

    # -- scheduling --------------------------------------------------------------------

    def run_in_executor(
        self,
        executor: concurrent.futures.Executor | None,
        func: Callable[[Unpack[_Ts]], T],
        *args: *_Ts,
    ) -> asyncio.Future[T]:
        # Tracked so that the clock holds still until the thread's result is back (rule 3).
        future = super().run_in_executor(executor, func, *args)
        self._executor_pending.add(future)
        future.add_done_callback(self._executor_pending.discard)
        return future

    async def shutdown_default_executor(self, *args: Any, **kwargs: Any) -> None:
        # The executor's threads join in real time. Since 3.12 asyncio.Runner bounds the wait
        # with a 300 s loop timeout, which a virtual clock would jump to at once: hold the
        # clock still (rule 3) for as long as the shutdown takes.
        holding: asyncio.Future[None] = self.create_future()
        self._executor_pending.add(holding)
        try:
            await super().shutdown_default_executor(*args, **kwargs)
        finally:
            self._executor_pending.discard(holding)
            holding.cancel()

    # -- moving the clock by hand --------------------------------------------------------

    async def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward, firing what falls due in deadline order.

        Each group of timers due at one tick fires with ``loop.time()`` at that tick; the
        callbacks they make ready run (to quiescence) before the next group. Must be awaited
        from a task on this loop.
        """
        if seconds < 0:
            raise ValueError(f"cannot advance by a negative time: {seconds}")
        if asyncio.get_running_loop() is not self:
            raise RuntimeError("advance() must be awaited on the paused loop it advances")
        start = self._now
        target = start + seconds
        target_tick = math.floor(target * TICKS_PER_SECOND + TICK_TOLERANCE)
        await self._settle()
        while True:
            at = self._wheel.poll_at()
            if at is None or at > target_tick:
                break
            self._jump_to_tick(at)
            # The next turn polls the wheel at this tick; due timers run, others cascade down.
            await self._settle()
        if target > self._now:
            self._set_time(target)
            self._jumps += 1
        self._advanced_s += self._now - start
        await self._settle()

    async def _settle(self) -> None:
        """Yield turns until nothing but this task was ready (every callback has settled)."""
        for _ in range(MAX_DRAIN_TURNS):
            await asyncio.sleep(0)
            if not self._ready:
                return

    # -- diagnostics ---------------------------------------------------------------------

    def _describe_tasks(self) -> str:
        described = []
        for task in asyncio.all_tasks(self):
            frame = getattr(task.get_coro(), "cr_frame", None)
            where = f" at {frame.f_code.co_filename}:{frame.f_lineno}" if frame else ""
            described.append(f"{task.get_name()}{where}")
        return ", ".join(sorted(described)) or "none"


def new_paused_loop(
    *,
    start: float = 0.0,
    idle_limit: float = DEFAULT_IDLE_LIMIT_S,
    autojump_threshold: float = 0.0,
) -> PausedEventLoop:
    """A new ``PausedEventLoop``; also usable as ``loop_factory`` for ``asyncio.Runner``."""
    return PausedEventLoop(
        start=start, idle_limit=idle_limit, autojump_threshold=autojump_threshold
    )


def run_paused(main: Coroutine[Any, Any, T], *, idle_limit: float = DEFAULT_IDLE_LIMIT_S) -> T:
    """Run ``main`` on a new paused loop and close it, like ``asyncio.run``."""
    with asyncio.Runner(loop_factory=lambda: new_paused_loop(idle_limit=idle_limit)) as runner:
        return runner.run(main)


async def advance(seconds: float) -> None:
    """Move the running paused loop's clock forward; see ``PausedEventLoop.advance``."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop, PausedEventLoop):
        raise RuntimeError(f"advance() needs a PausedEventLoop, not {type(loop).__name__}")
    await loop.advance(seconds)
