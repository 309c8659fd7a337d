"""``minidb batch serve`` as a subprocess: the listening line, SIGTERM with a request in
flight (exit 0), a full restart on the same store, bad options, an end-to-end import by an
in-process worker into a real minidb server, and no token in its output. Every wait has a
deadline."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.objstore.conftest import S3Rig
from tests.objstore.s3rig import ACCESS_KEY, REGION, SECRET_KEY
from tests.server.conftest import ServeFactory

from .conftest import ALICE, BOB, ROOT, SLEEP, TOKENS_TEXT, auth

START_TIMEOUT_S = 30.0
"""How long the subprocess may take to print its listening line."""
EXIT_TIMEOUT_S = 30.0
"""How long it may take to exit after SIGTERM."""
TASK_TIMEOUT_S = 60.0
"""How long the end-to-end task may take to succeed."""


class BatchServe:
    """One ``minidb batch serve`` subprocess."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "minidb", "batch", "serve", "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **env},
        )
        assert self.proc.stdout is not None
        line = _readline(self.proc, START_TIMEOUT_S)
        prefix, _, rest = line.strip().partition("minidb listening on ")
        if prefix or not rest.endswith(" (batch)"):
            self.proc.kill()
            pytest.fail(f"no listening line: {line!r} {self.proc.communicate()[1]}")
        self.host, _, port = rest.removesuffix(" (batch)").rpartition(":")
        self.port = int(port)
        self.url = f"http://{self.host}:{self.port}"

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=auth(token), timeout=30.0)

    def stop(self) -> tuple[int, str]:
        """SIGTERM; the exit status and everything it wrote to stderr."""
        self.proc.send_signal(signal.SIGTERM)
        _out, err = self.proc.communicate(timeout=EXIT_TIMEOUT_S)
        return self.proc.returncode, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=EXIT_TIMEOUT_S)


def _readline(proc: subprocess.Popen[str], timeout: float) -> str:
    """The first stdout line, or "" if none comes within ``timeout`` (then it is killed)."""
    assert proc.stdout is not None
    import selectors
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            proc.kill()
            return ""
    return proc.stdout.readline()


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(TOKENS_TEXT)
    return path


@pytest.fixture(params=["file", "s3"])
def store_args(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """``--store`` options and environment for each backend."""
    if request.param == "file":
        return ["--store", f"file:{tmp_path / 'objects'}"], {}
    rig: S3Rig = request.getfixturevalue("s3rig")
    env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
           "AWS_DEFAULT_REGION": REGION}
    return ["--store", f"s3://{rig.server.new_bucket()}/pfx", "--s3-endpoint",
            rig.server.endpoint], env


@pytest.fixture
def launch(tokens_file: Path, store_args: tuple[list[str], dict[str, str]]) -> Iterator[
        type[BatchServe]]:
    """Start ``minidb batch serve`` on the test's store; all are killed at teardown."""
    started: list[BatchServe] = []

    class Launcher(BatchServe):
        def __init__(self, *extra: str) -> None:
            super().__init__([*store_args[0], "--tokens", str(tokens_file), *extra],
                             store_args[1])
            started.append(self)

    yield Launcher
    for server in started:
        server.kill()


def _refusing(host: str, port: int, timeout: float) -> None:
    """Wait until ``host:port`` refuses connections (the server stopped listening)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1).close()
        except OSError:
            return
        time.sleep(0.02)
    pytest.fail("the server kept listening after SIGTERM")


def test_sigterm_finishes_the_request_in_flight_and_exits_0(launch: type[BatchServe]) -> None:
    """An upload whose handler is running when SIGTERM comes completes (204) after the
    server stopped listening, and the process then exits 0."""
    server = launch()
    with server.client(ALICE) as alice:
        task_id = alice.post("/tasks", json={"type": "csv_import"}).json()["id"]
    body = b"bucket,key,value\nb,k,v\n"
    with socket.create_connection((server.host, server.port), timeout=30) as sock:
        sock.sendall(
            f"PUT /tasks/{task_id}/input HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {ALICE}\r\nContent-Length: {len(body)}\r\n"
            "Expect: 100-continue\r\n\r\n".encode()
        )
        # uvicorn answers 100 Continue when the handler first asks for the body: from here
        # on the request is surely in flight (not merely bytes in a socket buffer).
        interim = sock.recv(1024)
        assert interim.startswith(b"HTTP/1.1 100"), interim
        server.proc.send_signal(signal.SIGTERM)
        _refusing(server.host, server.port, EXIT_TIMEOUT_S)  # shutdown has begun
        sock.sendall(body)
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = sock.recv(4096)
            assert chunk, reply
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 204"), reply
    _out, err = server.proc.communicate(timeout=EXIT_TIMEOUT_S)
    assert server.proc.returncode == 0, err


def test_restart_keeps_tasks_cursors_and_idempotency_keys(launch: type[BatchServe]) -> None:
    """After SIGTERM and a new process on the same store, the tasks, a cursor minted before
    and an Idempotency-Key used before all still hold."""
    first = launch()
    with first.client(ALICE) as alice:
        ids = [alice.post("/tasks", json=SLEEP).json()["id"] for _ in range(3)]
        keyed = alice.post("/tasks", json=SLEEP, headers={"Idempotency-Key": "once"})
        assert keyed.status_code == 201
        cursor = alice.get("/tasks", params={"limit": 2}).json()["next_cursor"]
    status, err = first.stop()
    assert status == 0, err
    second = launch()
    with second.client(ALICE) as alice:
        listed = [t["id"] for t in alice.get("/tasks", params={"limit": 100}).json()["tasks"]]
        assert listed == [keyed.json()["id"], *ids[::-1]]
        page = alice.get("/tasks", params={"limit": 2, "cursor": cursor})
        assert [t["id"] for t in page.json()["tasks"]] == ids[::-1][1:]
        again = alice.post("/tasks", json=SLEEP, headers={"Idempotency-Key": "once"})
        assert (again.status_code, again.json()["id"]) == (200, keyed.json()["id"])
    status, err = second.stop()
    assert status == 0, err
    for token in (ALICE, BOB, ROOT):
        assert token not in err


def test_a_port_in_use_is_exit_1_with_one_line(tmp_path: Path, tokens_file: Path) -> None:
    """Another listener on the port makes serve exit 1 with one line, not a traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "minidb", "batch", "serve", "--port", str(port),
                   "--store", f"file:{tmp_path / 'objects'}", "--tokens", str(tokens_file)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=EXIT_TIMEOUT_S)
    assert done.returncode == 1, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args,message", [
    (["--tokens", "/nonexistent/tokens"], "cannot read tokens file"),
    (["--workers", "1"], "--workers needs --minidb"),
    (["--presign-seconds", "0"], "presign_s"),
])
def test_bad_options_exit_2_with_one_line(tmp_path: Path, tokens_file: Path, args: list[str],
                                          message: str) -> None:
    """A missing tokens file or an inconsistent option is exit 2 and one line on stderr."""
    command = [sys.executable, "-m", "minidb", "batch", "serve", "--port", "0",
               "--store", f"file:{tmp_path / 'objects'}", "--tokens", str(tokens_file), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=EXIT_TIMEOUT_S)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_end_to_end_import_by_an_in_process_worker(launch: type[BatchServe],
                                                   serve: ServeFactory) -> None:
    """Create, upload, submit; the in-process worker imports into a real minidb server; the
    output is listed and downloaded through its URL."""
    minidb = serve()
    server = launch("--workers", "1", "--minidb", f"127.0.0.1:{minidb.port}",
                    "--poll-seconds", "0.05", "--lease-seconds", "5", "--heartbeat-seconds", "1")
    csv = b"bucket,key,value\nusers,u1,ann\nusers,u2,bob\nnot a row\n"
    with server.client(ALICE) as alice:
        task_id = alice.post("/tasks", json={"type": "csv_import",
                                             "params": {"max_bad_rows": 5}}).json()["id"]
        assert alice.put(f"/tasks/{task_id}/input", content=csv).status_code == 204
        assert alice.post(f"/tasks/{task_id}/submit").status_code == 202
        deadline = time.monotonic() + TASK_TIMEOUT_S
        task = alice.get(f"/tasks/{task_id}").json()
        while task["state"] not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, task
            time.sleep(0.05)
            task = alice.get(f"/tasks/{task_id}").json()
        assert task["state"] == "succeeded", task
        listing = alice.get(f"/tasks/{task_id}/output").json()
    files = {file["name"]: file for file in listing["files"]}
    assert "errors.csv" in files
    report = httpx.get(files["errors.csv"]["url"], timeout=30)
    assert report.status_code == 200 and report.content.startswith(b"line,reason")
    assert len(report.content) == files["errors.csv"]["size"]
    lines = minidb.client()
    assert lines.request("GET users u1") == "VALUE ann"
    assert lines.request("GET users u2") == "VALUE bob"
    status, err = server.stop()
    assert status == 0, err
    assert f"GET /tasks/{task_id}/output 200 alice" in err  # the access log ran
    assert ALICE not in err and "sig=" not in err and "X-Amz-Signature" not in err
