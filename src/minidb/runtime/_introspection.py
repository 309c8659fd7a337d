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
import json
import logging
import os
import sys
import threading
import time
import traceback
import weakref
from asyncio import events
from asyncio.log import logger as asyncio_logger
from collections import deque
from dataclasses import dataclass
from typing import Any

from minidb.runtime._loop import WheelEventLoop, _format_handle

__all__ = [
    "DEFAULT_BLOCKING_THRESHOLD_S",
    "BlockingEvent",
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


class _TaskRecord:
    """What introspection knows of one task; keyed by ``id(task)``, checked by weak reference."""

    __slots__ = ("busy", "first_poll", "last_poll", "polls", "ref", "scheduled")

    def __init__(self, task: asyncio.Task[Any], now: float) -> None:
        self.ref = weakref.ref(task)
        self.polls = 0
        self.busy = 0.0
        self.scheduled = 0.0
        self.first_poll = now
        self.last_poll = now


class Introspector:
    """The instrumented turn of one loop, its counters, and its watchdog thread."""

    def __init__(self, loop: WheelEventLoop, blocking_threshold: float) -> None:
        if blocking_threshold <= 0:
            raise ValueError(f"blocking_threshold must be > 0, got {blocking_threshold}")
        self.loop = loop
        self.blocking_threshold = blocking_threshold
        self.records: dict[int, _TaskRecord] = {}
        self.steps = 0
        self.io_polls = 0
        self.io_events = 0
        self.timers_fired = 0
        self.busy = 0.0
        self.blocking_steps = 0
        self.tasks_finished = 0
        self.recent_blocking: deque[BlockingEvent] = deque(maxlen=RECENT_BLOCKING_EVENTS)
        # The step now running as (handle, start), read by the watchdog; None between steps.
        self.current: tuple[events.Handle, float] | None = None
        # The watchdog's sample of an overrunning step: (handle, stack frames).
        self.sampled: tuple[events.Handle, traceback.StackSummary] | None = None
        now = time.perf_counter()
        self.interval_start = now
        self.interval_steps = 0
        self.interval_longest = 0.0
        self.last_rate = 0.0
        self.last_longest = 0.0
        self.interval_rolled = False
        self.interval = INTERVAL_S
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None

    # -- switching -----------------------------------------------------------------------

    def install(self) -> None:
        # An instance attribute shadows the class's _run_once: run_forever picks it up with
        # no check in the plain path.
        self.loop._run_once = self._make_run_once()  # type: ignore[method-assign]
        self.loop._introspector = self
        period = max(
            self.blocking_threshold / WATCHDOG_PERIODS_PER_THRESHOLD, WATCHDOG_MIN_PERIOD_S
        )
        self._watchdog = threading.Thread(
            target=self._watch, args=(period,), name="minidb-runtime-watchdog", daemon=True
        )
        self._watchdog.start()

    def uninstall(self) -> None:
        self.loop.__dict__.pop("_run_once", None)
        self.loop._introspector = None
        self._stop.set()
        if self._watchdog is not None and self._watchdog is not threading.current_thread():
            self._watchdog.join()
        self._watchdog = None

    # -- the instrumented turn -----------------------------------------------------------

    def _make_run_once(self) -> Any:
        loop = self.loop
        records = self.records
        clock = time.perf_counter
        task_type = asyncio.Task
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
            turn_start = t0 = clock()
            threshold = intro.blocking_threshold
            longest = intro.interval_longest
            ran = 0
            for _ in range(ntodo):
                handle = ready.popleft()
                if handle._cancelled:
                    continue
                intro.current = (handle, t0)
                if loop._debug:
                    loop._current_handle = handle
                    try:
                        handle._run()
                    finally:
                        loop._current_handle = None
                    t1 = clock()
                    dt = t1 - t0
                    if dt >= loop.slow_callback_duration:
                        asyncio_logger.warning(
                            "Executing %s took %.3f seconds", _format_handle(handle), dt
                        )
                else:
                    handle._run()
                    t1 = clock()
                    dt = t1 - t0
                ran += 1
                owner = getattr(handle._callback, "__self__", None)
                if owner is not None and isinstance(owner, task_type):
                    record = records.get(id(owner))
                    if record is None or record.ref() is not owner:
                        record = records[id(owner)] = _TaskRecord(owner, t0)
                    record.polls += 1
                    record.busy += dt
                    record.scheduled += t0 - turn_start
                    record.last_poll = t1
                    if owner.done():
                        del records[id(owner)]
                        intro.tasks_finished += 1
                else:
                    owner = None
                if dt > longest:
                    longest = dt
                if dt >= threshold:
                    intro._report_blocking(handle, owner, dt)
                t0 = t1
            intro.current = None
            handle = None  # Needed to break cycles when an exception occurs.
            owner = None
            intro.steps += ran
            intro.busy += t0 - turn_start
            intro.interval_steps += ran
            intro.interval_longest = longest
            if t0 - intro.interval_start >= intro.interval:
                intro._roll_interval(t0)

        return run_once

    def _roll_interval(self, now: float) -> None:
        self.last_rate = self.interval_steps / (now - self.interval_start)
        self.last_longest = self.interval_longest
        self.interval_start = now
        self.interval_steps = 0
        self.interval_longest = 0.0
        self.interval_rolled = True

    # -- blocking steps ------------------------------------------------------------------

    def _watch(self, period: float) -> None:
        """The watchdog thread: sample the loop thread's stack while a step overruns."""
        while not self._stop.wait(period):
            current = self.current
            if current is None or self.loop.is_closed():
                continue
            handle, started = current
            sampled = self.sampled
            if sampled is not None and sampled[0] is handle:
                continue
            if time.perf_counter() - started < self.blocking_threshold:
                continue
            thread_id = getattr(self.loop, "_thread_id", None)
            frame = sys._current_frames().get(thread_id) if thread_id is not None else None
            if frame is None or self.current is not current:
                continue
            self.sampled = (handle, traceback.extract_stack(frame))

    def _report_blocking(
        self, handle: events.Handle, task: asyncio.Task[Any] | None, duration: float
    ) -> None:
        sampled = self.sampled
        self.sampled = None
        if sampled is not None and sampled[0] is handle:
            stack = _inside_step(sampled[1])
            location = stack[-1] if stack else repr(handle)
            was_sampled = True
        else:
            stack = _await_chain(task.get_coro()) if task is not None else []
            location = stack[-1] if stack else repr(handle)
            was_sampled = False
        event = BlockingEvent(
            task=task.get_name() if task is not None else None,
            callback=repr(handle),
            duration_s=duration,
            location=location,
            stack=tuple(stack),
            sampled=was_sampled,
            wall_time=time.time(),
        )
        self.blocking_steps += 1
        self.recent_blocking.append(event)
        logger.warning(
            "event loop blocked for %.3f s by %s at %s",
            duration,
            f"task {event.task!r}" if event.task is not None else event.callback,
            location,
            extra={
                "minidb_event": "runtime.blocked",
                "task": event.task,
                "duration_s": duration,
                "location": location,
                "stack": event.stack,
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
            tasks_tracked=len(self.records),
            tasks_finished=self.tasks_finished,
            steps_per_second=rate,
            longest_step_s=longest,
        )

    def task_figures(self, task: asyncio.Task[Any], now: float) -> dict[str, Any] | None:
        """The counters of ``task``, or None if it has not run since introspection began."""
        record = self.records.get(id(task))
        if record is None or record.ref() is not task:
            return None
        return {
            "polls": record.polls,
            "busy_s": record.busy,
            "scheduled_s": record.scheduled,
            "since_last_poll_s": now - record.last_poll,
            "total_s": now - record.first_poll,
        }

    def prune(self) -> None:
        """Forget records of tasks that were garbage-collected without finishing."""
        dead = [key for key, record in self.records.items() if record.ref() is None]
        for key in dead:
            del self.records[key]


# -- locations -------------------------------------------------------------------------------


def _frame_text(filename: str, lineno: int | None, name: str) -> str:
    return f"{filename}:{lineno} in {name}"


def _inside_step(stack: traceback.StackSummary) -> list[str]:
    """The frames of a sampled stack below ``Handle._run``, i.e. the step's own frames."""
    start = 0
    for i, frame in enumerate(stack):
        if frame.name == _RUN_CODE.co_name and frame.filename == _RUN_CODE.co_filename:
            start = i + 1
    return [_frame_text(f.filename, f.lineno, f.name) for f in stack[start:]]


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
) -> Introspector:
    """Switch introspection on for ``loop`` (default: the running loop); return its state.

    Only a ``WheelEventLoop`` (or a subclass, such as the paused loop) can be instrumented.
    Switching on twice returns the existing introspector with the new threshold.
    """
    target = loop if loop is not None else asyncio.get_running_loop()
    if not isinstance(target, WheelEventLoop):
        raise TypeError(f"introspection needs a WheelEventLoop, not {type(target).__name__}")
    existing = getattr(target, "_introspector", None)
    if isinstance(existing, Introspector):
        existing.blocking_threshold = blocking_threshold
        return existing
    intro = Introspector(target, blocking_threshold)
    intro.install()
    return intro


def disable_introspection(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Switch introspection off for ``loop``; it goes back to the plain turn."""
    target = loop if loop is not None else asyncio.get_running_loop()
    intro = getattr(target, "_introspector", None)
    if isinstance(intro, Introspector):
        intro.uninstall()


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
