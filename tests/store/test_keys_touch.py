"""TOUCH (RQ's dependency code sends it in a WATCH pipeline): found missing by RQ's suite."""

from __future__ import annotations

from minidb.store._args import Session
from minidb.store._commands import execute
from minidb.store._journal import OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._results import OK, ErrorReply
from minidb.wal._ops import Remove

NOW = 1_700_000_000_000


def _run(ks: Keyspace, *argv: bytes, journal: OpJournal | None = None) -> object:
    return execute(ks, Session(), list(argv), journal or OpJournal(), NOW)


def test_touch_counts_the_keys_that_exist_repeats_included() -> None:
    """TOUCH answers how many of its keys exist, of any type, a repeated key each time."""
    ks = Keyspace(now_ms=NOW)
    assert _run(ks, b"SET", b"a", b"1") == OK
    assert _run(ks, b"SADD", b"s", b"m") == 1
    assert _run(ks, b"TOUCH", b"a", b"s", b"a", b"missing") == 3
    assert _run(ks, b"touch", b"missing") == 0


def test_touch_expires_a_key_past_its_deadline_and_does_not_count_it() -> None:
    """A key past its deadline is not touched: the lookup expires it (journaled) first."""
    ks = Keyspace(now_ms=NOW)
    assert _run(ks, b"SET", b"k", b"v", b"PX", b"5") == OK
    journal = OpJournal()
    assert execute(ks, Session(), [b"TOUCH", b"k"], journal, NOW + 10) == 0
    assert list(journal.ops()) == [Remove(b"0", b"k")]


def test_touch_without_keys_is_a_wrong_arity_error() -> None:
    ks = Keyspace(now_ms=NOW)
    assert _run(ks, b"TOUCH") == ErrorReply("ERR wrong number of arguments for 'touch' command")
