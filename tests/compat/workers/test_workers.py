"""Each job queue's worker runs MINIDB_COMPAT_JOBS jobs (default 10,000) while the server is
killed -9 and restarted: RQ 2.12.0 (``rq worker --worker-class rq.worker.SimpleWorker``),
arq 0.26.3 (``arq arq_side.WorkerSettings``) and Celery 5.x (``celery worker --concurrency
2``, the Redis broker and result backend); what each promises is in ``_promises.PROMISES``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.workers._check import PYTEST_TIMEOUT_S, SERVERS, check_workers
from tests.compat.workers._promises import PROMISES

pytestmark = [pytest.mark.compat, pytest.mark.timeout(PYTEST_TIMEOUT_S)]


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("library", sorted(PROMISES))
def test_worker_survives_a_server_kill(library: str, server: str, tmp_path: Path) -> None:
    """Every acknowledged job runs, results stay readable, within the library's promise."""
    check_workers(library, server, tmp_path)
