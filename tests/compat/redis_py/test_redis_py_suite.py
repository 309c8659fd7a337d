"""redis-py's own tests of hashes, lists, sets, sorted sets, pub/sub, scripting and its Lock pass
against minidb, on RESP2 and on RESP3 (issue 19).

One test per (group, protocol) starts a fresh ``minidb serve --resp-port 0`` and runs that
group's tests of ``selected.txt`` (what a real ``redis-server`` passes, see ``selection``) in
redis-py's own suite, in a subprocess with a deadline, less those of ``pending.txt`` (waiting on
a command being built: ``MINIDB_COMPAT_PENDING=1`` runs them too, to see which now pass).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.compat._servers import minidb_server
from tests.compat.redis_py._run import RunResult, run_suite
from tests.compat.redis_py.selection import GROUPS, PROTOCOLS, read_selected

pytestmark = pytest.mark.compat

RUN_TIMEOUT_S = 600.0
"""One group on one protocol (the pub/sub group, the longest, takes about a minute)."""
PENDING = Path(__file__).with_name("pending.txt")


def read_pending(path: Path = PENDING) -> dict[str, str]:
    """Node id -> why it waits (``<node id> <missing command>: <reason>`` per line)."""
    pending = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            nodeid, _, reason = line.partition(" ")
            pending[nodeid] = reason.strip()
    return pending


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: f"resp{p}")
@pytest.mark.parametrize("group", GROUPS)
def test_redis_py_suite(group: str, protocol: int) -> None:
    """Every selected test of ``group`` passes on minidb with RESP ``protocol``."""
    pending = read_pending()
    run_pending = os.environ.get("MINIDB_COMPAT_PENDING") == "1"
    nodeids = [
        entry.nodeid for entry in read_selected()
        if entry.group == group and protocol in entry.protocols
        and (run_pending or entry.nodeid not in pending)
    ]  # fmt: skip
    if not nodeids:
        pytest.skip(f"no selected test of {group} on RESP{protocol}")
    started = time.monotonic()
    with minidb_server() as port:
        result = run_suite(port, protocol, nodeids, timeout_s=RUN_TIMEOUT_S)
    print(_summary(group, protocol, result, pending, time.monotonic() - started))
    not_passed = {
        nodeid: f"{outcome}: {result.messages.get(nodeid, '')[:200]}"
        for nodeid, outcome in result.outcomes.items()
        if outcome != "passed" and nodeid not in pending
    }  # fmt: skip
    assert not_passed == {}, result.output_tail


def _summary(
    group: str, protocol: int, result: RunResult, pending: dict[str, str], seconds: float
) -> str:
    counts = {o: len(result.with_outcome(o)) for o in ("passed", "failed", "skipped", "missing")}
    lines = [f"redis-py {group} RESP{protocol}: {counts} in {seconds:.1f} s"]
    for nodeid, outcome in sorted(result.outcomes.items()):
        if outcome != "passed":
            why = pending.get(nodeid, result.messages.get(nodeid, "")[:160])
            lines.append(f"  {outcome:8} {nodeid}  {why}")
    pending_passed = [n for n in result.with_outcome("passed") if n in pending]
    if pending_passed:
        lines.append(f"  pending tests that now pass (remove from pending.txt): {pending_passed}")
    return "\n".join(lines)
