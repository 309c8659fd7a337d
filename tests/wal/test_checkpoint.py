"""Snapshot encoding: the whole store in the log's framing, closed by an END record."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.wal._checkpoint import snapshot_chunks, snapshot_records
from minidb.wal._format import FileKind, Malformed, encode_end, encode_header, encode_record


@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(
    base=st.integers(min_value=0, max_value=2**40),
    payloads=st.lists(st.binary(max_size=100), max_size=30),
)
def test_snapshot_round_trips(base: int, payloads: list[bytes]) -> None:
    """Every record of a snapshot reads back in order, whatever its position in the log."""
    buf = b"".join(snapshot_chunks(base, payloads))
    assert [r.payload for r in snapshot_records(buf, base)] == payloads


def test_snapshot_refuses_the_wrong_base() -> None:
    """A snapshot renamed to another position is refused: its header says where it belongs."""
    buf = b"".join(snapshot_chunks(7, [b"SET b k v"]))
    with pytest.raises(Malformed, match="base"):
        list(snapshot_records(buf, 8))


def test_snapshot_refuses_an_end_with_the_wrong_count() -> None:
    """An END that disagrees with the records before it means records went missing."""
    buf = (
        encode_header(FileKind.SNAPSHOT, 0)
        + encode_record(0, b"SET b k v")
        + encode_end(1, 2)  # claims two records
    )
    with pytest.raises(Malformed, match="END says 2"):
        list(snapshot_records(buf, 0))
