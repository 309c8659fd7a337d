"""Failpoint specifications: parsing, and a bad ``MINIDB_FAILPOINTS`` as a one-line usage error."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from minidb import _failpoints

CLI_TIMEOUT_S = 30.0
"""Deadline for one ``minidb`` subprocess."""


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--port", "0"],
        ["wal", "check", "--data-dir", "no-such-dir"],
        ["wal", "dump", "--data-dir", "no-such-dir"],
        ["client", "127.0.0.1:1", "GET", "users", "alice"],
        ["top", "127.0.0.1:1", "--once"],
    ],
)
def test_failpoints_bad_env_is_one_line_usage_error(command: list[str], tmp_path: object) -> None:
    """Every command answers a bad MINIDB_FAILPOINTS with exit 2 and one line, no traceback."""
    env = {**os.environ, "MINIDB_FAILPOINTS": "wal.sync=explode(now)"}
    out = subprocess.run(
        [sys.executable, "-m", "minidb", *command],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=env, cwd=str(tmp_path),
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "MINIDB_FAILPOINTS" in lines[0] and "wal.sync=explode(now)" in lines[0]
    assert out.stdout == ""


def test_failpoints_parse_reads_every_action() -> None:
    """delay, crash-after and error (with and without a count) parse into their fields."""
    points = _failpoints.parse(
        "store.apply=delay(0.5); store.owner=crash-after(3);wal.sync=error(ENOSPC);"
        "wal.append=error(5, 2)"
    )
    assert points["store.apply"].seconds == 0.5
    assert points["store.owner"].after == 3
    assert points["wal.sync"].errno_value == errno.ENOSPC
    assert (points["wal.append"].errno_value, points["wal.append"].after) == (errno.EIO, 2)


def test_failpoints_load_bad_env_raises_and_arms_placeholder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bad variable raises on load, and any later hit raises instead of silently passing."""
    monkeypatch.setattr(_failpoints, "ACTIVE", {})
    monkeypatch.setenv(_failpoints.ENV_VAR, "nonsense")
    with pytest.raises(ValueError, match="nonsense"):
        _failpoints.load_from_env()
    assert _failpoints.ACTIVE  # call sites guarded by `if ACTIVE:` still reach hit()
    with pytest.raises(ValueError, match="MINIDB_FAILPOINTS"):
        _failpoints.hit("wal.sync")
    monkeypatch.setenv(_failpoints.ENV_VAR, "")
    assert _failpoints.load_from_env() == {}
    assert _failpoints.ENV_ERROR is None
