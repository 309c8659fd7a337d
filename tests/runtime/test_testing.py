"""The paused clock: auto-advance, advance(), I/O before jumps, executors, and the pytest plugin."""

from __future__ import annotations

import asyncio
import socket
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

import minidb.runtime as rt
from minidb.runtime.testing import (
    PausedClockStuck,
    PausedEventLoop,
    advance,
    new_paused_loop,
    run_paused,
)

pytest_plugins = ["pytester"]

REAL_BUDGET_S = 1.0
"""Real seconds a test of virtual minutes may take: well under a second is the point."""


def test_testing_sleep_lands_exactly_on_its_deadline() -> None:
    """`await asyncio.sleep(1.5)` from t=0 ends with loop.time() == 1.5 exactly."""

    async def main() -> float:
        await asyncio.sleep(1.5)
        return asyncio.get_running_loop().time()

    assert run_paused(main()) == 1.5


@pytest.mark.minidb_paused
async def test_testing_retry_with_backoff_to_the_millisecond() -> None:
    """Four failed attempts with doubling backoff happen at exactly 0, 0.1, 0.3, 0.7 and 1.5 s."""
    loop = asyncio.get_running_loop()
    attempts: list[float] = []

    async def flaky() -> str:
        attempts.append(loop.time())
        if len(attempts) < 5:
            raise ConnectionError("not yet")
        return "ok"

    async def with_backoff(first_delay: float, tries: int) -> str:
        delay = first_delay
        for _ in range(tries - 1):
            try:
                return await flaky()
            except ConnectionError:
                await asyncio.sleep(delay)
                delay *= 2
        return await flaky()

    real_start = time.monotonic()
    assert await with_backoff(0.1, 6) == "ok"
    assert attempts == [0.0, 0.1, 0.3, 0.7, 1.5]
    assert time.monotonic() - real_start < REAL_BUDGET_S


async def _idle_timeout_server(idle_s: float, closed_at: list[float]) -> asyncio.Server:
    """An echo server that hangs up on a client silent for `idle_s`, resetting on each line."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with rt.timeout(idle_s) as idle:
                while line := await reader.readline():
                    writer.write(line)
                    await writer.drain()
                    idle.reschedule(loop.time() + idle_s)
        except TimeoutError:
            pass
        closed_at.append(loop.time())
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


@pytest.mark.minidb_paused
async def test_testing_server_idle_timeout_over_a_real_socket() -> None:
    """A 30 s idle timeout closes a silent TCP client at exactly t=30 after its last request."""
    loop = asyncio.get_running_loop()
    closed_at: list[float] = []
    server = await _idle_timeout_server(30.0, closed_at)
    port = server.sockets[0].getsockname()[1]
    real_start = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await asyncio.sleep(10)
    writer.write(b"ping\n")
    assert await reader.readline() == b"ping\n"
    assert loop.time() == 10.0
    async with asyncio.timeout(60):  # the habit: fail with a message, never hang
        assert await reader.read() == b""  # the server hung up
    assert closed_at == [40.0]
    assert loop.time() == 40.0
    assert time.monotonic() - real_start < REAL_BUDGET_S
    writer.close()
    server.close()
    await server.wait_closed()


@pytest.mark.minidb_paused
async def test_testing_auto_advance_never_jumps_past_waiting_data() -> None:
    """With bytes already waiting on a socket and a 30 s timer armed, the read wins at t=0."""
    loop = asyncio.get_running_loop()
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    try:
        sleeper = asyncio.create_task(asyncio.sleep(30))
        right.send(b"hello")
        async with asyncio.timeout(30):
            data = await loop.sock_recv(left, 100)
        assert data == b"hello"
        assert loop.time() == 0.0
        sleeper.cancel()
    finally:
        left.close()
        right.close()


def test_testing_io_readiness_wins_over_every_jump() -> None:
    """A byte sent by the peer at each turn is always read before the clock moves."""
    loop = new_paused_loop()
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    times: list[float] = []

    async def reader() -> None:
        for _ in range(20):
            right.send(b"x")
            await loop.sock_recv(left, 1)
            times.append(loop.time())

    async def main() -> None:
        ticker = asyncio.create_task(asyncio.sleep(5))
        await reader()
        await ticker

    try:
        loop.run_until_complete(main())
    finally:
        left.close()
        right.close()
        loop.close()
    assert times == [0.0] * 20
    assert loop.time() == 5.0


@pytest.mark.minidb_paused
async def test_testing_advance_crosses_every_wheel_level_in_order() -> None:
    """advance() over ~5 days fires timers on all levels in deadline order, each at its own tick."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, PausedEventLoop)
    # Deadlines straddling the level boundaries (64 ms, ~4 s, ~4.4 min, ~4.7 h, ~12 days).
    ticks = sorted(
        {1, 63, 64, 65, 4095, 4096, 4097, 262_143, 262_144, 262_145, 16_777_215, 16_777_216}
        | {16_777_217, 400_000_000, 3, 1000, 1500, 77_777}
    )
    fired: list[tuple[int, float]] = []
    for tick in reversed(ticks):  # scheduling order must not matter
        loop.call_at(tick / 1000, lambda t=tick: fired.append((t, loop.time())))
    chained: list[float] = []

    def chain(depth: int) -> None:
        # Callbacks made ready by a timer run before the next deadline group.
        chained.append(loop.time())
        if depth:
            loop.call_soon(chain, depth - 1)

    loop.call_at(1.0, chain, 3)
    await advance(5 * 24 * 3600)
    assert [t for t, _ in fired] == ticks
    assert all(at == t / 1000 for t, at in fired)
    assert chained == [1.0] * 4
    assert loop.time() == 5 * 24 * 3600


@pytest.mark.minidb_paused
async def test_testing_advance_runs_woken_tasks_between_groups() -> None:
    """A task woken by the first timer re-arms and is woken again inside the same advance()."""
    loop = asyncio.get_running_loop()
    seen: list[float] = []

    async def ticker() -> None:
        for _ in range(5):
            await asyncio.sleep(0.25)
            seen.append(loop.time())

    task = asyncio.create_task(ticker())
    await advance(1.0)
    assert seen == [0.25, 0.5, 0.75, 1.0]
    assert loop.time() == 1.0
    await advance(0.0005)  # between ticks: the clock moves, the 1.25 s timer does not fire
    assert loop.time() == 1.0005 and len(seen) == 4
    await task
    assert seen[-1] == 1.25


@pytest.mark.minidb_paused
async def test_testing_thirty_second_timeout_takes_milliseconds() -> None:
    """asyncio.wait_for with 30 s on a never-finishing future times out at exactly t=30."""
    loop = asyncio.get_running_loop()
    real_start = time.monotonic()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(loop.create_future(), 30)
    assert loop.time() == 30.0
    assert time.monotonic() - real_start < REAL_BUDGET_S


@pytest.mark.minidb_paused
async def test_testing_executor_work_holds_the_clock() -> None:
    """While a thread runs (real time.sleep), a pending 10 s timeout does not jump ahead."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(10):
        result = await asyncio.to_thread(lambda: time.sleep(0.05) or "done")
    assert result == "done"
    assert loop.time() == 0.0


def test_testing_stuck_loop_fails_with_a_clear_error() -> None:
    """A task waiting forever with no timer raises PausedClockStuck naming it, not a hang."""

    async def main() -> None:
        await asyncio.create_task(asyncio.Event().wait(), name="waits-forever")

    runner = asyncio.Runner(loop_factory=lambda: new_paused_loop(idle_limit=0.05))
    with runner, pytest.raises(PausedClockStuck, match="waits-forever"):
        runner.run(main())


def test_testing_autojump_threshold_waits_for_outside_io_first() -> None:
    """With a threshold, a reply from another thread arriving in real time beats the jump."""
    loop = new_paused_loop(autojump_threshold=0.5)
    left, right = socket.socketpair()
    left.setblocking(False)

    async def main() -> bytes:
        # A plain thread, not run_in_executor: only the threshold keeps the clock still.
        import threading

        threading.Timer(0.02, lambda: right.send(b"late")).start()
        async with asyncio.timeout(30):
            return await loop.sock_recv(left, 10)

    try:
        assert loop.run_until_complete(main()) == b"late"
        assert loop.time() == 0.0
        assert loop.statistics().real_waits >= 1
    finally:
        left.close()
        right.close()
        loop.close()


def test_testing_reschedule_and_timeout_use_virtual_ticks() -> None:
    """loop.reschedule and minidb.runtime.timeout follow the virtual clock exactly."""

    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        handle = loop.call_later(1.0, lambda: None)
        assert isinstance(loop, PausedEventLoop)
        fired: list[float] = []
        loop.reschedule(handle, 0.1 + 0.2)
        handle._callback = lambda: fired.append(loop.time())
        await asyncio.sleep(2)
        try:
            async with rt.timeout(5) as scope:
                scope.reschedule(loop.time() + 7.25)
                await asyncio.sleep(100)
        except TimeoutError:
            pass
        return fired[0], loop.time()

    assert run_paused(main()) == (0.3, 9.25)


def test_testing_statistics_count_jumps() -> None:
    """statistics() reports the virtual seconds skipped by auto-advance and by advance()."""
    loop = new_paused_loop()

    async def main() -> None:
        await asyncio.sleep(2)
        await advance(3)

    loop.run_until_complete(main())
    stats = loop.statistics()
    loop.close()
    assert stats.now == 5.0
    assert stats.auto_advanced_s == 2.0 and stats.advanced_s == 3.0
    assert stats.jumps >= 2


def test_testing_advance_refuses_other_loops() -> None:
    """advance() on a real-time loop is an error, not a silent no-op."""
    with pytest.raises(RuntimeError, match="PausedEventLoop"):
        rt.run(advance(1))


def test_testing_paused_loop_fixture_drives_sync_tests(paused_loop: PausedEventLoop) -> None:
    """The paused_loop fixture gives a sync test a current paused loop at t=0."""
    assert asyncio.get_event_loop() is paused_loop
    paused_loop.run_until_complete(asyncio.sleep(42))
    assert paused_loop.time() == 42.0


@pytest.mark.minidb_loop
async def test_testing_wheel_marker_runs_on_the_real_clock() -> None:
    """@pytest.mark.minidb_loop runs the test on a real-time WheelEventLoop."""
    loop = asyncio.get_running_loop()
    assert type(loop) is rt.WheelEventLoop
    start = time.monotonic()
    await asyncio.sleep(0.01)
    assert time.monotonic() - start >= 0.01


def test_testing_plugin_works_in_a_fresh_pytest(pytester: Any) -> None:
    """The entry-point plugin runs marked and fixture-using async tests with no other plugin."""
    pytester.makepyfile(
        """
        import asyncio
        import pytest

        @pytest.mark.minidb_paused
        async def test_marked():
            await asyncio.sleep(3600)
            assert asyncio.get_running_loop().time() == 3600.0

        async def test_fixture(paused_loop):
            assert asyncio.get_running_loop() is paused_loop

        @pytest.mark.minidb_paused(idle_limit=0.05)
        async def test_stuck():
            await asyncio.Event().wait()
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*PausedClockStuck*"])



def test_testing_runner_shutdown_waits_for_executor_threads_in_real_time() -> None:
    """Closing a runner after to_thread work joins the executor without a virtual timeout."""

    async def main() -> float:
        await asyncio.to_thread(time.sleep, 0.01)
        return asyncio.get_running_loop().time()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 3.12+ warns if the join "took" 300 virtual seconds
        assert run_paused(main()) == 0.0


def test_testing_minidb_server_idle_timeout_on_the_paused_clock(tmp_path: Path) -> None:
    """The minidb server hangs up on a silent client 30 s after its last request, in real ms."""
    from minidb.server import Server, ServerConfig

    async def main() -> float:
        loop = asyncio.get_running_loop()
        server = Server(ServerConfig(port=0, data_dir=tmp_path, idle_timeout=30.0))
        await server.start()
        try:
            assert server.line_address is not None
            reader, writer = await asyncio.open_connection(*server.line_address)
            await asyncio.sleep(5)
            writer.write(b"SET b k v\n")
            assert (await reader.readline()).startswith(b"OK")
            answered = loop.time()
            async with asyncio.timeout(60):
                assert await reader.read() == b""  # the server hung up
            writer.close()
            return loop.time() - answered
        finally:
            server.request_shutdown()
            async with asyncio.timeout(60):
                await server.serve()

    real_start = time.monotonic()
    assert run_paused(main()) == 30.0
    assert time.monotonic() - real_start < REAL_BUDGET_S
