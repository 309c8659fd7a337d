"""Run redis-py's own tests (from its sdist) against a server, in a subprocess; read outcomes.

The suite runs with its own ``tests/conftest.py`` and options: ``--redis-url`` names the
server, ``--protocol`` 2 or 3 the RESP version its clients speak. Its asyncio tests need
pytest-asyncio, which minidb's own tests must not load: the suite runs in a virtualenv that sees
the installed packages (pytest, pytest-timeout, packaging) and adds only pytest-asyncio.
Outcomes come from the JUnit XML pytest writes (``passed``, ``failed``, ``skipped``), one per
node id; a test that is asked for but absent from the report (a typo, a test renamed upstream)
is ``missing``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.compat._sdist import cache_dir, fetch_sdist

REDIS_PY_VERSION = "8.1.0"
"""The installed redis-py (``pip show redis``): its sdist's tests match its code."""
PER_TEST_TIMEOUT_S = 30
"""redis-py's own pytest-timeout setting; a hung test fails instead of hanging the run."""
HERE = Path(__file__).parent
PYTEST_ASYNCIO = "pytest-asyncio>=0.24"
"""What redis-py's dev_requirements.txt asks for its asyncio tests."""
VENV_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class RunResult:
    """What one run of the suite did: an outcome per node id, and the run's output tail."""

    outcomes: dict[str, str]
    messages: dict[str, str]
    returncode: int
    output_tail: str

    def with_outcome(self, outcome: str) -> list[str]:
        return sorted(nodeid for nodeid, seen in self.outcomes.items() if seen == outcome)


def redis_py_tree() -> Path:
    """redis-py's unpacked sdist (its ``tests/`` folder inside), fetched once."""
    return fetch_sdist("redis", REDIS_PY_VERSION)


def suite_python() -> Path:
    """The interpreter of the suite's virtualenv (made once, with pytest-asyncio added)."""
    venv = cache_dir() / "venvs" / "redis-py"
    python = venv / "bin" / "python"
    if not (venv / ".complete").exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                       check=True, timeout=VENV_TIMEOUT_S)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", PYTEST_ASYNCIO],
                       check=True, timeout=VENV_TIMEOUT_S)
        (venv / ".complete").touch()
    return python


def run_suite(
    port: int,
    protocol: int,
    targets: Sequence[str],
    *,
    timeout_s: float,
    command_log: Path | None = None,
) -> RunResult:
    """Run ``targets`` (node ids or files) of redis-py's suite against 127.0.0.1:``port``."""
    tree = redis_py_tree()
    with tempfile.TemporaryDirectory(prefix="redis-py-run-") as scratch:
        report = Path(scratch) / "report.xml"
        # Node ids go through a file: hundreds of them overflow no command line that way.
        args_file = Path(scratch) / "targets.txt"
        args_file.write_text("\n".join(targets) + "\n")
        command = [
            str(suite_python()), "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
            "-p", "no:randomly", "-q", "-W", "ignore", f"--junitxml={report}",
            f"--timeout={PER_TEST_TIMEOUT_S}",
            f"--redis-url=redis://127.0.0.1:{port}/0", f"--protocol={protocol}",
            f"@{args_file}",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("MINIDB_COMMANDLOG", None)
        if command_log is not None:
            command += ["-p", "_commandlog"]
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
            env["MINIDB_COMMANDLOG"] = str(command_log)
        done = subprocess.run(
            command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s,
        )
        outcomes, messages = _read_report(report) if report.exists() else ({}, {})
    for target in targets:
        if "::" in target and target not in outcomes:
            outcomes[target] = "missing"
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
    return RunResult(outcomes, messages, done.returncode, tail)


def _read_report(report: Path) -> tuple[dict[str, str], dict[str, str]]:
    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        nodeid = _nodeid(case.get("classname", ""), case.get("name", ""))
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", child.get("message", "")
                break
            if child.tag == "skipped":
                outcome, message = "skipped", child.get("message", "")
        # A test can appear twice (a failing teardown after a passing call): failure wins.
        if outcomes.get(nodeid) != "failed":
            outcomes[nodeid] = outcome
            messages[nodeid] = message
    return outcomes, messages


def _nodeid(classname: str, name: str) -> str:
    """``tests.test_commands.TestRedisCommands`` + ``test_hset`` -> pytest's node id."""
    parts = classname.split(".")
    # The module is the longest dotted prefix that is a file of the tree.
    for cut in range(len(parts), 0, -1):
        module = Path(*parts[:cut]).with_suffix(".py")
        if (redis_py_tree() / module).is_file():
            return "::".join([module.as_posix(), *parts[cut:], name])
    return "::".join([*parts, name])
