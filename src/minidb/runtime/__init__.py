"""minidb.runtime: Tokio's timer ideas in asyncio.

- ``TimerWheel``: a hierarchical timer wheel (6 levels x 64 slots, O(1) insert/cancel/reset),
  a pure data structure. The loop runs on its C twin when that was built (``ACCELERATED``;
  ``MINIDB_PURE_PYTHON=1`` forces the pure one).
- ``WheelEventLoop``: a drop-in asyncio event loop whose timers live on the wheel, with
  ``loop.reschedule(handle, when)`` to move an armed timer in place.
- ``timeout()`` / ``timeout_at()``: ``asyncio.timeout`` whose ``reschedule()`` uses it.
- ``enable_introspection()``, ``snapshot()``, ``snapshot_json()``: per-task polls, busy and
  scheduled time, blocking-step detection, loop-wide figures (``_introspection.py``);
  ``IntrospectionOnDemand``, switched on by the reads of the task table and off when they stop.
- ``minidb.runtime.testing``: the paused-clock loop for tests, and a pytest plugin.
- ``tune_for_throughput()``: the garbage collector set for a process that allocates per
  request (``_collector.py``): what ``minidb serve`` and the batch worker call at start.
- ``run()``, ``new_event_loop()``, ``EventLoopPolicy``: ways to switch a program over::

      minidb.runtime.run(main())                                       # like asyncio.run
      asyncio.run(main(), loop_factory=minidb.runtime.new_event_loop)  # 3.12+
      with asyncio.Runner(loop_factory=minidb.runtime.new_event_loop) as r: r.run(main())

This package imports nothing else of minidb, so any asyncio program can use it alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from minidb.runtime._accel import ACCELERATED
from minidb.runtime._collector import tune_for_throughput
from minidb.runtime._introspection import (
    DEFAULT_BLOCKING_THRESHOLD_S,
    ON_DEMAND_LINGER_S,
    BlockingEvent,
    IntrospectionOnDemand,
    IntrospectionStatistics,
    disable_introspection,
    enable_introspection,
    snapshot,
    snapshot_json,
)
from minidb.runtime._loop import (
    INTROSPECTION_ENV,
    EventLoopPolicy,
    WheelEventLoop,
    WheelTimerHandle,
    new_event_loop,
)
from minidb.runtime._timeout import Timeout, timeout, timeout_at
from minidb.runtime._wheel import TimerWheel, WheelEntry, WheelStatistics

__all__ = [
    "ACCELERATED",
    "DEFAULT_BLOCKING_THRESHOLD_S",
    "INTROSPECTION_ENV",
    "ON_DEMAND_LINGER_S",
    "BlockingEvent",
    "EventLoopPolicy",
    "IntrospectionOnDemand",
    "IntrospectionStatistics",
    "Timeout",
    "TimerWheel",
    "WheelEntry",
    "WheelEventLoop",
    "WheelStatistics",
    "WheelTimerHandle",
    "disable_introspection",
    "enable_introspection",
    "new_event_loop",
    "run",
    "snapshot",
    "snapshot_json",
    "timeout",
    "timeout_at",
    "tune_for_throughput",
]

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """Run ``main`` on a new ``WheelEventLoop`` and close it, like ``asyncio.run``."""
    with asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
        return runner.run(main)
