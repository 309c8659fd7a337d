"""The command line's contract: entry points, one-line usage errors, exit status 2."""

from __future__ import annotations

import subprocess
import sys


def test_cli_module_entry_point_prints_version() -> None:
    """``python -m minidb --version`` works without any subcommand machinery."""
    out = subprocess.run(
        [sys.executable, "-m", "minidb", "--version"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("minidb ")


def test_cli_bad_option_exits_2_with_one_line() -> None:
    """An unknown option is refused with exit status 2 and exactly one line on stderr."""
    out = subprocess.run(
        [sys.executable, "-m", "minidb", "--no-such-option"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
