"""The pytest plugin of minidb.runtime: ``async def`` tests on the paused or the wheel loop.

Registered as a ``pytest11`` entry point, so installing minidb is enough. It needs no other
async plugin:

- ``@pytest.mark.minidb_paused`` runs an ``async def`` test on a ``PausedEventLoop`` (virtual
  time, auto-advance); options go in the marker: ``@pytest.mark.minidb_paused(idle_limit=2.0,
  autojump_threshold=0.01)``.
- ``@pytest.mark.minidb_loop`` runs it on a real-time ``WheelEventLoop``.
- The ``paused_loop`` and ``wheel_loop`` fixtures hand the loop to the test; an ``async def``
  test that asks for one of them runs on it, marked or not. A plain test may drive the loop
  itself (``paused_loop.run_until_complete(...)``).

The loop is installed as the thread's current loop for the test and closed afterwards, with
left-over tasks cancelled and async generators finalised, as ``asyncio.run`` would.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from typing import Any

import pytest

from minidb.runtime._loop import WheelEventLoop
from minidb.runtime.testing import PausedEventLoop

PAUSED_MARKER = "minidb_paused"
WHEEL_MARKER = "minidb_loop"
PAUSED_FIXTURE = "paused_loop"
WHEEL_FIXTURE = "wheel_loop"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{PAUSED_MARKER}(**options): run this async test on minidb's paused-clock loop "
        "(options: start, idle_limit, autojump_threshold)",
    )
    config.addinivalue_line(
        "markers", f"{WHEEL_MARKER}: run this async test on minidb's real-time wheel loop"
    )


def _paused_options(node: Any) -> dict[str, Any]:
    marker = node.get_closest_marker(PAUSED_MARKER)
    return dict(marker.kwargs) if marker is not None else {}


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Finish a test's loop the way ``asyncio.run`` does, then close it."""
    try:
        if not loop.is_closed():
            leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


@pytest.fixture
def paused_loop(request: pytest.FixtureRequest) -> Iterator[PausedEventLoop]:
    """A ``PausedEventLoop`` (virtual clock at 0.0), current for the test, closed after it."""
    loop = PausedEventLoop(**_paused_options(request.node))
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        _close(loop)


@pytest.fixture
def wheel_loop() -> Iterator[WheelEventLoop]:
    """A real-time ``WheelEventLoop``, current for the test, closed after it."""
    loop = WheelEventLoop()
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        _close(loop)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A marked async test gets its loop through the fixture, so setup and teardown are pytest's.
    for item in items:
        if not isinstance(item, pytest.Function) or not inspect.iscoroutinefunction(item.obj):
            continue
        fixturenames: list[str] = item.fixturenames
        if item.get_closest_marker(PAUSED_MARKER) and PAUSED_FIXTURE not in fixturenames:
            fixturenames.append(PAUSED_FIXTURE)
        elif item.get_closest_marker(WHEEL_MARKER) and WHEEL_FIXTURE not in fixturenames:
            fixturenames.append(WHEEL_FIXTURE)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    funcargs = pyfuncitem.funcargs
    loop = funcargs.get(PAUSED_FIXTURE) or funcargs.get(WHEEL_FIXTURE)
    if not isinstance(loop, asyncio.AbstractEventLoop):
        return None  # not ours: leave it to another plugin, or to pytest's own refusal
    argnames = pyfuncitem._fixtureinfo.argnames
    loop.run_until_complete(pyfuncitem.obj(**{name: funcargs[name] for name in argnames}))
    return True
