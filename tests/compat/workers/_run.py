"""One run: enqueue N jobs, start the library's worker, kill -9 the server mid-way, count.

The pure part is ``Outcome``: from the acknowledged job numbers, the run file's lines and the
states the library reports after the run, it counts what the issue asks about (lost jobs,
jobs run twice, results reported stored but unreadable). The rest is the shell around it:
``run_workers`` drives the server (``_servers``), the library's scripts in ``side/`` (run by
the library's virtualenv's python) and its worker command, each wait with a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.compat._servers import DURABLE, die_with_parent, serving
from tests.compat.workers._venvs import library_python

SIDE = Path(__file__).parent / "side"
JOBS_ENV = "MINIDB_COMPAT_JOBS"
DEFAULT_JOBS = 10_000
KILL_AT_FRACTION = 0.3
"""The server is killed once this share of the jobs has run ("a few thousand" of 10,000)."""
ENQUEUE_TIMEOUT_S = 240.0
RESULTS_TIMEOUT_S = 240.0
SECONDS_PER_JOB_BUDGET = 0.1
"""The slowest worker rate a run tolerates (10 jobs/s; RQ's does about 15 here): from the
worker's start, ``jobs`` times this plus ``STALL_S`` is the deadline for every job to run;
past it the run stops and is judged as it is."""
STALL_S = 45.0
"""No new run for this long ends the wait: longer than RQ's reconnect backoff after one
failure (1+2+4+8 s) and Celery's ``visibility_timeout`` (20 s) with its restore interval."""
POLL_S = 0.1
SETTLE_SLACK_S = 30.0
"""Beyond a library's ``rerun_after_s`` from the last break: the rerun itself (a poll, the
job, its result store) and a worker started again importing its library on a busy machine."""
SETTLE_POLL_S = 1.0
"""Between two asks of the library for the jobs it still holds (a subprocess each)."""
UNSETTLED_STATES = frozenset({"queued", "started"})
"""The library still holds the job: it may run it (again) and store its result."""
WORKER_TAIL_CHARS = 4000
MAX_WORKER_RESTARTS = 5
"""A worker that exits is started again, as supervisord or systemd's ``Restart=always``
would: RQ's worker quits on a connection error outside its dequeue loop (its heartbeat's
EXPIRE, a job's result store), on Redis as on minidb. More exits than this fail the run."""


def job_count() -> int:
    return int(os.environ.get(JOBS_ENV, DEFAULT_JOBS))


def worker_command(library: str, python: Path, url: str) -> list[str]:
    bin_dir = python.parent
    if library == "rq":
        # SimpleWorker runs jobs in the worker's process: RQ's default forks a work horse per
        # job: 26 jobs/s against 60 here (200 jobs, idle machine), 6.4 minutes for 10,000.
        return [str(bin_dir / "rq"), "worker", "--worker-class", "rq.worker.SimpleWorker",
                "--url", url, "compat"]
    if library == "arq":
        return [str(bin_dir / "arq"), "arq_side.WorkerSettings"]
    return [str(bin_dir / "celery"), "-A", "celery_side", "worker", "--concurrency", "2",
            "--loglevel", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"]


@dataclass(frozen=True)
class Outcome:
    """What a run did to the acknowledged jobs."""

    acked: frozenset[int]
    runs: Counter[int]
    """job number -> how many times it ran (lines in the run file)."""
    states: dict[int, str]
    """job number -> finished / failed / queued / started / missing / wrong, the library's
    view after the run."""

    @property
    def never_ran(self) -> list[int]:
        return sorted(n for n in self.acked if self.runs[n] == 0)

    @property
    def lost(self) -> list[int]:
        """Acknowledged, never ran, and the library does not say it failed or gave it up."""
        return [n for n in self.never_ran if self.states.get(n) != "failed"]

    @property
    def duplicates(self) -> int:
        """Runs beyond the first, over all jobs."""
        return sum(count - 1 for count in self.runs.values() if count > 1)

    @property
    def wrong_results(self) -> list[int]:
        """Reported finished, but the stored return value is not the job's number."""
        return sorted(n for n, state in self.states.items() if state == "wrong")

    @property
    def ran_without_result(self) -> list[int]:
        """Ran, yet the library reports no stored result (the run's store was cut off)."""
        return sorted(n for n in self.acked
                      if self.runs[n] > 0 and self.states.get(n) != "finished")

    def summary(self) -> dict[str, int]:
        return {"acked": len(self.acked), "ran": sum(1 for n in self.acked if self.runs[n]),
                "lost": len(self.lost), "failed_not_run": len(self.never_ran) - len(self.lost),
                "duplicates": self.duplicates, "wrong_results": len(self.wrong_results),
                "ran_without_result": len(self.ran_without_result)}


@dataclass
class WorkerRun:
    library: str
    server: str
    jobs: int
    outcome: Outcome | None = None
    killed_after_runs: int = 0
    down_s: float = 0.0
    enqueue_s: float = 0.0
    work_s: float = 0.0
    stalled: bool = False
    settle_s: float = 0.0
    """After every job ran, how long the wait for the library's reruns took."""
    worker_restarts: int = 0
    worker_tail: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    def report(self) -> str:
        summary = self.outcome.summary() if self.outcome else {}
        return (f"{self.library} on {self.server}: {self.jobs} jobs, enqueue "
                f"{self.enqueue_s:.1f} s, work {self.work_s:.1f} s, settle "
                f"{self.settle_s:.1f} s, killed after "
                f"{self.killed_after_runs} runs, down {self.down_s:.1f} s, worker restarts "
                f"{self.worker_restarts}, stalled {self.stalled}: {json.dumps(summary)}")

    def failure(self, message: str) -> str:
        return f"{message}\n{self.report()}\n--- worker output tail ---\n{self.worker_tail}"


def count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as runs:
        return sum(1 for _ in runs)


def read_runs(path: Path) -> Counter[int]:
    runs: Counter[int] = Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            runs[int(line.split()[0])] += 1
    return runs


def unsettled(numbers: list[int], states: dict[int, str]) -> list[int]:
    """Of ``numbers``, those the library still holds as queued or started (reported states)."""
    return [n for n in numbers if states.get(n) in UNSETTLED_STATES]


def run_workers(library: str, server_kind: str, workdir: Path, jobs: int,
                rerun_after_s: float = 0.0) -> WorkerRun:
    """The whole run against ``server_kind`` (minidb or redis); never raises on a bad count.

    ``rerun_after_s`` is how long after a break the library may wait before it runs an
    interrupted job again (``Promise.rerun_after_s``): when every job has run, the run goes
    on until the library holds none as queued or started, or that long (plus
    ``SETTLE_SLACK_S``) after the last break, so a job that ran but whose result store the
    kill cut off is judged after the rerun its library promises, not before."""
    python = library_python(library)
    run = WorkerRun(library, server_kind, jobs)
    runs_path, acked_path = workdir / "runs.txt", workdir / "acked.txt"
    run_deadline_s = jobs * SECONDS_PER_JOB_BUDGET + STALL_S
    with serving(server_kind, workdir, DURABLE[server_kind]) as server:
        env = _side_env(python, server.port, runs_path)
        script = str(SIDE / f"{library}_side.py")

        def states_of(numbers: list[int] | None = None) -> dict[int, str]:
            only = [",".join(map(str, numbers))] if numbers is not None else []
            stdout = subprocess.run(
                [str(python), script, "results", str(server.port), str(jobs), *only], env=env,
                cwd=SIDE, check=True, timeout=RESULTS_TIMEOUT_S, capture_output=True,
                text=True,
            ).stdout  # fmt: skip
            return {int(n): state for n, state in json.loads(stdout).items()}

        started = time.monotonic()
        subprocess.run([str(python), script, "enqueue", str(server.port), str(jobs),
                        str(acked_path)], env=env, cwd=SIDE, check=True,
                       timeout=ENQUEUE_TIMEOUT_S)  # fmt: skip
        run.enqueue_s = time.monotonic() - started
        acked = frozenset(int(line) for line in acked_path.read_text().split())
        worker = SupervisedWorker(
            worker_command(library, python, f"redis://127.0.0.1:{server.port}/0"), env,
            workdir / "worker.log")
        try:
            started = time.monotonic()
            run.killed_after_runs = _wait_for_runs(runs_path, int(jobs * KILL_AT_FRACTION),
                                                   started + run_deadline_s, worker)
            run.down_s = server.kill9_and_restart()
            server_back = time.monotonic()
            run.stalled = _wait_all_ran(runs_path, acked, started + run_deadline_s, worker)
            run.work_s = time.monotonic() - started
            if rerun_after_s > 0:
                settle_started = time.monotonic()
                _wait_settled(states_of, rerun_after_s, server_back, worker)
                run.settle_s = time.monotonic() - settle_started
        finally:
            worker.stop()
            run.worker_restarts = worker.restarts
            run.worker_tail = worker.tail()
        states = states_of()
    run.outcome = Outcome(acked, read_runs(runs_path), states)
    return run


class SupervisedWorker:
    """The library's worker command in its own process group, started again if it exits."""

    def __init__(self, command: list[str], env: dict[str, str], log_path: Path) -> None:
        self.command, self.env, self.log_path = command, env, log_path
        self.restarts = 0
        self.started_at = 0.0
        """``time.monotonic()`` at the last start: a restart is a break the jobs it held
        were interrupted by."""
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        self.started_at = time.monotonic()
        with open(self.log_path, "a") as log:
            return subprocess.Popen(self.command, cwd=SIDE, env=self.env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=die_with_parent)  # fmt: skip

    def keep_running(self) -> None:
        if self.proc.poll() is None:
            return
        _kill_group(self.proc)  # what it forked
        if self.restarts >= MAX_WORKER_RESTARTS:
            raise RuntimeError(f"the worker exited {self.proc.returncode} "
                               f"{self.restarts + 1} times\n{self.tail()}")
        self.restarts += 1
        with open(self.log_path, "a") as log:
            log.write(f"--- worker exited {self.proc.returncode}: restart {self.restarts}\n")
        self.proc = self._start()

    def stop(self) -> None:
        _kill_group(self.proc)

    def tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-WORKER_TAIL_CHARS:]


def _side_env(python: Path, port: int, runs_path: Path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("PYTEST_", "PYTHON", "VIRTUAL_ENV", "COV_"))}
    env.update(PYTHONPATH=str(SIDE), MINIDB_COMPAT_PORT=str(port),
               MINIDB_COMPAT_RUNS=str(runs_path), VIRTUAL_ENV=str(python.parent.parent),
               PATH=f"{python.parent}{os.pathsep}{env.get('PATH', '')}")
    return env


def _wait_for_runs(runs_path: Path, target: int, deadline: float,
                   worker: SupervisedWorker) -> int:
    """Until the run file has ``target`` lines; their count then."""
    while True:
        done = count_lines(runs_path)
        if done >= target:
            return done
        worker.keep_running()
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {done} of {target} runs before the deadline")
        time.sleep(POLL_S)


def _wait_all_ran(runs_path: Path, acked: frozenset[int], deadline: float,
                  worker: SupervisedWorker) -> bool:
    """Until every acknowledged job ran, nothing new ran for ``STALL_S`` or the deadline;
    True if it stopped for want of progress."""
    last_count, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        worker.keep_running()
        count = count_lines(runs_path)
        if count != last_count:
            last_count, last_change = count, time.monotonic()
            if count >= len(acked) and acked <= set(read_runs(runs_path)):
                return False
        elif time.monotonic() - last_change > STALL_S:
            return True
        time.sleep(POLL_S)
    return True


def _wait_settled(states_of: Callable[[list[int] | None], dict[int, str]],
                  rerun_after_s: float, server_back: float, worker: SupervisedWorker) -> None:
    """Until the library holds no job as queued or started, or ``rerun_after_s``
    plus ``SETTLE_SLACK_S`` after the last break (the server's restart or the worker's);
    each ask covers only the jobs the previous one found unsettled."""
    pending: list[int] | None = None  # the first ask covers every job
    while True:
        worker.keep_running()
        states = states_of(pending)
        pending = unsettled(sorted(states) if pending is None else pending, states)
        deadline = max(server_back, worker.started_at) + rerun_after_s + SETTLE_SLACK_S
        if not pending or time.monotonic() > deadline:
            return
        time.sleep(SETTLE_POLL_S)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
