"""The task endpoints over real HTTP on both backends: create, input, submit, get, list,
retry, cancel and their status codes."""

from __future__ import annotations

import httpx

from .conftest import CSV, create, created_id, is_problem


def test_create_returns_201_location_and_a_created_task(alice: httpx.Client) -> None:
    """POST /tasks answers 201 with Location and the task in state created, owned by the token."""
    response = create(alice, {"type": "csv_import", "name": "June", "created_by": "mallory"})
    assert is_problem(response, 422)  # created_by is not a field of the body
    response = create(alice, {"type": "csv_import", "name": "June", "params": {}})
    assert response.status_code == 201
    task = response.json()
    assert response.headers["location"] == f"/tasks/{task['id']}"
    assert (task["state"], task["name"], task["created_by"]) == ("created", "June", "alice")
    assert task["params"] == {"max_bad_rows": 0} or "max_bad_rows" in task["params"]
    assert task["lease"] is None


def test_create_refuses_malformed_json_non_json_and_bad_params(alice: httpx.Client) -> None:
    """Malformed JSON is 400, a non-JSON body 415, an unknown type or bad params 422."""
    headers = {"Content-Type": "application/json"}
    assert is_problem(alice.post("/tasks", content=b"{nope", headers=headers), 400)
    assert is_problem(alice.post("/tasks", content=b"type=csv_import",
                                 headers={"Content-Type": "application/x-www-form-urlencoded"}),
                      415)
    assert is_problem(create(alice, {"type": "no_such_type"}), 422)
    assert is_problem(create(alice, {"type": "sleep", "params": {"seconds": -1}}), 422)
    assert is_problem(create(alice, {"type": "csv_import", "max_attempts": 0}), 422)
    assert is_problem(alice.post("/tasks", json=[1, 2]), 422)


def test_input_submit_get_flow(alice: httpx.Client) -> None:
    """Upload is 204 once then 409; submit is 202 then 200; get shows queued."""
    task_id = created_id(alice)
    assert is_problem(alice.post(f"/tasks/{task_id}/submit"), 422)  # input missing
    assert alice.put(f"/tasks/{task_id}/input", content=CSV).status_code == 204
    assert is_problem(alice.put(f"/tasks/{task_id}/input", content=CSV), 409)
    first = alice.post(f"/tasks/{task_id}/submit")
    assert (first.status_code, first.json()["state"]) == (202, "queued")
    again = alice.post(f"/tasks/{task_id}/submit")
    assert (again.status_code, again.json()["state"]) == (200, "queued")
    assert alice.get(f"/tasks/{task_id}").json()["state"] == "queued"
    assert is_problem(alice.put(f"/tasks/{task_id}/input", content=CSV), 409)


def test_list_is_newest_first_with_cursors(alice: httpx.Client) -> None:
    """GET /tasks pages newest first; next_cursor is null on the last page."""
    ids = [created_id(alice, {"type": "sleep", "params": {"seconds": 0}}) for _ in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2} if cursor is None else {"limit": 2, "cursor": cursor}
        page = alice.get("/tasks", params=params).json()
        seen += [task["id"] for task in page["tasks"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]


def test_output_before_success_is_409(alice: httpx.Client) -> None:
    """A task without output answers 409 on GET /output."""
    task_id = created_id(alice)
    assert is_problem(alice.get(f"/tasks/{task_id}/output"), 409)
