"""Fixtures of the web-page tests: a ``minidb serve`` subprocess, ``minidb batch serve`` with one
in-process worker on a ``file:`` store in front of it, and headless Chromium driven by
Playwright.

Chromium is Debian's ``/usr/bin/chromium`` (``apt-get install chromium``); without it, or
without the ``playwright`` package, the tests skip and say why. Every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import ServeFactory, ServerProcess

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    # Headless on a machine without a display, as root in CI (hence no sandbox). The rest keep
    # Chromium from phoning home: on a closed network those attempts fail and can stall it.
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
LAUNCH_TIMEOUT_MS = 30_000
"""How long Chromium may take to start."""
STARTUP_TIMEOUT_S = 30.0
"""How long ``minidb batch serve`` may take to print its listening line."""
HTTP_TIMEOUT_S = 10.0
"""Each API call the test makes itself (setting up tasks), in seconds."""
WORKER_OPTIONS = ("--workers", "1", "--lease-seconds", "3", "--heartbeat-seconds", "0.3",
                  "--poll-seconds", "0.05")
"""One in-process worker that picks work up within 50 ms and sees a cancel within 0.3 s."""

USERS = {"alice": "user", "bob": "user", "ops": "operator"}


@dataclass
class BatchServer:
    """A running ``minidb batch serve`` and the tokens of its users."""

    proc: subprocess.Popen[str]
    url: str
    tokens: dict[str, str]
    minidb: ServerProcess

    def call(
        self, user: str, method: str, path: str, body: Any = None, *,
        data: bytes | None = None, content_type: str = "application/json",
    ) -> Any:
        """One API call as ``user``; the parsed JSON reply (None when empty)."""
        payload = json.dumps(body).encode() if body is not None else data
        request = urllib.request.Request(
            self.url + path, data=payload, method=method,
            headers={"Authorization": f"Bearer {self.tokens[user]}",
                     **({"Content-Type": content_type} if payload is not None else {})},
        )
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                text = response.read()
        except urllib.error.HTTPError as exc:
            pytest.fail(f"{method} {path} as {user}: {exc.code} {exc.read()!r}")
        return json.loads(text) if text else None

    def import_task(self, user: str, csv: bytes, name: str, **params: Any) -> str:
        """Create, upload and submit a ``csv_import`` of ``csv`` as ``user``; its id."""
        task = self.call(user, "POST", "/tasks",
                         {"type": "csv_import", "name": name, "params": params})
        self.call(user, "PUT", f"/tasks/{task['id']}/input", data=csv, content_type="text/csv")
        self.call(user, "POST", f"/tasks/{task['id']}/submit")
        return str(task["id"])

    def wait_state(self, user: str, task_id: str, state: str, timeout: float = 30.0) -> Any:
        """Poll the task until it is in ``state``; fail showing it after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            task = self.call(user, "GET", f"/tasks/{task_id}")
            if task["state"] == state:
                return task
            if time.monotonic() > deadline:
                pytest.fail(f"task did not reach {state} in {timeout} s: {task}")
            time.sleep(0.05)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the session (each test gets its own context)."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=LAUNCH_TIMEOUT_MS
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context (its own sessionStorage) and page, with short default waits."""
    context = browser.new_context(accept_downloads=True, viewport={"width": 1400, "height": 900})
    context.set_default_timeout(15_000)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


@pytest.fixture
def batch(serve: ServeFactory, tmp_path: Path) -> Iterator[BatchServer]:
    """``minidb batch serve`` on 127.0.0.1:0 with one worker, a ``file:`` store and a real
    minidb server; killed at teardown."""
    minidb = serve()
    tokens = {user: secrets.token_urlsafe(24) for user in USERS}
    token_file = tmp_path / "tokens"
    token_file.write_text(
        "# TOKEN USER ROLE\n" + "".join(f"{tokens[u]} {u} {r}\n" for u, r in USERS.items())
    )
    command = [
        sys.executable, "-m", "minidb", "batch", "serve", "--host", "127.0.0.1", "--port", "0",
        "--store", f"file:{tmp_path / 'objects'}", "--minidb", f"127.0.0.1:{minidb.port}",
        "--tokens", str(token_file), *WORKER_OPTIONS,
    ]
    # stderr to a file: an undrained pipe would block the server once its log fills it.
    log = tmp_path / "batch-serve.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        url = _listening(proc, log)
        yield BatchServer(proc, url, tokens, minidb)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=STARTUP_TIMEOUT_S)
        if proc.stdout is not None:
            proc.stdout.close()


def _listening(proc: subprocess.Popen[str], log: Path) -> str:
    """The base URL from ``minidb listening on HOST:PORT (batch)``."""
    assert proc.stdout is not None
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(timeout=left):
                continue
            line = proc.stdout.readline()
            if not line:
                proc.wait(timeout=STARTUP_TIMEOUT_S)
                pytest.fail(f"batch serve exited {proc.returncode}: {log.read_text()}")
            words = line.split()
            if words[:3] == ["minidb", "listening", "on"] and words[-1] == "(batch)":
                return f"http://{words[3]}"
    proc.kill()
    pytest.fail(f"batch serve did not print its listening line in time: {log.read_text()}")
