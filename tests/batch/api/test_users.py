"""``GET /me`` and the task list filtered by user (``GET /tasks?user=``): operators may name
anyone, a user only itself; cursors are bound to the filter."""

from __future__ import annotations

import httpx

from .conftest import SLEEP, created_id, is_problem


def test_me_names_the_user_and_role(alice: httpx.Client, root: httpx.Client,
                                    anon: httpx.Client) -> None:
    """The token's user and role; 401 without one."""
    assert alice.get("/me").json() == {"user": "alice", "role": "user"}
    assert root.get("/me").json() == {"user": "root", "role": "operator"}
    answer = anon.get("/me")
    assert answer.status_code == 401 and is_problem(answer, 401)


def test_operator_lists_one_users_tasks_page_by_page(
    alice: httpx.Client, bob: httpx.Client, root: httpx.Client
) -> None:
    """``user=alice`` lists alice's tasks only, newest first, across pages."""
    mine = [created_id(alice, SLEEP) for _ in range(3)]
    created_id(bob, SLEEP)
    first = root.get("/tasks", params={"user": "alice", "limit": 2}).json()
    assert [t["id"] for t in first["tasks"]] == mine[::-1][:2]
    second = root.get("/tasks", params={"user": "alice", "limit": 2,
                                        "cursor": first["next_cursor"]}).json()
    assert [t["id"] for t in second["tasks"]] == mine[:1]
    assert second["next_cursor"] is None
    everyone = {t["created_by"] for t in root.get("/tasks").json()["tasks"]}
    assert everyone == {"alice", "bob"}


def test_user_may_filter_by_itself_only(alice: httpx.Client, bob: httpx.Client) -> None:
    """A user's ``user=`` naming itself is its list; naming another is 403."""
    task = created_id(alice, SLEEP)
    created_id(bob, SLEEP)
    own = alice.get("/tasks", params={"user": "alice"})
    assert [t["id"] for t in own.json()["tasks"]] == [task]
    other = alice.get("/tasks", params={"user": "bob"})
    assert other.status_code == 403 and is_problem(other, 403)
    assert other.json()["code"] == "forbidden"


def test_user_filter_refuses_bad_names_and_foreign_cursors(
    alice: httpx.Client, root: httpx.Client
) -> None:
    """A malformed user name is 400; a cursor of the unfiltered list (or of another user's
    list) is refused by a filtered one, and the other way round."""
    for _ in range(3):
        created_id(alice, SLEEP)
    for bad in ("", "a b", "x" * 65, "../bob", "alice%00"):
        answer = root.get("/tasks", params={"user": bad})
        assert answer.status_code == 400, (bad, answer.text)
    unfiltered = root.get("/tasks", params={"limit": 1}).json()["next_cursor"]
    filtered = root.get("/tasks", params={"limit": 1, "user": "alice"}).json()["next_cursor"]
    assert unfiltered and filtered
    crossed = root.get("/tasks", params={"user": "alice", "cursor": unfiltered})
    assert crossed.status_code == 400 and crossed.json()["code"] == "invalid_cursor"
    back = root.get("/tasks", params={"cursor": filtered})
    assert back.status_code == 400 and back.json()["code"] == "invalid_cursor"
    other = root.get("/tasks", params={"user": "bob", "cursor": filtered})
    assert other.status_code == 400
