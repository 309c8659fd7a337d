"""What each library promises about a job when its Redis connection breaks mid-run.

Each promise is a bound on the jobs an outage may touch: at most the jobs the worker held at
that moment (its in-flight window) per break the worker lived through (the server's kill,
plus each time the worker process died of it and was started again). Inside the window a job
may be left unfinished (never ran, or ran without its result stored) or run twice, as the
library's docs allow; outside it, every acknowledged job runs exactly once with its result
readable. ``check`` returns what broke the promise, empty when kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.compat.workers._run import WorkerRun


@dataclass(frozen=True)
class Promise:
    library: str
    in_flight: int
    """Jobs one worker holds at once: running plus fetched ahead."""
    may_duplicate: bool
    """The library's docs allow a job to run again after an outage."""
    may_leave_unfinished: bool
    """The library's docs allow a job caught by the outage not to complete."""
    rerun_after_s: float = 0.0
    """How long after a break the library may wait before it runs an interrupted job again
    (0: it never does); the run is judged only once that has passed or nothing is left."""

    def window(self, run: WorkerRun) -> int:
        return self.in_flight * (1 + run.worker_restarts)

    def check(self, run: WorkerRun) -> list[str]:
        assert run.outcome is not None
        broken: list[str] = []
        outcome, window = run.outcome, self.window(run)
        if outcome.wrong_results:
            broken.append(f"finished with a wrong stored result: {outcome.wrong_results[:10]}")
        unfinished = len(outcome.lost) + len(outcome.ran_without_result)
        allowed = window if self.may_leave_unfinished else 0
        if unfinished > allowed:
            broken.append(f"{unfinished} jobs unfinished (allowed {allowed}): never ran "
                          f"{outcome.lost[:10]}, ran without a result "
                          f"{outcome.ran_without_result[:10]}")
        allowed = window if self.may_duplicate else 0
        if outcome.duplicates > allowed:
            broken.append(f"{outcome.duplicates} runs twice (allowed {allowed})")
        return broken


PROMISES = {
    # RQ's docs (Workers, "Worker's death"; Job registries): a job a dead worker held stays in
    # the StartedJobRegistry until its cleanup marks it failed as abandoned (re-queued only if
    # it has a Retry); it is not run again. The window between LPOP from the queue and the
    # StartedJobRegistry write is not covered either. SimpleWorker holds one job.
    "rq": Promise("rq", in_flight=1, may_duplicate=False, may_leave_unfinished=True),
    # arq's docs ("Retrying jobs and cancellation"): jobs are not removed from the queue until
    # they succeed or fail, so a job interrupted may run again: at least once. An interrupted
    # job waits for its in-progress key to expire (job timeout + 10 s; ``arq_side`` sets a 5 s
    # job timeout) before it runs again: 15 s, plus the worker's 0.5 s poll delay. That covers
    # a job that ran but whose result store (``finish_job``'s MULTI/EXEC) the kill cut off: it
    # stays queued and "in progress" until then. max_jobs=10.
    "arq": Promise("arq", in_flight=10, may_duplicate=True, may_leave_unfinished=False,
                   rerun_after_s=5 + 10 + 0.5),
    # Celery's docs (Tasks, "acks_late"; Redis broker caveats, "visibility timeout"): with
    # acks_late=False a task is acknowledged just before it runs, so one in flight when the
    # connection breaks may never complete (at most once); a message fetched but not
    # acknowledged is redelivered after the visibility timeout, which may run it again if its
    # acknowledgement was the part that failed. Concurrency 2 x prefetch multiplier 4.
    "celery": Promise("celery", in_flight=8, may_duplicate=True, may_leave_unfinished=True),
}
