"""The operator token file of ``minidb up``: made once with mode 0600, then reused."""

from __future__ import annotations

import stat
from pathlib import Path

from minidb.up._tokens import ensure_operator_token, operator_token_in


def test_tokens_first_start_makes_a_private_file(tmp_path: Path) -> None:
    """The first start writes one operator line to a new file of mode 0600."""
    path = tmp_path / "data" / "batch" / "tokens"
    token, made = ensure_operator_token(path)
    assert made
    assert len(token) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert f"{token} operator operator" in path.read_text().splitlines()


def test_tokens_later_starts_reuse_the_token(tmp_path: Path) -> None:
    """A second start returns the same token and leaves the file as it was."""
    path = tmp_path / "tokens"
    token, _ = ensure_operator_token(path)
    before = path.read_text()
    again, made = ensure_operator_token(path)
    assert (again, made) == (token, False)
    assert path.read_text() == before


def test_tokens_a_file_without_operator_gets_one_appended(tmp_path: Path) -> None:
    """Lines an operator added are kept; an operator line is appended if none is there."""
    path = tmp_path / "tokens"
    path.write_text("# mine\nabc alice user")
    token, made = ensure_operator_token(path)
    assert made
    lines = path.read_text().splitlines()
    assert lines[:2] == ["# mine", "abc alice user"]
    assert lines[2] == f"{token} operator operator"


def test_tokens_parser_finds_the_first_operator() -> None:
    """Comments, blank lines and user lines are skipped; the first operator line wins."""
    text = "# c\n\nu1 alice user\nop1 root operator  # trailing\nop2 other operator\n"
    assert operator_token_in(text) == "op1"
    assert operator_token_in("u1 alice user\n") is None
