"""``minidb serve --log-level``: what a connection logs at each level. Black box: a real
process, a real socket, its stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.server.conftest import IO_TIMEOUT_S, ServeFactory


@pytest.mark.parametrize("level", [None, "info", "debug", "warning"])
def test_a_connection_is_logged_only_at_debug(serve: ServeFactory, level: str | None) -> None:
    """Each connection's open and close are debug events (as Redis's accepted clients are
    verbose ones): by default, and at info or above, a connection logs nothing; at debug
    both events, with the close's request count."""
    server = serve(*(("--log-level", level) if level else ()))
    conn = server.client()  # (the fixture's own connection stays open until the end)
    assert conn.request("SET b k v") == "OK"
    conn.close()
    server.clients.remove(conn)
    server.terminate()
    assert server.wait() == 0
    log = server.stderr()
    lines = [line for line in log.splitlines() if "event=connection_" in line]
    if level == "debug":
        assert any("level=debug event=connection_open" in line for line in lines), log
        assert any("event=connection_close" in line and "requests=1" in line
                   for line in lines), log  # fmt: skip
    else:
        assert lines == [], log


def test_an_unknown_log_level_is_refused(tmp_path: Path) -> None:
    """A level that is not one of the four is a usage error, before anything starts."""
    done = subprocess.run(
        [sys.executable, "-m", "minidb", "serve", "--port", "0", "--data-dir", str(tmp_path),
         "--log-level", "loud"],
        capture_output=True, text=True, timeout=IO_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "--log-level" in done.stderr, done.stderr
    assert "invalid choice: 'loud'" in done.stderr and done.stdout == ""
