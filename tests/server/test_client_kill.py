"""CLIENT KILL over real sockets (every filter, the old form, SKIPME, a blocked client and a
subscriber killed), its parsing and MAXAGE on the pure session (a fixed wall clock), its
errors diffed against a real ``redis-server`` (skipped without one), and the other CLIENT
subcommands job queues send (NO-EVICT, NO-TOUCH, INFO, SETINFO)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from minidb.protocol import encode_command
from minidb.protocol._resp_client import RespReplyDecoder
from minidb.server.resp._client import KillFilter, kill_matches, parse_kill
from minidb.server.resp._session import RespSession, SessionConfig
from minidb.server.resp._types import OK, ErrorReply, Reply
from tests.server.conftest import IO_TIMEOUT_S, ServeFactory, ServerProcess
from tests.server.test_containers_vs_redis import RedisServer
from tests.server.test_resp_session import FACTS, NOW, Env

WAIT_S = 5.0
"""Deadline for the server to reach a state a test waits for (a client blocked)."""


def _first_reply_size(data: bytes) -> int:
    """The bytes of the first whole reply in ``data`` (0: none is whole yet)."""
    decoder = RespReplyDecoder()
    for size in range(data.find(b"\r\n") + 2, len(data) + 1):
        if data[size - 2 : size] == b"\r\n" and decoder.feed(data[:size]):
            return size
        decoder = RespReplyDecoder()
    return 0


class Raw:
    """A blocking RESP client with a deadline on every socket call: commands out, whole
    replies (their bytes) in."""

    def __init__(self, sock: socket.socket) -> None:
        sock.settimeout(IO_TIMEOUT_S)
        self.sock = sock
        self.buffer = b""

    @classmethod
    def tcp(cls, port: int) -> Raw:
        return cls(socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S))

    def send(self, *commands: list[str]) -> None:
        self.sock.sendall(b"".join(encode_command([w.encode() for w in c]) for c in commands))

    def reply(self) -> bytes:
        """The next whole reply's bytes (fails on a timeout or a close before it)."""
        while True:
            size = _first_reply_size(self.buffer)
            if size:
                got, self.buffer = self.buffer[:size], self.buffer[size:]
                return got
            chunk = self.sock.recv(65536)
            assert chunk, f"closed before a whole reply (got {self.buffer!r})"
            self.buffer += chunk

    def call(self, *words: str) -> bytes:
        self.send(list(words))
        return self.reply()

    def closed(self) -> bool:
        """True once the server closed the connection with nothing more sent."""
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            return True
        self.buffer += data
        return not data

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server(serve: ServeFactory) -> ServerProcess:
    return serve("--resp-port", "0")


@pytest.fixture
def clients(server: ServerProcess) -> Iterator[list[Raw]]:
    opened: list[Raw] = []
    yield opened
    for raw in opened:
        raw.close()


def _connect(server: ServerProcess, clients: list[Raw]) -> Raw:
    assert server.resp_port is not None
    raw = Raw.tcp(server.resp_port)
    clients.append(raw)
    return raw


def _id(raw: Raw) -> str:
    return raw.call("CLIENT", "ID")[1:-2].decode()


def _field(raw: Raw, name: str) -> str:
    info = raw.call("CLIENT", "INFO").decode()
    return next(f for f in info.split() if f.startswith(name + "=")).split("=", 1)[1]


def _info_field(raw: Raw, name: str) -> str:
    info = raw.call("INFO", "clients").decode()
    return next(line for line in info.splitlines() if line.startswith(name + ":")).split(":")[1]


# -- the filters ---------------------------------------------------------------------------


def test_kill_by_id_closes_that_client_only(server: ServerProcess, clients: list[Raw]) -> None:
    admin, victim, bystander = (_connect(server, clients) for _ in range(3))
    victim_id = _id(victim)
    assert admin.call("CLIENT", "KILL", "ID", victim_id) == b":1\r\n"
    assert victim.closed()
    assert bystander.call("PING") == b"+PONG\r\n"
    assert admin.call("CLIENT", "KILL", "ID", victim_id) == b":0\r\n"  # gone already
    assert f"id={victim_id} ".encode() not in admin.call("CLIENT", "LIST")


def test_a_killed_client_gets_the_whole_replies_it_was_owed(
    server: ServerProcess, clients: list[Raw]
) -> None:
    """A client killed while megabytes of replies to what it sent wait for it to read: what
    it reads is whole replies, in order, up to the close (never a reply cut short)."""
    admin, victim = (_connect(server, clients) for _ in range(2))
    value = "v" * 100_000
    assert admin.call("SET", "big", value) == b"+OK\r\n"
    victim_id = _id(victim)
    victim.send(*(["GET", "big"] for _ in range(100)))  # 10 MB of replies, not read yet
    deadline = time.monotonic() + WAIT_S
    while b"cmd=get" not in admin.call("CLIENT", "LIST", "ID", victim_id):
        assert time.monotonic() < deadline, "the server never ran the GETs"
        time.sleep(0.01)
    assert admin.call("CLIENT", "KILL", "ID", victim_id) == b":1\r\n"
    reply = f"${len(value)}\r\n{value}\r\n".encode()
    got = 0
    while not victim.closed():
        while len(victim.buffer) >= len(reply):
            assert victim.buffer.startswith(reply)
            victim.buffer = victim.buffer[len(reply) :]
            got += 1
    assert victim.buffer == b"" and got >= 1


def test_kill_by_addr_and_the_old_form(server: ServerProcess, clients: list[Raw]) -> None:
    admin, first, second = (_connect(server, clients) for _ in range(3))
    assert admin.call("CLIENT", "KILL", "ADDR", _field(first, "addr")) == b":1\r\n"
    assert first.closed()
    assert admin.call("CLIENT", "KILL", _field(second, "addr")) == b"+OK\r\n"
    assert second.closed()
    assert admin.call("CLIENT", "KILL", "127.0.0.1:1") == b"-ERR No such client\r\n"
    assert admin.call("CLIENT", "KILL", "ADDR", "127.0.0.1:1") == b":0\r\n"


def test_kill_by_laddr_and_user_skip_the_caller(server: ServerProcess, clients: list[Raw]) -> None:
    admin = _connect(server, clients)
    others = [_connect(server, clients) for _ in range(3)]
    assert admin.call("CLIENT", "KILL", "LADDR", "127.0.0.1:1") == b":0\r\n"
    laddr = _field(admin, "laddr")
    assert admin.call("CLIENT", "KILL", "LADDR", laddr, "ID", _id(others[0])) == b":1\r\n"
    assert others[0].closed()
    assert admin.call("CLIENT", "KILL", "USER", "default") == b":2\r\n"  # all but the caller
    assert all(raw.closed() for raw in others[1:])
    assert admin.call("PING") == b"+PONG\r\n"


def test_kill_by_type(server: ServerProcess, clients: list[Raw]) -> None:
    admin, subscriber, plain = (_connect(server, clients) for _ in range(3))
    assert subscriber.call("SUBSCRIBE", "news").startswith(b"*3\r\n$9\r\nsubscribe")
    for kind in ("master", "replica", "slave"):
        assert admin.call("CLIENT", "KILL", "TYPE", kind) == b":0\r\n"
    assert admin.call("CLIENT", "KILL", "TYPE", "PUBSUB") == b":1\r\n"
    assert subscriber.closed()
    # The subscription went with it, at once: the registry is empty.
    assert admin.call("PUBSUB", "NUMSUB", "news") == b"*2\r\n$4\r\nnews\r\n:0\r\n"
    assert admin.call("PUBLISH", "news", "x") == b":0\r\n"
    assert admin.call("CLIENT", "KILL", "TYPE", "normal") == b":1\r\n"  # not the caller
    assert plain.closed()


def test_a_killed_blocked_client_leaves_no_waiter(
    server: ServerProcess, clients: list[Raw]
) -> None:
    admin, blocked = (_connect(server, clients) for _ in range(2))
    blocked_id = _id(blocked)
    blocked.send(["BLPOP", "q", "0"])
    deadline = time.monotonic() + WAIT_S
    while _info_field(admin, "blocked_clients") != "1":
        assert time.monotonic() < deadline, "the client never blocked"
        time.sleep(0.01)
    assert admin.call("CLIENT", "KILL", "ID", blocked_id) == b":1\r\n"
    assert _info_field(admin, "blocked_clients") == "0"
    assert blocked.closed() and blocked.buffer == b""  # closed without a reply
    assert admin.call("RPUSH", "q", "kept") == b":1\r\n"
    assert admin.call("LRANGE", "q", "0", "-1") == b"*1\r\n$4\r\nkept\r\n"


# -- SKIPME: killing oneself -----------------------------------------------------------------


def test_skipme_yes_is_the_default(server: ServerProcess, clients: list[Raw]) -> None:
    me = _connect(server, clients)
    my_id = _id(me)
    assert me.call("CLIENT", "KILL", "ID", my_id) == b":0\r\n"
    assert me.call("CLIENT", "KILL", "ID", my_id, "SKIPME", "yes") == b":0\r\n"
    assert me.call("PING") == b"+PONG\r\n"


def test_skipme_no_answers_then_closes(server: ServerProcess, clients: list[Raw]) -> None:
    """Redis's CLIENT_CLOSE_AFTER_REPLY: the replies before it and its own count are sent,
    the commands pipelined after it are not run."""
    me, admin = (_connect(server, clients) for _ in range(2))
    me.send(["PING"], ["CLIENT", "KILL", "ID", _id(me), "SKIPME", "no"], ["SET", "after", "1"])
    assert me.reply() == b"+PONG\r\n"
    assert me.reply() == b":1\r\n"
    assert me.closed() and me.buffer == b""
    assert admin.call("EXISTS", "after") == b":0\r\n"


def test_the_old_form_may_kill_the_caller(server: ServerProcess, clients: list[Raw]) -> None:
    me = _connect(server, clients)
    assert me.call("CLIENT", "KILL", _field(me, "addr")) == b"+OK\r\n"
    assert me.closed()


def test_killing_oneself_inside_exec_answers_the_whole_transaction(
    server: ServerProcess, clients: list[Raw]
) -> None:
    me, admin = (_connect(server, clients) for _ in range(2))
    my_id = _id(me)
    me.send(["MULTI"], ["CLIENT", "KILL", "ID", my_id, "SKIPME", "no"], ["SET", "k", "v"],
            ["EXEC"], ["PING"])  # fmt: skip
    assert [me.reply() for _ in range(4)] == [
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"+QUEUED\r\n",
        b"*2\r\n:1\r\n+OK\r\n",
    ]
    assert me.closed() and me.buffer == b""
    assert admin.call("GET", "k") == b"$1\r\nv\r\n"


# -- hostile input ---------------------------------------------------------------------------

HOSTILE = [
    (["ID", "0"], b"-ERR client-id should be greater than 0\r\n"),
    (["ID", "-1"], b"-ERR client-id should be greater than 0\r\n"),
    (["ID", "99999999999999999999"], b"-ERR client-id should be greater than 0\r\n"),
    (["ID", "x"], b"-ERR client-id should be greater than 0\r\n"),
    (["ID", "999999"], b":0\r\n"),
    (["BOGUS", "1"], b"-ERR syntax error\r\n"),
    (["ID", "1", "SKIPME"], b"-ERR syntax error\r\n"),  # an option without its value
    (["ID", "1", "SKIPME", "maybe"], b"-ERR syntax error\r\n"),
    (["TYPE", "robot"], b"-ERR Unknown client type 'robot'\r\n"),
    (["USER", "nobody"], b"-ERR No such user 'nobody'\r\n"),
    (["ID"], b"-ERR No such client\r\n"),  # one argument: the old form's address
    (["1.2.3.4:5"], b"-ERR No such client\r\n"),
    ([], b"-ERR wrong number of arguments for 'client|kill' command\r\n"),
    (["ADDR", "1.2.3.4:5", "ID", "0"], b"-ERR client-id should be greater than 0\r\n"),
    (["TYPE", "slave", "USER", "default", "SKIPME", "NO"], b":0\r\n"),
]
MAXAGE = [
    (["MAXAGE", "0"], b"-ERR maxage should be greater than 0\r\n"),
    (["MAXAGE", "-5"], b"-ERR maxage should be greater than 0\r\n"),
    (["MAXAGE", "x"], b"-ERR maxage is not an integer or out of range\r\n"),
    (["MAXAGE", "99999999999999999999"], b"-ERR maxage is not an integer or out of range\r\n"),
    (["MAXAGE", "100000"], b":0\r\n"),
]
"""MAXAGE came in Redis 7.4: not diffed against an older redis-server."""


def test_bad_arguments_get_redis_errors(server: ServerProcess, clients: list[Raw]) -> None:
    me, other = (_connect(server, clients) for _ in range(2))
    for args, expected in HOSTILE + MAXAGE:
        assert me.call("CLIENT", "KILL", *args) == expected, args
    assert me.call("PING") == other.call("PING") == b"+PONG\r\n"  # nothing was killed


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    real = RedisServer(tmp_path_factory.mktemp("redis"))
    yield real
    real.close()


def test_errors_match_redis_server(
    server: ServerProcess, clients: list[Raw], redis_server: RedisServer
) -> None:
    me = _connect(server, clients)
    for args, _ in HOSTILE:
        command = ["CLIENT", "KILL", *args]
        assert me.call(*command) == redis_server.raw([w.encode() for w in command]), command
    for command in (["CLIENT", "NO-EVICT", "on"], ["CLIENT", "NO-EVICT", "off"],
                    ["CLIENT", "NO-EVICT", "maybe"], ["CLIENT", "NO-EVICT"]):  # fmt: skip
        assert me.call(*command) == redis_server.raw([w.encode() for w in command]), command


# -- the other subcommands job queues send ----------------------------------------------------


def test_no_evict_no_touch_setinfo_and_info(server: ServerProcess, clients: list[Raw]) -> None:
    me = _connect(server, clients)
    for sub in ("NO-EVICT", "NO-TOUCH"):
        assert me.call("CLIENT", sub, "on") == b"+OK\r\n"
        assert me.call("CLIENT", sub, "OFF") == b"+OK\r\n"
        assert me.call("CLIENT", sub, "maybe") == b"-ERR syntax error\r\n"
    assert me.call("CLIENT", "SETINFO", "LIB-NAME", "redis-py") == b"+OK\r\n"
    assert me.call("CLIENT", "SETINFO", "lib-ver", "5.0.1") == b"+OK\r\n"
    assert me.call("CLIENT", "SETINFO", "lib-name", "a b") == (
        b"-ERR lib-name cannot contain spaces, newlines or special characters.\r\n"
    )
    assert _field(me, "lib-name") == "redis-py" and _field(me, "lib-ver") == "5.0.1"
    assert _field(me, "id") == _id(me)


# -- the pure core: parsing and MAXAGE on a fixed wall clock ----------------------------------


def _session(client_id: int, age_s: float) -> RespSession:
    addr = f"127.0.0.1:{5000 + client_id}"
    config = SessionConfig(facts=FACTS)
    return RespSession(client_id, config, addr=addr, laddr="127.0.0.1:6399", created_at=NOW - age_s)


def _kill(caller: RespSession, env: Env, *args: str) -> object:
    action = caller.handle([b"CLIENT", b"KILL", *(a.encode() for a in args)], env)
    assert isinstance(action, Reply)
    return action.result


def test_maxage_kills_only_clients_at_least_that_old() -> None:
    closed: list[int] = []
    young, old, older = _session(1, 4.9), _session(2, 5.0), _session(3, 60)
    for s in (young, old, older):
        s.close_connection = lambda i=s.id: closed.append(i)
    env = Env(open_sessions=[young, old, older])
    assert _kill(young, env, "MAXAGE", "61") == 0
    assert _kill(young, env, "MAXAGE", "5") == 2
    assert sorted(closed) == [2, 3] and old.closing and older.closing and not young.closing
    assert _kill(young, env, "MAXAGE", "1") == 0  # the caller is skipped, the others gone
    assert _kill(young, env, "MAXAGE", "1", "SKIPME", "no") == 1
    assert young.closing and closed[-1] == 1
    # A session that is closing runs nothing more.
    assert young.handle([b"PING"], env).__class__.__name__ == "NoReply"


def test_filters_are_anded() -> None:
    me, other = _session(1, 10), _session(2, 10)
    env = Env(open_sessions=[me, other])
    assert _kill(me, env, "ADDR", other.addr, "ID", "1") == 0
    assert _kill(me, env, "ADDR", other.addr, "LADDR", "127.0.0.1:1") == 0
    assert _kill(me, env, "ADDR", other.addr, "ID", "2", "TYPE", "normal") == 1
    assert _kill(me, env, "127.0.0.1:5001") == OK  # the old form: me
    assert me.closing


def test_parse_kill_reads_redis_options() -> None:
    parsed = parse_kill([b"CLIENT", b"KILL", b"id", b"7", b"Type", b"SLAVE", b"skipme", b"NO"])
    assert parsed == KillFilter(client_id=7, kind=b"replica", skip_me=False)
    assert parse_kill([b"CLIENT", b"KILL", b"a:1"]) == KillFilter(
        addr=b"a:1", skip_me=False, old_form=True
    )
    assert parse_kill([b"CLIENT", b"KILL", b"TYPE", b"a\r\nb"]) == ErrorReply(
        "ERR Unknown client type 'a  b'"
    )
    wanted = KillFilter(client_id=1)
    me = _session(1, 0)
    assert not kill_matches(wanted, me, me, NOW)
    assert kill_matches(wanted, me, _session(2, 0), NOW)
