"""The signed page cursors (pure)."""

from __future__ import annotations

import pytest

from minidb.batch.api._cursor import InvalidCursor, decode_cursor, encode_cursor

SECRET = b"s" * 32
TASK = "01KBCQCK20JZ7R9YTJGD1AH5T3"


def test_cursor_round_trips_for_its_user() -> None:
    """A cursor decodes to its task id for the user it was minted for."""
    assert decode_cursor(SECRET, "alice", encode_cursor(SECRET, "alice", TASK)) == TASK


def test_cursor_of_another_user_or_secret_is_refused() -> None:
    """Another user's cursor, or one signed with another secret, is InvalidCursor."""
    cursor = encode_cursor(SECRET, "alice", TASK)
    with pytest.raises(InvalidCursor):
        decode_cursor(SECRET, "bob", cursor)
    with pytest.raises(InvalidCursor):
        decode_cursor(b"t" * 32, "alice", cursor)


@pytest.mark.parametrize("mangle", [
    lambda c: c[:-1] + ("A" if c[-1] != "A" else "B"),
    lambda c: c.replace(TASK, "01KBCQCK20JZ7R9YTJGD1AH5T4"),
    lambda c: "v2" + c[2:],
    lambda c: c + ".x",
    lambda c: "",
    lambda c: "v1..",
    lambda c: "v1." + "A" * 5000,
    lambda c: c.replace("v1.", "v1.../"),
    lambda c: c + "\x00",
])
def test_tampered_cursors_are_refused(mangle: object) -> None:
    """Any change to a cursor makes it InvalidCursor."""
    cursor = encode_cursor(SECRET, "alice", TASK)
    with pytest.raises(InvalidCursor):
        decode_cursor(SECRET, "alice", mangle(cursor))  # type: ignore[operator]
