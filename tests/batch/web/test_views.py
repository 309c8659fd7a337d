"""The Store, Server and Batch views in headless Chromium against a real ``minidb up`` (ports
0): the sample imported from the page, the ``users`` bucket browsed by pattern and paged with
the server's cursor, values opened, an operator's changes read back over RESP with redis-py, a
user refused (403) with the buttons hidden, live charts rising under a redis-py load, HTML in
keys and values shown as text, binary values as hex, an export and the filter by user.

Set ``MINIDB_SCREENSHOT=1`` to (re)write ``docs/web-page-store.png`` and
``docs/web-page-server.png`` (``docs/web-page.png``, the Batch view, is test_page.py's).
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from .conftest import System

WAIT_MS = 30_000
"""How long the page may take to show what a test waits for."""
DOCS = Path(__file__).resolve().parents[3] / "docs"
USERS_CSV = Path(__file__).resolve().parents[3] / "examples" / "users.csv"
LOAD_DEADLINE_S = 20.0
"""The redis-py load of the chart test runs until the page saw it rise, or this long."""


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


@pytest.fixture(scope="module")
def imported(system: System) -> System:
    """The system with examples/users.csv imported (through the API: the page's own upload
    is the first test's)."""
    with redis.Redis(port=system.resp_port, db="users",  # type: ignore[arg-type]
                     socket_timeout=10) as r:
        if r.dbsize() >= 300:
            return system
    task = system.call("ops", "POST", "/tasks", {"type": "csv_import", "name": "users.csv"})
    request = urllib.request.Request(
        f"{system.url}/tasks/{task['id']}/input", data=USERS_CSV.read_bytes(), method="PUT",
        headers={"Authorization": f"Bearer {system.tokens['ops']}", "Content-Type": "text/csv"})
    urllib.request.urlopen(request, timeout=10).close()
    system.call("ops", "POST", f"/tasks/{task['id']}/submit")
    deadline = time.monotonic() + 60
    while system.call("ops", "GET", f"/tasks/{task['id']}")["state"] != "succeeded":
        assert time.monotonic() < deadline, "the sample import did not finish in time"
        time.sleep(0.1)
    return system


@pytest.fixture
def resp(system: System) -> Iterator[Any]:
    with redis.Redis(port=system.resp_port, socket_timeout=10) as client:
        yield client


def sign_in(page: Any, system: System, who: str, view: str = "") -> None:
    """Open the page, sign in as ``who`` and go to ``#view``."""
    page.goto(system.url + "/")
    page.fill("#token", system.tokens[who])
    page.click("#login-button")
    expect(page.locator("#app")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#me-user")).to_have_text(who)
    if view:
        page.click(f"#tab-{view}")
        expect(page.locator(f"#view-{view}")).to_be_visible()


def browse(page: Any, bucket: str, pattern: str = "*", count: str = "20") -> None:
    page.fill("#scan-bucket", bucket)
    page.fill("#scan-pattern", pattern)
    page.select_option("#scan-count", count)
    page.click("#scan-button")
    expect(page.locator("#keys-bucket")).to_have_text(bucket, timeout=WAIT_MS)


def open_key(page: Any, label: str) -> None:
    page.locator("#key-rows a.name", has_text=re.compile(f"^{re.escape(label)}$")).click()
    expect(page.locator("#key-title")).to_have_text(label, timeout=WAIT_MS)


def listed(page: Any) -> list[str]:
    return [t.strip() for t in page.locator("#key-rows a.name").all_text_contents()]


def screenshot(page: Any, tmp_path: Path, name: str) -> None:
    shot = tmp_path / name
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("MINIDB_SCREENSHOT") == "1":
        shutil.copyfile(shot, DOCS / name)


# --- Store --------------------------------------------------------------------------------


def test_sample_imported_from_the_page_is_browsed_by_pattern_and_paged(
    page: Any, system: System, resp: Any, tmp_path: Path
) -> None:
    """Upload examples/users.csv in the Batch view; the Store view then lists ``users`` with
    300 keys, ``user:01*`` pages through its 100 keys with the server's cursor (each once,
    Previous goes back), and a key opens on its value as redis-py reads it."""
    sign_in(page, system, "ops", "batch")
    page.set_input_files("#upload-file", str(USERS_CSV))
    page.click("#upload-button")
    status = page.locator("#upload-status")
    expect(status).to_have_text(re.compile(r"submitted [0-9A-Z]{26}"), timeout=WAIT_MS)
    task_id = str(status.text_content()).split()[-1]
    task_row = page.locator(f'tr.task[data-task-id="{task_id}"]')
    expect(task_row.locator("td.state")).to_have_text("succeeded", timeout=60_000)

    page.click("#tab-store")
    users = page.locator('tr.bucket[data-bucket="users"] td')
    expect(users.nth(1)).to_have_text("300", timeout=WAIT_MS)
    page.locator('tr.bucket[data-bucket="users"] a').click()
    expect(page.locator("#keys-bucket")).to_have_text("users", timeout=WAIT_MS)
    browse(page, "users", "user:01*", "20")
    expect(page.locator("#key-rows tr").first).to_be_visible(timeout=WAIT_MS)
    pages = [listed(page)]
    while page.locator("#keys-next").is_enabled():
        page.click("#keys-next")
        # The page number changes in the same render as the rows.
        expect(page.locator("#keys-page")).to_have_text(f"page {len(pages) + 1}",
                                                        timeout=WAIT_MS)
        pages.append(listed(page))
        assert len(pages) < 50, "the scan does not end"
    seen = [key for one in pages for key in one]
    assert sorted(seen) == [f"user:{i:04d}" for i in range(100, 200)]
    assert len(pages) >= 3
    page.click("#keys-prev")
    expect(page.locator("#key-rows a.name")).to_have_text(pages[-2], timeout=WAIT_MS)

    key = pages[-2][0]
    open_key(page, key)
    resp.execute_command("SELECT", "users")
    expect(page.locator("#value-view")).to_have_text(resp.get(key).decode(), timeout=WAIT_MS)
    expect(page.locator('#key-fields [data-field="type"]')).to_have_text("string")
    expect(page.locator("#value-note")).to_contain_text("text,")
    page.set_viewport_size({"width": 1400, "height": 400})
    screenshot(page, tmp_path, "web-page-store.png")


def test_operator_sets_and_deletes_keys_read_back_over_resp(
    page: Any, imported: System, resp: Any
) -> None:
    """Each change asks first (Cancel changes nothing) and is then what redis-py reads: a new
    key, a new value, a TTL, its removal, and the delete."""
    sign_in(page, imported, "ops", "store")
    resp.execute_command("SELECT", "notes")
    page.fill("#new-key-bucket", "notes")
    page.fill("#new-key-name", "note:1")
    page.fill("#new-key-value", "first draft")
    page.click("#new-key-button")
    expect(page.locator("#new-key-confirm")).to_be_visible()
    expect(page.locator("#new-key-confirm p")).to_contain_text("note:1")
    assert resp.exists("note:1") == 0  # nothing before the confirmation
    page.locator('#new-key-confirm [data-confirm="yes"]').click()
    expect(page.locator("#key-title")).to_have_text("note:1", timeout=WAIT_MS)
    assert resp.get("note:1") == b"first draft"

    page.fill("#set-value", "second draft")
    page.click("#set-value-button")
    page.click("#confirm-no")
    expect(page.locator("#key-status")).to_have_text("not changed")
    assert resp.get("note:1") == b"first draft"
    page.click("#set-value-button")
    page.click("#confirm-yes")
    expect(page.locator("#key-status")).to_have_text("value set", timeout=WAIT_MS)
    expect(page.locator("#value-view")).to_have_text("second draft")
    assert resp.get("note:1") == b"second draft"

    page.fill("#set-ttl", "600")
    page.click("#set-ttl-button")
    page.click("#confirm-yes")
    expect(page.locator("#key-status")).to_have_text("TTL set", timeout=WAIT_MS)
    assert 590 < resp.ttl("note:1") <= 600
    expect(page.locator('#key-fields [data-field="ttl"]')).to_contain_text("min")
    page.fill("#set-ttl", "")
    page.click("#set-ttl-button")
    page.click("#confirm-yes")
    expect(page.locator("#key-status")).to_have_text("TTL removed", timeout=WAIT_MS)
    assert resp.ttl("note:1") == -1

    page.click("#delete-key")
    expect(page.locator("#confirm p")).to_contain_text("cannot be undone")
    page.click("#confirm-yes")
    expect(page.locator("#key-status")).to_have_text("deleted", timeout=WAIT_MS)
    assert resp.exists("note:1") == 0


def test_user_reads_the_store_but_cannot_change_it(
    page: Any, imported: System, resp: Any
) -> None:
    """A ``user`` browses and opens values; the change controls are hidden, and the API
    refuses the change anyway (403) when the page is bypassed."""
    resp.execute_command("SELECT", "guarded")
    resp.set("k", "original")
    sign_in(page, imported, "carol", "store")
    expect(page.locator("#me-role")).to_have_text("user")
    expect(page.locator('tr.bucket[data-bucket="guarded"]')).to_be_visible(timeout=WAIT_MS)
    browse(page, "guarded")
    open_key(page, "k")
    expect(page.locator("#value-view")).to_have_text("original")
    for hidden in ("#key-actions", "#delete-key", "#set-value-button", "#set-ttl-button",
                   "#new-key-form", "#user-filter-form"):
        expect(page.locator(hidden)).to_be_hidden()
    status = page.evaluate("""async () => {
        const token = sessionStorage.getItem("minidb.batch.token");
        const put = await fetch("/store/key?bucket=guarded&key=k", {method: "PUT",
            headers: {Authorization: `Bearer ${token}`}, body: "hacked"});
        const del = await fetch("/store/key?bucket=guarded&key=k", {method: "DELETE",
            headers: {Authorization: `Bearer ${token}`}});
        return [put.status, del.status, (await put.json()).code];
    }""")
    assert status == [403, 403, "forbidden"]
    assert resp.get("k") == b"original"


def test_html_in_keys_and_values_renders_as_text(page: Any, imported: System, resp: Any) -> None:
    """A key named like an image tag with a handler and a value holding a script are shown
    as those characters in the list, the title and the value, and nothing of them runs."""
    key = "<img src=x onerror=alert(1)>"
    value = "<script>window.pwned = 1; alert(2)</script><b>bold?</b>"
    resp.execute_command("SELECT", "xss")
    resp.set(key, value)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    sign_in(page, imported, "ops", "store")
    browse(page, "xss")
    expect(page.locator("#key-rows a.name")).to_have_text([key], timeout=WAIT_MS)
    open_key(page, key)
    expect(page.locator("#value-view")).to_have_text(value)
    expect(page.locator('#key-fields [data-field="key"]')).to_have_text(key)
    assert page.locator("img").count() == 0
    assert page.locator("#value-view script, #value-view b").count() == 0
    assert page.evaluate("window.pwned") is None
    assert dialogs == []


def test_binary_values_show_as_hex_and_large_ones_download_whole(
    page: Any, imported: System, resp: Any
) -> None:
    """Bytes that are not text are a hex dump with their length; a binary key is 0x…; a
    value longer than the preview is cut, and Download saves all of it."""
    resp.execute_command("SELECT", "bin")
    resp.set("blob", b"\x00\x01\xffbin\x7f")
    resp.set(b"\xfe\xff", b"binary key")
    big = ("0123456789abcdef" * 4096).encode()  # 64 KiB of text
    resp.set("big", big)
    sign_in(page, imported, "ops", "store")
    browse(page, "bin")
    open_key(page, "blob")
    view = page.locator("#value-view")
    expect(view).to_have_attribute("data-encoding", "hex")
    expect(view).to_contain_text("00 01 ff 62 69 6e 7f")
    expect(view).to_contain_text("|...bin.|")
    expect(page.locator("#value-note")).to_have_text("binary, 7 bytes, shown as hex")
    open_key(page, "0xfeff")
    expect(page.locator('#key-fields [data-field="key"]')).to_contain_text("binary")
    expect(view).to_have_text("binary key")
    open_key(page, "big")
    expect(page.locator("#value-note")).to_contain_text("only the beginning is shown")
    assert len(str(view.text_content())) < len(big)
    with page.expect_download(timeout=WAIT_MS) as download:
        page.click("#value-download")
    assert Path(download.value.path()).read_bytes() == big


# --- Server -------------------------------------------------------------------------------


def test_server_charts_rise_while_a_load_runs(
    page: Any, imported: System, tmp_path: Path
) -> None:
    """While redis-py sends SETs (a bounded loop with a deadline), the commands chart's count
    and rate, the WAL chart's appends and the plot's points all rise, without a reload."""
    sign_in(page, imported, "ops", "server")
    chart = page.locator("#chart-commands")
    page.wait_for_function(
        "() => Number(document.getElementById('chart-commands').dataset.points) >= 2",
        timeout=WAIT_MS)
    expect(chart.locator("canvas").first).to_be_visible()
    before = int(str(chart.get_attribute("data-total")))
    appends = int(str(page.locator("#chart-wal").get_attribute("data-appends")))
    page.evaluate("window.notReloaded = true")
    stop = threading.Event()
    sent = [0]

    def load() -> None:
        deadline = time.monotonic() + LOAD_DEADLINE_S
        with redis.Redis(port=imported.resp_port, db="load",  # type: ignore[arg-type]
                         socket_timeout=10) as r:
            while not stop.is_set() and time.monotonic() < deadline:
                with r.pipeline(transaction=False) as pipe:
                    for i in range(100):
                        pipe.set(f"load:{i}", sent[0])
                    pipe.execute()
                sent[0] += 100

    loader = threading.Thread(target=load, name="redis-load")
    loader.start()
    try:
        # Functions, not expressions: the page's CSP refuses eval, which a string would need.
        commands = "document.getElementById('chart-commands').dataset"
        page.wait_for_function(
            f"() => Number({commands}.total) > {before + 2000} && Number({commands}.rate) > 100",
            timeout=WAIT_MS)
        page.wait_for_function(
            f"() => Number(document.getElementById('chart-wal').dataset.appends) > {appends + 20}",
            timeout=WAIT_MS)
        points = int(str(chart.get_attribute("data-points")))
        page.wait_for_function(
            f"() => Number(document.getElementById('chart-commands').dataset.points) > {points}",
            timeout=WAIT_MS)
        expect(page.locator("#chart-latency .readout")).to_contain_text("the server's requests")
        page.wait_for_function(
            "() => Number(document.getElementById('chart-latency').dataset.p99) > 0",
            timeout=WAIT_MS)
        expect(page.locator("#chart-commands .u-legend")).to_contain_text("set")
        if os.environ.get("MINIDB_SCREENSHOT") == "1":  # the picture: a dozen s of the load
            page.wait_for_function(
                f"() => Number({commands}.points) >= {points + 12}", timeout=WAIT_MS)
        page.set_viewport_size({"width": 1400, "height": 400})
        screenshot(page, tmp_path, "web-page-server.png")
    finally:
        stop.set()
        loader.join(timeout=LOAD_DEADLINE_S + 10)
    assert sent[0] >= 2000
    assert page.evaluate("window.notReloaded") is True


# --- Batch --------------------------------------------------------------------------------


def test_batch_exports_a_bucket_and_filters_by_user(page: Any, imported: System) -> None:
    """The header names the user and role; the export form runs a csv_export of ``users``;
    an operator's filter lists one user's tasks."""
    carols = imported.call("carol", "POST", "/tasks",
                           {"type": "csv_import", "name": "carol's draft"})
    sign_in(page, imported, "ops", "batch")
    expect(page.locator("#me-role")).to_have_text("operator")
    page.fill("#export-bucket", "users")
    page.fill("#export-name", "users export")
    page.click("#export-button")
    status = page.locator("#export-status")
    expect(status).to_have_text(re.compile(r"submitted [0-9A-Z]{26}"), timeout=WAIT_MS)
    task_id = str(status.text_content()).split()[-1]
    task_row = page.locator(f'tr.task[data-task-id="{task_id}"]')
    expect(task_row.locator("td").nth(1)).to_have_text("csv_export", timeout=WAIT_MS)
    expect(task_row.locator("td.state")).to_have_text("succeeded", timeout=60_000)
    record = imported.call("ops", "GET", f"/tasks/{task_id}")
    assert record["params"]["bucket"] == "users" and record["result"]["rows"] >= 300

    page.fill("#user-filter", "carol")
    page.click("#user-filter-button")
    expect(page.locator("#task-rows a.name")).to_have_text(["carol's draft"], timeout=WAIT_MS)
    expect(page.locator(f'tr.task[data-task-id="{carols["id"]}"] td').nth(6)).to_have_text(
        "carol")
    page.fill("#user-filter", "")
    page.click("#user-filter-button")
    expect(task_row).to_be_visible(timeout=WAIT_MS)
