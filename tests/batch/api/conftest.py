"""Fixtures of the API tests: the control API served over real HTTP on 127.0.0.1:0.

``ApiServer`` runs ``create_app`` under uvicorn in a thread with its own minidb.runtime loop
(the store is used only from that loop), so tests talk to it with plain ``httpx`` clients,
sync or async. ``api`` is parametrised over both backends (file: and the moto rig).
``minidb_server`` is a real ``minidb serve`` (line, RESP and metrics listeners) for the store
browser's and server figures' tests, one per module; ``attached`` is the API attached to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import uvicorn

import minidb.runtime
from minidb.batch import Claim, TaskError
from minidb.batch.api import ApiSettings, create_app, parse_tokens
from minidb.batch.api._attached import ServerLink
from minidb.objstore import FileStore, ObjectStore
from tests.batch.conftest import file_store, proxy, s3_store, s3rig, store  # noqa: F401  (fixtures)

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"
ROOT = "root-token-0123456789a"
TOKENS_TEXT = f"""# test tokens
{ALICE} alice user
{BOB} bob user
{ROOT} root operator
"""
START_TIMEOUT_S = 10.0
"""How long the in-process server may take to start listening."""
SERVER_START_TIMEOUT_S = 30.0
"""How long ``minidb serve`` may take to print its listening lines."""
_LISTENING = re.compile(r"^minidb listening on (\S+):(\d+) \((\w+)\)$")
STOP_TIMEOUT_S = 10.0
"""How long it may take to stop."""


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class ApiServer:
    """The API over ``store`` under uvicorn in a thread; ``url`` once started."""

    def __init__(self, objects: ObjectStore, settings: ApiSettings | None = None,
                 **options: Any) -> None:
        self.app = create_app(objects, parse_tokens(TOKENS_TEXT), settings=settings, **options)
        self.service = self.app.state.service
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(
            self.app, loop="none", lifespan="off", access_log=False, log_config=None))
        self._server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="api-server", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            try:
                await self._server.serve(sockets=[self._sock])
            finally:
                await self.app.state.attached.close()
        minidb.runtime.run(main())

    def start(self) -> ApiServer:
        self._thread.start()
        with httpx.Client(base_url=self.url, timeout=1.0) as client:
            for _ in range(int(START_TIMEOUT_S / 0.05)):
                with contextlib.suppress(httpx.HTTPError):
                    if client.get("/healthz").status_code == 200:
                        return self
                threading.Event().wait(0.05)
        raise AssertionError("the API server did not start")

    def call(self, coro: Any) -> Any:
        """Run ``coro`` on the server's loop (where its store lives) and return the result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(STOP_TIMEOUT_S)

    def client(self, token: str | None = None, **options: Any) -> httpx.Client:
        headers = {} if token is None else auth(token)
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0, **options)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(STOP_TIMEOUT_S)
        assert not self._thread.is_alive(), "the API server did not stop"


@pytest.fixture
def api(store: ObjectStore) -> Iterator[ApiServer]:  # noqa: F811
    """The API on each backend, over real HTTP."""
    server = ApiServer(store).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def alice(api: ApiServer) -> Iterator[httpx.Client]:
    with api.client(ALICE) as client:
        yield client


@pytest.fixture
def bob(api: ApiServer) -> Iterator[httpx.Client]:
    with api.client(BOB) as client:
        yield client


@pytest.fixture
def root(api: ApiServer) -> Iterator[httpx.Client]:
    with api.client(ROOT) as client:
        yield client


@pytest.fixture
def anon(api: ApiServer) -> Iterator[httpx.Client]:
    with api.client() as client:
        yield client


CSV = b"bucket,key,value\nb,k1,v1\nb,k2,v2\n"


def create(client: httpx.Client, body: dict[str, Any] | None = None,
           **headers: str) -> httpx.Response:
    """POST /tasks (a csv_import by default)."""
    return client.post("/tasks", json=body or {"type": "csv_import"}, headers=headers)


def created_id(client: httpx.Client, body: dict[str, Any] | None = None) -> str:
    response = create(client, body)
    assert response.status_code == 201, response.text
    task_id: str = response.json()["id"]
    return task_id


def is_problem(response: httpx.Response, status: int) -> bool:
    """Whether ``response`` is an RFC 9457 problem with ``status``."""
    body = response.json()
    return (response.status_code == status
            and response.headers["content-type"].startswith("application/problem+json")
            and body["status"] == status and isinstance(body["title"], str))


SLEEP = {"type": "sleep", "params": {"seconds": 0}}
"""A task that needs no input."""


def queued_id(client: httpx.Client) -> str:
    """A submitted sleep task of ``client``'s user."""
    task_id = created_id(client, SLEEP)
    assert client.post(f"/tasks/{task_id}/submit").status_code == 202
    return task_id


def claim(api: ApiServer, task_id: str) -> Claim:
    """Claim ``task_id`` (the only queued task of the store) as a worker would."""
    got = api.call(api.service.queue.claim_next(worker="w-test"))
    assert got is not None and got.task_id == task_id, got
    return cast(Claim, got)


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data


def in_state(api: ApiServer, client: httpx.Client, state: str) -> str:
    """A task of ``client``'s user in ``state`` (``running`` is held by worker w-test; a
    ``succeeded`` one has the output file ``report.csv``)."""
    if state == "created":
        return created_id(client, SLEEP)
    task_id = queued_id(client)
    if state == "queued":
        return task_id
    if state == "cancelled":
        assert client.post(f"/tasks/{task_id}/cancel").status_code == 200
        return task_id
    held = claim(api, task_id)
    queue = api.service.queue
    if state == "succeeded":
        file = api.call(queue.put_output(held, "report.csv", _one(REPORT)))
        api.call(queue.complete(held, result={"rows": 2}, files=(file,)))
    elif state == "failed":
        api.call(queue.fail(held, error=TaskError("boom", "it broke"), retryable=False))
    else:
        assert state == "running", state
    return task_id


REPORT = b"line,reason\n2,bad\n"
"""The output file of a ``succeeded`` task of ``in_state``."""


# --- a real minidb server for the store browser ---------------------------------------------


@dataclass
class MinidbServer:
    """A ``minidb serve`` subprocess with its three listeners."""

    proc: subprocess.Popen[str]
    ports: dict[str, int]

    @property
    def link(self) -> ServerLink:
        return ServerLink(resp=("127.0.0.1", self.ports["resp"]),
                          metrics=("127.0.0.1", self.ports["metrics"]))


@pytest.fixture(scope="module")
def minidb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinidbServer]:
    """``minidb serve`` on port 0 for line, RESP and metrics, shared by a module's tests."""
    data = tmp_path_factory.mktemp("minidb")
    log = (data / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "minidb", "serve", "--port", "0", "--resp-port", "0",
         "--metrics-port", "0", "--data-dir", str(data / "data")],
        stdout=subprocess.PIPE, stderr=log, text=True,
    )
    try:
        assert proc.stdout is not None
        ports: dict[str, int] = {}
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while set(ports) != {"line", "resp", "metrics"}:
            if time.monotonic() > deadline:
                pytest.fail("minidb serve did not print its listening lines in time")
            line = proc.stdout.readline()
            if not line:
                pytest.fail(f"minidb serve exited: {Path(log.name).read_text()}")
            if match := _LISTENING.match(line.strip()):
                ports[match.group(3)] = int(match.group(2))
        yield MinidbServer(proc, ports)
    finally:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)
        if proc.stdout is not None:
            proc.stdout.close()
        log.close()


def attached_api(tmp_path: Path, link: ServerLink, **settings: Any) -> ApiServer:
    """The API on a ``file:`` store, attached to the server at ``link``, started."""
    return ApiServer(FileStore(str(tmp_path / "objects")),
                     ApiSettings(server=link, **settings)).start()


@pytest.fixture
def attached(tmp_path: Path, minidb_server: MinidbServer) -> Iterator[ApiServer]:
    """The API attached to the module's ``minidb serve`` (RESP and metrics)."""
    server = attached_api(tmp_path, minidb_server.link)
    try:
        yield server
    finally:
        server.stop()


def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
