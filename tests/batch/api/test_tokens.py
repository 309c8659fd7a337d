"""The tokens file parser and the constant-time token table (pure)."""

from __future__ import annotations

import pytest

from minidb.batch.api import Principal, TokenFileError, load_tokens, parse_tokens

GOOD = "tok-alice-0123456789"


def test_parse_tokens_reads_users_and_operators_and_skips_comments() -> None:
    """Comments and blank lines are skipped; each line maps a token to user and role."""
    table = parse_tokens(
        f"# header\n\n{GOOD} alice user  # trailing\nop-token-0123456789ab ops operator\n"
    )
    assert len(table) == 2
    assert table.lookup(GOOD) == Principal("alice", "user")
    assert table.lookup("op-token-0123456789ab") == Principal("ops", "operator")
    assert table.lookup("op-token-0123456789ab").operator  # type: ignore[union-attr]
    assert table.lookup(GOOD + "x") is None
    assert table.lookup("") is None
    assert table.lookup("x" * 100_000) is None


@pytest.mark.parametrize("line", [
    f"{GOOD} alice", f"{GOOD} alice admin", f"{GOOD} al/ice user", "short alice user",
    f"{GOOD} alice user extra",
])
def test_parse_tokens_refuses_bad_lines_without_echoing_the_token(line: str) -> None:
    """A malformed line is a TokenFileError naming the line number, never the token."""
    with pytest.raises(TokenFileError) as caught:
        parse_tokens(f"# ok\n{line}\n")
    assert caught.value.line == 2
    assert "short" not in str(caught.value) and GOOD not in str(caught.value)


def test_parse_tokens_refuses_a_duplicate_token() -> None:
    """One token naming two users is refused (which one would it be?)."""
    with pytest.raises(TokenFileError, match="twice"):
        parse_tokens(f"{GOOD} alice user\n{GOOD} bob user\n")


def test_token_table_repr_hides_tokens(tmp_path: object) -> None:
    """Neither repr nor str of the table shows a token."""
    table = parse_tokens(f"{GOOD} alice user\n")
    assert GOOD not in repr(table) and GOOD not in str(table)


def test_load_tokens_reports_a_missing_file(tmp_path: object) -> None:
    """A missing file is a TokenFileError, not an OSError."""
    with pytest.raises(TokenFileError, match="cannot read"):
        load_tokens(f"{tmp_path}/nope")
