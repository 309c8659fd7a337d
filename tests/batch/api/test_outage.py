"""The store unreachable: 503 problem within 30 s (not 500, not a hang), then service again
as soon as the store is back. S3 through the fault proxy; both reads and writes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from minidb.objstore import S3Store
from tests.objstore.conftest import S3Rig
from tests.objstore.faultproxy import Action, FaultProxy, Rule

from .conftest import ALICE, SLEEP, ApiServer, created_id, is_problem

PROMISED_S = 30.0
"""The longest a client may wait for the 503."""


@pytest.fixture
def s3_api(s3rig: S3Rig, proxy: FaultProxy) -> Iterator[tuple[ApiServer, FaultProxy]]:
    store: S3Store = s3rig.store(s3rig.server.new_bucket())
    server = ApiServer(store).start()
    try:
        yield server, proxy
    finally:
        server.stop()
        proxy.clear()
        asyncio.run(store.close())


@pytest.mark.parametrize("rule,method,path", [
    (Rule(Action.DROP_BEFORE), "GET", "/tasks/{}"),
    (Rule(Action.ERROR_BEFORE, status=503), "POST", "/tasks"),
    (Rule(Action.ERROR_BEFORE, status=500), "GET", "/tasks"),
    pytest.param(Rule(Action.DELAY, delay_s=25.0), "GET", "/tasks/{}", marks=pytest.mark.slow),
], ids=["drop-get", "slowdown-create", "internal-list", "hang-get"])
def test_store_outage_is_503_in_time_and_recovers(
    s3_api: tuple[ApiServer, FaultProxy], rule: Rule, method: str, path: str,
) -> None:
    """While every store request fails (or hangs), the API answers 503 with Retry-After
    within 30 s; once the store answers again, the same request succeeds."""
    server, proxy = s3_api
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ALICE}"},
                      timeout=PROMISED_S + 10) as alice:
        task_id = created_id(alice, SLEEP)
        body = SLEEP if method == "POST" else None
        proxy.add(rule)
        started = time.monotonic()
        response = alice.request(method, path.format(task_id), json=body)
        took = time.monotonic() - started
        assert is_problem(response, 503), response.text
        assert response.headers["retry-after"] == "1"
        assert took < PROMISED_S, took
        proxy.clear()
        assert alice.request(method, path.format(task_id), json=body).status_code < 300
