"""RespRequests and RespExecutor without sockets: RESP bytes in, wire replies out, in order,
with a fake owner that runs each owner request at once on one keyspace."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

from minidb.protocol import SIMPLE_OK, RespReplyDecoder, encode_command
from minidb.server.resp._connection import RespContext, RespRequests
from minidb.server.resp._executor import (
    READ_ONLY_REASON,
    OwnerSide,
    RespExecutor,
    unwatch_request,
)
from minidb.server.resp._info import InfoSnapshot, ServerFacts
from minidb.server.resp._session import RespSession, SessionConfig
from minidb.store import Keyspace, OpJournal

NOW_MS = 1_700_000_000_000


@dataclass
class Env:
    """A SessionEnv with a fixed clock."""

    open_sessions: list[RespSession] = field(default_factory=list)

    def unix_time(self) -> float:
        return NOW_MS / 1000

    def snapshot(self) -> InfoSnapshot:
        return InfoSnapshot()

    def sessions(self) -> Iterable[RespSession]:
        return self.open_sessions


@dataclass
class State:
    """The owner's state as the executor sees it."""

    keyspace: Keyspace = field(default_factory=Keyspace)


class Owner:
    """Runs each owner request of a RespRequests at once, like a group of one."""

    def __init__(self, password: bytes | None = None) -> None:
        self.state = State()
        self.executor = RespExecutor()
        self.journal: OpJournal | None = OpJournal()
        ids = itertools.count(1)
        self.context = RespContext(
            SessionConfig(ServerFacts(minidb_version="0"), password=password),
            self.executor, Env(), max_bulk_bytes=1 << 20, next_id=lambda: next(ids),
        )  # fmt: skip

    def client(self) -> RespRequests:
        return RespRequests(RespSession(self.context.next_id(), self.context.config),
                            OwnerSide(), self.context)  # fmt: skip

    def run(self, client: RespRequests, data: bytes, limit: int = 1000) -> list[bytes]:
        """The wire replies to ``data``, in order."""
        client.receive(data)
        out = []
        for entry in client.next_requests(limit):
            if isinstance(entry, bytes):
                out.append(entry)
            else:
                out.append(self.executor.execute(self.state, entry, self.journal, NOW_MS))
        return out


def wire(*commands: tuple[bytes | str, ...]) -> bytes:
    """The RESP multibulk form of ``commands``, pipelined."""
    return b"".join(encode_command(list(c)) for c in commands)


def decoded(replies: list[bytes]) -> list[object]:
    return RespReplyDecoder().feed(b"".join(replies))


def test_requests_forward_data_commands_and_answer_local_ones_in_order() -> None:
    """ECHO between SET and GET is answered locally yet keeps its place between them; the
    plain commands around it go as runs, a bare PING inside one."""
    owner = Owner()
    client = owner.client()
    replies = owner.run(
        client, wire(("SET", "k", "v"), ("ECHO", "e"), ("PING",), ("GET", "k"), ("DEL", "k"))
    )
    assert replies == [b"+OK\r\n", b"$1\r\ne\r\n", b"+PONG\r\n$1\r\nv\r\n:1\r\n"]


def test_executor_encodes_in_the_protocol_the_command_was_decided_in() -> None:
    """A GET before HELLO 3 answers the RESP2 null, the same GET after it RESP3's."""
    owner = Owner()
    client = owner.client()
    replies = owner.run(client, wire(("GET", "missing"), ("HELLO", "3"), ("GET", "missing")))
    assert replies[0] == b"$-1\r\n" and replies[2] == b"_\r\n"


def test_executor_transaction_follows_select_inside_multi() -> None:
    """SELECT queued in MULTI moves the later commands to its bucket, and its OK stays local."""
    owner = Owner()
    client = owner.client()
    replies = owner.run(client, wire(("MULTI",), ("SET", "k", "zero"), ("SELECT", "3"),
                                     ("SET", "k", "three"), ("EXEC",)))  # fmt: skip
    assert decoded(replies)[-1] == [SIMPLE_OK] * 3
    ks = owner.state.keyspace
    assert ks.get(b"0", b"k", NOW_MS, None) == b"zero"
    assert ks.get(b"3", b"k", NOW_MS, None) == b"three"


def test_executor_aborts_exec_when_a_watched_key_changed() -> None:
    """WATCH, another client's SET, then EXEC answers the null array and runs nothing."""
    owner = Owner()
    a, b = owner.client(), owner.client()
    assert owner.run(a, wire(("WATCH", "k"), ("MULTI",), ("SET", "k", "a"))) == [
        b"+OK\r\n", b"+OK\r\n", b"+QUEUED\r\n",
    ]  # fmt: skip
    owner.run(b, wire(("SET", "k", "b")))
    assert owner.run(a, wire(("EXEC",))) == [b"*-1\r\n"]
    assert owner.state.keyspace.get(b"0", b"k", NOW_MS, None) == b"b"
    assert owner.state.keyspace.statistics().watched_keys == 0


def test_executor_drops_a_watch_the_session_unwatched() -> None:
    """After UNWATCH (answered locally) a change of the once-watched key no longer aborts."""
    owner = Owner()
    a, b = owner.client(), owner.client()
    owner.run(a, wire(("WATCH", "k"), ("UNWATCH",)))
    owner.run(b, wire(("SET", "k", "b")))
    assert decoded(owner.run(a, wire(("MULTI",), ("SET", "k", "a"), ("EXEC",))))[-1] == [SIMPLE_OK]
    assert owner.state.keyspace.statistics().watched_keys == 0


def test_unwatch_request_forgets_a_closed_connections_watch() -> None:
    """The request a closing connection sends removes its keys from the keyspace's watches."""
    owner = Owner()
    a = owner.client()
    owner.run(a, wire(("WATCH", "k", "j")))
    assert a.watched and owner.state.keyspace.statistics().watched_keys == 2
    owner.executor.execute(owner.state, unwatch_request(a.side), owner.journal, NOW_MS)
    assert owner.state.keyspace.statistics().watched_keys == 0


def test_executor_refuses_writes_without_a_journal_and_serves_reads() -> None:
    """With journal None (read-only store) SET is refused with a RESP error, GET still runs."""
    owner = Owner()
    client = owner.client()
    owner.run(client, wire(("SET", "k", "v")))
    owner.journal = None
    # One run of two commands: one reply each, joined.
    assert owner.run(client, wire(("SET", "k", "w"), ("GET", "k"))) == [
        b"-ERR " + READ_ONLY_REASON.encode() + b"\r\n" + b"$1\r\nv\r\n",
    ]  # fmt: skip


def test_executor_write_flags_come_from_the_command_table() -> None:
    """A run holding SET and a transaction holding a write are writes; a run of GET, WATCH and
    a read-only EXEC not."""
    owner = Owner()
    client = owner.client()
    client.receive(wire(("SET", "k", "v"), ("GET", "k"), ("WATCH", "k"), ("GET", "k"),
                        ("MULTI",), ("GET", "k"), ("EXEC",), ("MULTI",), ("INCR", "n"),
                        ("EXEC",)))  # fmt: skip
    forwarded = [r for r in client.next_requests(100) if not isinstance(r, bytes)]
    assert [owner.executor.is_write(r) for r in forwarded] == [True, False, False, False, True]


def test_executor_journals_each_command_as_one_group() -> None:
    """SET then an EXEC of two writes leave two journal groups: one record each."""
    owner = Owner()
    client = owner.client()
    owner.run(client, wire(("SET", "a", "1"), ("MULTI",), ("SET", "b", "2"), ("INCR", "a"),
                           ("EXEC",)))  # fmt: skip
    assert owner.journal is not None
    assert [len(group) for group in owner.journal.records] == [1, 2]


def test_requests_stop_at_quit_and_never_run_what_follows() -> None:
    """QUIT answers +OK; a SET pipelined after it is neither answered nor run."""
    owner = Owner()
    client = owner.client()
    assert owner.run(client, wire(("QUIT",), ("SET", "k", "v"))) == [b"+OK\r\n"]
    assert client.closing and not client.has_request()
    assert owner.state.keyspace.get(b"0", b"k", NOW_MS, None) is None


def test_requests_answer_a_protocol_error_after_the_commands_before_it() -> None:
    """Commands before a broken frame are answered, then the protocol error, then nothing."""
    owner = Owner()
    client = owner.client()
    replies = owner.run(client, wire(("SET", "k", "v")) + b"*1\r\n$x\r\n" + wire(("PING",)))
    assert replies == [b"+OK\r\n", b"-ERR Protocol error: invalid bulk length\r\n"]
    assert client.closing


def test_requests_take_at_most_the_limit() -> None:
    """next_requests(3) of five pipelined commands gives three and leaves two decoded later."""
    owner = Owner()
    client = owner.client()
    client.receive(wire(*[("PING",)] * 5))
    assert [len(run) for run in client.next_requests(3)] == [3]  # one run of three
    assert client.has_request()
    assert [len(run) for run in client.next_requests(10)] == [2] and not client.has_request()


def test_executor_counts_calls_failures_and_rejections_by_name() -> None:
    """INCR of a non-number is a failed incr; an unknown command a rejection with code ERR."""
    owner = Owner()
    client = owner.client()
    owner.run(client, wire(("SET", "k", "x"), ("INCR", "k"), ("NOPE",), ("PING",)))
    counts = owner.executor.counts
    assert counts.calls == {"set": 1, "incr": 1, "ping": 1}
    assert counts.failed == {"incr": 1} and counts.errors == {"ERR": 2}
    assert sum(counts.rejected.values()) == 1


def test_session_table_knows_every_engine_command_with_its_arity() -> None:
    """Every command the store runs is in the session's table with the same arity and write
    flag, so none is refused as unknown before it reaches the owner."""
    from minidb.server.resp._commands_meta import CommandTable
    from minidb.store import COMMANDS

    table = CommandTable.default()
    for name, command in COMMANDS.items():
        spec = table.top(name)
        assert spec is not None, name
        assert spec.arity == command.arity, name
        assert ("write" in spec.flags) == ("write" in command.flags), name
