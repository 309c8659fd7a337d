"""A pytest plugin loaded into a library's own test run (``-p minidb_compat_plugin``).

* ``MINIDB_COMPAT_SELECT``: a file of node ids, one a line (``#`` comments); only those tests
  run, the others are deselected (works on every pytest, unlike ``@argfile``).
* ``MINIDB_COMPAT_REPORT``: a file the plugin writes one JSON line to per test, with its final
  outcome (``passed``, ``failed``, ``skipped``; an attempt that ``pytest-rerunfailures`` retried
  is not final) and, for a failure, the last lines of its traceback.

With a report to write, the run also ends as soon as pytest is done (``os._exit`` with its exit
status), skipping the interpreter's exit handlers: a test that fails before it stops the worker
processes it started (RQ's ``WorkerPool`` tests) leaves non-daemon children that
``multiprocessing`` would join forever at exit, a hang after every outcome is known. The
harness kills the process group, those children with it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

_LONGREPR_TAIL_CHARS = 1500
"""How much of a failure's traceback goes into the report (its end says the most)."""


def _selected() -> set[str] | None:
    path = os.environ.get("MINIDB_COMPAT_SELECT")
    if not path:
        return None
    lines = Path(path).read_text().splitlines()
    return {line.split("#", 1)[0].strip() for line in lines} - {""}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = _selected()
    if wanted is None:
        return
    keep = [item for item in items if item.nodeid in wanted]
    drop = [item for item in items if item.nodeid not in wanted]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


class _Recorder:
    def __init__(self, path: str) -> None:
        self.outcomes: dict[str, dict[str, Any]] = {}
        self.path = path
        self.exitstatus = 1

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.outcome == "rerun":
            self.outcomes.pop(report.nodeid, None)
            return
        entry = self.outcomes.setdefault(report.nodeid, {"outcome": "passed", "detail": ""})
        if report.failed:
            entry["outcome"] = "failed"
            entry["detail"] += f"[{report.when}] " + str(report.longrepr)[-_LONGREPR_TAIL_CHARS:]
        elif report.skipped and entry["outcome"] == "passed":
            entry["outcome"] = "skipped"

    def pytest_sessionfinish(self, exitstatus: int) -> None:
        self.exitstatus = int(exitstatus)
        with open(self.path, "w") as out:
            for nodeid, entry in self.outcomes.items():
                out.write(json.dumps({"nodeid": nodeid, **entry}) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get("MINIDB_COMPAT_REPORT")
    if path:
        config.pluginmanager.register(_Recorder(path), "minidb_compat_recorder")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    recorder = config.pluginmanager.get_plugin("minidb_compat_recorder")
    if isinstance(recorder, _Recorder):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(recorder.exitstatus)
