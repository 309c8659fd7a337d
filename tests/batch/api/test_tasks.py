"""The task endpoints over real HTTP on both backends: create, input, submit, get, list,
retry, cancel and their status codes."""

from __future__ import annotations

import asyncio
import http.client
from collections.abc import Iterator

import httpx
import pytest

from minidb.batch.api import ApiSettings
from minidb.objstore import ObjectStore

from .conftest import (
    ALICE,
    CSV,
    SLEEP,
    ApiServer,
    auth,
    claim,
    create,
    created_id,
    in_state,
    is_problem,
    queued_id,
)


@pytest.fixture
def api(store: ObjectStore) -> Iterator[ApiServer]:
    """The API with a 1 KiB input limit, on each backend."""
    server = ApiServer(store, ApiSettings(max_input_bytes=1024)).start()
    try:
        yield server
    finally:
        server.stop()


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


@pytest.mark.parametrize("state,status,after", [
    ("created", 200, "cancelled"), ("queued", 200, "cancelled"), ("running", 202, "running"),
    ("cancelled", 200, "cancelled"), ("succeeded", 409, None), ("failed", 409, None),
])
def test_cancel_answers_by_state(api: ApiServer, alice: httpx.Client, state: str, status: int,
                                 after: str | None) -> None:
    """Cancel: 200 cancelled from created/queued/cancelled, 202 cancel_requested while running,
    409 once succeeded or failed."""
    task_id = in_state(api, alice, state)
    response = alice.post(f"/tasks/{task_id}/cancel")
    if after is None:
        assert is_problem(response, status)
        assert alice.get(f"/tasks/{task_id}").json()["state"] == state
        return
    assert (response.status_code, response.json()["state"]) == (status, after)
    assert response.json()["cancel_requested"] is (state == "running")


def test_cancel_of_a_running_task_ends_cancelled_when_the_worker_stops(
    api: ApiServer, alice: httpx.Client,
) -> None:
    """After 202, the worker's release (it saw cancel_requested) makes the task cancelled."""
    task_id = queued_id(alice)
    held = claim(api, task_id)
    assert alice.post(f"/tasks/{task_id}/cancel").status_code == 202
    beat = api.call(api.service.queue.heartbeat(held))
    assert beat.cancel_requested
    api.call(api.service.queue.release(beat))
    assert alice.get(f"/tasks/{task_id}").json()["state"] == "cancelled"


@pytest.mark.parametrize("state,status", [
    ("created", 409), ("queued", 409), ("running", 409), ("succeeded", 409),
    ("failed", 202), ("cancelled", 202),
])
def test_retry_answers_by_state(api: ApiServer, alice: httpx.Client, state: str,
                                status: int) -> None:
    """Retry brings failed/cancelled back to queued (202) and is 409 otherwise."""
    task_id = in_state(api, alice, state)
    response = alice.post(f"/tasks/{task_id}/retry")
    if status == 409:
        assert is_problem(response, 409)
        return
    task = response.json()
    assert (response.status_code, task["state"]) == (202, "queued")
    assert task["budget_from"] == task["attempt"]  # a fresh budget; numbers continue


def test_retried_attempt_numbers_continue(api: ApiServer, alice: httpx.Client) -> None:
    """The attempt after a retry is numbered after the failed one."""
    task_id = in_state(api, alice, "failed")
    assert alice.post(f"/tasks/{task_id}/retry").status_code == 202
    assert claim(api, task_id).attempt == 2


@pytest.mark.parametrize("state,status", [
    ("queued", 200), ("running", 200), ("succeeded", 409), ("failed", 409), ("cancelled", 409),
])
def test_submit_answers_by_state(api: ApiServer, alice: httpx.Client, state: str,
                                 status: int) -> None:
    """Submit of a queued or running task is 200 (nothing changes); of a terminal one 409."""
    task_id = in_state(api, alice, state)
    response = alice.post(f"/tasks/{task_id}/submit")
    if status == 409:
        assert is_problem(response, 409)
    else:
        assert (response.status_code, response.json()["state"]) == (200, state)


@pytest.mark.parametrize("limit", ["0", "101", "-1", "x", "1.5", ""])
def test_list_refuses_a_bad_limit(alice: httpx.Client, limit: str) -> None:
    """A limit outside 1-100 or not an integer is 400."""
    assert is_problem(alice.get("/tasks", params={"limit": limit}), 400)


def test_list_refuses_tampered_and_foreign_cursors(alice: httpx.Client,
                                                   bob: httpx.Client) -> None:
    """A cursor that was altered, is garbage, or was minted for another user is 400."""
    for _ in range(3):
        created_id(alice)
    cursor = alice.get("/tasks", params={"limit": 1}).json()["next_cursor"]
    assert cursor is not None
    assert alice.get("/tasks", params={"limit": 1, "cursor": cursor}).status_code == 200
    flipped = cursor[:-1] + ("A" if cursor[-1] != "A" else "B")
    for bad in (flipped, "garbage", "v1.01KBCQCK20JZ7R9YTJGD1AH5T3.AAAA", "x" * 5000):
        assert is_problem(alice.get("/tasks", params={"cursor": bad}), 400), bad
    assert is_problem(bob.get("/tasks", params={"cursor": cursor}), 400)


def test_pagination_is_stable_under_concurrent_inserts(alice: httpx.Client) -> None:
    """Tasks created while paging never shift, repeat or drop the tasks of later pages."""
    before = [created_id(alice, SLEEP) for _ in range(7)]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, str | int] = {"limit": 2}
        if cursor is not None:
            params["cursor"] = cursor
        page = alice.get("/tasks", params=params).json()
        seen += [task["id"] for task in page["tasks"]]
        cursor = page["next_cursor"]
        created_id(alice, SLEEP)  # an insert between every two pages
        if cursor is None:
            break
    assert seen == before[::-1]


HOSTILE = ["..", "%2e%2e", "..%2F..%2Fsecrets%2Fapi", "%2F", "a%00b", "%00", "A" * 5000,
           "01kbcqck20jz7r9ytjgd1ah5t3", "01KBCQCK20JZ7R9YTJGD1AH5T3%2F..", "8" * 26,
           "..%5C..%5Cx"]


@pytest.mark.parametrize("task_id", HOSTILE)
def test_hostile_ids_are_refused_before_the_store_is_touched(api: ApiServer,
                                                             task_id: str) -> None:
    """Traversal, encoded slashes, NUL, lowercase and 5000-character ids are 404 or 400 on
    every task endpoint, and the store sees no request at all."""
    host, port = api.url.removeprefix("http://").split(":")
    before = api.service.store.statistics().requests
    for method, suffix in (("GET", ""), ("PUT", "/input"), ("POST", "/submit"),
                           ("POST", "/retry"), ("POST", "/cancel"), ("GET", "/output")):
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            # http.client sends the path as given: no client-side normalisation of ``..``.
            connection.request(method, f"/tasks/{task_id}{suffix}", body=b"a,b\n",
                               headers={"Authorization": f"Bearer {ALICE}"})
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        assert response.status in (400, 404), (method, suffix, response.status, body[:200])
        assert response.getheader("content-type", "").startswith("application/problem+json")
    assert api.service.store.statistics().requests == before


def test_unknown_routes_and_methods_are_problems(alice: httpx.Client) -> None:
    """FastAPI's own 404 and 405 answers are problem+json too."""
    assert is_problem(alice.get("/nope"), 404)
    assert is_problem(alice.delete("/tasks"), 405)


def test_input_over_the_limit_is_413_declared_or_streamed(alice: httpx.Client) -> None:
    """An input over --max-input-bytes is 413 whether Content-Length says so or a chunked
    body runs past it; nothing is stored and a right-sized upload works afterwards."""
    limit = 1024
    task_id = created_id(alice)
    assert is_problem(alice.put(f"/tasks/{task_id}/input", content=b"x" * (limit + 1)), 413)

    def chunks() -> Iterator[bytes]:
        for _ in range(8):
            yield b"y" * 200
    assert is_problem(alice.put(f"/tasks/{task_id}/input", content=chunks()), 413)
    assert alice.put(f"/tasks/{task_id}/input", content=CSV).status_code == 204
    assert alice.post(f"/tasks/{task_id}/submit").status_code == 202


def test_create_body_over_its_limit_is_413(alice: httpx.Client) -> None:
    """A create body over 64 KiB is refused with 413 before it is parsed."""
    body = b'{"type": "sleep", "name": "' + b"x" * (70 << 10) + b'"}'
    response = alice.post("/tasks", content=body, headers={"Content-Type": "application/json"})
    assert is_problem(response, 413)


def test_idempotent_create_replays_and_refuses_another_body(alice: httpx.Client,
                                                            bob: httpx.Client) -> None:
    """The same key and body gives 200 and the same task; another body 422; keys are per
    user."""
    first = create(alice, SLEEP, **{"Idempotency-Key": "k-1"})
    again = create(alice, {"params": {"seconds": 0}, "type": "sleep"},
                   **{"Idempotency-Key": "k-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["location"] == first.headers["location"]
    assert is_problem(create(alice, {"type": "sleep", "params": {"seconds": 1}},
                             **{"Idempotency-Key": "k-1"}), 422)
    theirs = create(bob, SLEEP, **{"Idempotency-Key": "k-1"})
    assert theirs.status_code == 201 and theirs.json()["id"] != first.json()["id"]
    assert is_problem(create(alice, SLEEP, **{"Idempotency-Key": "tab\there"}), 400)


RACERS = 20
RACE_DEADLINE_S = 60.0


def test_racing_idempotent_creates_make_one_task(api: ApiServer) -> None:
    """20 concurrent creates with one key: exactly one 201, the rest 200, all one task."""
    async def race() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=api.url, headers=auth(ALICE),
                                     timeout=RACE_DEADLINE_S) as client:
            async with asyncio.timeout(RACE_DEADLINE_S):
                return list(await asyncio.gather(*(
                    client.post("/tasks", json=SLEEP, headers={"Idempotency-Key": "race"})
                    for _ in range(RACERS)
                )))
    responses = asyncio.run(race())
    statuses = sorted(response.status_code for response in responses)
    assert statuses == [200] * (RACERS - 1) + [201], [r.text for r in responses]
    assert len({response.json()["id"] for response in responses}) == 1
    with api.client(ALICE) as alice:
        assert len(alice.get("/tasks").json()["tasks"]) == 1
