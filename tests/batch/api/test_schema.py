"""schemathesis against the live server's /openapi.json: no 5xx and no answer outside the
documented statuses, content types and schemas, for every operation (bounded: a few dozen
examples per operation, with an operator token, on a file: store with tasks in it, attached
to a real minidb server for the store browser's and server figures' operations)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import checks as generic
from schemathesis.specs.openapi import checks as openapi

from .conftest import ROOT, ApiServer, MinidbServer, attached_api, auth, in_state

EXAMPLES_PER_OPERATION = 9
"""Generated cases per operation (20 operations: ~180 requests)."""
CHECKS = [
    generic.not_a_server_error,
    openapi.status_code_conformance,
    openapi.content_type_conformance,
    openapi.response_schema_conformance,
    openapi.response_headers_conformance,
]


@pytest.fixture
def live(tmp_path: Path, minidb_server: MinidbServer) -> Iterator[ApiServer]:
    """The API on a file: store that has a task in every state, so real ids are around,
    attached to a minidb server."""
    server = attached_api(tmp_path, minidb_server.link)
    try:
        with server.client(ROOT) as root:
            for state in ("created", "succeeded", "failed"):
                in_state(server, root, state)
        yield server
    finally:
        server.stop()


def test_openapi_contract_holds_for_generated_requests(live: ApiServer) -> None:
    """Every generated request to every operation gets a documented, schema-valid answer."""
    schema = schemathesis.openapi.from_url(f"{live.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 20  # every route of docs/batch-api.md
    known_ids = [task["id"] for task in
                 httpx.get(f"{live.url}/tasks", headers=auth(ROOT)).json()["tasks"]]
    failures: list[str] = []
    for operation in operations:
        strategy = operation.as_strategy()

        @given(case=strategy, use_known=st.booleans(), index=st.integers(0, 2))
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
                  phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck))
        def run(case: schemathesis.Case, use_known: bool, index: int) -> None:
            if use_known and case.path_parameters and "task_id" in case.path_parameters:
                case.path_parameters["task_id"] = known_ids[index % len(known_ids)]
            response = case.call(base_url=live.url, headers=auth(ROOT), timeout=30)
            try:
                case.validate_response(response, checks=CHECKS)
            except AssertionError as exc:  # schemathesis failures are AssertionErrors
                failures.append(f"{case.operation.label}: {exc}"[:2000])

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run()
    assert not failures, "\n\n".join(failures[:5])
