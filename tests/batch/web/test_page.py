"""The operator page (``src/minidb/batch/web/``) in headless Chromium against a real
``minidb batch serve``, its worker and a real minidb server: login, upload, live progress,
the error report, cancel and retry, paging, other users' tasks, and names that look like HTML.

Set ``MINIDB_SCREENSHOT=1`` to (re)write ``docs/web-page.png`` from
``test_page_offers_only_legal_transitions``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
from pathlib import Path
from typing import Any

from .conftest import BatchServer

WAIT_MS = 20_000
"""How long the page may take to show what a test waits for (polls are 1 s apart)."""
DOCS_PNG = Path(__file__).resolve().parents[3] / "docs" / "web-page.png"

GOOD_ROWS = [("users", f"u{i}", f"value {i}") for i in range(5)]
CSV = (
    b"bucket,key,value\n"
    + b"".join(f"{b},{k},{v}\n".encode() for b, k, v in GOOD_ROWS[:3])
    + b"users,only-two-fields\n"          # line 5: wrong_column_count
    + b"users,bad key!,x\n"               # line 6: invalid_key
    + b"".join(f"{b},{k},{v}\n".encode() for b, k, v in GOOD_ROWS[3:])
)


def expect(locator: Any) -> Any:
    """Playwright's ``expect`` (imported late: the module must import without playwright)."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def log_in(page: Any, batch: BatchServer, user: str) -> None:
    """Open the page and log in as ``user``; returns once the task list is shown."""
    page.goto(batch.url + "/")
    page.fill("#token", batch.token(user))
    page.click("#login-button")
    expect(page.locator("#app")).to_be_visible(timeout=WAIT_MS)


def row(page: Any, task_id: str) -> Any:
    """The list row of one task."""
    return page.locator(f'tr.task[data-task-id="{task_id}"]')


def names_listed(page: Any) -> list[str]:
    """The task names in the list, top to bottom."""
    return [n.strip() for n in page.locator("#task-rows a.name").all_text_contents()]


def upload(page: Any, tmp_path: Path, name: str, data: bytes) -> str:
    """Import ``data`` through the upload form; the new task's id."""
    path = tmp_path / f"{name}.csv"
    path.write_bytes(data)
    page.set_input_files("#upload-file", str(path))
    page.fill("#upload-name", name)
    page.click("#upload-button")
    status = page.locator("#upload-status")
    expect(status).to_have_text(re.compile(r"submitted [0-9A-Z]{26}"), timeout=WAIT_MS)
    return str(status.text_content()).split()[-1]


def test_page_refuses_a_bad_token_and_keeps_a_good_one(page: Any, batch: BatchServer) -> None:
    """A wrong token shows the login error; a right one survives a reload; log out forgets it."""
    page.goto(batch.url + "/")
    expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
    page.fill("#token", "not-a-token")
    page.click("#login-button")
    expect(page.locator("#login-error")).to_contain_text("refused", timeout=WAIT_MS)
    expect(page.locator("#app")).to_be_hidden()
    assert page.evaluate("sessionStorage.length") == 0

    log_in(page, batch, "alice")
    page.reload()
    expect(page.locator("#app")).to_be_visible(timeout=WAIT_MS)
    page.click("#logout")
    expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
    assert page.evaluate("sessionStorage.length") == 0


def test_upload_reaches_100_percent_and_serves_the_error_report(
    page: Any, batch: BatchServer, tmp_path: Path
) -> None:
    """An uploaded CSV with two bad rows runs to 100 % without a reload, its good rows are in
    minidb, and the detail's errors.csv link downloads the report of the two bad rows."""
    log_in(page, batch, "alice")
    page.evaluate("window.notReloaded = true")
    task_id = upload(page, tmp_path, "june", CSV)

    bar = row(page, task_id).locator('[role="progressbar"]')
    expect(bar).to_have_attribute("aria-valuenow", "100", timeout=WAIT_MS)
    expect(row(page, task_id).locator("td.state")).to_have_text("succeeded", timeout=WAIT_MS)
    expect(bar).to_contain_text("7 rows · 2 bad · 100%")
    assert page.evaluate("window.notReloaded") is True, "the page reloaded to show progress"
    expect(row(page, task_id).locator("td").nth(6)).to_have_text(batch.user("alice"))
    expect(row(page, task_id).locator("button")).to_have_count(0)  # succeeded: nothing legal

    conn = batch.minidb()
    try:
        for bucket, key, value in GOOD_ROWS:
            assert conn.request(f"GET {bucket} {key}") == f"VALUE {value}"
    finally:
        conn.close()

    row(page, task_id).locator("a.name").click()
    detail = page.locator("#detail")
    expect(detail.locator('[data-field="state"]')).to_have_text("succeeded", timeout=WAIT_MS)
    expect(page.locator("#attempt-rows tr")).to_have_count(1)
    expect(page.locator("#attempt-rows tr td").nth(4)).to_have_text("succeeded")
    link = page.locator('#outputs a[data-file="errors.csv"]')
    expect(link).to_be_visible(timeout=WAIT_MS)
    with page.expect_download(timeout=WAIT_MS) as download_info:
        link.click()
    report = Path(download_info.value.path()).read_bytes().decode()
    lines = report.splitlines()
    assert lines[0] == "line,reason,bucket,key"
    assert [line.split(",")[:2] for line in lines[1:]] == [
        ["5", "wrong_column_count"], ["6", "invalid_key"],
    ], report


def test_cancel_stops_a_running_import_and_retry_runs_it_again(
    page: Any, batch: BatchServer, tmp_path: Path
) -> None:
    """An import held running (its minidb server stopped) is cancelled from its row; only
    Retry is offered then, and retrying with the server back runs it to success."""
    os.kill(batch.minidb_pid, signal.SIGSTOP)  # the import's SETs get no reply: it stays running
    try:
        log_in(page, batch, "alice")
        task_id = upload(page, tmp_path, "held", CSV)
        task_row = row(page, task_id)
        expect(task_row.locator("td.state")).to_have_text("running", timeout=WAIT_MS)
        expect(task_row.locator('button[data-action="retry"]')).to_have_count(0)
        task_row.locator('button[data-action="cancel"]').click()
        expect(task_row.locator("td.state")).to_have_text("cancelled", timeout=WAIT_MS)
        expect(task_row.locator('button[data-action="cancel"]')).to_have_count(0)
        record = batch.call("alice", "GET", f"/tasks/{task_id}")
        assert record["cancel_requested"] is True
        assert [a["outcome"] for a in record["attempts"]] == ["cancelled"]
    finally:
        os.kill(batch.minidb_pid, signal.SIGCONT)

    task_row.locator('button[data-action="retry"]').click()
    expect(task_row.locator("td.state")).to_have_text("succeeded", timeout=WAIT_MS)
    expect(task_row.locator('[role="progressbar"]')).to_have_attribute("aria-valuenow", "100")
    expect(task_row.locator("td").nth(4)).to_have_text("1/3")  # a fresh budget after retry
    task_row.locator("a.name").click()
    outcomes = page.locator("#attempt-rows tr td:nth-child(5)")
    expect(outcomes).to_have_text(["cancelled", "succeeded"], timeout=WAIT_MS)


def test_upload_shows_the_problem_detail_of_a_refused_request(
    page: Any, batch: BatchServer, tmp_path: Path
) -> None:
    """Params the API refuses (422) show its problem+json detail, and no task is listed."""
    log_in(page, batch, "alice")
    path = tmp_path / "x.csv"
    path.write_bytes(CSV)
    page.set_input_files("#upload-file", str(path))
    page.fill("#upload-max-bad", str(10**10))
    page.click("#upload-button")
    status = page.locator("#upload-status")
    expect(status).to_contain_text("create failed: ", timeout=WAIT_MS)
    expect(status).to_contain_text("max_bad_rows")
    expect(status).to_contain_text("(HTTP 422)")
    expect(page.locator("#task-rows tr")).to_have_count(0)


def test_another_users_tasks_are_not_listed(page: Any, batch: BatchServer) -> None:
    """Alice sees her task and not Bob's (his detail is "not found"); an operator sees both."""
    bobs = batch.call("bob", "POST", "/tasks", {"type": "csv_import", "name": "bob's import"})
    alices = batch.call("alice", "POST", "/tasks",
                        {"type": "csv_import", "name": "alice's import"})

    log_in(page, batch, "alice")
    expect(page.locator("#task-rows tr")).to_have_count(1, timeout=WAIT_MS)
    assert names_listed(page) == ["alice's import"]
    page.evaluate(f"location.hash = '#task/{bobs['id']}'")
    expect(page.locator("#detail-error")).to_contain_text("404", timeout=WAIT_MS)
    assert names_listed(page) == ["alice's import"]

    page.click("#logout")
    log_in(page, batch, "ops")
    for task in (alices, bobs):
        owner = row(page, task["id"]).locator("td").nth(6)
        expect(owner).to_have_text(task["created_by"], timeout=WAIT_MS)
    assert bobs["created_by"] == batch.user("bob") != batch.user("alice")


def test_task_names_render_as_text(page: Any, batch: BatchServer) -> None:
    """A task named like an HTML tag with a handler is shown as those characters, in the list
    and the detail, and its handler never runs."""
    name = '<img src=x onerror="window.pwned=1">'
    task = batch.call("alice", "POST", "/tasks", {"type": "csv_import", "name": name})
    log_in(page, batch, "alice")
    expect(row(page, task["id"]).locator("a.name")).to_have_text(name, timeout=WAIT_MS)
    row(page, task["id"]).locator("a.name").click()
    expect(page.locator("#detail-title")).to_have_text(name, timeout=WAIT_MS)
    assert page.locator("img").count() == 0
    assert page.evaluate("window.pwned") is None


def test_pages_through_history_with_the_cursor(page: Any, batch: BatchServer) -> None:
    """Twelve tasks at ten a page: the newest ten, Older shows the last two, Newer goes back."""
    for i in range(12):
        batch.call("alice", "POST", "/tasks", {"type": "csv_import", "name": f"task {i:02d}"})
    log_in(page, batch, "alice")
    page.select_option("#page-size", "10")
    first = [f"task {i:02d}" for i in range(11, 1, -1)]
    expect(page.locator("#task-rows a.name")).to_have_text(first, timeout=WAIT_MS)
    expect(page.locator("#newer")).to_be_disabled()
    page.click("#older")
    expect(page.locator("#task-rows a.name")).to_have_text(["task 01", "task 00"],
                                                            timeout=WAIT_MS)
    expect(page.locator("#page-number")).to_have_text("page 2")
    expect(page.locator("#older")).to_be_disabled()
    page.click("#newer")
    expect(page.locator("#task-rows a.name")).to_have_text(first, timeout=WAIT_MS)


def test_page_offers_only_legal_transitions(
    page: Any, batch: BatchServer, tmp_path: Path
) -> None:
    """Rows in every settled state offer Retry only when failed/cancelled and Cancel only when
    created/queued/running; the page with them is the screenshot of docs/web-page.png."""
    ok = batch.import_task("alice", CSV, "june-customers.csv")
    bad = batch.import_task("alice", b"name,email\nx,y\n", "broken-header.csv")
    stopped = batch.call("alice", "POST", "/tasks", {"type": "csv_import", "name": "draft.csv"})
    batch.call("alice", "POST", f"/tasks/{stopped['id']}/cancel")
    created = batch.call("alice", "POST", "/tasks", {"type": "csv_import", "name": "july.csv"})
    batch.wait_state("alice", ok, "succeeded")
    batch.wait_state("alice", bad, "failed")
    busy = batch.call("alice", "POST", "/tasks",
                      {"type": "sleep", "name": "hold (sleep 600 s)", "params": {"seconds": 600}})
    batch.call("alice", "POST", f"/tasks/{busy['id']}/submit")
    batch.wait_state("alice", busy["id"], "running")

    try:
        log_in(page, batch, "alice")
        expected = {ok: [], bad: ["retry"], stopped["id"]: ["retry"], created["id"]: ["cancel"],
                    busy["id"]: ["cancel"]}
        for task_id, actions in expected.items():
            buttons = row(page, task_id).locator("td.actions button")
            expect(buttons).to_have_count(len(actions), timeout=WAIT_MS)
            assert [b.get_attribute("data-action") for b in buttons.all()] == actions
        expect(row(page, bad).locator("td.error-text")).to_contain_text("bad_header")
        expect(row(page, ok).locator('[role="progressbar"]')).to_have_attribute("aria-valuenow",
                                                                                "100")
        shot = tmp_path / "web-page.png"
        page.set_viewport_size({"width": 1400, "height": 400})  # full_page: as tall as needed
        page.screenshot(path=str(shot), full_page=True)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if os.environ.get("MINIDB_SCREENSHOT") == "1":
            shutil.copyfile(shot, DOCS_PNG)
    finally:
        batch.call("alice", "POST", f"/tasks/{busy['id']}/cancel")  # free the shared worker
