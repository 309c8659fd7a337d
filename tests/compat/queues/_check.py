"""One suite's selected tests, less its pending ones, run against a fresh minidb: all must pass.

``MINIDB_COMPAT_WITH_PENDING=1`` runs (and asserts) the pending ones too: once the commands
they wait for have landed, that run says which can leave ``<lib>_pending.txt``.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.compat.queues._servers import minidb_server
from tests.compat.queues._suites import SUITES, SuiteRun, read_list, run_suite

DETAIL_CHARS = 600
"""How much of each failure's traceback the assertion message shows."""


def run_on_minidb(name: str, workdir: Path) -> tuple[list[str], SuiteRun]:
    """The node ids expected to pass, and the run of exactly those against minidb."""
    suite = SUITES[name]
    selected_path, pending_path = suite.lists()
    selected, pending = read_list(selected_path), read_list(pending_path)
    assert selected, f"{selected_path} is empty: regenerate it against redis-server"
    with_pending = os.environ.get("MINIDB_COMPAT_WITH_PENDING") == "1"
    expected = sorted(set(selected) - (set() if with_pending else set(pending)))
    select = workdir / f"{name}-select.txt"
    select.write_text("\n".join(expected) + "\n")
    with minidb_server(workdir / "data") as port:
        run = run_suite(suite, port, workdir, select)
    return expected, run


def check_suite(name: str, workdir: Path) -> None:
    expected, run = run_on_minidb(name, workdir)
    pending = read_list(SUITES[name].lists()[1])
    not_passed = {nodeid: run.outcomes.get(nodeid, "not run") for nodeid in expected
                  if run.outcomes.get(nodeid) != "passed"}
    summary = (f"{name}: {len(expected) - len(not_passed)}/{len(expected)} selected tests "
               f"passed against minidb in {run.seconds:.0f} s ({len(pending)} pending)")
    print(summary)
    if run.returncode is None:
        raise AssertionError(f"{summary}; killed at the {SUITES[name].deadline_s:.0f} s "
                             f"deadline; output tail:\n{run.output_tail}")
    if not_passed:
        lines = [f"  {nodeid}: {outcome}\n    {run.details.get(nodeid, '')[-DETAIL_CHARS:]}"
                 for nodeid, outcome in sorted(not_passed.items())]
        raise AssertionError(f"{summary}; these did not pass:\n" + "\n".join(lines)
                             + f"\noutput tail:\n{run.output_tail[-2000:]}")
