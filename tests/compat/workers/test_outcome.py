"""The counting and the promises, on made-up runs (no server, no worker: not ``compat``)."""

from __future__ import annotations

from collections import Counter

from tests.compat.workers._promises import PROMISES
from tests.compat.workers._run import Outcome, WorkerRun


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
