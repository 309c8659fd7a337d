"""Introspection of a running ``WheelEventLoop``: per-task figures, blocking steps, a snapshot.

The tokio-console idea for asyncio. Switched on per loop (``enable_introspection(loop)``, or
``MINIDB_INTROSPECTION=1`` in the environment when the loop is built), it replaces the loop's
``_run_once`` with an instrumented copy; switched off, the loop runs the plain one and pays
nothing, not even a flag check per step.

What the instrumented turn measures, with one ``perf_counter`` call per step (the end of one
step is the start of the next):

- per task (a step is a task's ``__step``/``__wakeup`` callback; its ``__self__`` is the task):
  polls, busy time (inside its steps), scheduled time (ready but waiting: from the start of the
  turn it ran in to the start of its step, a lower bound that misses the tail of the previous
  turn), time since its last poll;
- loop-wide: steps, I/O polls and events, timers fired, busy time, and per interval
  (``INTERVAL_S``) the step rate and the longest step;
- blocking: a step longer than the threshold (default ``DEFAULT_BLOCKING_THRESHOLD_S``) is
  reported once, after it ends, as a ``minidb.runtime`` log record (``extra`` fields
  ``minidb_event="runtime.blocked"``, ``task``, ``duration_s``, ``location``, ``stack``) and
  counted. A watchdog thread samples the loop thread's stack while a step overruns, so the
  report shows the line that was blocking (a ``time.sleep``, a CPU loop), not where the task
  went on to suspend. Only a step shorter than a watchdog period over the threshold can miss the
  sample; it is then reported with the task's location after the step.

``snapshot()`` returns plain data (dicts, lists, numbers, strings) and must be called on the
loop's thread (the minidb server serves ``/debug/tasks`` on the loop itself); from another
thread, schedule it with ``loop.call_soon_threadsafe`` or ``run_coroutine_threadsafe``.
It works on any asyncio loop; without introspection the task table has names, states and
locations but no counters.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import sys
import threading
import time
import weakref
from array import array
from asyncio import base_events, events
from collections import deque
from dataclasses import dataclass
from types import FrameType
from typing import Any

from minidb.runtime._loop import WheelEventLoop, WheelTimerHandle, _format_handle

__all__ = [
    "DEFAULT_BLOCKING_THRESHOLD_S",
    "ON_DEMAND_LINGER_S",
    "BlockingEvent",
    "IntrospectionOnDemand",
    "IntrospectionStatistics",
    "Introspector",
    "disable_introspection",
    "enable_introspection",
    "snapshot",
    "snapshot_json",
]

DEFAULT_BLOCKING_THRESHOLD_S = 0.1
"""A single step holding the loop this long (seconds) is reported as blocking."""

INTERVAL_S = 1.0
"""Window (seconds) of the loop-wide rate and longest-step figures."""

WATCHDOG_PERIODS_PER_THRESHOLD = 4
"""The watchdog looks at the running step this many times per threshold."""

WATCHDOG_MIN_PERIOD_S = 0.005
"""Shortest watchdog period (seconds), for tiny thresholds set in tests."""

RECENT_BLOCKING_EVENTS = 50
"""Blocking events kept for ``snapshot()`` (the counter counts all of them)."""

GC_NOTABLE_S = 0.001
"""A garbage collection this long (seconds) is remembered, to explain blocking steps."""

RECENT_COLLECTIONS = 64
"""Notable collections remembered (a blocking step needs only those it overlapped)."""

LOG_STEPS = 131_072
"""Task steps logged before they are folded into the task table.

It bounds the log's memory (32 bytes a step, so 4 MiB) and how many steps a finished
task can be held alive by the log; the log is also folded on every read and every
``PRUNE_EVERY_INTERVALS`` intervals.
"""


PRUNE_EVERY_INTERVALS = 10
"""Every this many intervals the task table drops tasks abandoned while pending."""

SNAPSHOT_VERSION = 1
"""Bumped when the shape of ``snapshot()`` changes incompatibly."""

logger = logging.getLogger("minidb.runtime")

_ASYNCIO_DIR = os.path.dirname(asyncio.__file__)
_RUN_CODE = events.Handle._run.__code__


@dataclass(frozen=True)
class BlockingEvent:
    """One step that held the loop longer than the threshold."""

    task: str | None
    """Name of the task whose step it was, or None for a plain callback."""
    callback: str
    """The handle's repr (for a task step, the task's ``__step``/``__wakeup``)."""
    duration_s: float
    location: str
    """``file:line in function`` where it was blocking (or, unsampled, where it went on to)."""
    stack: tuple[str, ...]
    """The step's stack, outermost first, as ``file:line in function`` lines."""
    sampled: bool
    """Whether the watchdog caught the stack while the step was still running."""
    gc_s: float
    """Of ``duration_s``, the time spent in garbage collections longer than ``GC_NOTABLE_S``:
    a long step may be the collector's, not the code's."""
    wall_time: float
    """When the step ended, as ``time.time()``."""


@dataclass(frozen=True)
class IntrospectionStatistics:
    """Loop-wide counters since introspection was switched on."""

    steps: int
    io_polls: int
    io_events: int
    timers_fired: int
    busy_s: float
    blocking_steps: int
    tasks_tracked: int
    tasks_finished: int
    steps_per_second: float
    """Steps per second over the last completed interval."""
    longest_step_s: float
    """The longest step of the last completed interval."""


# Fields of a task's row in _TaskTable.data, in this order.
_POLLS, _BUSY, _SCHEDULED, _FIRST_POLL, _LAST_POLL = range(5)
_ROW_WIDTH = 5


class _TaskTable:
    """Per-task counters of live tasks, built so that the hot path stays cheap.

    A step does not look its task up: it appends the task to ``log`` and its start, end and
    scheduled time to ``log_times`` (three doubles a step).
    The log is folded into the table (``fold``) when it fills up, before any read, and every
    ``PRUNE_EVERY_INTERVALS`` intervals. Steps of tasks that have finished by then are
    skipped, so short-lived tasks mostly never get a row at all: with 100k tasks a hash insert
    per task costs about a microsecond, because every one misses the CPU cache. The log holds
    its tasks until the fold (at most ``LOG_STEPS`` steps or ``PRUNE_EVERY_INTERVALS``
    intervals); the table itself holds them only weakly, so a task abandoned while pending is
    still collected (and asyncio still warns about it).

    A live task's row is ``_ROW_WIDTH`` doubles in one flat array, reused once the task ends:
    no object per task for the cyclic garbage collector to allocate and traverse. ``rows``
    maps ``id(task)`` to the row's offset and ``refs`` to a weak reference that tells a live
    task from a dead one whose id was reused. Times are ``time.perf_counter()`` seconds.
    """

    def __init__(self) -> None:
        self.log: list[asyncio.Task[Any]] = []
        self.log_times = array("d")
        self.rows: dict[int, int] = {}
        self.refs: dict[int, weakref.ref[asyncio.Task[Any]]] = {}
        self.free: list[int] = []
        self.data = array("d")

    def __len__(self) -> int:
        return len(self.rows)

    def fold(self) -> None:
        """Move the logged steps of still-running tasks into their rows."""
        log = self.log
        if not log:
            return
        rows, refs, data, free = self.rows, self.refs, self.data, self.free
        ref = weakref.ref
        times = self.log_times
        starts, ends, waits = times[0::3], times[1::3], times[2::3]
        for task, t0, t1, scheduled in zip(log, starts, ends, waits, strict=True):
            if task.done():
                continue
            key = id(task)
            at = rows.get(key)
            if at is None or refs[key]() is not task:
                if at is None and not free:
                    rows[key] = len(data)
                    data.extend((1.0, t1 - t0, scheduled, t0, t1))
                else:
                    if at is None:
                        at = rows[key] = free.pop()
                    data[at] = 1.0
                    data[at + 1] = t1 - t0
                    data[at + 2] = scheduled
                    data[at + 3] = t0
                    data[at + 4] = t1
                refs[key] = ref(task)
            else:
                data[at] += 1.0
                data[at + 1] += t1 - t0
                data[at + 2] += scheduled
                data[at + 4] = t1
        # Cleared in place: the running turn holds the bound appends.
        log.clear()
        del times[:]

    def discard(self, task: asyncio.Task[Any]) -> None:
        self._discard_key(id(task))

    def _discard_key(self, key: int) -> None:
        at = self.rows.pop(key, None)
        self.refs.pop(key, None)
        if at is not None:
            self.free.append(at)

    def prune(self) -> None:
        """Forget the rows of tasks that finished or were garbage-collected."""
        self.fold()
        gone = []
        for key, ref in self.refs.items():
            task = ref()
            if task is None or task.done():
                gone.append(key)
        for key in gone:
            self._discard_key(key)

    def get(self, task: asyncio.Task[Any]) -> tuple[float, ...] | None:
        """(polls, busy, scheduled, first poll, last poll) of ``task``, if it has run."""
        self.fold()
        key = id(task)
        at = self.rows.get(key)
        if at is None or self.refs[key]() is not task:
            return None
        return tuple(self.data[at : at + _ROW_WIDTH])


class Introspector:
    """The instrumented turn of one loop, its counters, and its watchdog thread."""

    def __init__(
        self, loop: WheelEventLoop, blocking_threshold: float, per_task: bool = True
    ) -> None:
        if blocking_threshold <= 0:
            raise ValueError(f"blocking_threshold must be > 0, got {blocking_threshold}")
        self.loop = loop
        self.per_task = per_task
        self.blocking_threshold = blocking_threshold
        # Keyed by the task itself (hashing by identity is the cheapest lookup there is). A
        # finished task is dropped after its last step; prune() drops a pending task that only
        # this table still references, so abandoned tasks are still collected (and warned of).
        self.tasks = _TaskTable()
        self.steps = 0
        self.io_polls = 0
        self.io_events = 0
        self.timers_fired = 0
        self.busy = 0.0
        self.blocking_steps = 0
        self.tasks_finished = 0
        self.recent_blocking: deque[BlockingEvent] = deque(maxlen=RECENT_BLOCKING_EVENTS)
        # The watchdog's latest sample of a step in progress: (perf_counter time, stack).
        self.sampled: tuple[float, list[str]] | None = None
        now = time.perf_counter()
        self.interval = INTERVAL_S
        self.interval_start = now
        self.interval_steps = 0
        self.interval_longest = 0.0
        self.interval_rolled = False
        self.intervals = 0
        self.last_rate = 0.0
        self.last_longest = 0.0
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        # Recent notable garbage collections as (start, duration), from gc.callbacks.
        self.collections: deque[tuple[float, float]] = deque(maxlen=RECENT_COLLECTIONS)
        self._gc_started = 0.0

    # -- switching -----------------------------------------------------------------------

    def install(self) -> None:
        # An instance attribute shadows the class's _run_once: run_forever picks it up, and
        # the plain path has no check to make.
        self.loop._run_once = self._make_run_once()  # type: ignore[method-assign]
        self.loop._introspector = self
        gc.callbacks.append(self._on_gc)
        self._start_watchdog()

    def uninstall(self) -> None:
        self.loop.__dict__.pop("_run_once", None)
        self.loop._introspector = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self._stop_watchdog()

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        # Runs on every collection (thousands a second in a busy process): keep it tiny.
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            took = time.perf_counter() - self._gc_started
            if took >= GC_NOTABLE_S:
                self.collections.append((self._gc_started, took))

    def _gc_time_within(self, start: float, end: float) -> float:
        return sum(
            max(0.0, min(end, began + took) - max(start, began))
            for began, took in self.collections
        )

    def set_threshold(self, blocking_threshold: float) -> None:
        if blocking_threshold <= 0:
            raise ValueError(f"blocking_threshold must be > 0, got {blocking_threshold}")
        self._stop_watchdog()
        self.blocking_threshold = blocking_threshold
        self._start_watchdog()

    def _start_watchdog(self) -> None:
        period = max(
            self.blocking_threshold / WATCHDOG_PERIODS_PER_THRESHOLD, WATCHDOG_MIN_PERIOD_S
        )
        self._stop = threading.Event()
        self._watchdog = threading.Thread(
            target=self._watch,
            args=(period, self._stop),
            name="minidb-runtime-watchdog",
            daemon=True,
        )
        self._watchdog.start()

    def _stop_watchdog(self) -> None:
        self._stop.set()
        if self._watchdog is not None and self._watchdog is not threading.current_thread():
            self._watchdog.join()
        self._watchdog = None

    # -- the instrumented turn -----------------------------------------------------------

    def _make_run_once(self) -> Any:
        loop = self.loop
        table = self.tasks
        per_task = self.per_task
        rows = table.rows
        discard = table.discard
        plain_types: set[type] = set()
        step_types: set[type] = set()
        builtin_method = type(len)
        timer_type = WheelTimerHandle
        task_type = asyncio.Task
        clock = time.perf_counter
        intro = self

        def run_once() -> None:
            """WheelEventLoop._run_once, timing every step; see the module docstring."""
            event_list = loop._selector.select(loop._select_timeout())
            intro.io_polls += 1
            if event_list:
                intro.io_events += len(event_list)
            loop._process_events(event_list)
            event_list = None

            ready = loop._ready
            due = loop._wheel.poll(loop._now_tick())
            if due:
                for timer in due:
                    timer._scheduled = False
                ready.extend(due)
                intro.timers_fired += len(due)

            ntodo = len(ready)
            skipped = 0
            finished = 0
            debug = loop._debug
            threshold = intro.blocking_threshold
            longest = intro.interval_longest
            # One comparison per step on the common path: only a step longer than both the
            # interval's longest and the threshold's smaller needs a second look.
            bar = longest if longest < threshold else threshold
            turn_start = t0 = clock()
            popleft = ready.popleft
            log_task = table.log.append
            log_time = table.log_times.append
            owner: Any = None
            for _ in range(ntodo):
                handle = popleft()
                if handle._cancelled:
                    skipped += 1
                    continue
                if debug:
                    loop._current_handle = handle
                    try:
                        handle._run()
                    finally:
                        loop._current_handle = None
                    t1 = clock()
                    if t1 - t0 >= loop.slow_callback_duration:
                        # Looked up at call time, as the plain turn does.
                        base_events.logger.warning(  # type: ignore[attr-defined]
                            "Executing %s took %.3f seconds", _format_handle(handle), t1 - t0
                        )
                else:
                    handle._run()
                    t1 = clock()
                # Timers never run task steps (tasks are woken with call_soon), so a timer
                # handle needs no look at its callback.
                if per_task and handle.__class__ is not timer_type:
                    # A task's steps are callbacks bound to it (__self__): C tasks use a
                    # wrapper type that always is, remembered in step_types; types with no
                    # __self__ at all (plain functions, partials) are remembered too, to skip
                    # a failing getattr.
                    callback = handle._callback
                    kind = callback.__class__
                    if kind is builtin_method:  # a C task's wakeup, among others
                        owner = callback.__self__
                        if not isinstance(owner, task_type):
                            owner = None
                    elif kind in step_types:
                        owner = callback.__self__
                    elif kind in plain_types:
                        owner = None
                    else:
                        owner = _classify(callback, step_types, plain_types)
                    if owner is not None:
                        # A finished task's figures are dropped; a running task's step is
                        # logged, to be folded into its row later (see _TaskTable).
                        if owner.done():
                            if rows:
                                discard(owner)
                            finished += 1
                        else:
                            # Appends, not a tuple: a tuple holding a task would be one more
                            # object for the garbage collector to track; and the times go
                            # into an array, so no float object is kept alive per step.
                            log_task(owner)
                            log_time(t0)
                            log_time(t1)
                            log_time(t0 - turn_start)
                if t1 - t0 > bar:
                    dt = t1 - t0
                    if dt > longest:
                        longest = dt
                    if dt >= threshold:
                        intro._report_blocking(handle, t0, dt)
                    bar = longest if longest < threshold else threshold
                t0 = t1
            handle = None  # Needed to break cycles when an exception occurs.
            owner = None
            ran = ntodo - skipped
            intro.steps += ran
            intro.tasks_finished += finished
            intro.busy += t0 - turn_start
            intro.interval_steps += ran
            intro.interval_longest = longest
            if t0 - intro.interval_start >= intro.interval:
                intro._roll_interval(t0)
            elif len(table.log) >= LOG_STEPS:
                table.fold()

        return run_once

    def _roll_interval(self, now: float) -> None:
        self.last_rate = self.interval_steps / (now - self.interval_start)
        self.last_longest = self.interval_longest
        self.interval_start = now
        self.interval_steps = 0
        self.interval_longest = 0.0
        self.interval_rolled = True
        self.intervals += 1
        if self.intervals % PRUNE_EVERY_INTERVALS == 0:
            self.prune()  # folds the log first

    # -- blocking steps ------------------------------------------------------------------

    def _watch(self, period: float, stop: threading.Event) -> None:
        """The watchdog thread: sample the loop thread's stack while one step runs long.

        The loop side keeps no per-step state for it. Each period the watchdog finds the
        ``Handle._run`` frame on the loop thread's stack; seeing the same frame object twice
        in a row means one step has run for at least a period, and only then is the stack
        copied (as plain strings). The loop, when a step overruns, uses the latest sample
        taken after the step began.
        """
        previous: FrameType | None = None
        while not stop.wait(period):
            thread_id = getattr(self.loop, "_thread_id", None)
            frame = sys._current_frames().get(thread_id) if thread_id is not None else None
            taken = time.perf_counter()
            run_frame: FrameType | None = frame
            while run_frame is not None and run_frame.f_code is not _RUN_CODE:
                run_frame = run_frame.f_back
            if run_frame is not None and run_frame is previous and frame is not None:
                self.sampled = (taken, _frames_below(frame, run_frame))
            # Holding the frame keeps its identity unique until the next look.
            previous = run_frame
            del frame, run_frame

    def _report_blocking(self, handle: Any, start: float, duration: float) -> None:
        owner = getattr(handle._callback, "__self__", None)
        task = owner if isinstance(owner, asyncio.Task) else None
        sampled = self.sampled
        if sampled is not None and sampled[0] >= start:
            stack = sampled[1]
            was_sampled = True
        else:
            stack = _await_chain(task.get_coro()) if task is not None else []
            was_sampled = False
        location = stack[-1] if stack else repr(handle)
        event = BlockingEvent(
            task=task.get_name() if task is not None else None,
            callback=repr(handle),
            duration_s=duration,
            location=location,
            stack=tuple(stack),
            sampled=was_sampled,
            wall_time=time.time(),
            gc_s=self._gc_time_within(start, start + duration),
        )
        self.blocking_steps += 1
        self.recent_blocking.append(event)
        logger.warning(
            "event loop blocked for %.3f s by %s at %s%s",
            duration,
            f"task {event.task!r}" if event.task is not None else event.callback,
            location,
            f" ({event.gc_s:.3f} s of it in garbage collection)" if event.gc_s else "",
            extra={
                "minidb_event": "runtime.blocked",
                "task": event.task,
                "duration_s": duration,
                "location": location,
                "stack": event.stack,
                "gc_s": event.gc_s,
            },
        )

    # -- reading -------------------------------------------------------------------------

    def statistics(self) -> IntrospectionStatistics:
        rate, longest = self.last_rate, self.last_longest
        if not self.interval_rolled:
            # Young loop, no full interval yet: report the partial one rather than zeros.
            elapsed = time.perf_counter() - self.interval_start
            rate = self.interval_steps / elapsed if elapsed > 0 else 0.0
            longest = self.interval_longest
        return IntrospectionStatistics(
            steps=self.steps,
            io_polls=self.io_polls,
            io_events=self.io_events,
            timers_fired=self.timers_fired,
            busy_s=self.busy,
            blocking_steps=self.blocking_steps,
            tasks_tracked=len(self.tasks),
            tasks_finished=self.tasks_finished,
            steps_per_second=rate,
            longest_step_s=longest,
        )

    def task_figures(self, task: asyncio.Task[Any], now: float) -> dict[str, Any] | None:
        """The counters of ``task``, or None if it has not run since introspection began."""
        row = self.tasks.get(task)
        if row is None:
            return None
        return {
            "polls": int(row[_POLLS]),
            "busy_s": row[_BUSY],
            "scheduled_s": row[_SCHEDULED],
            "since_last_poll_s": now - row[_LAST_POLL],
            "total_s": now - row[_FIRST_POLL],
        }

    def prune(self) -> None:
        """Forget the rows of tasks that finished or were garbage-collected."""
        self.tasks.prune()


def _classify(callback: Any, step_types: set[type], plain_types: set[type]) -> Any:
    """The task whose step ``callback`` is, or None; learns the callback's type on the way."""
    kind = callback.__class__
    owner = getattr(callback, "__self__", plain_types)
    if owner is plain_types:
        plain_types.add(kind)
        return None
    if not isinstance(owner, asyncio.Task):
        return None
    if kind.__name__ == "TaskStepMethWrapper":  # CPython's C task step: always a task's
        step_types.add(kind)
    return owner


# -- locations -------------------------------------------------------------------------------


def _frame_text(filename: str, lineno: int | None, name: str) -> str:
    return f"{filename}:{lineno} in {name}"


def _frames_below(frame: FrameType, stop: FrameType) -> list[str]:
    """The frames from ``frame`` up to (not including) ``stop``, outermost first."""
    out: list[str] = []
    probe: FrameType | None = frame
    while probe is not None and probe is not stop:
        code = probe.f_code
        out.append(_frame_text(code.co_filename, probe.f_lineno, code.co_name))
        probe = probe.f_back
    out.reverse()
    return out


def _await_chain(coro: Any) -> list[str]:
    """Where a suspended coroutine is, outermost first, following what each one awaits."""
    out: list[str] = []
    seen = 0
    while coro is not None and seen < 64:  # a bound in case of a cyclic custom awaitable
        seen += 1
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        out.append(_frame_text(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return out


def _location(chain: list[str]) -> str | None:
    """The innermost frame outside asyncio itself: where the task's own code is waiting."""
    for text in reversed(chain):
        if not text.startswith(_ASYNCIO_DIR + os.sep):
            return text
    return chain[-1] if chain else None


# -- the public functions --------------------------------------------------------------------


def enable_introspection(
    loop: asyncio.AbstractEventLoop | None = None,
    *,
    blocking_threshold: float = DEFAULT_BLOCKING_THRESHOLD_S,
    per_task: bool = True,
) -> Introspector:
    """Switch introspection on for ``loop`` (default: the running loop); return its state.

    ``per_task=False`` keeps the loop-wide figures and blocking detection but no per-task
    counters: the task table then costs nothing, which matters with ~100k short-lived tasks
    (see the README's figures). Only a ``WheelEventLoop`` (or a subclass, such as the paused
    loop) can be instrumented. Switching on twice returns the existing introspector with the
    new threshold.
    """
    target = loop if loop is not None else asyncio.get_running_loop()
    if not isinstance(target, WheelEventLoop):
        raise TypeError(f"introspection needs a WheelEventLoop, not {type(target).__name__}")
    existing = getattr(target, "_introspector", None)
    if isinstance(existing, Introspector):
        if existing.blocking_threshold != blocking_threshold:
            existing.set_threshold(blocking_threshold)
        return existing
    intro = Introspector(target, blocking_threshold, per_task)
    intro.install()
    return intro


def disable_introspection(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Switch introspection off for ``loop``; it goes back to the plain turn."""
    target = loop if loop is not None else asyncio.get_running_loop()
    intro = getattr(target, "_introspector", None)
    if isinstance(intro, Introspector):
        intro.uninstall()


ON_DEMAND_LINGER_S = 60.0
"""``IntrospectionOnDemand`` switches introspection off this long (seconds) after the last read."""


class IntrospectionOnDemand:
    """Introspection switched on by whoever reads the task table, and off again when nobody has
    read it for ``linger_s``.

    For a server that offers its task table (the minidb server's ``/debug/tasks``): the
    instrumented turn runs in Python where the plain one runs in C (``_cio``), which costs a
    request of the minidb server about half again its instructions, so it should be paid only
    while someone (``minidb top``) is looking. ``touch()`` before each read; counters count from
    the first one. Introspection that something else switched on (``MINIDB_INTROSPECTION=1``, a
    call to ``enable_introspection``) is left alone: only what ``touch`` switched on is
    switched off.
    """

    def __init__(self, loop: WheelEventLoop, linger_s: float = ON_DEMAND_LINGER_S) -> None:
        if linger_s <= 0:
            raise ValueError(f"linger_s must be > 0, got {linger_s}")
        self.loop = loop
        self.linger_s = linger_s
        self.switched_on = 0
        """Times ``touch`` found introspection off and switched it on."""
        self._owned = False
        self._expiry: asyncio.TimerHandle | None = None

    def touch(self) -> None:
        """A read of the task table: introspection is on from here until ``linger_s`` after
        the last touch. Call it on the loop's thread."""
        if self.loop._introspector is None:
            enable_introspection(self.loop)
            self._owned = True
            self.switched_on += 1
        if self._owned:
            if self._expiry is not None:
                self._expiry.cancel()
            self._expiry = self.loop.call_later(self.linger_s, self._expire)

    def close(self) -> None:
        """Switch off what ``touch`` switched on, now."""
        if self._expiry is not None:
            self._expiry.cancel()
        self._expire()

    def _expire(self) -> None:
        self._expiry = None
        if self._owned:
            self._owned = False
            disable_introspection(self.loop)


def _task_state(task: asyncio.Task[Any], current: asyncio.Task[Any] | None) -> str:
    if task is current:
        return "running"
    # A task waiting on a future has it in _fut_waiter; one with none is in the ready queue.
    return "idle" if getattr(task, "_fut_waiter", None) is not None else "scheduled"


def snapshot(loop: asyncio.AbstractEventLoop | None = None) -> dict[str, Any]:
    """The loop's tasks and figures as plain data; call it on the loop's thread.

    ``tasks`` is sorted by busy time, busiest first. Durations are seconds. See the README's
    "Introspection" section for the fields.
    """
    target = loop if loop is not None else asyncio.get_running_loop()
    intro = getattr(target, "_introspector", None)
    if not isinstance(intro, Introspector):
        intro = None
    now = time.perf_counter()
    current = asyncio.current_task(target) if target.is_running() else None
    tasks = []
    for task in asyncio.all_tasks(target):
        chain = _await_chain(task.get_coro())
        entry: dict[str, Any] = {
            "id": id(task),
            "name": task.get_name(),
            "state": _task_state(task, current),
            "location": _location(chain),
            "stack": chain,
        }
        figures = intro.task_figures(task, now) if intro is not None else None
        entry.update(
            figures
            or {
                "polls": None,
                "busy_s": None,
                "scheduled_s": None,
                "since_last_poll_s": None,
                "total_s": None,
            }
        )
        tasks.append(entry)
    tasks.sort(key=lambda t: (-(t["busy_s"] or 0.0), t["name"]))

    loop_figures: dict[str, Any] = {
        "class": f"{type(target).__module__}.{type(target).__qualname__}",
        "time": target.time(),
        "ready": len(getattr(target, "_ready", ())),
        "tasks": len(tasks),
    }
    timer_statistics = getattr(target, "timer_statistics", None)
    if timer_statistics is not None:
        wheel = timer_statistics()
        loop_figures["timers"] = {
            "entries": wheel.entries,
            "pending": wheel.pending,
            "per_level": list(wheel.per_level),
        }
    blocking: list[dict[str, Any]] = []
    if intro is not None:
        intro.prune()
        stats = intro.statistics()
        loop_figures.update(
            steps=stats.steps,
            steps_per_second=stats.steps_per_second,
            io_polls=stats.io_polls,
            io_events=stats.io_events,
            timers_fired=stats.timers_fired,
            busy_s=stats.busy_s,
            longest_step_s=stats.longest_step_s,
            interval_s=intro.interval,
            blocking_steps=stats.blocking_steps,
            blocking_threshold_s=intro.blocking_threshold,
            per_task=intro.per_task,
            tasks_finished=stats.tasks_finished,
        )
        blocking = [
            {
                "task": e.task,
                "callback": e.callback,
                "duration_s": e.duration_s,
                "location": e.location,
                "stack": list(e.stack),
                "sampled": e.sampled,
                "gc_s": e.gc_s,
                "wall_time": e.wall_time,
            }
            for e in intro.recent_blocking
        ]
    return {
        "version": SNAPSHOT_VERSION,
        "pid": os.getpid(),
        "wall_time": time.time(),
        "introspection": intro is not None,
        "loop": loop_figures,
        "tasks": tasks,
        "blocking": blocking,
    }


def snapshot_json(loop: asyncio.AbstractEventLoop | None = None) -> bytes:
    """``snapshot()`` as UTF-8 JSON, ready to serve (e.g. at ``GET /debug/tasks``)."""
    return json.dumps(snapshot(loop), separators=(",", ":")).encode() + b"\n"
