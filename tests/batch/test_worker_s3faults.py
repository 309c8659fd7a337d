"""S3 faults on every kind of request a worker makes (issue 17, part 4): a worker in-process,
its store on moto behind the fault proxy, a real ``minidb serve``.

The kinds of request: the LIST of queue markers, GET and PUT of ``status.json``, the GET of
the input, the PUT of an output (``errors.csv``), the DELETE of a marker. The faults: a
connection dropped or reset before the request is forwarded or after it was applied, 500
before or after applying, 503 SlowDown before or after applying. Whatever the fault, the
import runs once and ends ``succeeded`` with one clean attempt (a lost answer to a status write
is settled by its write id; an output's by its ETag; a cut input read resumes), and the worker
then claims and finishes another task. Every wait has a deadline.

The default run aims each fault at every kind of request at once; the full matrix (each kind
alone, hit three times in a row) is marked slow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from minidb.batch._backoff import IdlePoll, RetryBackoff
from minidb.batch._model import TaskRecord
from minidb.batch._queue import TaskQueue
from minidb.batch._worker import Worker, WorkerConfig
from minidb.client import Client
from tests.objstore.conftest import S3Rig
from tests.objstore.faultproxy import Action, FaultProxy, Rule
from tests.server.conftest import ServeFactory

from .conftest import submit_task, terminal, until

pytestmark = pytest.mark.minidb_loop

READ_TIMEOUT_S = 1.0
"""The worker's S3 read timeout, in seconds."""
DEADLINE_S = 30.0
"""How long any one wait of this module may take, in seconds."""
REQUESTS = {
    "list-markers": ("GET", r"queue/$"),
    "get-status": ("GET", r"status\.json$"),
    "put-status": ("PUT", r"status\.json$"),
    "get-input": ("GET", r"input\.csv$"),
    "put-output": ("PUT", r"errors\.csv$"),
    "delete-marker": ("DELETE", r"queue/."),
}
"""Each kind of request a worker makes, as (method, key regex) for a proxy rule."""
FAULTS = {
    "drop-before": Rule(Action.DROP_BEFORE),
    "drop-after": Rule(Action.DROP_AFTER),
    "reset-before": Rule(Action.RESET_BEFORE),
    "reset-after": Rule(Action.RESET_AFTER),
    "500-before": Rule(Action.ERROR_BEFORE, status=500),
    "500-after": Rule(Action.ERROR_AFTER, status=500),
    "503-before": Rule(Action.ERROR_BEFORE, status=503),
    "503-after": Rule(Action.ERROR_AFTER, status=503),
}
"""Each fault, as a rule still to be aimed (method, key, how many times)."""
CSV = b"bucket,key,value\nfault,a,1\nfault,b,2\nfault,bad key,3\n"


class Rig:
    """A worker on the faulty store, the test's own queue on the same bucket without faults,
    and the minidb server the worker imports into."""

    def __init__(self, s3rig: S3Rig, proxy: FaultProxy, serve: ServeFactory) -> None:
        bucket = s3rig.server.new_bucket()
        self.proxy = proxy
        self.direct = s3rig.store(bucket, endpoint_url=s3rig.server.endpoint)
        self.faulty = s3rig.store(bucket, read_timeout_s=READ_TIMEOUT_S)
        self.minidb = ("127.0.0.1", serve().port)
        config = WorkerConfig(
            "w-faults", lease_s=4.0, heartbeat_s=0.5, takeover_grace_s=0.5,
            poll=IdlePoll(min_s=0.05, cap_s=0.2), retry_backoff=RetryBackoff(0.05, 0.1),
        )
        self.worker = Worker(TaskQueue(self.faulty), config, minidb=self.minidb)
        self.queue = TaskQueue(self.direct)

    async def aim(self, fault: str, kinds: list[str], times: int) -> list[Rule]:
        """Once the worker polls, aim ``fault`` at each kind of request, ``times`` times."""
        async with asyncio.timeout(DEADLINE_S):
            await self.worker.polling.wait()
        template = FAULTS[fault]
        return [
            self.proxy.add(Rule(template.action, method=REQUESTS[kind][0], key=REQUESTS[kind][1],
                                status=template.status, times=times))
            for kind in kinds
        ]

    async def imported(self) -> list[str | None]:
        async with await Client.connect(*self.minidb) as client:
            return [await client.get("fault", key) for key in ("a", "b")]

    async def __aenter__(self) -> Rig:
        self.running = asyncio.ensure_future(self.worker.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.worker.stop()
        try:
            async with asyncio.timeout(DEADLINE_S):
                await self.running
        finally:
            await self.direct.close()
            await self.faulty.close()


@pytest.fixture
def rig(s3rig: S3Rig, proxy: FaultProxy, serve: ServeFactory) -> Iterator[Rig]:
    """A worker on the store behind the proxy (run it with ``async with rig``)."""
    yield Rig(s3rig, proxy, serve)


def _one_clean_attempt(record: TaskRecord) -> None:
    """Succeeded on attempt 1, the only attempt, with the import's counts and its output."""
    assert record.state == "succeeded", record
    assert [(a.n, a.outcome) for a in record.attempts] == [(1, "succeeded")], record.attempts
    assert record.result == {"rows": 3, "ok": 2, "failed": 1}
    assert record.output is not None and [f.name for f in record.output.files] == ["errors.csv"]


async def _import_then_another(rig: Rig) -> TaskRecord:
    """Submit the import, wait for its end, then check the worker still claims and finishes
    a second task; the import's final record."""
    task_id = await submit_task(rig.queue, "csv_import", {}, data=CSV)
    record = await until(rig.queue, task_id, terminal, timeout=DEADLINE_S)
    other = await submit_task(rig.queue, "sleep", {"seconds": 0})
    after = await until(rig.queue, other, terminal, timeout=DEADLINE_S)
    assert (after.state, after.attempt) == ("succeeded", 1), after
    return record


@pytest.mark.parametrize("fault", FAULTS)
async def test_fault_on_every_kind_of_request(rig: Rig, fault: str) -> None:
    """The fault strikes the first request of every kind (marker LIST, status GET and PUT,
    input GET, output PUT, marker DELETE): one clean attempt, then the next task runs."""
    async with rig:
        rules = await rig.aim(fault, list(REQUESTS), times=1)
        record = await _import_then_another(rig)
        assert await rig.imported() == ["1", "2"]
    _one_clean_attempt(record)
    assert all(rule.fired == 1 for rule in rules), [(r.key, r.fired) for r in rules]


@pytest.mark.parametrize("cut_at", [0, 20])
async def test_input_read_cut_short_resumes(rig: Rig, cut_at: int) -> None:
    """The input's body is cut after the headers or mid-row: the read resumes where it
    stopped (a ranged GET), every row is imported once, in one clean attempt."""
    rule = rig.proxy.add(Rule(Action.TRUNCATE, method="GET", key=r"input\.csv$", nth=1,
                              truncate_at=cut_at))
    async with rig:
        record = await _import_then_another(rig)
    _one_clean_attempt(record)
    assert rule.fired == 1
    assert record.progress.bytes_done == len(CSV)


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("kind", REQUESTS)
async def test_fault_matrix(rig: Rig, kind: str, fault: str) -> None:
    """Each fault on each kind of request alone, three times in a row (past botocore's own
    retries of a read): one clean attempt, then the next task runs."""
    async with rig:
        rules = await rig.aim(fault, [kind], times=3)
        record = await _import_then_another(rig)
    _one_clean_attempt(record)
    assert rules[0].fired >= 1
