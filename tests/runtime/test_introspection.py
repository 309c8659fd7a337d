"""Introspection: per-task polls and busy time, blocking steps, loop figures, snapshot, on/off."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import threading
import time
import weakref
from typing import Any

import pytest

import minidb.runtime as rt
from minidb.runtime._introspection import Introspector
from minidb.runtime._wheel import NUM_LEVELS, SLOT_BITS
from minidb.runtime.testing import PausedEventLoop, new_paused_loop

BLOCK_S = 0.3
"""How long the blocking test's step holds the loop (three times the default threshold)."""

STEP_WORK_S = 0.02
"""Busy time each step of the counting test spends (a real time.sleep inside the step)."""

SLACK_S = 0.25
"""Upper margin on busy times measured on a shared, loaded machine."""


def _line_of(marker: str, source: Any) -> int:
    """The line number of the line containing `marker` in `source`'s file."""
    import inspect

    lines, start = inspect.getsourcelines(source)
    return start + next(i for i, line in enumerate(lines) if marker in line)


async def _blocker() -> None:
    await asyncio.sleep(0)
    time.sleep(BLOCK_S)  # BLOCKING-LINE
    await asyncio.sleep(0)


def test_introspection_reports_a_blocking_step_once_with_name_and_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A coroutine calling time.sleep(0.3) is logged once as blocking, with its name and line."""
    loop = rt.new_event_loop()
    intro = rt.enable_introspection(loop)

    async def main() -> None:
        await asyncio.create_task(_blocker(), name="blocker")

    with caplog.at_level(logging.WARNING, logger="minidb.runtime"):
        loop.run_until_complete(main())
    snap = rt.snapshot(loop)
    loop.close()
    records = [r for r in caplog.records if getattr(r, "minidb_event", None) == "runtime.blocked"]
    assert len(records) == 1
    record: Any = records[0]
    line = _line_of("BLOCKING-LINE", _blocker)
    assert record.task == "blocker"
    assert record.location.endswith(f"test_introspection.py:{line} in _blocker")
    assert BLOCK_S <= record.duration_s < BLOCK_S + SLACK_S
    assert "blocker" in record.getMessage()
    assert intro.statistics().blocking_steps == 1
    assert snap["loop"]["blocking_steps"] == 1
    (event,) = snap["blocking"]
    assert event["task"] == "blocker" and event["sampled"] is True
    assert event["stack"][-1] == record.location


def test_introspection_reports_a_blocking_plain_callback() -> None:
    """A plain callback over the threshold is counted and named by its handle."""
    loop = rt.new_event_loop()
    intro = rt.enable_introspection(loop, blocking_threshold=0.02)

    def slow() -> None:
        time.sleep(0.05)

    loop.call_soon(slow)
    loop.run_until_complete(asyncio.sleep(0))
    events = list(intro.recent_blocking)
    loop.close()
    assert len(events) == 1
    assert events[0].task is None and "slow" in events[0].callback


def test_introspection_counts_polls_and_busy_time_of_known_awaits() -> None:
    """A task with five awaits is polled six times and is busy for its six steps of work."""
    loop = rt.new_event_loop()
    rt.enable_introspection(loop, blocking_threshold=10)
    figures: dict[str, Any] = {}

    async def worker() -> None:
        for i in range(5):
            time.sleep(STEP_WORK_S)
            await (asyncio.sleep(0) if i % 2 else asyncio.sleep(0.001))
        time.sleep(STEP_WORK_S)
        figures.update(next(t for t in rt.snapshot()["tasks"] if t["name"] == "worker"))

    async def main() -> None:
        await asyncio.create_task(worker(), name="worker")

    loop.run_until_complete(main())
    loop.close()
    # The snapshot is taken inside the sixth step, before it is counted.
    assert figures["polls"] == 5
    assert figures["state"] == "running"
    assert 5 * STEP_WORK_S <= figures["busy_s"] < 5 * STEP_WORK_S + SLACK_S
    assert figures["scheduled_s"] >= 0 and figures["total_s"] >= figures["busy_s"]


def test_introspection_final_counts_after_the_task_ends() -> None:
    """Finished tasks leave the table and are counted as finished; polls match awaits + 1."""
    loop = rt.new_event_loop()
    intro = rt.enable_introspection(loop)
    polls: list[int] = []

    async def worker() -> None:
        for _ in range(3):
            await asyncio.sleep(0)

    async def main() -> None:
        task = asyncio.create_task(worker(), name="worker")
        await asyncio.sleep(0)
        for _ in range(3):
            polls.append(intro.task_figures(task, time.perf_counter())["polls"])  # type: ignore[index]
            await asyncio.sleep(0)
        await task

    loop.run_until_complete(main())
    stats = intro.statistics()
    loop.close()
    assert polls == [1, 2, 3]
    assert stats.tasks_finished >= 1
    assert stats.tasks_tracked == 0


def test_introspection_states_and_locations() -> None:
    """Snapshot states: the caller is running, a waiter idle at its line, a fresh task scheduled."""
    loop = rt.new_event_loop()
    rt.enable_introspection(loop)
    event = asyncio.Event()

    async def waiter() -> None:
        await event.wait()  # WAITER-LINE

    async def main() -> dict[str, Any]:
        w = asyncio.create_task(waiter(), name="waiter")
        await asyncio.sleep(0)
        fresh = asyncio.create_task(asyncio.sleep(0), name="fresh")
        snap = rt.snapshot()
        event.set()
        await asyncio.gather(w, fresh)
        return snap

    snap = loop.run_until_complete(main())
    loop.close()
    by_name = {t["name"]: t for t in snap["tasks"]}
    assert by_name["waiter"]["state"] == "idle"
    assert by_name["waiter"]["location"].endswith(f":{_line_of('WAITER-LINE', waiter)} in waiter")
    assert by_name["fresh"]["state"] == "scheduled"
    assert by_name["fresh"]["polls"] is None  # never run yet
    running = [t for t in snap["tasks"] if t["state"] == "running"]
    assert len(running) == 1


def test_introspection_loop_figures() -> None:
    """Loop figures: ready depth, timers per wheel level, steps, I/O polls, rate, longest step."""
    loop = rt.new_event_loop()
    intro = rt.enable_introspection(loop)
    intro.interval = 3600.0  # one interval, still open: its figures are the partial ones

    async def main() -> dict[str, Any]:
        handles = [loop.call_later(d, lambda: None) for d in (0.01, 0.02, 10, 1000)]
        for _ in range(3):
            loop.call_soon(lambda: None)
        await asyncio.sleep(0.03)
        time.sleep(0.005)
        await asyncio.sleep(0.02)
        snap = rt.snapshot()
        # Which level a timer sits at depends on the clock's reading, not only on its delay
        # (the wheel files by the highest bit in which now and the deadline differ): the
        # figures must agree with where the wheel put the two that are left.
        levels_of_live = [h._wheel_where >> SLOT_BITS for h in handles if h._scheduled]
        for h in handles:
            h.cancel()
        return snap | {"levels_of_live": levels_of_live}

    snap = loop.run_until_complete(main())
    loop.close()
    figures = snap["loop"]
    assert figures["timers"]["entries"] == 2
    expected_per_level = [snap["levels_of_live"].count(level) for level in range(NUM_LEVELS)]
    assert list(figures["timers"]["per_level"]) == expected_per_level
    assert all(level >= 2 for level in snap["levels_of_live"])  # 10 s and 1000 s: past level 1
    assert figures["steps"] >= 6 and figures["io_polls"] >= 3 and figures["timers_fired"] >= 3
    assert figures["steps_per_second"] > 0
    assert figures["longest_step_s"] >= 0.005
    assert figures["ready"] == 0
    assert snap["introspection"] is True


def test_introspection_costs_nothing_when_off() -> None:
    """Off, the loop runs its class's plain turn; on and off again, it goes back to it."""
    loop = rt.new_event_loop()
    assert "_run_once" not in vars(loop)
    intro = rt.enable_introspection(loop)
    assert "_run_once" in vars(loop)
    assert rt.enable_introspection(loop) is intro
    rt.disable_introspection(loop)
    assert "_run_once" not in vars(loop)
    loop.run_until_complete(asyncio.sleep(0.001))
    loop.close()


def test_introspection_watchdog_thread_stops_on_close() -> None:
    """Closing an introspected loop stops its watchdog thread."""
    loop = rt.new_event_loop()
    rt.enable_introspection(loop)
    assert any(t.name == "minidb-runtime-watchdog" for t in threading.enumerate())
    loop.close()
    assert loop._introspector is None
    assert not any(t.name == "minidb-runtime-watchdog" for t in threading.enumerate())


def test_introspection_switched_on_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """MINIDB_INTROSPECTION=1 switches introspection on in every new wheel loop."""
    monkeypatch.setenv(rt.INTROSPECTION_ENV, "1")
    loop = rt.new_event_loop()
    assert isinstance(loop._introspector, Introspector)
    loop.close()
    monkeypatch.setenv(rt.INTROSPECTION_ENV, "0")
    loop = rt.new_event_loop()
    assert loop._introspector is None
    loop.close()


def test_introspection_snapshot_on_a_stock_loop() -> None:
    """On a stock asyncio loop snapshot() still lists tasks, with no counters."""

    async def main() -> bytes:
        sleeper = asyncio.create_task(asyncio.sleep(1), name="sleeper")
        await asyncio.sleep(0)
        body = rt.snapshot_json()
        sleeper.cancel()
        return body

    data = json.loads(asyncio.run(main()))
    assert data["introspection"] is False
    sleeper = next(t for t in data["tasks"] if t["name"] == "sleeper")
    assert sleeper["state"] == "idle" and sleeper["polls"] is None
    assert "timers" not in data["loop"]
    with pytest.raises(TypeError):
        rt.enable_introspection(asyncio.new_event_loop())


def test_introspection_works_on_the_paused_loop() -> None:
    """The paused loop can be introspected: busy time is real, blocking detection too."""
    loop = new_paused_loop()
    assert isinstance(loop, PausedEventLoop)
    intro = rt.enable_introspection(loop, blocking_threshold=0.02)

    async def main() -> None:
        await asyncio.sleep(60)
        time.sleep(0.04)
        await asyncio.sleep(60)

    loop.run_until_complete(main())
    stats = intro.statistics()
    loop.close()
    assert loop.time() == 120.0
    assert stats.blocking_steps == 1
    assert stats.busy_s >= 0.04


def test_introspection_snapshot_json_is_plain_json() -> None:
    """snapshot_json() is UTF-8 JSON of snapshot(), one line, newline-terminated."""

    async def main() -> tuple[bytes, dict[str, Any]]:
        rt.enable_introspection()
        return rt.snapshot_json(), rt.snapshot()

    body, snap = rt.run(main())
    assert body.endswith(b"\n") and body.count(b"\n") == 1
    decoded = json.loads(body)
    assert decoded["version"] == snap["version"] == 1
    assert set(decoded) == {
        "version", "pid", "wall_time", "introspection", "loop", "tasks", "blocking"
    }


def test_introspection_blocking_step_reports_its_garbage_collection() -> None:
    """A step that is slow because of a full garbage collection says how much of it was GC."""
    loop = rt.new_event_loop()
    intro = rt.enable_introspection(loop, blocking_threshold=0.005)
    garbage = [[i] for i in range(300_000)]  # makes a full collection take milliseconds

    def collect() -> None:
        gc.collect()

    loop.call_soon(collect)
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    del garbage
    events = list(intro.recent_blocking)
    if not events:
        pytest.skip("the collection was faster than the threshold on this machine")
    assert 0 < events[0].gc_s <= events[0].duration_s + 1e-6


def test_introspection_does_not_keep_abandoned_tasks_alive() -> None:
    """A pending task that nobody references is still collected while it is in the table."""
    loop = rt.new_event_loop()
    intro = rt.enable_introspection(loop)

    async def orphan() -> None:
        await loop.create_future()

    async def main() -> weakref.ref[asyncio.Task[None]]:
        task = asyncio.create_task(orphan(), name="orphan")
        await asyncio.sleep(0)
        figures = intro.task_figures(task, time.perf_counter())
        assert figures is not None and figures["polls"] == 1
        return weakref.ref(task)

    ref = loop.run_until_complete(main())
    loop.set_exception_handler(lambda loop, context: None)  # "destroyed but pending" is expected
    gc.collect()
    assert ref() is None
    intro.prune()
    assert len(intro.tasks) == 0
    loop.close()


def test_introspection_loop_mode_keeps_blocking_detection_without_task_counters() -> None:
    """per_task=False: no task counters, but a blocking step still names its task."""
    loop = rt.new_event_loop()
    intro = rt.enable_introspection(loop, blocking_threshold=0.02, per_task=False)

    async def slow() -> None:
        time.sleep(0.04)

    async def main() -> dict[str, Any]:
        await asyncio.create_task(slow(), name="slow-one")
        return rt.snapshot()

    snap = loop.run_until_complete(main())
    loop.close()
    assert snap["loop"]["per_task"] is False
    assert all(t["polls"] is None for t in snap["tasks"])
    (event,) = intro.recent_blocking
    assert event.task == "slow-one"


def test_introspection_keeps_asyncio_debug_mode_slow_callback_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """In asyncio debug mode the instrumented turn still logs slow callbacks like the plain one."""
    loop = rt.new_event_loop()
    loop.set_debug(True)
    loop.slow_callback_duration = 0.01
    rt.enable_introspection(loop)
    loop.call_soon(time.sleep, 0.02)
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    assert any("Executing" in r.getMessage() for r in caplog.records if r.name == "asyncio")


def test_introspection_disable_while_running_goes_back_to_the_plain_turn() -> None:
    """A task can switch introspection off for its own loop; later turns are plain again."""
    loop = rt.new_event_loop()
    rt.enable_introspection(loop)

    async def main() -> bool:
        rt.disable_introspection()
        await asyncio.sleep(0.001)
        return "_run_once" in vars(loop) or loop._introspector is not None

    assert loop.run_until_complete(main()) is False
    loop.close()


def test_introspection_task_table_folds_the_log_and_reuses_rows() -> None:
    """Logged steps fold into per-task rows; finished tasks are skipped; freed rows are reused."""
    from minidb.runtime._introspection import _TaskTable

    loop = asyncio.new_event_loop()
    futures = [loop.create_future() for _ in range(3)]
    a, b, c = (loop.create_task(asyncio.wait([f])) for f in futures)
    table = _TaskTable()
    table.log.extend([a, b, a])
    table.log_times.extend([1.0, 1.5, 0.25, 2.0, 2.1, 0.0, 3.0, 3.5, 0.5])
    table.fold()
    assert table.log == [] and len(table.log_times) == 0 and len(table) == 2
    assert table.get(a) == (2.0, 1.0, 0.75, 1.0, 3.5)
    assert table.get(b) == (1.0, 2.1 - 2.0, 0.0, 2.0, 2.1)
    b_row = table.rows[id(b)]
    table.discard(b)
    table.log.append(c)
    table.log_times.extend([4.0, 4.25, 0.0])
    table.fold()
    assert table.rows[id(c)] == b_row  # the freed row, reused
    assert table.get(c) == (1.0, 0.25, 0.0, 4.0, 4.25)
    assert table.get(b) is None
    for task in (a, b, c):
        task.cancel()
    loop.run_until_complete(asyncio.gather(a, b, c, return_exceptions=True))
    table.prune()
    assert len(table) == 0
    loop.close()


def test_introspection_on_demand_is_on_from_a_read_until_the_reads_stop() -> None:
    """touch() switches introspection on; each touch keeps it on for linger_s more (virtual
    clock), and it goes off linger_s after the last; a later touch switches it on again."""
    loop = new_paused_loop()
    on_demand = rt.IntrospectionOnDemand(loop, linger_s=60)
    seen: list[bool] = []

    async def main() -> None:
        assert loop._introspector is None
        on_demand.touch()
        seen.append(loop._introspector is not None)
        await asyncio.sleep(59)
        on_demand.touch()  # the linger starts again from here
        await asyncio.sleep(59)
        seen.append(loop._introspector is not None)
        await asyncio.sleep(2)
        seen.append(loop._introspector is not None or "_run_once" in vars(loop))
        on_demand.touch()
        seen.append(loop._introspector is not None)

    loop.run_until_complete(main())
    on_demand.close()
    assert loop._introspector is None
    loop.close()
    assert seen == [True, True, False, True]
    assert on_demand.switched_on == 2


def test_introspection_on_demand_leaves_alone_what_it_did_not_switch_on() -> None:
    """Introspection switched on by someone else stays on through touches and their linger,
    and close(); the same introspector serves the reads."""
    loop = new_paused_loop()
    intro = rt.enable_introspection(loop)
    on_demand = rt.IntrospectionOnDemand(loop, linger_s=1)

    async def main() -> None:
        on_demand.touch()
        await asyncio.sleep(5)

    loop.run_until_complete(main())
    on_demand.close()
    assert loop._introspector is intro and on_demand.switched_on == 0
    with pytest.raises(ValueError, match="linger_s"):
        rt.IntrospectionOnDemand(loop, linger_s=0)
    loop.close()
