"""The test body every library shares: one run against a server, judged by its promise."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.compat.workers._promises import PROMISES
from tests.compat.workers._run import job_count, run_workers

SERVERS = ("minidb", "redis")
"""minidb as the issue asks; Debian's redis-server the same way, so "what the library
promises on Redis" is measured beside it."""
PYTEST_TIMEOUT_S = 1800
"""Enqueue, run and result check of 10,000 jobs at the slowest rate a run tolerates."""
RESULTS_LOG = "workers-results.jsonl"
"""Each run's counts, appended under the test's ``tmp_path`` parent for the README table."""


def check_workers(library: str, server: str, tmp_path: Path) -> None:
    if server == "redis" and shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    run = run_workers(library, server, tmp_path, job_count(), PROMISES[library].rerun_after_s)
    print(run.report())
    assert run.outcome is not None
    with open(tmp_path.parent / RESULTS_LOG, "a") as log:
        log.write(json.dumps({"library": library, "server": server, "jobs": run.jobs,
                              "enqueue_s": round(run.enqueue_s, 1),
                              "work_s": round(run.work_s, 1), "down_s": round(run.down_s, 1),
                              "worker_restarts": run.worker_restarts,
                              **run.outcome.summary()}) + "\n")
    assert run.killed_after_runs < run.jobs, run.failure("the kill came after every job ran")
    broken = PROMISES[library].check(run)
    assert not broken, run.failure("; ".join(broken))
