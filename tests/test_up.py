"""``minidb up`` as a subprocess on port 0 everywhere: what it prints, an import through the
API read back over RESP, graceful stops, restarts on the same data dir, and no orphans."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis

from tests._listening import LISTENING, LineReader
from tests.objstore.conftest import S3Rig, s3rig  # noqa: F401
from tests.objstore.s3rig import ACCESS_KEY, REGION, SECRET_KEY

ROOT = Path(__file__).resolve().parents[1]
USERS_CSV = ROOT / "examples" / "users.csv"
STARTUP_TIMEOUT_S = 60.0
"""How long ``minidb up`` may take to print its last line (two children start in turn)."""
STOP_TIMEOUT_S = 60.0
"""How long a graceful stop may take (each child has its grace)."""
TASK_TIMEOUT_S = 30.0
"""How long the sample import may take."""
ANY_PORT = ("--port", "0", "--resp-port", "0", "--http-port", "0", "--metrics-port", "0")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not count)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return text.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _children(pid: int) -> set[int]:
    """The pids whose parent is ``pid``, from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat_line = (entry / "stat").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(stat_line.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _wait_gone(pids: set[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while alive := {p for p in pids if _alive(p)}:
        if time.monotonic() > deadline:
            pytest.fail(f"processes outlived minidb up: {sorted(alive)}")
        time.sleep(0.05)


@dataclass
class Up:
    """A running ``minidb up`` and what it printed."""

    proc: subprocess.Popen[str]
    lines: list[str]
    listening: dict[str, tuple[str, int]]
    token: str
    children: set[int] = field(default_factory=set)

    @property
    def api(self) -> str:
        host, port = self.listening["batch"]
        return f"http://{host}:{port}"

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.api, timeout=10.0,
                            headers={"Authorization": f"Bearer {self.token}"})

    def stop(self, signum: int = signal.SIGINT) -> int:
        self.proc.send_signal(signum)
        return self.proc.wait(timeout=STOP_TIMEOUT_S)


StartUp = Callable[..., Up]


@pytest.fixture
def start_up(tmp_path: Path) -> Iterator[StartUp]:
    """Start ``minidb up`` on a data dir (port 0 everywhere); everything is killed at teardown."""
    started: list[Up] = []

    def start(data_dir: Path = tmp_path / "data", *extra: str,
              env: dict[str, str] | None = None) -> Up:
        proc = subprocess.Popen(
            [sys.executable, "-m", "minidb", "up", "--data-dir", str(data_dir), *ANY_PORT,
             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})},
        )
        reader = LineReader(proc)
        try:
            reader.until("curl ", STARTUP_TIMEOUT_S)
        except (TimeoutError, EOFError) as exc:
            proc.kill()
            pytest.fail(f"minidb up did not start: {exc}: {proc.communicate(timeout=10)[1]}")
        listening: dict[str, tuple[str, int]] = {}
        token = ""
        for line in reader.seen:
            if match := LISTENING.match(line):
                listening[match.group(3)] = (match.group(1), int(match.group(2)))
            if line.startswith("operator token: "):
                token = line.removeprefix("operator token: ")
        up = Up(proc, list(reader.seen), listening, token, _children(proc.pid))
        started.append(up)
        return up

    yield start
    pids: set[int] = set()
    for up in started:
        pids |= up.children
        if up.proc.poll() is None:
            up.proc.kill()
        up.proc.wait(timeout=10)
        for stream in (up.proc.stdout, up.proc.stderr):
            if stream is not None:
                stream.close()
    for pid in pids:  # the PDEATHSIG of a broken build must not leave them to the next test
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _import_users(up: Up) -> str:
    """Create, upload, submit examples/users.csv through the API; the task id once done."""
    with up.http() as http:
        created = http.post("/tasks", json={"type": "csv_import", "name": "users.csv"})
        assert created.status_code == 201, created.text
        task_id = created.json()["id"]
        put = http.put(f"/tasks/{task_id}/input", content=USERS_CSV.read_bytes(),
                       headers={"Content-Type": "text/csv"})
        assert put.status_code == 204, put.text
        assert http.post(f"/tasks/{task_id}/submit").status_code == 202
        deadline = time.monotonic() + TASK_TIMEOUT_S
        while (task := http.get(f"/tasks/{task_id}").json())["state"] != "succeeded":
            assert task["state"] in ("queued", "running"), task
            if time.monotonic() > deadline:
                pytest.fail(f"the import did not end in time: {task}")
            time.sleep(0.1)
        assert task["result"] == {"rows": 303, "ok": 300, "failed": 3}
        return str(task_id)


def test_up_prints_its_lines_imports_stops_and_restarts(start_up: StartUp, tmp_path: Path) -> None:
    """The whole path: banner, an import through the API read over RESP, SIGINT exit 0 with no
    child left, and a restart on the same dir with the same token, keys and task."""
    data = tmp_path / "data"
    up = start_up(data)
    kinds = [line.rsplit("(", 1)[1].rstrip(")") for line in up.lines
             if line.startswith("minidb listening on ")]
    assert kinds == ["line", "resp", "metrics", "batch"]
    base = up.api
    assert f"web page: {base}/" in up.lines
    assert f"curl -H 'Authorization: Bearer {up.token}' {base}/tasks" in up.lines
    tokens = data / "batch" / "tokens"
    assert stat.S_IMODE(tokens.stat().st_mode) == 0o600
    assert up.token in tokens.read_text()
    assert len(up.children) == 2, up.children
    with httpx.Client(base_url=base, timeout=10.0) as plain:
        assert plain.get("/healthz").status_code == 200
        page = plain.get("/")
        assert page.status_code == 200 and "html" in page.headers["content-type"]
        assert plain.get("/tasks").status_code == 401

    task_id = _import_users(up)
    resp_port = up.listening["resp"][1]
    with redis.Redis(port=resp_port, db="users", socket_timeout=10) as r:  # type: ignore[arg-type]
        assert r.get("user:0001") == b"Alan Hopper, Osaka"
        assert r.get("user:0300") is not None
    metrics_port = up.listening["metrics"][1]
    with httpx.Client(timeout=10.0) as plain:
        assert plain.get(f"http://127.0.0.1:{metrics_port}/metrics").status_code == 200

    assert up.stop(signal.SIGINT) == 0, up.proc.stderr.read()  # type: ignore[union-attr]
    _wait_gone(up.children, timeout=1.0)  # reaped by up before it exited: gone at once

    again = start_up(data)
    assert again.token == up.token
    with redis.Redis(port=again.listening["resp"][1], db="users",  # type: ignore[arg-type]
                     socket_timeout=10) as r:
        assert r.get("user:0001") == b"Alan Hopper, Osaka"
        assert r.dbsize() == 300
    with again.http() as http:
        task = http.get(f"/tasks/{task_id}").json()
        assert task["state"] == "succeeded"
        assert task_id in [t["id"] for t in http.get("/tasks").json()["tasks"]]
    assert again.stop(signal.SIGTERM) == 0
    _wait_gone(again.children, timeout=1.0)


def test_up_on_s3_imports_and_finds_the_task_after_a_restart(
    start_up: StartUp, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``--store s3://...`` keeps the tasks in S3 (moto): an import, a restart, the same task."""
    rig: S3Rig = request.getfixturevalue("s3rig")
    bucket = rig.server.new_bucket()
    env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
           "AWS_DEFAULT_REGION": REGION}
    store = ("--store", f"s3://{bucket}/up", "--s3-endpoint", rig.server.endpoint)
    up = start_up(tmp_path / "data", *store, env=env)
    task_id = _import_users(up)
    assert not (tmp_path / "data" / "objects").exists()
    assert up.stop(signal.SIGTERM) == 0
    again = start_up(tmp_path / "data", *store, env=env)
    with again.http() as http:
        assert http.get(f"/tasks/{task_id}").json()["state"] == "succeeded"
    assert again.stop() == 0


def test_up_sigkill_leaves_no_orphan(start_up: StartUp) -> None:
    """SIGKILL of ``minidb up`` (no code of ours runs) still ends both children: PDEATHSIG."""
    up = start_up()
    assert len(up.children) == 2
    up.proc.kill()
    up.proc.wait(timeout=10)
    _wait_gone(up.children, timeout=STOP_TIMEOUT_S)


def test_up_busy_port_exits_1_and_leaves_nothing(start_up: StartUp, tmp_path: Path) -> None:
    """A listener port that is taken fails the start with exit 1, and no child is left."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "minidb", "up", "--data-dir", str(tmp_path / "d"),
             *ANY_PORT[:-2], "--metrics-port", "0", "--http-port", str(port)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        seen: set[int] = set()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while proc.poll() is None:
            seen |= _children(proc.pid)
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail("minidb up did not give up on a busy port")
            time.sleep(0.05)
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 1, (out, err)
    assert "minidb up: error: minidb batch serve" in err
    _wait_gone(seen, timeout=1.0)


def test_up_bad_options_exit_2() -> None:
    """Two listeners on one port, or a port out of range, exit 2 with one line."""
    for args in (("--port", "9000", "--http-port", "9000"), ("--resp-port", "70000")):
        done = subprocess.run([sys.executable, "-m", "minidb", "up", *args],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 2, done
        assert done.stderr.count("\n") == 1, done.stderr
