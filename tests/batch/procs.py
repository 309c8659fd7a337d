"""Worker subprocesses for the scenario tests: ``Workers`` and the fixtures ``backend`` (a store
of either kind and the options that reach it), ``workers`` (worker processes on it, pointed at
a real ``minidb serve``) and ``queue`` (the test's own client of the store)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from minidb.batch._queue import TaskQueue
from minidb.objstore import FileStore, ObjectStore
from tests.objstore.conftest import S3Rig
from tests.objstore.s3rig import ACCESS_KEY, REGION, SECRET_KEY
from tests.server.conftest import ServeFactory

READY_TIMEOUT_S = 20.0
"""How long a worker subprocess may take to print its ready line."""
DEADLINE_S = 30.0
"""How long a scenario waits for a task to reach a state."""
FAST = ("--lease-seconds", "1.5", "--heartbeat-seconds", "0.3", "--poll-seconds", "0.05",
        "--retry-backoff", "0.05", "--grace", "0.5")


class Workers:
    """Starts ``minidb batch worker`` subprocesses on one store; all killed at teardown."""

    def __init__(self, store_args: list[str], env: dict[str, str], minidb: str) -> None:
        self.store_args = store_args
        self.env = env
        self.minidb = minidb
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, worker_id: str, *extra: str) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "minidb", "batch", "worker", *self.store_args,
                   "--minidb", self.minidb, "--worker-id", worker_id, *FAST, *extra]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, **self.env})
        self.procs.append(proc)
        assert proc.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        line = proc.stdout.readline()
        if line.strip() != f"minidb batch worker {worker_id} ready":
            proc.kill()
            pytest.fail(f"worker did not get ready: {line!r} {proc.stderr.read()}")  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                if proc.returncode is None:
                    os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.wait(timeout=10)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


Backend = tuple[ObjectStore, list[str], dict[str, str]]


@pytest.fixture(name="backend", params=["file", "s3"])
def backend_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A store for the test and the worker options and environment that reach it."""
    if request.param == "file":
        root = tmp_path / "objects"
        store: ObjectStore = FileStore(str(root))
        yield store, ["--store", f"file:{root}"], {}
    else:
        rig: S3Rig = request.getfixturevalue("s3rig")
        bucket = rig.server.new_bucket()
        store = rig.store(bucket)
        env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
               "AWS_DEFAULT_REGION": REGION}
        yield store, ["--store", f"s3://{bucket}/pfx", "--s3-endpoint",
                      rig.server.endpoint], env


@pytest.fixture(name="workers")
def workers_fixture(backend: Any, serve: ServeFactory) -> Iterator[Workers]:
    """Worker subprocesses on the test's store, pointed at a real minidb server."""
    server = serve()
    pool = Workers(backend[1], backend[2], f"127.0.0.1:{server.port}")
    yield pool
    pool.close()


@pytest.fixture(name="queue")
def queue_fixture(backend: Any) -> Iterator[TaskQueue]:
    """The test's own queue client on the workers' store."""
    yield TaskQueue(backend[0])
