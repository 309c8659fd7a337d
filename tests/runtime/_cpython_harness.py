"""Runs CPython's own asyncio test modules on a chosen event loop and reports every test's outcome.

Two halves live here, because they must agree on one format:

- the *parent* (``run_jobs``, imported by ``test_cpython_asyncio.py`` or run as a script) starts
  one child process per ``(module, loop)`` job, two at a time, and reads their results;
- the *child* (``python -P _cpython_harness.py --child ...``) installs the loop under test, runs
  one ``test.test_asyncio.<module>`` with ``unittest`` and writes one JSON line per test.

How the child puts a loop under test (``_install``), in the order the test modules would
otherwise escape it:

1. The event loop policy is installed *sticky*: ``asyncio.DefaultEventLoopPolicy`` is rebound
   to the policy under test. The test modules reset the policy with
   ``asyncio.set_event_loop_policy(None)``, and on every supported version (3.11-3.13) the next
   ``get_event_loop_policy()`` instantiates whatever ``asyncio.DefaultEventLoopPolicy`` names
   (``asyncio.events._init_event_loop_policy``), so the reset lands on ours again.
2. ``asyncio.SelectorEventLoop`` is rebound to the class under test, so the loop-building test
   classes of test_events (``asyncio.SelectorEventLoop(selectors.EpollSelector())``) and
   test_base_events build ours. The name is looked up when a test runs, so rebinding after
   ``asyncio`` is imported is enough.
3. CPython's virtual-time ``test.test_asyncio.utils.TestLoop`` (most of test_tasks) is
   respliced on top of the class under test: MRO ``TestLoop -> _TestSelectorShim -> class``.

Each job runs the same way whatever the loop, so the stock baseline ("stock": a trivial
subclass of ``asyncio.SelectorEventLoop``) and our loop ("minidb") are measured by one
instrument. Two deliberately broken loops ("early-timers", "lifo-callbacks") exist so the test
can prove the instrument is able to report failures.

A test counts as having run on the loop under test when an instance of that class was built
while it ran (counted by wrapping ``BaseEventLoop.__init__``); loops from the policy are counted
separately. A test that hangs is killed by a per-test watchdog (``faulthandler``), recorded as
failed, and the module is resumed without the tests already done.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import faulthandler
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import unittest
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HARNESS_PATH = Path(__file__).resolve()

PER_TEST_DEADLINE_S = 10.0
"""A single CPython test running longer than this is taken as hung (the slowest stock one takes
about 2 s); the child dumps its stack and exits, and the parent resumes the module."""

JOB_DEADLINE_S = 300.0
"""Wall-clock bound on one job, all its child processes together; a last resort behind the
per-test watchdog."""

MAX_RESUMES = 5
"""How many times a module is restarted after hung tests before the rest is reported missing."""

STDERR_TAIL_CHARS = 3000
"""How much of a dead child's stderr is kept in the report (the watchdog's stack dump)."""

DETAIL_CHARS = 1500
"""How much of a failing test's traceback is kept."""

EARLY_BY_S = 0.050
"""How early the "early-timers" broken loop fires every timer."""

LOOPS = ("stock", "minidb", "early-timers", "lifo-callbacks")


# --------------------------------------------------------------------------------------------
# Reports (shared by both halves)


@dataclass(frozen=True)
class TestOutcome:
    """One CPython test's result on one loop."""

    test_id: str
    outcome: str  # "passed" (incl. expected failure), "failed" (incl. error, hang), "skipped"
    on_loop_under_test: bool
    on_policy_loop: bool
    detail: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class ModuleReport:
    """Everything one ``(module, loop)`` job produced."""

    module: str
    loop: str
    outcomes: dict[str, TestOutcome]
    seconds: float
    problems: tuple[str, ...] = ()  # child crashes, hangs, deadline kills

    def ids(self, outcome: str) -> set[str]:
        return {t for t, o in self.outcomes.items() if o.outcome == outcome}

    @property
    def passed(self) -> set[str]:
        return self.ids("passed")

    @property
    def failed(self) -> set[str]:
        return self.ids("failed")

    @property
    def skipped(self) -> set[str]:
        return self.ids("skipped")

    @property
    def on_loop_under_test(self) -> int:
        return sum(o.on_loop_under_test for o in self.outcomes.values())

    @property
    def on_policy_loop(self) -> int:
        return sum(o.on_policy_loop for o in self.outcomes.values())

    def summary(self) -> str:
        return (
            f"{self.module} [{self.loop}]: {len(self.passed)} passed, {len(self.failed)} failed,"
            f" {len(self.skipped)} skipped; {self.on_loop_under_test} ran on the loop under test"
            f" ({self.on_policy_loop} via the policy); {self.seconds:.1f} s"
        )


# --------------------------------------------------------------------------------------------
# Parent


@dataclass(frozen=True)
class Job:
    """One child run: a CPython test module on a loop, optionally only some of its tests."""

    module: str
    loop: str
    only: tuple[str, ...] = ()  # substrings of test ids; empty means the whole module


@dataclass
class _Progress:
    outcomes: dict[str, TestOutcome] = field(default_factory=dict)
    started: str | None = None
    finished: bool = False


def _read_events(path: Path) -> _Progress:
    progress = _Progress()
    if not path.exists():
        return progress
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a kill
            continue
        kind = event.pop("event")
        if kind == "start":
            progress.started = event["test_id"]
        elif kind == "stop":
            progress.outcomes[event["test_id"]] = TestOutcome(**event)
            progress.started = None
        elif kind == "done":
            progress.finished = True
    return progress


def run_job(job: Job, *, python: str = sys.executable) -> ModuleReport:
    """Run one job in child processes (resuming after hangs) and collect its report."""
    t0 = time.monotonic()
    outcomes: dict[str, TestOutcome] = {}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="cpython-asyncio-") as tmp:
        workdir = Path(tmp)
        for attempt in range(MAX_RESUMES + 1):
            remaining = JOB_DEADLINE_S - (time.monotonic() - t0)
            if remaining <= 0:
                problems.append(f"exceeded {JOB_DEADLINE_S:.0f} s; the rest did not run")
                break
            progress, returncode, tail = _run_child(
                job, python, workdir / str(attempt), outcomes, remaining
            )
            outcomes.update(progress.outcomes)
            if progress.finished and returncode == 0:
                break
            if progress.started is None:
                # Died outside any test (import error, a fixture hanging or crashing): resuming
                # would most likely die the same way.
                problems.append(f"child exited with {returncode} outside a test:\n{tail}")
                break
            why = "hung" if returncode is not None else "ran out of the job's time"
            problems.append(f"{progress.started} {why}:\n{tail}")
            outcomes[progress.started] = TestOutcome(
                progress.started, "failed", False, False, f"{why}; see problems"
            )
        else:
            problems.append(f"gave up after {MAX_RESUMES} resumes; the rest did not run")
    return ModuleReport(job.module, job.loop, outcomes, time.monotonic() - t0, tuple(problems))


def _run_child(
    job: Job, python: str, workdir: Path, done: dict[str, TestOutcome], timeout: float
) -> tuple[_Progress, int | None, str]:
    """One child process over the job's tests not in ``done``: progress, exit code, stderr."""
    workdir.mkdir()
    events = workdir / "events.jsonl"
    exclude = workdir / "exclude.txt"
    exclude.write_text("\n".join(sorted(done)))
    command = [python, "-P", str(HARNESS_PATH), "--child", "--module", job.module,
               "--loop", job.loop, "--events", str(events), "--exclude", str(exclude)]
    for pattern in job.only:
        command += ["--only", pattern]
    stderr_path = workdir / "stderr.txt"
    with stderr_path.open("wb") as stderr:
        try:
            # cwd: the tests create scratch files in the working directory.
            proc = subprocess.run(command, cwd=workdir, env=_child_environment(),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=stderr, timeout=timeout, check=False)
            returncode: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            returncode = None
    tail = stderr_path.read_text(errors="replace")[-STDERR_TAIL_CHARS:]
    return _read_events(events), returncode, tail


def _child_environment() -> dict[str, str]:
    """This process's environment, with minidb importable in the child however it was here
    (an installed package, or a path added by pytest or by hand)."""
    env = dict(os.environ)
    spec = importlib.util.find_spec("minidb")
    if spec is not None and spec.submodule_search_locations:
        root = str(Path(next(iter(spec.submodule_search_locations))).parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def run_jobs(
    jobs: Sequence[Job], *, workers: int = 2, python: str = sys.executable
) -> dict[Job, ModuleReport]:
    """Run jobs in parallel child processes; the biggest modules go first to pack the workers."""
    order = sorted(jobs, key=lambda j: (j.only != (), -_RELATIVE_COST.get(j.module, 1)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {job: pool.submit(run_job, job, python=python) for job in order}
        return {job: futures[job].result() for job in jobs}


def regressions(baseline: ModuleReport, candidate: ModuleReport,
                only: Sequence[str] = ()) -> set[str]:
    """Tests that passed on the baseline but not on the candidate (failed, hung or never ran).

    ``only`` restricts the comparison to the candidate job's selection when the baseline ran the
    whole module.
    """
    expected = {t for t in baseline.passed if not only or any(p in t for p in only)}
    return expected - candidate.passed


CONFIRM_LIMIT = 40
"""Regressions are rerun once to tell flakes from failures only when there are at most this
many; more than that is a broken loop, not a flake, and rerunning would double the cost."""


def confirm_regressions(
    baseline: ModuleReport, job: Job, report: ModuleReport, *, python: str = sys.executable
) -> tuple[set[str], set[str]]:
    """Rerun the job's regressions once in a fresh child: ``(still failing, passed on rerun)``.

    A test that passes when rerun alone is a flake (or depends on what ran before it); the
    caller decides how loudly to say so.
    """
    suspects = regressions(baseline, report, job.only)
    if not suspects or len(suspects) > CONFIRM_LIMIT:
        return suspects, set()
    rerun = run_job(Job(job.module, job.loop, tuple(sorted(suspects))), python=python)
    confirmed = suspects - rerun.passed
    return confirmed, suspects - confirmed


# Rough stock run times in seconds, only used to start the long modules first.
_RELATIVE_COST = {
    "test_tasks": 14, "test_taskgroups": 6, "test_events": 6, "test_waitfor": 1,
    "test_base_events": 1, "test_streams": 1, "test_locks": 1,
}


# --------------------------------------------------------------------------------------------
# Child


class _LoopCounter:
    """Counts loops built while the current test runs."""

    def __init__(self) -> None:
        self.under_test = 0
        self.from_policy = 0

    def reset(self) -> None:
        self.under_test = 0
        self.from_policy = 0


_COUNTER = _LoopCounter()


def _loop_classes(loop: str) -> tuple[type[Any], type[Any]]:
    """The event loop class and policy class under test for ``loop``."""
    import asyncio

    if loop == "stock":

        class StockLoop(asyncio.SelectorEventLoop):
            """The stock loop, subclassed only so its instances can be told apart."""

        class StockPolicy(asyncio.DefaultEventLoopPolicy):
            def new_event_loop(self) -> asyncio.AbstractEventLoop:
                return StockLoop()

        return StockLoop, StockPolicy

    import minidb.runtime

    wheel_loop: type[Any] = minidb.runtime.WheelEventLoop
    wheel_policy: type[Any] = minidb.runtime.EventLoopPolicy
    if loop == "minidb":
        return wheel_loop, wheel_policy
    if loop == "early-timers":

        class EarlyTimersLoop(wheel_loop):  # type: ignore[misc]
            """Broken on purpose: every timer fires EARLY_BY_S before its deadline."""

            def call_at(self, when: float, callback: Any, *args: Any,
                        context: Any = None) -> Any:
                return super().call_at(when - EARLY_BY_S, callback, *args, context=context)

            def call_later(self, delay: float, callback: Any, *args: Any,
                           context: Any = None) -> Any:
                return self.call_at(self.time() + delay, callback, *args, context=context)

        broken: type[Any] = EarlyTimersLoop
    elif loop == "lifo-callbacks":

        class LifoCallbacksLoop(wheel_loop):  # type: ignore[misc]
            """Broken on purpose: ``call_soon`` callbacks run newest first."""

            def _call_soon(self, callback: Any, args: Any, context: Any) -> Any:
                handle = super()._call_soon(callback, args, context)
                self._ready.remove(handle)
                self._ready.appendleft(handle)
                return handle

        broken = LifoCallbacksLoop
    else:
        raise SystemExit(f"unknown loop {loop!r}; choose from {', '.join(LOOPS)}")

    class BrokenPolicy(wheel_policy):  # type: ignore[misc]
        def new_event_loop(self) -> Any:
            return broken()

    return broken, BrokenPolicy


def _install(loop: str) -> type[Any]:
    """Make every way the test modules get a loop give the loop under test; return its class."""
    import asyncio
    from asyncio import base_events, unix_events

    loop_class, policy_class = _loop_classes(loop)  # imports minidb before anything is rebound

    class CountingPolicy(policy_class):  # type: ignore[misc,valid-type]
        def new_event_loop(self) -> Any:
            _COUNTER.from_policy += 1
            return super().new_event_loop()

    asyncio.DefaultEventLoopPolicy = CountingPolicy  # sticky: see top
    asyncio.set_event_loop_policy(CountingPolicy())
    asyncio.SelectorEventLoop = loop_class
    unix_events.SelectorEventLoop = loop_class

    original_init = base_events.BaseEventLoop.__init__

    def counting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(self, loop_class):
            _COUNTER.under_test += 1
        original_init(self, *args, **kwargs)

    base_events.BaseEventLoop.__init__ = counting_init  # type: ignore[method-assign]

    from test.test_asyncio import utils as test_utils

    class _TestSelectorShim(loop_class):  # type: ignore[misc,valid-type]
        """Feeds TestLoop's fake selector to the class under test's constructor."""

        def __init__(self, selector: Any = None) -> None:
            super().__init__(test_utils.TestSelector())

    class TestLoop(test_utils.TestLoop, _TestSelectorShim):  # type: ignore[misc]
        """CPython's virtual-time TestLoop over the class under test instead of BaseEventLoop."""

        def __init__(self, gen: Any = None) -> None:
            # The selector loop's constructor registers its self-pipe (TestLoop._add_reader) and
            # a loop may read its clock (TestLoop.time) before TestLoop.__init__ has set them up.
            self._time = 0
            self.readers: dict[Any, Any] = {}
            self.writers: dict[Any, Any] = {}
            self.reset_counters()
            super().__init__(gen)

    test_utils.TestLoop = TestLoop
    return loop_class


class _RecordingResult(unittest.TestResult):
    """Writes one JSON line per test as it finishes, so a killed child loses nothing done."""

    def __init__(self, out: Any) -> None:
        super().__init__()
        self._out = out
        self._outcome: dict[str, tuple[str, str]] = {}
        self._t0 = time.monotonic()

    def _emit(self, event: str, **fields: Any) -> None:
        self._out.write(json.dumps({"event": event, **fields}) + "\n")
        self._out.flush()

    def _note(self, test: unittest.TestCase, outcome: str, detail: str = "") -> None:
        current = self._outcome.get(test.id())
        if current is None or current[0] != "failed":  # a failure sticks
            self._outcome[test.id()] = (outcome, detail[-DETAIL_CHARS:])

    def startTest(self, test: unittest.TestCase) -> None:
        super().startTest(test)
        _COUNTER.reset()
        self._emit("start", test_id=test.id())
        _arm_watchdog()
        self._t0 = time.monotonic()

    def stopTest(self, test: unittest.TestCase) -> None:
        seconds = time.monotonic() - self._t0
        super().stopTest(test)
        outcome, detail = self._outcome.pop(test.id(), ("passed", ""))
        self._emit("stop", test_id=test.id(), outcome=outcome,
                   on_loop_under_test=_COUNTER.under_test > 0,
                   on_policy_loop=_COUNTER.from_policy > 0, detail=detail,
                   seconds=round(seconds, 3))
        # Re-armed, not cancelled: class and module fixtures between tests may hang too.
        _arm_watchdog()

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self._note(test, "passed")

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addExpectedFailure(test, err)
        self._note(test, "passed")

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        if not isinstance(test, unittest.TestCase):  # a skipped module or class fixture
            return
        self._note(test, "skipped", reason)

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._fail(test, self.failures[-1][1])

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        self._fail(test, self.errors[-1][1])

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        self._fail(test, "unexpected success")

    def addSubTest(self, test: unittest.TestCase, subtest: Any, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._fail(test, "".join(traceback.format_exception(*err)))

    def _fail(self, test: Any, detail: str) -> None:
        if isinstance(test, unittest.TestCase):
            self._note(test, "failed", detail)
        else:
            # Module or class fixtures (setUpModule, tearDownClass, ...) have no start/stop.
            self._emit("stop", test_id=str(test), outcome="failed", on_loop_under_test=False,
                       on_policy_loop=False, detail=detail[-DETAIL_CHARS:])


def _arm_watchdog() -> None:
    # Dumps every thread's stack to stderr and exits unless re-armed in time; the parent then
    # names the test that was running and resumes the module after it.
    faulthandler.dump_traceback_later(PER_TEST_DEADLINE_S, exit=True)


def _flatten(suite: Iterable[Any]) -> Iterator[unittest.TestCase]:
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _flatten(item)
        else:
            yield item


def _child(args: argparse.Namespace) -> int:
    _install(args.loop)
    name = f"test.test_asyncio.{args.module}"
    exclude = set(Path(args.exclude).read_text().split()) if args.exclude else set()
    with open(args.events, "a") as out:
        result = _RecordingResult(out)
        try:
            loaded = unittest.defaultTestLoader.loadTestsFromName(name)
        except Exception as exc:  # an import failure is a failed module, reported as such
            result._emit("stop", test_id=f"import {name}", outcome="failed",
                         on_loop_under_test=False, on_policy_loop=False, detail=repr(exc))
            return 1
        # A flat suite keeps unittest's class and module fixtures (it tracks class changes).
        tests = [t for t in _flatten(loaded) if t.id() not in exclude
                 and (not args.only or any(p in t.id() for p in args.only))]
        _arm_watchdog()
        unittest.TestSuite(tests).run(result)
        faulthandler.cancel_dump_traceback_later()
        result._emit("done")
    return 0


# --------------------------------------------------------------------------------------------
# Command line


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--loop", choices=LOOPS, default="minidb")
    parser.add_argument("--module", action="append", dest="modules",
                        help="test.test_asyncio module (repeatable; default: the standard set)")
    parser.add_argument("--only", action="append", default=[],
                        help="run only tests whose id contains this (repeatable)")
    parser.add_argument("-j", "--workers", type=int, default=2)
    parser.add_argument("--failures", action="store_true", help="print each failure's detail")
    parser.add_argument("--json", metavar="PATH", help="also write every outcome to PATH")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--events", help=argparse.SUPPRESS)
    parser.add_argument("--exclude", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


STANDARD_MODULES = (
    "test_timeouts", "test_waitfor", "test_locks", "test_queues", "test_streams",
    "test_taskgroups", "test_tasks", "test_events", "test_base_events",
)


def main(argv: Sequence[str]) -> int:
    args = _parse(argv)
    if args.child:
        args.module = args.modules[0]
        return _child(args)
    jobs = [Job(m, args.loop, tuple(args.only)) for m in args.modules or STANDARD_MODULES]
    reports = run_jobs(jobs, workers=args.workers)
    totals = [0, 0, 0, 0]
    problems = 0
    for job in jobs:
        report = reports[job]
        print(report.summary())
        for test_id in sorted(report.failed):
            detail = report.outcomes[test_id].detail
            print(f"    FAILED {test_id}" + (f"\n{detail}" if args.failures else ""))
        for problem in report.problems:
            print(f"    PROBLEM {problem if args.failures else problem.splitlines()[0]}")
        problems += len(report.problems)
        totals[0] += len(report.passed)
        totals[1] += len(report.failed)
        totals[2] += len(report.skipped)
        totals[3] += report.on_loop_under_test
    if args.json:
        Path(args.json).write_text(json.dumps([dataclasses.asdict(r) for r in reports.values()]))
    print(f"total [{args.loop}]: {totals[0]} passed, {totals[1]} failed, {totals[2]} skipped;"
          f" {totals[3]} ran on the loop under test")
    return 1 if totals[1] or problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
