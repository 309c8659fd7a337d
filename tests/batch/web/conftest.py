"""Fixtures of the web-page tests: a ``minidb serve`` subprocess, ``minidb batch serve`` with
in-process workers on a ``file:`` store in front of it (both shared by a module's tests, each
test with users of its own), a whole ``minidb up`` on ports 0 (``system``: the store and
server views need the RESP and metrics listeners it passes on), and headless Chromium driven
by Playwright.

Chromium is Debian's ``/usr/bin/chromium`` (``apt-get install chromium``); without it, or
without the ``playwright`` package, the tests skip and say why. Every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import signal
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

from tests._listening import LISTENING, LineReader
from tests.server.conftest import _LISTENING, LineClient

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
WORKER_OPTIONS = ("--workers", "2", "--lease-seconds", "3", "--heartbeat-seconds", "0.3",
                  "--poll-seconds", "0.05")
"""Two in-process workers that pick work up within 50 ms and see a cancel within 0.3 s."""
USER_SETS = 16
"""The servers are shared by a module's tests; each test gets users of its own (alice<n>,
bob<n>) out of this many sets, so no test sees another's tasks. ``ops`` (an operator) sees
them all."""


@dataclass
class Service:
    """A ``minidb serve`` and a ``minidb batch serve`` in front of it, for one module."""

    minidb: subprocess.Popen[str]
    minidb_port: int
    batch: subprocess.Popen[str]
    url: str
    tokens: dict[str, str]
    """Token of every user in the tokens file."""
    next_set: int = 0


@dataclass
class BatchServer:
    """The service as one test sees it: ``alice`` and ``bob`` are this test's own users."""

    service: Service
    users: dict[str, str]
    """``alice``/``bob``/``ops`` to the user names in the tokens file."""

    @property
    def url(self) -> str:
        return self.service.url

    @property
    def minidb_pid(self) -> int:
        return self.service.minidb.pid

    def user(self, who: str) -> str:
        """The user name the API knows ``who`` by (what ``created_by`` shows)."""
        return self.users[who]

    def token(self, who: str) -> str:
        return self.service.tokens[self.users[who]]

    def minidb(self) -> LineClient:
        """A line-protocol client of the minidb server the workers import into."""
        return LineClient(self.service.minidb_port)

    def call(
        self, user: str, method: str, path: str, body: Any = None, *,
        data: bytes | None = None, content_type: str = "application/json",
    ) -> Any:
        """One API call as ``user``; the parsed JSON reply (None when empty)."""
        payload = json.dumps(body).encode() if body is not None else data
        request = urllib.request.Request(
            self.url + path, data=payload, method=method,
            headers={"Authorization": f"Bearer {self.token(user)}",
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


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium per module (each test gets its own context). Not per session:
    while Playwright's sync API is open, the thread counts as running an event loop, and the
    async tests of later modules could not run theirs."""
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


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``minidb batch serve`` on 127.0.0.1:0 with two workers on a ``file:`` store, importing
    into a real ``minidb serve``; both killed at teardown."""
    root = tmp_path_factory.mktemp("web")
    names = ["ops", *(f"{who}{n}" for n in range(USER_SETS) for who in ("alice", "bob"))]
    tokens = {name: secrets.token_urlsafe(24) for name in names}
    token_file = root / "tokens"
    token_file.write_text("# TOKEN USER ROLE\n" + "".join(
        f"{tokens[name]} {name} {'operator' if name == 'ops' else 'user'}\n" for name in names
    ))
    procs: list[subprocess.Popen[str]] = []
    try:
        minidb = _start(procs, root / "minidb.log", "line",
                        "serve", "--port", "0", "--data-dir", str(root / "data"))
        batch = _start(
            procs, root / "batch-serve.log", "batch",
            "batch", "serve", "--host", "127.0.0.1", "--port", "0",
            "--store", f"file:{root / 'objects'}", "--minidb", f"127.0.0.1:{minidb[1]}",
            "--tokens", str(token_file), *WORKER_OPTIONS,
        )
        yield Service(minidb[0], minidb[1], batch[0], f"http://127.0.0.1:{batch[1]}", tokens)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)  # a test may have stopped it
                proc.kill()
            proc.wait(timeout=STARTUP_TIMEOUT_S)
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.fixture
def batch(service: Service) -> BatchServer:
    """The module's service with a fresh ``alice`` and ``bob`` for this test."""
    n = service.next_set
    if n >= USER_SETS:
        raise AssertionError(f"more than USER_SETS={USER_SETS} tests in one module")
    service.next_set += 1
    return BatchServer(service, {"alice": f"alice{n}", "bob": f"bob{n}", "ops": "ops"})


def _start(
    procs: list[subprocess.Popen[str]], log: Path, listener: str, *args: str
) -> tuple[subprocess.Popen[str], int]:
    """Start ``python -m minidb ARGS`` (stderr to ``log``: an undrained pipe would block the
    server once its log fills it) and return it with the port of its ``listener`` from
    ``minidb listening on HOST:PORT (listener)``."""
    with log.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "minidb", *args],
                                stdout=subprocess.PIPE, stderr=stderr, text=True)
    procs.append(proc)
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
                pytest.fail(f"{args[0]} exited {proc.returncode}: {log.read_text()}")
            match = _LISTENING.match(line.strip())
            if match and match.group(3) == listener:
                return proc, int(match.group(2))
    pytest.fail(f"{args[0]} did not print its listening line in time: {log.read_text()}")


# --- a whole minidb up ------------------------------------------------------------------------

UP_START_TIMEOUT_S = 90.0
"""How long ``minidb up`` may take to print its banner (two children start in turn)."""
UP_STOP_TIMEOUT_S = 60.0


@dataclass
class System:
    """A running ``minidb up``: its listeners and the tokens of its operator and a user."""

    proc: subprocess.Popen[str]
    listening: dict[str, tuple[str, int]]
    tokens: dict[str, str]
    """``ops`` (operator) and ``carol`` (user) to their tokens."""

    @property
    def url(self) -> str:
        host, port = self.listening["batch"]
        return f"http://{host}:{port}"

    @property
    def resp_port(self) -> int:
        return self.listening["resp"][1]

    def call(self, user: str, method: str, path: str, body: Any = None) -> Any:
        """One API call as ``user`` (``ops`` or ``carol``); the parsed JSON reply."""
        payload = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path, data=payload, method=method,
            headers={"Authorization": f"Bearer {self.tokens[user]}",
                     **({"Content-Type": "application/json"} if payload else {})},
        )
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            text = response.read()
        return json.loads(text) if text else None


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """``minidb up`` on port 0 everywhere, with a tokens file made beforehand holding an
    operator (``ops``, which ``up`` then uses as its own) and a user (``carol``)."""
    data = tmp_path_factory.mktemp("up") / "data"
    (data / "batch").mkdir(parents=True, mode=0o700)
    tokens = {"ops": secrets.token_urlsafe(24), "carol": secrets.token_urlsafe(24)}
    token_file = data / "batch" / "tokens"
    token_file.write_text(f"{tokens['ops']} ops operator\n{tokens['carol']} carol user\n")
    token_file.chmod(0o600)
    log = data.parent / "up.log"  # a file: an undrained pipe would block the children's logs
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "minidb", "up", "--data-dir", str(data), "--port", "0",
             "--resp-port", "0", "--http-port", "0", "--metrics-port", "0"],
            stdout=subprocess.PIPE, stderr=stderr, text=True,
        )
    try:
        reader = LineReader(proc)
        try:
            reader.until("curl ", UP_START_TIMEOUT_S)
        except (TimeoutError, EOFError) as exc:
            proc.kill()
            proc.wait(timeout=UP_STOP_TIMEOUT_S)
            pytest.fail(f"minidb up did not start: {exc}: {log.read_text()}")
        listening = {match.group(3): (match.group(1), int(match.group(2)))
                     for line in reader.seen if (match := LISTENING.match(line))}
        assert f"operator token: {tokens['ops']}" in reader.seen
        yield System(proc, listening, tokens)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=UP_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=UP_STOP_TIMEOUT_S)
        if proc.stdout is not None:
            proc.stdout.close()
