"""One suite's selected tests, less its pending ones, run against a fresh minidb: all must pass.

``MINIDB_COMPAT_WITH_PENDING=1`` runs (and asserts) the pending ones too: once the commands
they wait for have landed, that run says which can leave ``<lib>_pending.txt``.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.compat._servers import MINIDB_DURABLE, minidb_server
from tests.compat.queues._suites import (
    INSTALL_TIMEOUT_S,
    SUITES,
    SuiteRun,
    read_list,
    run_suite,
)

DETAIL_CHARS = 600
"""How much of each failure's traceback the assertion message shows."""
PYTEST_TIMEOUT_MARGIN_S = 300.0
"""Beyond the suite's deadlines, what a compat test may spend creating its virtualenv and
starting servers before pytest-timeout (the project's 120 s default) stops it."""
MAX_RETRIED = 5
"""Failures a suite's run may have and still get a retry (more is not a lost race)."""


def pytest_timeout_s(name: str) -> float:
    """The ``pytest.mark.timeout`` of a suite's test: its run and a retry, a virtualenv to
    create, and a margin (the deadline on the suite's own run says more, sooner)."""
    return 2 * SUITES[name].deadline_s + INSTALL_TIMEOUT_S + PYTEST_TIMEOUT_MARGIN_S


def run_on_minidb(name: str, workdir: Path) -> tuple[list[str], SuiteRun]:
    """The node ids expected to pass, and the run of exactly those against minidb."""
    suite = SUITES[name]
    selected_path, pending_path = suite.lists()
    selected, pending = read_list(selected_path), read_list(pending_path)
    assert selected, f"{selected_path} is empty: regenerate it against redis-server"
    with_pending = os.environ.get("MINIDB_COMPAT_WITH_PENDING") == "1"
    expected = sorted(set(selected) - (set() if with_pending else set(pending)))
    return expected, _run_ids(name, expected, workdir)


def _run_ids(name: str, nodeids: list[str], workdir: Path) -> SuiteRun:
    """Exactly ``nodeids`` of the suite, against a minidb of their own."""
    workdir.mkdir(parents=True, exist_ok=True)
    select = workdir / f"{name}-select.txt"
    select.write_text("\n".join(nodeids) + "\n")
    with minidb_server(workdir, MINIDB_DURABLE) as port:
        return run_suite(SUITES[name], port, workdir, select)


def check_suite(name: str, workdir: Path) -> None:
    expected, run = run_on_minidb(name, workdir)
    pending = read_list(SUITES[name].lists()[1])
    if run.returncode is None:
        raise AssertionError(f"{name}: killed at the {SUITES[name].deadline_s:.0f} s deadline "
                             f"after {len(run.outcomes)} tests; output tail:\n{run.output_tail}")
    failed_once = [nodeid for nodeid in expected if run.outcomes.get(nodeid) != "passed"]
    flaky: list[str] = []
    if 0 < len(failed_once) <= MAX_RETRIED:
        # The machine may be shared: RQ's two-worker ordering tests (the first worker has 0.5 s
        # to start the first job) and arq's unclosed-socket warnings (raised wherever the GC
        # happens to run) lose races under load, whatever the server. One more run of just
        # those, on a fresh server; what passes then is reported as flaky, not failed.
        retry = _run_ids(name, failed_once, workdir / "retry")
        flaky = [nodeid for nodeid in failed_once if retry.outcomes.get(nodeid) == "passed"]
        run = retry if retry.returncode is not None else run
    not_passed = {nodeid: run.outcomes.get(nodeid, "not run") for nodeid in failed_once
                  if nodeid not in flaky}
    summary = (f"{name}: {len(expected) - len(not_passed)}/{len(expected)} selected tests "
               f"passed against minidb ({len(pending)} pending; "
               f"{len(flaky)} only on a retry: {flaky})")
    print(summary)
    if not_passed:
        lines = [f"  {nodeid}: {outcome}\n    {run.details.get(nodeid, '')[-DETAIL_CHARS:]}"
                 for nodeid, outcome in sorted(not_passed.items())]
        raise AssertionError(f"{summary}; these did not pass:\n" + "\n".join(lines)
                             + f"\noutput tail:\n{run.output_tail[-2000:]}")
