"""One cell of the timer benchmark: build one loop, run one workload once, report as JSON.

``bench/timers.py`` runs this module in a fresh interpreter per cell (``python
bench/_timer_workloads.py '<cell as JSON>'``) so that peak RSS belongs to the cell alone and no
heap or allocator state leaks between loops. This module owns what each workload does and
which phases are timed; the driver owns planning, medians, ratios and the report. Workloads
use public asyncio APIs only (plus minidb's public API for the rows that exist only on our
loop); each checks its own outcome (every timer fired, no cancelled or idle deadline fired)
so a broken loop fails loudly instead of producing a fast number.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import os
import random
import resource
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

# Parameters follow the research's timer_bench design, so figures are comparable with it.
FIRE_MIN_DELAY_S = 0.001  # shortest fire/sleep delay: at least one wheel tick
FIRE_SPREAD_S = 0.250  # fire/sleep delays span 250 ms, exercising wheel levels 0 and 1
DUE_MARGIN_S = 0.005  # extra blocking sleep so every timer is due even after tick rounding
CANCEL_MIN_DELAY_S = 30.0  # cancel workload: deadlines 30-60 s ahead, like request timeouts
CANCEL_SPREAD_S = 30.0
IDLE_TIMEOUT_S = 30.0  # reset workloads: per-connection idle timeout ...
IDLE_JITTER = 0.10  # ... +-10%, so deadlines do not all share one slot
DRAIN_TURNS = 2  # loop turns after cancelling: stock rebuilds its heap, uvloop frees handles

LOOPS = ("asyncio", "uvloop", "minidb")
WORKLOADS = (
    "fire",
    "cancel",
    "reset-timeout",
    "reset-minidb-timeout",
    "reset-native",
    "reset-handle",
    "sleep",
)


@dataclasses.dataclass(frozen=True)
class Cell:
    """One measurement: a workload at size n on one loop, with the seed of its repetition."""

    loop: str
    workload: str
    n: int
    resets: int
    seed: int
    gc_enabled: bool


class Unsupported(Exception):
    """The loop under test lacks the API a workload needs (e.g. the placeholder loop)."""


def _rss_bytes() -> int:
    """Current resident set size of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _new_loop(name: str) -> asyncio.AbstractEventLoop:
    if name == "asyncio":
        return asyncio.SelectorEventLoop()
    if name == "uvloop":
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        return loop
    if name == "minidb":
        import minidb.runtime

        return minidb.runtime.new_event_loop()
    raise ValueError(f"unknown loop {name!r}")


def _one_turn(loop: asyncio.AbstractEventLoop) -> None:
    """Run exactly one loop iteration: stop() queued behind what is ready ends it."""
    loop.call_soon(loop.stop)
    loop.run_forever()


def _wait_until_due(loop: asyncio.AbstractEventLoop, latest: float) -> None:
    """Block the thread (not the loop) until loop time `latest` has passed, plus a margin."""
    remaining = latest - loop.time() + DUE_MARGIN_S
    if remaining > 0:
        time.sleep(remaining)


def _fire(loop: asyncio.AbstractEventLoop, cell: Cell) -> dict[str, Any]:
    rng = random.Random(cell.seed)
    delays = [FIRE_MIN_DELAY_S + rng.random() * FIRE_SPREAD_S for _ in range(cell.n)]
    n = cell.n
    fired = 0

    def on_fire() -> None:
        nonlocal fired
        fired += 1
        if fired == n:
            loop.stop()

    gc.collect()
    call_later = loop.call_later
    t0 = time.perf_counter()
    for delay in delays:
        call_later(delay, on_fire)
    t1 = time.perf_counter()
    _wait_until_due(loop, loop.time() + FIRE_MIN_DELAY_S + FIRE_SPREAD_S)
    t2 = time.perf_counter()
    loop.run_forever()
    t3 = time.perf_counter()
    if fired != n:
        raise AssertionError(f"fired {fired} of {n} timers")
    return {"seconds": (t1 - t0) + (t3 - t2), "phases": {"schedule": t1 - t0, "fire": t3 - t2}}


def _cancel(loop: asyncio.AbstractEventLoop, cell: Cell) -> dict[str, Any]:
    # RSS is read before the workload's own data exists and after all of it is dropped, so
    # "memory back" compares like with like: only what the loop still holds can differ.
    gc.collect()
    rss_start = _rss_bytes()
    rng = random.Random(cell.seed)
    offsets = [CANCEL_MIN_DELAY_S + rng.random() * CANCEL_SPREAD_S for _ in range(cell.n)]
    order = list(range(cell.n))
    rng.shuffle(order)
    fired = 0

    def on_fire() -> None:
        nonlocal fired
        fired += 1

    gc.collect()
    call_at = loop.call_at
    t0 = time.perf_counter()
    now = loop.time()
    handles = [call_at(now + offset, on_fire) for offset in offsets]
    t1 = time.perf_counter()
    rss_scheduled = _rss_bytes()
    for i in order:
        handles[i].cancel()
    t2 = time.perf_counter()
    for _ in range(DRAIN_TURNS):
        _one_turn(loop)
    t3 = time.perf_counter()
    del handles, offsets, order
    gc.collect()
    rss_after = _rss_bytes()
    if fired:
        raise AssertionError(f"{fired} cancelled timers fired")
    return {
        "seconds": t3 - t0,
        "phases": {"schedule": t1 - t0, "cancel": t2 - t1, "drain": t3 - t2},
        "rss_start_bytes": rss_start,
        "rss_scheduled_bytes": rss_scheduled,
        "rss_after_cancel_bytes": rss_after,
    }


# A set of N idle deadlines: arm() makes them, move(i, when) pushes deadline i out to `when`,
# disarm() releases them and returns how many had expired. Only move() is timed.
Deadlines = tuple[
    Callable[[], Awaitable[None]], Callable[[int, float], None], Callable[[], Awaitable[int]]
]


def _scope_deadlines(make_timeout: Callable[[float], Any], idles: list[float]) -> Deadlines:
    """Deadlines held by `asyncio.timeout`-style scopes, moved with ``reschedule()``."""
    scopes: list[Any] = []

    async def arm() -> None:
        # One task holds all N scopes, as nested `async with` blocks would, so the figure is
        # the deadline machinery's and not N tasks' worth of scheduling.
        for idle in idles:
            scope = make_timeout(idle)
            await scope.__aenter__()
            scopes.append(scope)

    def move(i: int, when: float) -> None:
        scopes[i].reschedule(when)

    async def disarm() -> int:
        expired = sum(1 for scope in scopes if scope.expired())
        for scope in reversed(scopes):
            await scope.__aexit__(None, None, None)
        scopes.clear()
        return expired

    return arm, move, disarm


def _handle_deadlines(
    loop: asyncio.AbstractEventLoop, idles: list[float], native: bool
) -> Deadlines:
    """Deadlines held as bare timer handles, moved in place (native) or by cancel + call_at."""
    handles: list[asyncio.TimerHandle] = []
    expired = 0

    def on_expire() -> None:
        nonlocal expired
        expired += 1

    async def arm() -> None:
        now = loop.time()
        handles.extend(loop.call_at(now + idle, on_expire) for idle in idles)

    async def disarm() -> int:
        for handle in handles:
            handle.cancel()
        handles.clear()
        return expired

    call_at = loop.call_at
    reschedule: Callable[[asyncio.TimerHandle, float], bool] | None
    reschedule = getattr(loop, "reschedule", None)
    if native and reschedule is None:
        raise Unsupported(f"{type(loop).__name__} has no reschedule()")

    def move_in_place(i: int, when: float) -> None:
        assert reschedule is not None
        if not reschedule(handles[i], when):
            raise AssertionError(f"deadline {i} was no longer armed")

    def move_by_cancel(i: int, when: float) -> None:
        handles[i].cancel()
        handles[i] = call_at(when, on_expire)

    return arm, move_in_place if native else move_by_cancel, disarm


def _reset(loop: asyncio.AbstractEventLoop, cell: Cell) -> dict[str, Any]:
    """N idle deadlines, each pushed out M times; the workload decides how they are held."""
    rng = random.Random(cell.seed)
    idles = [IDLE_TIMEOUT_S * (1 + IDLE_JITTER * (2 * rng.random() - 1)) for _ in range(cell.n)]
    order = list(range(cell.n))
    if cell.workload == "reset-timeout":
        deadlines = _scope_deadlines(asyncio.timeout, idles)
    elif cell.workload == "reset-minidb-timeout":
        import minidb.runtime

        make_timeout = getattr(minidb.runtime, "timeout", None)
        if make_timeout is None:
            raise Unsupported("minidb.runtime.timeout does not exist")
        deadlines = _scope_deadlines(make_timeout, idles)
    else:
        deadlines = _handle_deadlines(loop, idles, native=cell.workload == "reset-native")
    arm, move, disarm = deadlines

    async def drive() -> tuple[dict[str, float], int]:
        clock = loop.time
        t0 = time.perf_counter()
        await arm()
        t1 = time.perf_counter()
        resets = 0.0
        for _ in range(cell.resets):
            rng.shuffle(order)  # a fresh order per round, outside the timed region
            r0 = time.perf_counter()
            for i in order:
                move(i, clock() + idles[i])
            await asyncio.sleep(0)  # one loop turn per round, as a server would get
            resets += time.perf_counter() - r0
        t2 = time.perf_counter()
        expired = await disarm()
        t3 = time.perf_counter()
        return {"setup": t1 - t0, "resets": resets, "teardown": t3 - t2}, expired

    gc.collect()
    phases, expired = loop.run_until_complete(drive())
    if expired:
        raise AssertionError(f"{expired} idle deadlines expired; none should")
    return {"seconds": phases["resets"], "phases": phases}


def _sleep(loop: asyncio.AbstractEventLoop, cell: Cell) -> dict[str, Any]:
    rng = random.Random(cell.seed)
    delays = [FIRE_MIN_DELAY_S + rng.random() * FIRE_SPREAD_S for _ in range(cell.n)]
    n = cell.n
    done = 0

    async def sleeper(delay: float) -> None:
        nonlocal done
        await asyncio.sleep(delay)
        done += 1
        if done == n:
            loop.stop()

    gc.collect()
    t0 = time.perf_counter()
    tasks = [loop.create_task(sleeper(delay)) for delay in delays]
    _one_turn(loop)  # every task runs to its first await and arms its timer
    t1 = time.perf_counter()
    _wait_until_due(loop, loop.time() + FIRE_MIN_DELAY_S + FIRE_SPREAD_S)
    t2 = time.perf_counter()
    loop.run_forever()
    t3 = time.perf_counter()
    if done != n or not all(task.done() for task in tasks):
        raise AssertionError(f"{done} of {n} sleepers finished")
    return {"seconds": (t1 - t0) + (t3 - t2), "phases": {"start": t1 - t0, "wake": t3 - t2}}


RUNNERS: dict[str, Callable[[asyncio.AbstractEventLoop, Cell], dict[str, Any]]] = {
    "fire": _fire,
    "cancel": _cancel,
    "reset-timeout": _reset,
    "reset-minidb-timeout": _reset,
    "reset-native": _reset,
    "reset-handle": _reset,
    "sleep": _sleep,
}


def run_cell(cell: Cell) -> dict[str, Any]:
    """Measure one cell in this process and return its result (what the child prints)."""
    if not cell.gc_enabled:
        gc.disable()
    loop = _new_loop(cell.loop)
    result: dict[str, Any] = {"loop_class": f"{type(loop).__module__}.{type(loop).__qualname__}"}
    try:
        asyncio.set_event_loop(loop)
        result.update(RUNNERS[cell.workload](loop, cell))
    except Unsupported as exc:
        result["unsupported"] = str(exc)
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    result["peak_rss_bytes"] = _peak_rss_bytes()
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"usage: {sys.argv[0]} '<cell as JSON>'", file=sys.stderr)
        return 2
    print(json.dumps(run_cell(Cell(**json.loads(argv[0])))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
