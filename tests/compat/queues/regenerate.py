"""Regenerate ``<lib>_selected.txt``: the tests of a suite that pass against a real redis-server.

    python -m tests.compat.queues.regenerate rq arq huey kombu

runs each suite whole against the Debian ``redis-server`` and writes the node ids that passed
there (the ones that fail or skip need what no local setup has: Sentinel, a cluster, TLS, a
second Redis, Docker...; their count is in the header). The minidb test then runs exactly
these, less ``<lib>_pending.txt``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from tests.compat._servers import redis_server
from tests.compat.queues._suites import SUITES, run_suite

REGENERATE = "python -m tests.compat.queues.regenerate"


def regenerate(name: str) -> None:
    suite = SUITES[name]
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                             timeout=10).stdout.split()[2].removeprefix("v=")
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as port:
        run = run_suite(suite, port, Path(tmp), deadline_s=suite.deadline_s * 2)
    if run.returncode is None or not run.outcomes:
        sys.exit(f"{name}: the run against redis-server did not finish\n{run.output_tail}")
    counts = Counter(run.outcomes.values())
    passed = sorted(nodeid for nodeid, outcome in run.outcomes.items() if outcome == "passed")
    selected, _ = suite.lists()
    header = [
        f"# {name} {suite.version}: the tests that pass against redis-server {version}",
        f"# (regenerate: {REGENERATE} {name}; took {run.seconds:.0f} s).",
        f"# Against Redis: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped; only the passed ones are listed.",
    ]
    selected.write_text("\n".join(header + passed) + "\n")
    failed = sorted(n for n, o in run.outcomes.items() if o == "failed")
    print(f"{name}: {dict(counts)} in {run.seconds:.0f} s; failing on Redis: {failed}")


if __name__ == "__main__":
    for lib in sys.argv[1:] or sorted(SUITES):
        regenerate(lib)
