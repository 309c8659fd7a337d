"""The counting and the promises, on made-up runs (no server, no worker: not ``compat``)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.compat.workers import _run
from tests.compat.workers._promises import PROMISES
from tests.compat.workers._run import Outcome, WorkerRun, unsettled


def outcome(runs: dict[int, int], states: dict[int, str], jobs: int = 5) -> Outcome:
    return Outcome(frozenset(range(jobs)), Counter(runs), states)


def run_of(library: str, result: Outcome, worker_restarts: int = 0) -> WorkerRun:
    return WorkerRun(library, "minidb", len(result.acked), outcome=result,
                     worker_restarts=worker_restarts)  # fmt: skip


def test_outcome_counts_lost_duplicates_and_missing_results() -> None:
    result = outcome({0: 1, 1: 2, 2: 1, 3: 0},
                     {0: "finished", 1: "finished", 2: "started", 3: "queued", 4: "failed"})
    assert result.never_ran == [3, 4]
    assert result.lost == [3]  # 4 never ran, but the library reports it failed
    assert result.duplicates == 1
    assert result.ran_without_result == [2]
    assert result.summary()["failed_not_run"] == 1


def test_outcome_wrong_result_is_counted() -> None:
    result = outcome({n: 1 for n in range(5)}, {n: "finished" for n in range(4)} | {4: "wrong"})
    assert result.wrong_results == [4]
    assert PROMISES["arq"].check(run_of("arq", result))


def test_promise_kept_when_every_job_ran_once() -> None:
    result = outcome({n: 1 for n in range(5)}, {n: "finished" for n in range(5)})
    assert all(not promise.check(run_of(name, result)) for name, promise in PROMISES.items())


def test_rq_promise_forbids_a_second_run() -> None:
    result = outcome({n: 1 for n in range(5)} | {2: 2}, {n: "finished" for n in range(5)})
    assert PROMISES["rq"].check(run_of("rq", result))
    assert not PROMISES["arq"].check(run_of("arq", result))


def test_promise_window_grows_with_each_worker_restart() -> None:
    never = {n: 0 for n in range(2)} | {n: 1 for n in range(2, 5)}
    result = outcome(never, {n: "finished" for n in range(2, 5)} | {0: "queued", 1: "queued"})
    assert PROMISES["rq"].check(run_of("rq", result))  # 2 unfinished, window 1
    assert not PROMISES["rq"].check(run_of("rq", result, worker_restarts=1))


class FakeWorker:
    """``SupervisedWorker``'s face to ``_wait_settled``: alive, last started at ``started_at``."""

    def __init__(self, started_at: float) -> None:
        self.started_at = started_at

    def keep_running(self) -> None:
        pass


class ScriptedStates:
    """The library's answers, one dict per ask; records what each ask covered."""

    def __init__(self, *answers: dict[int, str]) -> None:
        self.answers = list(answers)
        self.asked: list[list[int] | None] = []

    def __call__(self, numbers: list[int] | None) -> dict[int, str]:
        self.asked.append(numbers)
        return self.answers.pop(0)


@pytest.fixture
def no_settle_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_run, "SETTLE_POLL_S", 0.0)


def test_unsettled_keeps_only_jobs_the_library_still_holds() -> None:
    states = {0: "finished", 1: "started", 2: "queued", 3: "failed", 4: "missing", 5: "wrong"}
    assert unsettled([0, 1, 2, 3, 4, 5, 6], states) == [1, 2]


def test_wait_settled_asks_again_for_a_job_left_in_progress(no_settle_pause: None) -> None:
    """arq's job that ran but whose result store the kill cut off is "started" until its
    in-progress key expires and it reruns: the wait asks again, only about that job."""
    states = ScriptedStates({0: "finished", 1: "started", 2: "finished"},
                            {1: "started"}, {1: "finished"})  # fmt: skip
    now = time.monotonic()
    _run._wait_settled(states, 15.5, now, FakeWorker(now))  # type: ignore[arg-type]
    assert states.asked == [None, [1], [1]]


def test_wait_settled_gives_up_past_the_last_break_plus_rerun_time(
        no_settle_pause: None) -> None:  # fmt: skip
    long_ago = time.monotonic() - 3600
    states = ScriptedStates({0: "started"})
    _run._wait_settled(states, 15.5, long_ago, FakeWorker(long_ago))  # type: ignore[arg-type]
    assert states.asked == [None]


def test_wait_settled_counts_from_the_worker_restart(no_settle_pause: None) -> None:
    """A worker started again after the server's restart interrupted its own jobs: their
    rerun time runs from that restart."""
    long_ago = time.monotonic() - 3600
    states = ScriptedStates({0: "started"}, {0: "finished"})
    _run._wait_settled(states, 15.5, long_ago, FakeWorker(time.monotonic()))  # type: ignore[arg-type]
    assert states.asked == [None, [0]]


def test_arq_promise_waits_out_the_in_progress_key() -> None:
    """arq skips a job while its in-progress key lives (job timeout 5 s + 10 s), then polls."""
    assert PROMISES["arq"].rerun_after_s >= 5 + 10
    assert PROMISES["rq"].rerun_after_s == PROMISES["celery"].rerun_after_s == 0
