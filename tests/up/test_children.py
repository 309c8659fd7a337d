"""One supervised child of ``minidb up``: its listening lines, its stop, and PDEATHSIG."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from minidb.up._children import Child, ChildError

DEADLINE_S = 20.0
"""How long any step here may take."""

# A stand-in for a server: prints two listening lines, then an ordinary line, then waits.
FAKE = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("minidb listening on 127.0.0.1:1234 (line)")
    print("hello from the child")
    print("minidb listening on 127.0.0.1:5678 (resp)", flush=True)
    time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return text.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_child_listening_lines_and_graceful_stop(capfd: pytest.CaptureFixture[str]) -> None:
    """The listening lines are parsed, other lines pass through, SIGTERM stops it with 0."""
    child = Child.spawn("fake", [sys.executable, "-c", FAKE])
    try:
        found = child.wait_listening({"line", "resp"}, time.monotonic() + DEADLINE_S,
                                     threading.Event())
        assert found == {"line": ("127.0.0.1", 1234), "resp": ("127.0.0.1", 5678)}
        assert os.getpgid(child.pid) == child.pid  # its own process group
        assert child.stop(grace_s=DEADLINE_S) == 0
    finally:
        if child.exited() is None:
            child.proc.kill()
    assert "hello from the child" in capfd.readouterr().out


def test_child_that_ignores_sigterm_is_killed_after_grace() -> None:
    """A child that does not stop on SIGTERM is SIGKILLed once the grace is over."""
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
               "print('ready', flush=True); time.sleep(600)"
    child = Child.spawn("stubborn", [sys.executable, "-c", stubborn])
    time.sleep(0.5)  # let it install its handler; the outcome is checked, not the timing
    started = time.monotonic()
    assert child.stop(grace_s=0.5) == -signal.SIGKILL
    assert time.monotonic() - started < DEADLINE_S


def test_child_that_exits_while_starting_is_an_error() -> None:
    """A child that exits before its listening lines is a ChildError with its status."""
    child = Child.spawn("broken", [sys.executable, "-c", "raise SystemExit(7)"])
    with pytest.raises(ChildError, match="status 7") as caught:
        child.wait_listening({"line"}, time.monotonic() + DEADLINE_S, threading.Event())
    assert caught.value.status == 7


def test_child_dies_with_its_supervisor() -> None:
    """SIGKILL of the process that spawned the child ends the child too (PR_SET_PDEATHSIG)."""
    supervisor = textwrap.dedent(f"""
        import sys, threading, time
        from minidb.up._children import Child
        child = Child.spawn("fake", [sys.executable, "-c", {FAKE!r}])
        # Once the child has printed everything it only sleeps: nothing but the death signal
        # can end it (not a write to a pipe whose reader is gone).
        child.wait_listening({{"line", "resp"}}, time.monotonic() + 20, threading.Event())
        print("pid", child.pid, flush=True)
        time.sleep(600)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", supervisor], stdout=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    pid = 0
    try:
        line = proc.stdout.readline()
        while line and not line.startswith("pid "):  # the child's own lines pass through
            line = proc.stdout.readline()
        pid = int(line.split()[1])
        assert _alive(pid)
        proc.kill()
        proc.wait(timeout=DEADLINE_S)
        deadline = time.monotonic() + DEADLINE_S
        while _alive(pid):
            assert time.monotonic() < deadline, "the child outlived its supervisor"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait(timeout=DEADLINE_S)
        proc.stdout.close()
        if pid and _alive(pid):
            os.kill(pid, signal.SIGKILL)
