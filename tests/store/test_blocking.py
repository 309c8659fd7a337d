"""The blocking core (``store._blocking``) and the owner's part: waiters served in the order
they blocked, each pop a write of the group that woke it, released after its sync."""

from __future__ import annotations

from typing import Any

import pytest

from minidb.protocol import RespEncoder
from minidb.protocol._results import NULL_ARRAY
from minidb.store import (
    UNBOUNDED_OUTPUT,
    Batch,
    CommandError,
    Keyspace,
    MemoryLog,
    OpJournal,
    Session,
    StoreOwner,
    StoreState,
    execute,
    execute_transaction,
)
from minidb.store._blocking import (
    Blocked,
    BlockingRegistry,
    Waiter,
    WouldBlock,
    parse_timeout,
)
from minidb.store._commands import BLOCKING, execute_blocking
from minidb.store._values import ListValue
from tests.store.test_actor import Sink

_RESP2 = RespEncoder(2)


class ArgvExecutor:
    """The least executor that blocks: requests are argvs in bucket 0, replies RESP2."""

    def __init__(self) -> None:
        self.session = Session()

    def execute(
        self, state: Any, request: list[bytes], journal: OpJournal | None, now_ms: int,
        room: int = UNBOUNDED_OUTPUT,
    ) -> bytes:
        assert journal is not None
        ks = state.keyspace
        if request[0].lower() not in BLOCKING:
            return _RESP2.encode(execute(ks, self.session, request, journal, now_ms))
        session = Session()

        def attempt(ks: Keyspace, journal: OpJournal, now_ms: int) -> bytes | None:
            result = execute_blocking(ks, session, request, journal, now_ms)
            return None if type(result) is WouldBlock else _RESP2.encode(result)  # type: ignore[arg-type]

        first = execute_blocking(ks, session, request, journal, now_ms)
        if type(first) is not WouldBlock:
            return _RESP2.encode(first)  # type: ignore[arg-type]
        waiter = Waiter(session.bucket, first.keys, first.kind, first.timeout, attempt, b"*-1\r\n")
        return Blocked.on(waiter)

    def remainder(self, request: Any) -> None:
        return None

    def expand(self, request: Any) -> list[Any]:
        return [request]

    def is_write(self, request: Any) -> bool:
        return True

    def refusal(self, request: Any, reason: str) -> bytes:
        return f"-ERR {reason}\r\n".encode()


def _owner() -> tuple[StoreOwner, MemoryLog, ArgvExecutor]:
    log = MemoryLog()
    return StoreOwner(StoreState(), log, mailbox=100), log, ArgvExecutor()


def _batch(executor: ArgvExecutor, *commands: str) -> Batch:
    requests = [command.encode().split() for command in commands]
    return Batch(requests, Sink(), 0.0, executor=executor)  # type: ignore[arg-type]


# -- the timeout argument ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(b"0", 0.0), (b"1", 1.0), (b"0.5", 0.5), (b"0.0001", 0.001), (b"-0.0001", 0.0),
     (b"1e3", 1000.0), (b".25", 0.25), (b"+2", 2.0)],
)  # fmt: skip
def test_parse_timeout_reads_seconds_rounded_up_to_ms(text: bytes, seconds: float) -> None:
    """Fractions are allowed and rounded up to whole ms, as Redis's ``ceill``."""
    assert parse_timeout(text) == seconds


@pytest.mark.parametrize(
    ("text", "error"),
    [(b"-1", "ERR timeout is negative"), (b"abc", "ERR timeout is not a float or out of range"),
     (b" 1", "ERR timeout is not a float or out of range"), (b"1_0", "ERR timeout is not a "
     "float or out of range"), (b"", "ERR timeout is not a float or out of range"),
     (b"nan", "ERR timeout is not a float or out of range"),
     (b"1e400", "ERR timeout is out of range"), (b"inf", "ERR timeout is out of range"),
     (b"-inf", "ERR timeout is negative"), (b"-1e400", "ERR timeout is negative"),
     (b"9223372036854776", "ERR timeout is out of range")],
)  # fmt: skip
def test_parse_timeout_refuses_as_redis_words_it(text: bytes, error: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse_timeout(text)
    assert caught.value.reply.message == error


# -- the commands where they may not block ------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "reply"),
    [(b"BLPOP a b 0", NULL_ARRAY), (b"BRPOP a 1", NULL_ARRAY), (b"BLMOVE a b LEFT RIGHT 0", None),
     (b"BRPOPLPUSH a b 0", None), (b"BLMPOP 0 2 a b LEFT", NULL_ARRAY),
     (b"BZPOPMIN a 0", NULL_ARRAY), (b"BZPOPMAX a b 0", NULL_ARRAY),
     (b"BZMPOP 0 2 a b MIN COUNT 2", NULL_ARRAY)],
)  # fmt: skip
def test_blocking_command_in_a_transaction_answers_at_once(argv: bytes, reply: object) -> None:
    """Inside MULTI/EXEC (and wherever ``execute`` runs it) an empty key answers Redis's
    no-block reply instead of blocking."""
    ks, journal = Keyspace(), OpJournal()
    assert execute(ks, Session(), argv.split(), journal, 0) == reply
    assert execute_transaction(ks, Session(), [argv.split()], journal, 0) == [reply]


def test_blocking_command_serves_at_once_like_its_plain_form() -> None:
    """A key with elements is served now: the first non-empty key in argument order."""
    ks, journal, s = Keyspace(), OpJournal(), Session()
    execute(ks, s, [b"RPUSH", b"b", b"1", b"2"], journal, 0)
    execute(ks, s, [b"RPUSH", b"c", b"3"], journal, 0)
    assert execute_blocking(ks, s, b"BLPOP a c b 0".split(), journal, 0) == [b"c", b"3"]
    assert execute_blocking(ks, s, b"BRPOP a b 0".split(), journal, 0) == [b"b", b"2"]
    execute(ks, s, [b"ZADD", b"z", b"2", b"m", b"1", b"n"], journal, 0)
    assert execute_blocking(ks, s, b"BZPOPMAX z 0".split(), journal, 0) == [b"z", b"m", b"2"]
    blocked = execute_blocking(ks, s, b"BLPOP a c 0.5".split(), journal, 0)
    assert isinstance(blocked, WouldBlock)
    assert (blocked.keys, blocked.timeout, blocked.kind) == ((b"a", b"c"), 0.5, ListValue)


def test_blocking_command_checks_arguments_before_keys() -> None:
    """The timeout is checked first, then types (WRONGTYPE), as Redis does."""
    ks, journal, s = Keyspace(), OpJournal(), Session()
    execute(ks, s, [b"SET", b"str", b"v"], journal, 0)
    assert execute_blocking(ks, s, b"BLPOP str -1".split(), journal, 0).message == (  # type: ignore[union-attr]
        "ERR timeout is negative"
    )
    assert execute_blocking(ks, s, b"BLPOP str 0".split(), journal, 0).message.startswith(  # type: ignore[union-attr]
        "WRONGTYPE"
    )
    assert execute_blocking(ks, s, b"BLMPOP 0 0 a LEFT".split(), journal, 0).message == (  # type: ignore[union-attr]
        "ERR numkeys should be greater than 0"
    )
    assert execute_blocking(ks, s, b"BLMOVE a b UP LEFT 0".split(), journal, 0).message == (  # type: ignore[union-attr]
        "ERR syntax error"
    )


# -- the registry --------------------------------------------------------------------------


def _waiter(ks: Keyspace, keys: list[bytes], log: list[str], name: str) -> Waiter:
    def serve(ks: Keyspace, journal: OpJournal, now_ms: int) -> bytes | None:
        result = execute_blocking(ks, Session(), [b"BLPOP", *keys, b"0"], journal, now_ms)
        if type(result) is WouldBlock:
            return None
        log.append(name)
        return _RESP2.encode(result)  # type: ignore[arg-type]

    return Waiter(b"0", tuple(keys), ListValue, 0.0, serve, b"*-1\r\n")


def test_registry_serves_waiters_in_the_order_they_blocked() -> None:
    """Three waiters on one key, three elements pushed: served first come, first served,
    each with its own pop."""
    ks, journal, served = Keyspace(), OpJournal(), list[str]()
    registry = BlockingRegistry(ks)
    waiters = [_waiter(ks, [b"q"], served, name) for name in ("one", "two", "three")]
    for waiter in waiters:
        registry.add(waiter)
    execute(ks, Session(), [b"RPUSH", b"q", b"a", b"b"], journal, 0)
    done = registry.serve_ready(journal, 0)
    assert served == ["one", "two"] and done == waiters[:2]
    assert [w.reply for w in done] == [
        b"*2\r\n$1\r\nq\r\n$1\r\na\r\n", b"*2\r\n$1\r\nq\r\n$1\r\nb\r\n",
    ]
    assert len(registry) == 1 and waiters[2] in registry
    execute(ks, Session(), [b"LPUSH", b"q", b"c"], journal, 0)
    assert registry.serve_ready(journal, 0) == [waiters[2]]
    assert len(registry) == 0 and registry.keys() == 0


def test_registry_ignores_a_key_of_another_type_and_cheap_touches() -> None:
    """A SET onto a waited key, or a write to another key, wakes nobody: the waiter keeps
    waiting (Redis 7.2) and is served once a list is there."""
    ks, journal, served = Keyspace(), OpJournal(), list[str]()
    registry = BlockingRegistry(ks)
    registry.add(_waiter(ks, [b"k"], served, "w"))
    execute(ks, Session(), [b"SET", b"k", b"str"], journal, 0)
    execute(ks, Session(), [b"RPUSH", b"other", b"x"], journal, 0)
    assert registry.serve_ready(journal, 0) == [] and len(registry) == 1
    execute(ks, Session(), [b"DEL", b"k"], journal, 0)
    execute(ks, Session(), [b"RPUSH", b"k", b"x"], journal, 0)
    assert len(registry.serve_ready(journal, 0)) == 1 and served == ["w"]


def test_registry_wakes_on_rename_onto_a_waited_key() -> None:
    """Whatever stores a list at the key wakes its waiters, not only a push."""
    ks, journal, served = Keyspace(), OpJournal(), list[str]()
    registry = BlockingRegistry(ks)
    registry.add(_waiter(ks, [b"dst"], served, "w"))
    execute(ks, Session(), [b"RPUSH", b"src", b"x"], journal, 0)
    assert registry.serve_ready(journal, 0) == []
    execute(ks, Session(), [b"RENAME", b"src", b"dst"], journal, 0)
    assert len(registry.serve_ready(journal, 0)) == 1


def test_registry_remove_leaves_no_watch_behind() -> None:
    """A waiter removed (timeout, disconnect) takes its keyspace watches with it."""
    ks = Keyspace()
    registry = BlockingRegistry(ks)
    first = _waiter(ks, [b"a", b"b", b"a"], [], "1")
    second = _waiter(ks, [b"b"], [], "2")
    registry.add(first)
    registry.add(second)
    assert ks.statistics().watched_keys == 2
    assert registry.remove(first) and not registry.remove(first)
    assert ks.statistics().watched_keys == 1
    assert registry.remove(second)
    assert ks.statistics().watched_keys == 0 and len(registry) == 0 and not registry.ready


# -- the owner -----------------------------------------------------------------------------


def test_owner_holds_a_blocked_reply_and_releases_it_after_the_pushing_groups_sync() -> None:
    """The waiter's pop is journaled in the group of the push that woke it; its reply comes
    with that group, after the sync, and nothing else of its batch ran meanwhile."""
    owner, log, executor = _owner()
    blocked = _batch(executor, "BLPOP q 0", "PING")
    owner.commit([blocked])
    assert blocked.held and blocked.replies is None and blocked.leftover == [[b"PING"]]
    assert len(owner.blocking) == 1
    push = _batch(executor, "RPUSH q x", "LLEN q")
    synced = len(log.synced)
    owner.commit([push])
    assert push.replies == [b":1\r\n", b":0\r\n"]  # the waiter popped between the two
    assert blocked.replies == [b"*2\r\n$1\r\nq\r\n$1\r\nx\r\n"] and not blocked.held
    assert len(log.synced) == synced + 2  # the push and the pop, one sync
    assert log.syncs >= 1 and len(owner.blocking) == 0
    assert blocked.sink.flushes == 2  # its group's flush (nothing to write), then the pop's


def test_owner_serves_a_push_in_a_transaction_after_it() -> None:
    """A push inside EXEC wakes the waiter only after the whole transaction (a pop inside
    the same transaction sees the element first)."""
    owner, _, executor = _owner()
    blocked = _batch(executor, "BLPOP q 0")
    owner.commit([blocked])
    session = Session()
    journal = OpJournal()
    results = execute_transaction(
        owner.state.keyspace, session,
        [[b"RPUSH", b"q", b"a", b"b"], [b"LPOP", b"q"]], journal, 0,
    )
    assert results == [2, b"a"]
    assert owner.blocking.ready  # marked, served by the owner after the request
    owner.state.keyspace.rollback(journal)


def test_owner_blmove_wakes_the_waiters_of_its_target() -> None:
    """A served BLMOVE pushes onto its target, whose own waiter is served in the same
    group."""
    owner, _, executor = _owner()
    mover = _batch(executor, "BLMOVE a b LEFT RIGHT 0")
    popper = _batch(executor, "BLPOP b 0")
    owner.commit([mover, popper])
    owner.commit([_batch(executor, "RPUSH a x")])
    assert mover.replies == [b"$1\r\nx\r\n"]
    assert popper.replies == [b"*2\r\n$1\r\nb\r\n$1\r\nx\r\n"]


def test_owner_end_wait_answers_the_timeout_reply_and_forgets_the_waiter() -> None:
    """A wait ended from outside a group (timer, CLIENT UNBLOCK) answers at once; ending it
    twice, or after it was served, does nothing."""
    owner, _, executor = _owner()
    blocked = _batch(executor, "BRPOP a b 0")
    owner.commit([blocked])
    waiter = owner.blocking.waiters()[0]
    assert waiter.release is not None
    release = waiter.release
    assert release(waiter.timed_out)
    assert blocked.replies == [b"*-1\r\n"] and blocked.sink.flushes == 2  # type: ignore[attr-defined]
    assert not release(b"again") and waiter.release is None
    assert owner.state.keyspace.statistics().watched_keys == 0


def test_owner_refuses_woken_pops_when_the_log_fails() -> None:
    """A pop whose group failed to log is rolled back and answered ``not logged``."""
    import errno

    owner, log, executor = _owner()
    blocked = _batch(executor, "BLPOP q 0")
    owner.commit([blocked])
    log.fail_sync = errno.EIO
    owner.commit([_batch(executor, "RPUSH q x")])
    assert blocked.replies is not None and blocked.replies[0].startswith(b"-ERR not logged")
    assert owner.state.keyspace.peek(b"0", b"q") is None


def test_owner_ends_every_wait_when_the_log_fails() -> None:
    """Once the log failed nothing can serve a waiter: one blocked in the failed group is
    answered ``not logged`` with it, one blocked before is refused ``read-only``."""
    import errno

    owner, log, executor = _owner()
    earlier = _batch(executor, "BLPOP a 0")
    owner.commit([earlier])
    log.fail_sync = errno.EIO
    same, write = _batch(executor, "BLPOP b 0"), _batch(executor, "SET k v")
    owner.commit([same, write])
    assert earlier.replies is not None and earlier.replies[0].startswith(b"-ERR read-only: ")
    assert same.replies is not None and same.replies[0].startswith(b"-ERR not logged: ")
    assert len(owner.blocking) == 0 and not same.held and not earlier.held
