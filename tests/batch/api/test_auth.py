"""Who may do what: bearer tokens, 401/403, users confined to their own tasks, operators."""

from __future__ import annotations

import logging

import httpx
import pytest

from .conftest import ALICE, BOB, ROOT, ApiServer, created_id, in_state, is_problem

ID = "01KBCQCK20JZ7R9YTJGD1AH5T3"
ENDPOINTS = [
    ("POST", "/tasks"), ("GET", "/tasks"), ("GET", f"/tasks/{ID}"),
    ("PUT", f"/tasks/{ID}/input"), ("POST", f"/tasks/{ID}/submit"),
    ("POST", f"/tasks/{ID}/retry"), ("POST", f"/tasks/{ID}/cancel"),
    ("GET", f"/tasks/{ID}/output"), ("GET", "/metrics"),
]


@pytest.mark.parametrize("header", [None, "Bearer nope-not-a-token-at-all", "Basic YTpi",
                                    f"Bearer {ALICE}x", "Bearer"])
def test_every_endpoint_needs_a_valid_bearer_token(anon: httpx.Client, header: str | None) -> None:
    """Without a valid token every API endpoint answers 401 with WWW-Authenticate: Bearer."""
    headers = {} if header is None else {"Authorization": header}
    for method, path in ENDPOINTS:
        response = anon.request(method, path, headers=headers)
        assert is_problem(response, 401), (method, path, response.text)
        assert response.headers["www-authenticate"] == "Bearer"


def test_healthz_and_the_page_shell_need_no_token(anon: httpx.Client) -> None:
    """/healthz, / and /openapi.json load without a token."""
    assert anon.get("/healthz").json() == {"status": "ok"}
    assert anon.get("/").status_code == 200
    assert anon.get("/").headers["content-type"].startswith("text/html")
    assert anon.get("/openapi.json").json()["openapi"].startswith("3.")
    assert is_problem(anon.get("/static/..%2Fsecret"), 404)


def test_metrics_are_for_operators(alice: httpx.Client, root: httpx.Client) -> None:
    """/metrics is 403 for a user and Prometheus text for an operator."""
    assert is_problem(alice.get("/metrics"), 403)
    response = root.get("/metrics")
    assert response.status_code == 200
    assert "minidb_batch_api_responses_total" in response.text
    assert "minidb_batch_store_requests_total" in response.text


def test_another_users_task_is_404_everywhere(api: ApiServer, alice: httpx.Client,
                                              bob: httpx.Client) -> None:
    """Bob gets 404, exactly as for a missing task, on every endpoint of Alice's tasks."""
    task_id = in_state(api, alice, "succeeded")
    fresh = created_id(alice)
    missing = "01KBCQCK20JZ7R9YTJGD1AH5T3"
    calls = [("GET", "/tasks/{}"), ("PUT", "/tasks/{}/input"), ("POST", "/tasks/{}/submit"),
             ("POST", "/tasks/{}/retry"), ("POST", "/tasks/{}/cancel"),
             ("GET", "/tasks/{}/output")]
    for target in (task_id, fresh):
        for method, path in calls:
            theirs = bob.request(method, path.format(target), content=b"a,b\n")
            absent = bob.request(method, path.format(missing), content=b"a,b\n")
            assert is_problem(theirs, 404), (method, path, theirs.text)
            assert theirs.json() == absent.json()
    assert bob.get("/tasks").json()["tasks"] == []
    assert alice.get(f"/tasks/{fresh}").json()["state"] == "created"  # nothing was done


def test_operator_sees_and_acts_on_every_task(alice: httpx.Client, bob: httpx.Client,
                                              root: httpx.Client) -> None:
    """An operator lists everyone's tasks newest first and may cancel Alice's."""
    first, second = created_id(alice), created_id(bob)
    listed = [task["id"] for task in root.get("/tasks").json()["tasks"]]
    assert listed == [second, first]
    assert root.get(f"/tasks/{first}").json()["created_by"] == "alice"
    assert root.post(f"/tasks/{first}/cancel").json()["state"] == "cancelled"


def test_created_by_comes_from_the_token(alice: httpx.Client, root: httpx.Client) -> None:
    """An operator's task is its own; a body naming another user is refused."""
    response = root.post("/tasks", json={"type": "csv_import", "created_by": "alice"})
    assert is_problem(response, 422)
    assert root.post("/tasks", json={"type": "csv_import"}).json()["created_by"] == "root"
    assert alice.get("/tasks").json()["tasks"] == []


def test_tokens_and_presigned_urls_never_reach_the_logs(
    api: ApiServer, alice: httpx.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    """With every server logger at DEBUG, no token, bad token or URL signature is logged."""
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-token-but-secret-0123"
    task_id = in_state(api, alice, "succeeded")
    listing = alice.get(f"/tasks/{task_id}/output").json()
    url = listing["files"][0]["url"]
    with httpx.Client(timeout=30) as plain:
        plain.get(url)
        plain.get(url.replace("sig=", "sig=0") if "sig=" in url else url + "x")
        plain.get(f"{api.url}/tasks", headers={"Authorization": f"Bearer {wrong}"})
        plain.get(f"{api.url}/metrics", headers={"Authorization": f"Bearer {ALICE}"})
    server_lines = "\n".join(
        record.getMessage() for record in caplog.records
        if record.name.startswith(("minidb", "uvicorn"))
    )
    assert "GET /tasks" in server_lines  # the access log did run
    query = url.split("?", 1)[1]
    for secret in (ALICE, BOB, ROOT, wrong, query):
        assert secret not in server_lines
