"""A handler that raises (a bug, whatever the client sent) costs its one command: the reply is
an error, what it changed before raising is taken back, and the owner goes on serving."""

from __future__ import annotations

import logging

import pytest

from minidb.store import (
    COMMANDS,
    Command,
    Keyspace,
    MemoryLog,
    OpJournal,
    Session,
    StoreOwner,
    StoreState,
    execute,
    execute_transaction,
)
from minidb.store._commands import INTERNAL_ERROR
from minidb.store._results import ErrorReply
from minidb.wal import Put, encode_ops
from tests.store.test_actor import ArgvExecutor, Sink, _exec_batch


def _half_done(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> None:
    """Writes a key, closes a group as a put of its own would, writes another, then fails."""
    ks.put(s.bucket, b"first", b"1", None, j)
    j.close_group()
    ks.put(s.bucket, b"second", b"2", None, j)
    raise KeyError("a bug")


@pytest.fixture
def boom(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(COMMANDS, b"boom", Command("boom", 1, frozenset({"write"}), _half_done))


def test_a_raising_handler_answers_an_error_and_changes_nothing(
    boom: None, caplog: pytest.LogCaptureFixture
) -> None:
    ks, journal = Keyspace(), OpJournal()
    with caplog.at_level(logging.ERROR, logger="minidb.store"):
        result = execute(ks, Session(), [b"BOOM"], journal, 0)
    assert result == ErrorReply(INTERNAL_ERROR.format(name="boom"))
    assert ks.get(b"0", b"first", 0, journal) is None
    assert ks.get(b"0", b"second", 0, journal) is None
    assert journal.records == [] and journal.undo == [] and journal.open_ops == []
    assert "command_failed" in caplog.text and "KeyError" in caplog.text


def test_in_a_transaction_only_the_raising_command_is_taken_back(boom: None) -> None:
    ks, journal = Keyspace(), OpJournal()
    queued = [[b"SET", b"a", b"x"], [b"BOOM"], [b"SET", b"b", b"y"]]
    results = execute_transaction(ks, Session(), queued, journal, 0)
    assert results is not None
    assert isinstance(results[1], ErrorReply)
    assert ks.get(b"0", b"a", 0, journal) == b"x"
    assert ks.get(b"0", b"b", 0, journal) == b"y"
    assert ks.get(b"0", b"first", 0, journal) is None
    assert [op.key for group in journal.records for op in group] == [b"a", b"b"]
    assert len(journal.records) == 1  # still one record for the whole EXEC


def test_the_owner_survives_a_raising_handler_and_logs_only_what_stood(boom: None) -> None:
    log = MemoryLog()
    owner = StoreOwner(StoreState(), log, mailbox=100, clock=lambda: 1_000)
    executor = ArgvExecutor()
    first = _exec_batch(Sink(), executor, [b"SET", b"k", b"v"], [b"BOOM"])
    owner.commit([first])
    assert first.replies is not None and b"internal error" in first.replies[1]
    after = _exec_batch(Sink(), executor, [b"GET", b"k"], [b"GET", b"first"])
    owner.commit([after])
    assert after.replies == [b"R b'v'", b"R None"]
    assert log.synced == [encode_ops([Put(b"0", b"k", b"v", None)])]
