"""CPython's own asyncio tests pass on ``WheelEventLoop`` wherever they pass on the stock loop.

The modules of ``test.test_asyncio`` (shipped with CPython) listed in ``MODULES`` run twice, in
child processes two at a time (``_cpython_harness.py``): once on the stock selector loop and
once on ours, installed the same three ways each time. The baseline is measured here, on this
interpreter, so no list of known stock failures has to be kept per Python version.

How each module reaches the loop under test, and what is left out (counts on CPython 3.11.7;
3.12.1 and 3.13.0 have more tests: 1,538, 1,577 and 1,646 in all, of which 1,444, 1,483 and
1,550 run on the loop under test):

- test_timeouts, test_waitfor, test_locks, test_queues, test_streams, test_taskgroups: all 263
  tests get their loop from the event loop policy (``IsolatedAsyncioTestCase`` through
  ``asyncio.Runner``, or ``asyncio.new_event_loop()`` in ``setUp``). The policy is sticky, so
  the modules' ``set_event_loop_policy(None)`` resets land on ours again.
- test_tasks, 891 of 913: 253 use the policy; the Task/Future variant classes and the gather
  tests build CPython's virtual-time ``test_utils.TestLoop``, which the harness rebuilds on top
  of our class, so their timers go through our ``call_at``/``call_later`` and ``_run_once``.
  Not covered: the 22 introspection and generic tests, which build no loop.
- test_events, 233 of 253: the epoll, poll and select loop classes (73 tests each: sockets,
  pipes, subprocesses, signals, servers, ``call_later`` on the real clock) build
  ``asyncio.SelectorEventLoop(selector)``, rebound to our class; the policy and
  ``get_event_loop`` tests use the policy. Not covered: 20 tests of handles, timer handles,
  servers and policies that build no loop.
- test_base_events, 57 of 109: ``BaseEventLoopWithSelectorTests`` (52) and the tests that
  call ``asyncio.new_event_loop()``. Not covered: ``BaseEventLoopTests`` (37) builds
  ``base_events.BaseEventLoop()`` itself with a mocked selector and asserts on the heap
  (``loop._scheduled``) and ``_run_once`` internals that our loop replaces by design;
  ``BaseLoopSockSendfileTests`` (11) needs a loop *without* the native ``os.sendfile`` path
  that every Unix selector loop, ours included, has; 4 more build no loop.
- Left out entirely: test_futures (a ``Future`` does not depend on the loop's timers),
  test_selector_events and test_sock_lowlevel (the transport layer, inherited unchanged from
  ``SelectorEventLoop`` and mostly run on mocks), test_runners (installs its own policy around
  a bare ``BaseEventLoop``), test_subprocess, test_ssl and test_sendfile (I/O our loop does not
  touch).

This suite is a weak oracle for timer semantics (a loop firing every timer 50 ms early fails
only 12 to 17 of these tests); ``test_loop.py`` holds the timer-semantics tests. Two tests here
prove the harness can fail at all, on deliberately broken subclasses of our loop, and the last
one is a fast check of what the respliced ``TestLoop`` relies on: ``call_later`` goes through
``call_at``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import minidb.runtime


def _load_harness() -> ModuleType:
    # Loaded by path: tests/ is not a package, and the harness also runs as a child script.
    path = Path(__file__).with_name("_cpython_harness.py")
    spec = importlib.util.spec_from_file_location("_cpython_harness", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


harness = _load_harness()

MODULES = harness.STANDARD_MODULES

# Fewest tests per module that must run on our loop class, and on a loop from our policy: about
# 90% of CPython 3.11's counts (3.12 and 3.13 have more), so a harness that silently stops
# installing the loop fails here instead of passing on nothing.
FLOORS = {
    "test_timeouts": (29, 29),
    "test_waitfor": (13, 13),
    "test_locks": (63, 63),
    "test_queues": (40, 40),
    "test_streams": (60, 60),
    "test_taskgroups": (31, 31),
    "test_tasks": (800, 225),
    "test_events": (210, 12),
    "test_base_events": (51, 3),
}

# The broken loops of the self-check and where each shows: a slice of test_tasks (one of its
# eight Task/Future variants) for early timers, and the whole of test_queues for reordered
# call_soon callbacks.
EARLY_TIMERS = harness.Job("test_tasks", "early-timers", ("PyTask_PyFuture_Tests.",))
LIFO_CALLBACKS = harness.Job("test_queues", "lifo-callbacks")

HARNESS_TIMEOUT_S = 600
"""pytest-timeout bound on a harness test, whose fixture runs the child processes: 40-60 s
when all is well, several minutes when tests hang and the watchdog must resume modules."""


@pytest.fixture(scope="module")
def reports(request: pytest.FixtureRequest) -> dict[Any, Any]:
    """The jobs the selected tests of this file need, run once, two child processes at a time."""
    jobs: set[Any] = set()
    for item in request.session.items:
        if item.path != Path(__file__):
            continue
        module = getattr(getattr(item, "callspec", None), "params", {}).get("module")
        if module:
            jobs |= {harness.Job(module, loop) for loop in ("stock", "minidb")}
        for broken in (EARLY_TIMERS, LIFO_CALLBACKS):
            if item.name == f"test_harness_reports_{broken.loop.replace('-', '_')}_as_failures":
                jobs |= {broken, harness.Job(broken.module, "stock")}
    return dict(harness.run_jobs(sorted(jobs, key=str)))


def _describe(report: Any, ids: set[str]) -> str:
    lines = [report.summary()]
    for test_id in sorted(ids)[:25]:
        outcome = report.outcomes.get(test_id)
        detail = outcome.detail.strip().splitlines()[-1:] if outcome else ["did not run"]
        lines.append(f"  {test_id}: {' '.join(detail) or outcome.outcome}")
    if len(ids) > 25:
        lines.append(f"  ... and {len(ids) - 25} more")
    for i, problem in enumerate(report.problems):
        # The first ones carry the watchdog's stack dump (innermost frame first); the rest
        # are usually the same hang again.
        shown = problem.splitlines()[: 14 if i < 2 else 1]
        lines.append("  problem: " + "\n    ".join(shown))
    return "\n".join(lines)


@pytest.mark.slow
@pytest.mark.timeout(HARNESS_TIMEOUT_S)
@pytest.mark.parametrize("module", MODULES)
def test_cpython_module_passes_what_stock_passes(reports: dict[Any, Any], module: str) -> None:
    """Every test of the module that passes on the stock loop passes on WheelEventLoop."""
    stock = reports[harness.Job(module, "stock")]
    job = harness.Job(module, "minidb")
    ours = reports[job]
    assert stock.passed, f"the baseline ran nothing:\n{_describe(stock, stock.failed)}"
    failing, flaky = harness.confirm_regressions(stock, job, ours)
    if flaky:
        warnings.warn(
            f"{module}: failed once on WheelEventLoop, passed when rerun alone: {sorted(flaky)}",
            stacklevel=1,
        )
    assert not failing, _describe(ours, failing)


@pytest.mark.slow
@pytest.mark.timeout(HARNESS_TIMEOUT_S)
@pytest.mark.parametrize("module", MODULES)
def test_cpython_module_runs_on_wheel_loop(reports: dict[Any, Any], module: str) -> None:
    """Enough of the module's tests really ran on our loop class and on our policy's loops."""
    ours = reports[harness.Job(module, "minidb")]
    on_class, on_policy = FLOORS[module]
    assert ours.on_loop_under_test >= on_class, ours.summary()
    assert ours.on_policy_loop >= on_policy, ours.summary()


@pytest.mark.slow
@pytest.mark.timeout(HARNESS_TIMEOUT_S)
def test_harness_reports_early_timers_as_failures(reports: dict[Any, Any]) -> None:
    """A WheelEventLoop that fires every timer 50 ms early fails tests that pass on stock."""
    stock = reports[harness.Job(EARLY_TIMERS.module, "stock")]
    broken = reports[EARLY_TIMERS]
    failing, _ = harness.confirm_regressions(stock, EARLY_TIMERS, broken)
    assert broken.on_loop_under_test >= 100, broken.summary()
    # One is certain on every version: test_as_completed_with_timeout runs on the virtual-time
    # TestLoop. The others (test_cancel_gather_2, ...) depend on real-time races.
    assert failing, _describe(broken, failing)


@pytest.mark.slow
@pytest.mark.timeout(HARNESS_TIMEOUT_S)
def test_harness_reports_lifo_callbacks_as_failures(reports: dict[Any, Any]) -> None:
    """A WheelEventLoop that runs call_soon callbacks newest first fails tests that pass on
    stock."""
    stock = reports[harness.Job(LIFO_CALLBACKS.module, "stock")]
    broken = reports[LIFO_CALLBACKS]
    failing, _ = harness.confirm_regressions(stock, LIFO_CALLBACKS, broken)
    assert broken.on_loop_under_test >= 40, broken.summary()
    assert len(failing) >= 5, _describe(broken, failing)


LOOP_CLASSES: dict[str, Any] = {
    "stock": asyncio.SelectorEventLoop,
    "wheel": minidb.runtime.WheelEventLoop,
}


@pytest.mark.parametrize("name", sorted(LOOP_CLASSES))
def test_loop_call_later_goes_through_subclass_call_at(name: str) -> None:
    """A subclass overriding call_at also sees call_later's timers, as CPython's TestLoop needs."""
    base = LOOP_CLASSES[name]
    seen: list[float] = []

    class Recording(base):  # type: ignore[misc,valid-type]
        def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> Any:
            seen.append(when)
            return super().call_at(when, callback, *args, context=context)

    loop = Recording()
    try:
        loop.call_later(10.0, lambda: None).cancel()
    finally:
        loop.close()
    assert len(seen) == 1
