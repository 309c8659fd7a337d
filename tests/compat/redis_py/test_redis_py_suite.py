"""redis-py's own tests of hashes, lists, sets, sorted sets, pub/sub, scripting and its Lock pass
against minidb, on RESP2 and on RESP3 (issue 19).

One test per (group, protocol) holds minidb to that group's tests of ``selected.txt`` (what a
real ``redis-server`` passes, see ``selection``), less those of ``pending.txt`` (waiting on a
command being built: ``MINIDB_COMPAT_PENDING=1`` runs them too, to see which now pass). The
groups of one protocol that the session asks for run in one subprocess of redis-py's suite
(``--protocol``), with a deadline, against one fresh ``minidb serve --resp-port 0``: each run
costs some 20 s of start-up (redis-py's conftest, collecting ``test_commands.py``), which sixteen
runs would pay sixteen times; each (group, protocol) test then judges its own tests' outcomes.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.compat._servers import minidb_server
from tests.compat.redis_py._run import RunResult, run_suite
from tests.compat.redis_py.selection import GROUPS, PROTOCOLS, read_selected

pytestmark = pytest.mark.compat

RUN_TIMEOUT_S = 900.0
"""Every group on one protocol (about 3 minutes on a loaded 2-core machine)."""
PENDING = Path(__file__).with_name("pending.txt")


def read_pending(path: Path = PENDING) -> dict[str, str]:
    """Node id -> why it waits (``<node id> <missing command>: <reason>`` per line)."""
    pending = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            nodeid, _, reason = line.partition(" ")
            pending[nodeid] = reason.strip()
    return pending


@dataclass(frozen=True)
class ProtocolRun:
    """One run of the requested groups' tests on one protocol, and the groups' node ids."""

    result: RunResult
    nodeids: dict[str, list[str]]
    seconds: float


_RUNS: dict[int, ProtocolRun] = {}


def _nodeids(group: str, protocol: int, pending: dict[str, str]) -> list[str]:
    run_pending = os.environ.get("MINIDB_COMPAT_PENDING") == "1"
    return [
        entry.nodeid for entry in read_selected()
        if entry.group == group and protocol in entry.protocols
        and (run_pending or entry.nodeid not in pending)
    ]  # fmt: skip


def _requested_groups(session: pytest.Session, protocol: int) -> list[str]:
    """The groups this session runs on ``protocol`` (all of them, or those ``-k`` kept)."""
    wanted = []
    for item in session.items:
        spec = getattr(item, "callspec", None)
        if (getattr(item, "originalname", "") == "test_redis_py_suite" and spec is not None
                and spec.params["protocol"] == protocol):
            wanted.append(spec.params["group"])
    return wanted


def _protocol_run(request: pytest.FixtureRequest, protocol: int) -> ProtocolRun:
    if protocol not in _RUNS:
        pending = read_pending()
        groups = _requested_groups(request.session, protocol)
        nodeids = {group: _nodeids(group, protocol, pending) for group in groups}
        started = time.monotonic()
        with minidb_server() as port:
            everything = [nodeid for group in groups for nodeid in nodeids[group]]
            result = run_suite(port, protocol, everything, timeout_s=RUN_TIMEOUT_S)
        _RUNS[protocol] = ProtocolRun(result, nodeids, time.monotonic() - started)
        print(f"\nredis-py suite on RESP{protocol}: {len(everything)} tests of {groups} in "
              f"{_RUNS[protocol].seconds:.1f} s (exit {result.returncode})")
    return _RUNS[protocol]


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: f"resp{p}")
@pytest.mark.parametrize("group", GROUPS)
def test_redis_py_suite(request: pytest.FixtureRequest, group: str, protocol: int) -> None:
    """Every selected test of ``group`` passes on minidb with RESP ``protocol``."""
    run = _protocol_run(request, protocol)
    pending = read_pending()
    nodeids = run.nodeids[group]
    if not nodeids:
        pytest.skip(f"no selected test of {group} on RESP{protocol}")
    outcomes = {nodeid: run.result.outcomes.get(nodeid, "missing") for nodeid in nodeids}
    print(_summary(group, protocol, outcomes, run.result.messages, pending))
    not_passed = {
        nodeid: f"{outcome}: {run.result.messages.get(nodeid, '')[:200]}"
        for nodeid, outcome in outcomes.items()
        if outcome != "passed" and nodeid not in pending
    }  # fmt: skip
    assert not_passed == {}, run.result.output_tail


def _summary(
    group: str, protocol: int, outcomes: dict[str, str], messages: dict[str, str],
    pending: dict[str, str],
) -> str:
    counts = {o: sum(seen == o for seen in outcomes.values())
              for o in ("passed", "failed", "skipped", "missing")}
    lines = [f"redis-py {group} RESP{protocol}: {counts}"]
    for nodeid, outcome in sorted(outcomes.items()):
        if outcome != "passed":
            why = pending.get(nodeid, messages.get(nodeid, "")[:160])
            lines.append(f"  {outcome:8} {nodeid}  {why}")
    pending_passed = [n for n, seen in outcomes.items() if seen == "passed" and n in pending]
    if pending_passed:
        lines.append(f"  pending tests that now pass (remove from pending.txt): {pending_passed}")
    return "\n".join(lines)
