"""The scripts CLI (``minidb batch submit/ls/show/cancel/retry/output``) as subprocesses against
a real ``minidb batch serve --workers 1`` and a real ``minidb serve``, over HTTP on 127.0.0.1;
every call has a deadline."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from minidb._cli import main
from minidb.client import SyncClient
from tests._listening import LineReader

ROOT = Path(__file__).resolve().parents[2]
USERS_CSV = ROOT / "examples" / "users.csv"
STARTUP_TIMEOUT_S = 30.0
"""How long the server and the API may take to print their listening lines."""
CLI_TIMEOUT_S = 60.0
"""How long one CLI invocation may take (a submit waits for its task to end)."""
FAST = ("--lease-seconds", "3", "--heartbeat-seconds", "0.3", "--poll-seconds", "0.1")
OPERATOR = "operator-token-0123456789"
BOB = "bob-token-0123456789abcdef"
TOKENS = f"{OPERATOR} operator-1 operator\nalice-token-0123456789ab alice user\n{BOB} bob user\n"

_TASK_LINE = re.compile(r"^task (\w+) (\w+)$")


def _start(argv: list[str], kinds: set[str]) -> tuple[subprocess.Popen[str], dict[str, int]]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        found = LineReader(proc).listening(kinds, STARTUP_TIMEOUT_S)
    except (TimeoutError, EOFError) as exc:
        proc.kill()
        pytest.fail(f"{argv[3:5]} did not start: {exc}: {proc.communicate(timeout=10)[1]}")
    return proc, {kind: port for kind, (_host, port) in found.items()}


@dataclass
class System:
    """A server, an API with one worker, and the API's URL."""

    url: str
    line_port: int
    tmp: Path

    def cli(self, *args: str, token: str | None = OPERATOR, url: str | None = "",
            env: dict[str, str] | None = None, spawn: bool = False) -> Ran:
        """Run ``minidb batch ARGS --url URL --token TOKEN`` to the end, within the deadline.

        ``url`` "" is this system's API, None leaves ``--url`` out; ``token`` None leaves
        ``--token`` out. MINIDB_BATCH_* variables of the test run are not passed on. In this
        process through ``minidb._cli.main`` (the same HTTP, without an interpreter start per
        call), or with ``spawn`` as a ``python -m minidb`` subprocess.
        """
        argv = ["batch", *args]
        if url is not None:
            argv += ["--url", url or self.url]
        if token is not None:
            argv += ["--token", token]
        clean = {k: v for k, v in os.environ.items() if not k.startswith("MINIDB_BATCH_")}
        full_env = {**clean, **(env or {})}
        if spawn:
            done = subprocess.run([sys.executable, "-m", "minidb", *argv], capture_output=True,
                                  text=True, timeout=CLI_TIMEOUT_S, env=full_env)
            return Ran(done.returncode, done.stdout, done.stderr)
        out, err = io.StringIO(), io.StringIO()
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(full_env)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(argv)
                except SystemExit as exc:  # argparse's usage errors
                    code = int(exc.code or 0)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        return Ran(code, out.getvalue(), err.getvalue())


@dataclass
class Ran:
    """How one CLI invocation ended."""

    returncode: int
    stdout: str
    stderr: str


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """``minidb serve`` and ``minidb batch serve --workers 1`` on fresh dirs, port 0."""
    tmp = tmp_path_factory.mktemp("cli")
    tokens = tmp / "tokens"
    tokens.write_text(TOKENS)
    server, ports = _start([sys.executable, "-m", "minidb", "serve", "--port", "0",
                            "--data-dir", str(tmp / "server")], {"line"})
    try:
        api, api_ports = _start(
            [sys.executable, "-m", "minidb", "batch", "serve", "--host", "127.0.0.1",
             "--port", "0", "--store", f"file:{tmp / 'objects'}",
             "--minidb", f"127.0.0.1:{ports['line']}", "--tokens", str(tokens),
             "--workers", "1", *FAST], {"batch"})
        try:
            yield System(f"http://127.0.0.1:{api_ports['batch']}", ports["line"], tmp)
        finally:
            _stop(api)
    finally:
        _stop(server)


def _task_id(stdout: str) -> str:
    for line in stdout.splitlines():
        match = _TASK_LINE.match(line)
        if match:
            return match.group(1)
    raise AssertionError(f"no task line in {stdout!r}")


def _show(system: System, task_id: str, token: str = OPERATOR) -> dict[str, object]:
    done = system.cli("show", task_id, "--json", token=token)
    assert done.returncode == 0, done.stderr
    task: dict[str, object] = json.loads(done.stdout)
    return task


def _until_state(system: System, task_id: str, state: str, timeout: float = 30.0) -> None:
    """Poll the task over HTTP (not the CLI: an interpreter start per poll) until ``state``."""
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {OPERATOR}"}
    with httpx.Client(base_url=system.url, headers=headers, timeout=10.0) as http:
        while (task := http.get(f"/tasks/{task_id}").json())["state"] != state:
            if time.monotonic() > deadline:
                pytest.fail(f"task never got to {state}: {task}")
            time.sleep(0.1)


@pytest.fixture(scope="module")
def imported(system: System) -> str:
    """The id of examples/users.csv imported with ``submit`` (checked by the first test)."""
    done = system.cli("submit", "--type", "csv_import", str(USERS_CSV), spawn=True)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "succeeded: rows=303 ok=300 failed=3" in done.stdout
    return _task_id(done.stdout)


def test_cli_submit_import_prints_counts_and_error_report(system: System, imported: str) -> None:
    """``submit`` of the sample CSV exits 0, names the error report, and the keys are there."""
    task = _show(system, imported)
    assert task["state"] == "succeeded"
    assert task["result"] == {"rows": 303, "ok": 300, "failed": 3}
    with SyncClient("127.0.0.1", system.line_port) as db:
        assert db.get("users", "user:0001") == "Alan Hopper, Osaka"
        assert db.get("users", "user:0300") is not None


def test_cli_output_download_saves_the_error_report(system: System, imported: str,
                                                    tmp_path: Path) -> None:
    """``output --download DIR`` writes errors.csv with the three bad rows; without it, lists."""
    listed = system.cli("output", imported)
    assert listed.returncode == 0, listed.stderr
    assert "errors.csv" in listed.stdout
    done = system.cli("output", imported, "--download", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    with (tmp_path / "out" / "errors.csv").open(newline="") as file:
        rows = list(csv.reader(file))
    text = "\n".join(",".join(row) for row in rows)
    for reason in ("invalid_key", "wrong_column_count", "stray_quote"):
        assert reason in text
    assert not list((tmp_path / "out").glob("*.part"))


def test_cli_submit_export_with_param(system: System, imported: str, tmp_path: Path) -> None:
    """``submit --type csv_export --param bucket=users`` exits 0; the export has all 300 keys."""
    done = system.cli("submit", "--type", "csv_export", "--param", "bucket=users")
    assert done.returncode == 0, (done.stdout, done.stderr)
    task_id = _task_id(done.stdout)
    assert system.cli("output", task_id, "--download", str(tmp_path)).returncode == 0
    (export,) = [p for p in tmp_path.iterdir() if p.suffix == ".csv"]
    with export.open(newline="") as file:
        rows = list(csv.reader(file))
    assert rows[0] == ["bucket", "key", "value"]
    assert {r[1] for r in rows[1:]} >= {f"user:{i:04d}" for i in range(1, 301)}


def test_cli_ls_and_show(system: System, imported: str) -> None:
    """``ls`` lists the task in a table and as JSON; ``show`` prints its fields."""
    table = system.cli("ls")
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("ID")
    assert imported in table.stdout
    page = json.loads(system.cli("ls", "--json", "--limit", "100").stdout)
    assert imported in [t["id"] for t in page["tasks"]]
    shown = system.cli("show", imported)
    assert shown.returncode == 0
    assert "state: succeeded" in shown.stdout


def test_cli_failed_task_exits_1(system: System, tmp_path: Path) -> None:
    """A task that fails (a CSV without the bucket,key,value header) makes ``submit`` exit 1."""
    bad = tmp_path / "bad.csv"
    bad.write_text("name,email\nada,ada@example.com\n")
    done = system.cli("submit", "--type", "csv_import", str(bad))
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "failed: bad_header" in done.stdout


def test_cli_cancel_ends_a_waiting_submit_with_1_and_retry_requeues(system: System) -> None:
    """``cancel`` of a running task makes the waiting ``submit`` exit 1; ``retry`` queues it."""
    command = [sys.executable, "-m", "minidb", "batch", "submit", "--type", "sleep",
               "--param", "seconds=60", "--url", system.url, "--token", OPERATOR]
    waiting = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        assert waiting.stdout is not None
        task_id = _task_id(waiting.stdout.readline())
        _until_state(system, task_id, "running")
        cancelled = system.cli("cancel", task_id)
        assert cancelled.returncode == 0, cancelled.stderr
        out, err = waiting.communicate(timeout=CLI_TIMEOUT_S)
        assert waiting.returncode == 1, (out, err)
        assert "cancelled" in out
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.communicate(timeout=10)
    retried = system.cli("retry", task_id, "--json")
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout)["state"] == "queued"
    # Cancel again so the one worker is free for the other tests.
    assert system.cli("cancel", task_id).returncode == 0
    _until_state(system, task_id, "cancelled")
    again = system.cli("cancel", task_id)
    assert again.returncode == 0  # already cancelled: 200


def test_cli_no_wait_prints_the_id_and_exits_0(system: System) -> None:
    """``submit --no-wait`` returns once the task is queued."""
    done = system.cli("submit", "--type", "sleep", "--param", "seconds=0", "--no-wait")
    assert done.returncode == 0, done.stderr
    _until_state(system, _task_id(done.stdout), "succeeded")


def test_cli_url_and_token_from_the_environment(system: System) -> None:
    """Without ``--url``/``--token``, MINIDB_BATCH_URL and MINIDB_BATCH_TOKEN are used."""
    env = {"MINIDB_BATCH_URL": system.url, "MINIDB_BATCH_TOKEN": OPERATOR}
    done = system.cli("ls", token=None, url=None, env=env, spawn=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ID")


def test_cli_bad_token_missing_token_and_bad_url(system: System) -> None:
    """A refused token exits 3 (401), no token exits 2, an unreachable API exits 3."""
    refused = system.cli("ls", token="nope-not-a-token-at-all")
    assert refused.returncode == 3
    assert "401" in refused.stderr
    assert "nope-not" not in refused.stderr
    missing = system.cli("ls", token=None)
    assert missing.returncode == 2
    assert "MINIDB_BATCH_TOKEN" in missing.stderr
    unreachable = system.cli("ls", url="http://127.0.0.1:1")
    assert unreachable.returncode == 3
    assert "127.0.0.1:1" in unreachable.stderr


def test_cli_other_users_task_and_unknown_ids_exit_3(system: System, imported: str) -> None:
    """A user's view of another's task is a 404 (exit 3), as is an id that does not exist."""
    for args in (("show", imported), ("cancel", imported), ("retry", imported),
                 ("output", imported)):
        done = system.cli(*args, token=BOB)
        assert done.returncode == 3, (args, done.stdout)
        assert "404" in done.stderr
    assert system.cli("show", "01KBCQCK20JZ7R9YTJGD1AH5T3").returncode == 3
    assert system.cli("show", "../../etc").returncode == 3


def test_cli_usage_errors_exit_2(system: System, tmp_path: Path) -> None:
    """A missing --type, an unreadable FILE, a bad --param or --limit exit 2 with one line."""
    cases = [
        ("submit", str(USERS_CSV)),
        ("submit", "--type", "csv_import", str(tmp_path / "missing.csv")),
        ("submit", "--type", "csv_export", "--param", "bucket"),
        ("ls", "--limit", "0"),
    ]
    for args in cases:
        done = system.cli(*args, spawn=args[0] == "ls")
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_cli_invalid_params_exit_3(system: System) -> None:
    """Params the API refuses (422) exit 3 with the problem's detail."""
    done = system.cli("submit", "--type", "csv_export", "--param", "bucket=no spaces")
    assert done.returncode == 3
    assert "422" in done.stderr
