"""The four job queues' suites: how each is installed, pointed at a server and run.

A ``Suite`` says which sdist (``fetch_sdist``), what its virtualenv holds (the library's pinned
or newest test requirements; never minidb, the suite talks RESP over a socket), which test
files it runs and how it learns the server's address. ``run_suite`` runs the library's own
pytest in that virtualenv, in a new process group killed at the deadline, with two helpers on
``PYTHONPATH`` (``shim/``): ``minidb_compat_plugin`` (runs only the listed node ids, records
each test's final outcome) and, for suites that hard-code ``localhost:6379``, a
``sitecustomize`` that moves that address to the server under test.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.compat._sdist import cache_dir, fetch_sdist
from tests.compat._servers import die_with_parent

HERE = Path(__file__).parent
SHIM = HERE / "shim"
INSTALL_TIMEOUT_S = 900.0
"""Creating one virtualenv (pip resolves and downloads the suite's requirements)."""
OUTPUT_TAIL_CHARS = 6000
"""How much of a suite's output an assertion message carries."""


@dataclass(frozen=True)
class Suite:
    name: str
    version: str
    requirements: Callable[[Path], list[str]]
    """pip arguments, given the unpacked sdist (the tree itself is installed from them)."""
    test_paths: tuple[str, ...]
    """What the library's pytest is given, relative to its tree."""
    address_env: Callable[[str, int], dict[str, str]]
    """The environment that points the suite at ``host:port``, its own way."""
    deadline_s: float
    """The whole run against minidb; past it the run is killed and the test fails."""

    def tree(self) -> Path:
        return fetch_sdist(self.name, self.version)

    def lists(self) -> tuple[Path, Path]:
        """This suite's selected and pending lists (checked in beside this module)."""
        return HERE / f"{self.name}_selected.txt", HERE / f"{self.name}_pending.txt"


def _redirect_6379(host: str, port: int) -> dict[str, str]:
    return {"MINIDB_COMPAT_REDIRECT_PORT": str(port)}


def _arq_requirements(tree: Path) -> list[str]:
    # arq's own pins (redis-py 4.6.0 with hiredis 2.3.2, pytest 8.1.1, pytest-asyncio 0.23.6,
    # pytest-timeout...) less Docker and testcontainers (shim/testcontainers stands in) and
    # pytest-pretty (output only).
    testing = (tree / "requirements" / "testing.txt").read_text().splitlines()
    pins = [line.split("#")[0].strip() for line in testing]
    dropped = ("testcontainers", "docker", "pytest-pretty")
    pins = [pin for pin in pins if pin and not pin.startswith(dropped)]
    return ["-r", str(tree / "requirements" / "pyproject.txt"), *pins, "--no-deps", str(tree)]


SUITES: dict[str, Suite] = {
    suite.name: suite
    for suite in (
        Suite(
            # The newest 2.x on PyPI (`pip index versions rq`: 2.12.0; the issue named 2.10).
            # Its tox deps; tests/ connects to Redis() and redis://127.0.0.1:6379/<db>.
            "rq", "2.12.0",
            lambda tree: ["psutil", "pytest", str(tree)],
            ("tests",), _redirect_6379, 1500.0,
        ),
        Suite(
            "arq", "0.26.3", _arq_requirements, ("tests",),
            lambda host, port: {"MINIDB_COMPAT_HOST": host, "MINIDB_COMPAT_PORT": str(port)},
            600.0,
        ),
        Suite(
            # huey's tests run under pytest as they do under its unittest runner; the Redis
            # ones connect to Redis() (localhost:6379).
            "huey", "3.5.4", lambda tree: ["pytest", "redis", str(tree)],
            ("huey/tests",), _redirect_6379, 900.0,
        ),
        Suite(
            # Celery's transport: kombu's Redis integration tests (t/integration/test_redis*),
            # which read REDIS_HOST and REDIS_6379_TCP (tox-docker's names).
            "kombu", "5.7.0",
            lambda tree: [f"{tree}[redis]", "pytest", "pytest-rerunfailures", "pytest-freezer",
                          "hypothesis"],
            ("t/integration/test_redis.py", "t/integration/test_redis_brpop_qos.py"),
            lambda host, port: {"REDIS_HOST": host, "REDIS_6379_TCP": str(port)},
            900.0,
        ),
    )
}


def venv_python(suite: Suite) -> Path:
    """The suite's virtualenv's python (the library's sdist and its test requirements)."""
    return requirements_venv(f"{suite.name}-{suite.version}", suite.requirements(suite.tree()))


def requirements_venv(name: str, args: list[str]) -> Path:
    """A virtualenv holding ``pip install args``, created once under the compat cache (keyed by
    the Python version and ``args``, marked complete only after pip succeeded); its python."""
    key = hashlib.sha256(json.dumps([sys.version, args]).encode()).hexdigest()[:10]
    venv = cache_dir() / "venvs" / f"{name}-{key}"
    python = venv / "bin" / "python"
    if (venv / ".complete").exists():
        return python
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args],
        check=True, timeout=INSTALL_TIMEOUT_S,
    )  # fmt: skip
    (venv / ".complete").touch()
    return python


@dataclass(frozen=True)
class SuiteRun:
    outcomes: dict[str, str]
    """node id -> passed / failed / skipped (the final attempt)."""
    details: dict[str, str]
    """node id -> the end of its failure's traceback."""
    output_tail: str
    returncode: int | None
    """None: killed at the deadline."""
    seconds: float


def run_suite(suite: Suite, port: int, workdir: Path, select: Path | None = None,
              deadline_s: float | None = None) -> SuiteRun:
    """Run the suite (only the node ids in ``select``, if given) against ``127.0.0.1:port``."""
    python = venv_python(suite)
    report = workdir / f"{suite.name}-outcomes.jsonl"
    log = workdir / f"{suite.name}-output.txt"
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("PYTEST_", "PYTHON", "VIRTUAL_ENV", "COV_"))}
    env.update(suite.address_env("127.0.0.1", port))
    env.update(
        PYTHONPATH=str(SHIM), PATH=f"{python.parent}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(python.parent.parent), MINIDB_COMPAT_REPORT=str(report),
        MINIDB_COMPAT_HOST="127.0.0.1", MINIDB_COMPAT_PORT=str(port),
    )
    if select is not None:
        env["MINIDB_COMPAT_SELECT"] = str(select)
    command = [str(python), "-m", "pytest", "-p", "minidb_compat_plugin", "-p",
               "no:cacheprovider", "-q", "-rfE", *suite.test_paths]
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=suite.tree(), env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=die_with_parent)
        try:
            returncode: int | None = proc.wait(timeout=deadline_s or suite.deadline_s)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _kill_group(proc)
    seconds = time.monotonic() - started
    outcomes: dict[str, str] = {}
    details: dict[str, str] = {}
    if report.exists():
        for line in report.read_text().splitlines():
            entry = json.loads(line)
            outcomes[entry["nodeid"]] = entry["outcome"]
            if entry["detail"]:
                details[entry["nodeid"]] = entry["detail"]
    tail = log.read_text(errors="replace")[-OUTPUT_TAIL_CHARS:]
    return SuiteRun(outcomes, details, tail, returncode, seconds)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """The suite's process group (its workers and forked work horses too), if still there."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.wait(timeout=10)


def read_list(path: Path) -> dict[str, str]:
    """A selected/pending list: node id -> the reason after ``#`` (may be empty)."""
    if not path.exists():
        return {}
    entries: dict[str, str] = {}
    for line in path.read_text().splitlines():
        nodeid, _, reason = line.partition("#")
        if nodeid.strip():
            entries[nodeid.strip()] = reason.strip()
    return entries
