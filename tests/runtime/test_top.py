"""`minidb top`: formatting, and the live view against a real process serving its snapshot."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from minidb.runtime._top import format_duration, header_lines, parse_address, task_rows

PROCESS_TIMEOUT_S = 20.0
LIVE_VIEW_DEADLINE_S = 60.0
"""Seconds for `minidb top` in tmux to start and draw two different frames (an interpreter
start and imports on a loaded machine)."""
"""Real seconds any child process of these tests may take."""

# A small process of its own: a wheel loop with introspection on, three named tasks, and
# /debug/tasks served by a bare asyncio HTTP responder. It prints its port, then runs until
# its stdin closes.
TARGET = r'''
import asyncio, sys, time
import minidb.runtime as rt

async def spinner():
    while True:
        time.sleep(0.002)  # busy on purpose: the busiest task
        await asyncio.sleep(0.001)

async def ticker():
    while True:
        await asyncio.sleep(0.05)

async def serve(reader, writer):
    await reader.readuntil(b"\r\n\r\n")
    body = rt.snapshot_json()
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    await writer.drain()
    writer.close()

async def main():
    rt.enable_introspection()
    loop = asyncio.get_running_loop()
    tasks = [asyncio.create_task(spinner(), name="spinner"),
             asyncio.create_task(ticker(), name="ticker"),
             asyncio.create_task(asyncio.Event().wait(), name="idler")]
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until the test closes our stdin
    for task in tasks:
        task.cancel()

rt.run(main())
'''


@pytest.fixture
def target(tmp_path: Path) -> Iterator[str]:
    """A live process serving /debug/tasks; yields its HOST:PORT."""
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = proc.stdout.readline().strip()
        assert port.isdigit(), f"target did not start (exit {proc.poll()})"
        time.sleep(0.3)  # let the spinner build up some busy time before the first look
        yield f"127.0.0.1:{port}"
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=PROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _minidb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "minidb", *args],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
    )


def test_top_once_renders_a_live_process(target: str) -> None:
    """`minidb top --once` prints the header and every task, the busy spinner first."""
    result = _minidb("top", target, "--once")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"minidb top  {target}" in out
    assert "steps/s" in out and "timers" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("NAME"))
    names = [line.split()[0] for line in lines[header + 1 :] if line.strip()]
    assert names[0] == "spinner"
    assert {"spinner", "ticker", "idler"} <= set(names)
    idler = next(line for line in lines if line.startswith("idler"))
    assert " idle " in f" {idler} "


def test_top_once_fails_cleanly_when_nothing_listens() -> None:
    """An address with no server is a one-line error and exit status 1."""
    result = _minidb("top", "127.0.0.1:1", "--once")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "cannot read" in result.stderr


def test_top_rejects_a_bad_address() -> None:
    """A malformed HOST:PORT is a usage error (exit 2)."""
    result = _minidb("top", "localhost", "--once")
    assert result.returncode == 2
    assert "HOST:PORT" in result.stderr


def test_top_live_view_in_tmux(target: str, tmp_path: Path) -> None:
    """The live view, run in a real terminal (tmux), shows the task table and refreshes."""
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed (.ci/run installs it)")
    socket_name = f"minidb-top-test-{uuid.uuid4().hex[:8]}"  # a private tmux server
    command = f"{sys.executable} -m minidb top {target} --interval 0.1"
    base = [tmux, "-L", socket_name]
    # The pane's size is the terminal's: a LINES/COLUMNS inherited from the test runner (pytest
    # workers set 24x80) would make rich draw for that size instead of the 160x40 pane.
    env = {k: v for k, v in os.environ.items() if k not in ("LINES", "COLUMNS")}
    env["TERM"] = "xterm-256color"
    subprocess.run(
        [*base, "new-session", "-d", "-x", "160", "-y", "40", command],
        check=True,
        timeout=PROCESS_TIMEOUT_S,
        env=env,
    )
    try:
        deadline = time.monotonic() + LIVE_VIEW_DEADLINE_S
        frames: list[str] = []
        while time.monotonic() < deadline:
            screen = subprocess.run(
                [*base, "capture-pane", "-p"],
                capture_output=True,
                text=True,
                timeout=PROCESS_TIMEOUT_S,
            ).stdout
            if "spinner" in screen and "idler" in screen and "busy" in screen:
                frames.append(screen)
                if len(frames) >= 2 and frames[-1] != frames[0]:
                    break
            time.sleep(0.1)
        assert frames, "the live view never showed the tasks"
        assert frames[-1] != frames[0], "the live view did not refresh"
        assert "minidb top" in frames[-1]
    finally:
        subprocess.run([*base, "kill-server"], timeout=PROCESS_TIMEOUT_S, check=False)


def test_top_task_rows_sort_by_busy_time_and_format() -> None:
    """Rows come busiest first with short durations; tasks without counters show dashes."""
    snapshot = {
        "tasks": [
            {"name": "b", "state": "idle", "polls": 3, "busy_s": 0.002, "location": "x.py:1"},
            {"name": "a", "state": "running", "polls": 9, "busy_s": 1.5, "total_s": 75.0},
            {"name": "c", "state": "scheduled", "polls": None, "busy_s": None},
        ]
    }
    rows = task_rows(snapshot)
    assert [r[0] for r in rows] == ["a", "b", "c"]
    assert rows[0][2:4] == ("9", "1.50s") and rows[0][6] == "1m15s"
    assert rows[1][3] == "2.0ms" and rows[1][7] == "x.py:1"
    assert rows[2][2:4] == ("-", "-")
    assert len(task_rows(snapshot, limit=1)) == 1


def test_top_header_says_when_introspection_is_off() -> None:
    """A snapshot without counters gets a hint instead of zeros."""
    lines = header_lines({"introspection": False, "tasks": [], "loop": {}}, "h:1")
    assert any("MINIDB_INTROSPECTION=1" in line for line in lines)


def test_top_header_busy_share_between_two_polls() -> None:
    """With a previous snapshot the header shows the loop's busy share over the interval."""
    loop = {"busy_s": 1.0, "steps": 10, "blocking_steps": 0}
    before = {"introspection": True, "wall_time": 100.0, "loop": loop, "tasks": []}
    after = {
        "introspection": True,
        "wall_time": 102.0,
        "loop": {**loop, "busy_s": 1.5},
        "tasks": [],
        "blocking": [{"task": "t", "duration_s": 0.3, "location": "f.py:9", "gc_s": 0.1}],
    }
    text = "\n".join(header_lines(after, "h:1", before))
    assert "busy 25%" in text
    assert "blocked 300.0ms, 100.0ms GC by t at f.py:9" in text


def test_top_parse_address_and_durations() -> None:
    """Addresses parse with a default host; durations pick a readable unit."""
    assert parse_address(":8080") == ("127.0.0.1", 8080)
    assert parse_address("[::1]:9") == ("::1", 9)
    with pytest.raises(ValueError):
        parse_address("host:99999")
    assert [format_duration(x) for x in (None, 0.00085, 0.0123, 4.561, 425)] == [
        "-",
        "850us",
        "12.3ms",
        "4.56s",
        "7m05s",
    ]
