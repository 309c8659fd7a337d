"""RespSession in isolation: every connection command's reply and error, as Redis 7.2 words them."""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field

import pytest

from minidb.server.resp import _session as _resp_session
from minidb.server.resp._commands_meta import CommandTable
from minidb.server.resp._glob import glob_match
from minidb.server.resp._info import BucketStats, CommandStats, InfoSnapshot, ServerFacts
from minidb.server.resp._session import RespSession, SessionConfig
from minidb.server.resp._types import (
    NULL_ARRAY,
    OK,
    PONG,
    QUEUED,
    Action,
    Close,
    ErrorReply,
    Forward,
    ForwardTransaction,
    ForwardWatch,
    NoReply,
    Reply,
    ReplyAndClose,
    Result,
    Simple,
    TransactionCommand,
    Verbatim,
    WatchSet,
)

FACTS = ServerFacts(
    minidb_version="0.9.0",
    tcp_port=6399,
    data_dir="/var/lib/minidb",
    max_clients=1024,
    idle_timeout_s=30.0,
    process_id=4242,
)
NOW = 1_700_000_000.25


@dataclass
class Env:
    """A SessionEnv with a fixed wall clock and a settable snapshot."""

    snap: InfoSnapshot = field(default_factory=InfoSnapshot)
    open_sessions: list[RespSession] = field(default_factory=list)
    now: float = NOW

    def unix_time(self) -> float:
        return self.now

    def snapshot(self) -> InfoSnapshot:
        return self.snap

    def sessions(self) -> Iterable[RespSession]:
        return self.open_sessions


def session(password: bytes | None = None, client_id: int = 7) -> RespSession:
    config = SessionConfig(facts=FACTS, password=password)
    return RespSession(client_id, config, addr="127.0.0.1:5000", laddr="127.0.0.1:6399",
                       created_at=NOW - 10)  # fmt: skip


def cmd(s: RespSession, *words: bytes | str, env: Env | None = None) -> Action:
    argv = [w.encode() if isinstance(w, str) else w for w in words]
    env = env or Env()
    s.last_interaction = env.unix_time()  # what the connection does once per read
    return s.handle(argv, env)


def reply(s: RespSession, *words: bytes | str, env: Env | None = None) -> Result:
    """The result of a command answered locally (fails if it was forwarded)."""
    action = cmd(s, *words, env=env)
    assert isinstance(action, Reply), action
    return action.result


def err(message: str) -> ErrorReply:
    return ErrorReply(message)


class FakeOwner:
    """The owner side of WATCH/EXEC as the data owner must implement it: a dict store whose
    writes mark every WatchSet registered (weakly) under the written key dirty."""

    def __init__(self) -> None:
        self.data: dict[tuple[bytes, bytes], bytes] = {}
        self.watchers: dict[tuple[bytes, bytes], weakref.WeakSet[WatchSet]] = {}

    def watch(self, action: ForwardWatch) -> Result:
        for key in action.keys:
            self.watchers.setdefault((action.bucket, key), weakref.WeakSet()).add(action.watch)
        return OK

    def write(self, bucket: bytes, key: bytes, value: bytes) -> None:
        self.data[(bucket, key)] = value
        for watch in self.watchers.pop((bucket, key), ()):
            watch.dirty = True

    def run(self, command: TransactionCommand) -> Result:
        verb, *args = command.argv
        if verb.lower() == b"set":
            self.write(command.bucket, args[0], args[1])
            return OK
        return self.data.get((command.bucket, args[0]))

    def transaction(self, tx: ForwardTransaction) -> Result:
        if tx.watch is not None and tx.watch.dirty:
            return tx.assemble(None)
        return tx.assemble([self.run(c) for c in tx.commands])


# -- PING, ECHO, TIME, names ---------------------------------------------------------------


def test_ping_answers_pong_or_its_argument_in_both_protocols() -> None:
    """PING is +PONG, PING msg is the bulk msg, in RESP2 and RESP3 alike (outside pub/sub)."""
    s = session()
    assert reply(s, "PING") == PONG
    assert reply(s, "PING", "hi") == b"hi"
    reply(s, "HELLO", "3")
    action = cmd(s, "ping")
    assert action == Reply(PONG, 3)
    assert reply(s, "PING", "a", "b") == err("ERR wrong number of arguments for 'ping' command")


def test_command_names_are_case_insensitive() -> None:
    """pInG, Echo and cLiEnT iD run like their upper-case spelling."""
    s = session()
    assert reply(s, "pInG") == PONG
    assert reply(s, "Echo", "x") == b"x"
    assert reply(s, "cLiEnT", "iD") == 7


def test_echo_returns_its_argument_and_checks_arity() -> None:
    """ECHO returns the bytes it got, and without an argument is Redis's arity error."""
    s = session()
    assert reply(s, "ECHO", b"\x00\xff") == b"\x00\xff"
    assert reply(s, "ECHO") == err("ERR wrong number of arguments for 'echo' command")


def test_time_is_seconds_and_microseconds_as_bulk_strings() -> None:
    """TIME answers [unix seconds, microseconds] from the environment's wall clock."""
    assert reply(session(), "TIME") == [b"1700000000", b"250000"]


def test_unknown_command_is_worded_exactly_as_redis() -> None:
    """Quotes, the comma and the trailing space after the last argument match Redis."""
    s = session()
    assert reply(s, "FOO", "a", "b") == err(
        "ERR unknown command 'FOO', with args beginning with: 'a' 'b' "
    )
    assert reply(s, "foo") == err("ERR unknown command 'foo', with args beginning with: ")
    assert reply(s, "") == err("ERR unknown command '', with args beginning with: ")


def test_unknown_command_echo_is_bounded_and_stays_on_one_line() -> None:
    """A huge name or argument is cut at 128 bytes and CR/LF become spaces (framing safe)."""
    s = session()
    result = reply(s, b"x" * 100_000, b"y" * 100_000, b"z")
    assert isinstance(result, ErrorReply)
    assert result.message == (
        "ERR unknown command '" + "x" * 128 + "', with args beginning with: '" + "y" * 128 + "' "
    )
    result = reply(s, b"evil\r\n+OK", b"a\nb")
    assert result == err("ERR unknown command 'evil  +OK', with args beginning with: 'a b' ")


def test_non_utf8_command_names_are_escaped_in_errors() -> None:
    """Bytes that are not UTF-8 come back as \\xNN escapes, never as a decode error."""
    result = reply(session(), b"\xff\xfe", b"\x80")
    assert result == err("ERR unknown command '\\xff\\xfe', with args beginning with: '\\x80' ")


def test_empty_argv_is_ignored() -> None:
    """An empty command (``*0``) gets no reply, as in Redis."""
    assert session().handle([], Env()) == NoReply()


def test_http_request_line_closes_without_reply() -> None:
    """POST and Host: close the connection silently (Redis's cross-protocol defence)."""
    s = session()
    assert cmd(s, "POST", "/", "HTTP/1.1") == Close()
    assert cmd(s, "PING") == NoReply()
    assert cmd(session(), "Host:", "x") == Close()


def test_data_commands_are_forwarded_with_the_selected_bucket() -> None:
    """GET/SET go to the owner with the session's bucket and protocol; arity is checked here."""
    s = session()
    assert cmd(s, "SET", "k", "v") == Forward([b"SET", b"k", b"v"], b"0", 2)
    assert reply(s, "SELECT", "users") == OK
    assert cmd(s, "get", "k") == Forward([b"get", b"k"], b"users", 2)
    assert reply(s, "GET") == err("ERR wrong number of arguments for 'get' command")
    assert reply(s, "GET", "a", "b") == err("ERR wrong number of arguments for 'get' command")


def test_forward_keeps_the_protocol_of_its_own_moment() -> None:
    """A GET pipelined before HELLO 3 is encoded in RESP2 even if its reply comes later."""
    s = session()
    first = cmd(s, "GET", "k")
    hello = cmd(s, "HELLO", "3")
    assert isinstance(first, Forward) and first.protocol == 2
    assert isinstance(hello, Reply) and hello.protocol == 3


@pytest.mark.parametrize("protocol", [2, 3])
def test_every_action_carries_the_connection_protocol(protocol: int) -> None:
    """Results are protocol-neutral values; the protocol each must be encoded in rides along
    (maps become flat arrays, verbatim strings bulk strings, the null array *-1 in RESP2)."""
    s = session()
    reply(s, "HELLO", str(protocol))
    actions = [
        cmd(s, "PING"),
        cmd(s, "CONFIG", "GET", "save"),
        cmd(s, "INFO", "cluster"),
        cmd(s, "GET", "k"),
        cmd(s, "WATCH", "k"),
        cmd(s, "MULTI"),
        cmd(s, "SET", "k", "v"),
        cmd(s, "EXEC"),
        cmd(s, "NOPE"),
        cmd(s, "QUIT"),
    ]
    assert [a.protocol for a in actions] == [protocol] * len(actions)  # type: ignore[union-attr]
    ping, config, info = (a.result for a in actions[:3])  # type: ignore[union-attr]
    assert (ping, config) == (PONG, {b"save": b""})
    assert info == Verbatim("# Cluster\r\ncluster_enabled:0\r\n")
    tx = actions[7]
    assert isinstance(tx, ForwardTransaction) and tx.watch is not None
    tx.watch.dirty = True
    assert FakeOwner().transaction(tx) is NULL_ARRAY


# -- HELLO ----------------------------------------------------------------------------------


def hello_map(proto: int, client_id: int = 7) -> dict[bytes, Result]:
    return {
        b"server": b"redis",
        b"version": b"7.2.0",
        b"proto": proto,
        b"id": client_id,
        b"mode": b"standalone",
        b"role": b"master",
        b"modules": [],
    }


def test_hello_switches_protocol_and_answers_in_the_new_one() -> None:
    """HELLO 3 answers Redis's seven-field map encoded in RESP3; HELLO 2 switches back."""
    s = session()
    assert cmd(s, "HELLO") == Reply(hello_map(2), 2)
    assert cmd(s, "HELLO", "3") == Reply(hello_map(3), 3)
    assert s.protocol == 3
    assert cmd(s, "HELLO", "2") == Reply(hello_map(2), 2)


def test_hello_refuses_other_versions() -> None:
    """HELLO 1 / 4 are NOPROTO; a non-integer is Redis's integer error; protocol unchanged."""
    s = session()
    assert reply(s, "HELLO", "4") == err("NOPROTO unsupported protocol version")
    assert reply(s, "HELLO", "1") == err("NOPROTO unsupported protocol version")
    bad = err("ERR Protocol version is not an integer or out of range")
    assert reply(s, "HELLO", "three") == bad
    assert reply(s, "HELLO", "03") == bad
    assert reply(s, "HELLO", "99999999999999999999") == bad
    assert s.protocol == 2


def test_hello_setname_and_syntax_errors() -> None:
    """SETNAME names the connection (with CLIENT SETNAME's rules); unknown options are refused."""
    s = session()
    assert cmd(s, "HELLO", "3", "SETNAME", "worker-1") == Reply(hello_map(3), 3)
    assert reply(s, "CLIENT", "GETNAME") == b"worker-1"
    assert reply(s, "HELLO", "3", "SETNAME", "a b") == err(
        "ERR Client names cannot contain spaces, newlines or special characters."
    )
    assert reply(s, "HELLO", "3", "BOGUS") == err("ERR Syntax error in HELLO option 'BOGUS'")
    assert reply(s, "HELLO", "3", "AUTH", "default") == err(
        "ERR Syntax error in HELLO option 'AUTH'"
    )


# -- AUTH ------------------------------------------------------------------------------------

HELLO_NOAUTH = (
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
    "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
    "select the RESP protocol version at the same time"
)


def test_without_password_auth_is_refused_as_redis_does() -> None:
    """AUTH pw with no password configured is Redis's configuration error; AUTH default x is OK."""
    s = session()
    assert reply(s, "AUTH", "secret") == err(
        "ERR AUTH <password> called without any password configured for the default user. "
        "Are you sure your configuration is correct?"
    )
    assert reply(s, "AUTH", "default", "anything") == OK
    assert reply(s, "AUTH", "alice", "anything") == err(
        "WRONGPASS invalid username-password pair or user is disabled."
    )
    assert reply(s, "AUTH") == err("ERR wrong number of arguments for 'auth' command")
    assert reply(s, "AUTH", "a", "b", "c") == err("ERR syntax error")


def test_with_password_only_auth_hello_quit_reset_run_before_auth() -> None:
    """Before AUTH everything but AUTH/HELLO/QUIT/RESET is NOAUTH; after it, everything runs."""
    s = session(password=b"s3cret")
    noauth = err("NOAUTH Authentication required.")
    assert reply(s, "PING") == noauth
    assert reply(s, "GET", "k") == noauth
    assert reply(s, "SELECT", "1") == noauth
    assert reply(s, "CLIENT", "SETINFO", "LIB-NAME", "redis-py") == noauth
    assert reply(s, "HELLO", "3") == err(HELLO_NOAUTH)
    assert s.protocol == 2
    assert reply(s, "AUTH", "wrong") == err(
        "WRONGPASS invalid username-password pair or user is disabled."
    )
    assert reply(s, "AUTH", "s3cret") == OK
    assert cmd(s, "GET", "k") == Forward([b"GET", b"k"], b"0", 2)


def test_unknown_command_before_auth_is_unknown_not_noauth() -> None:
    """Redis checks that a command exists (and its arity) before it checks authentication."""
    s = session(password=b"pw")
    assert reply(s, "NOPE") == err("ERR unknown command 'NOPE', with args beginning with: ")
    assert reply(s, "GET") == err("ERR wrong number of arguments for 'get' command")


def test_auth_user_form_and_hello_auth() -> None:
    """AUTH default pw and HELLO 3 AUTH default pw authenticate; other users never do."""
    s = session(password=b"pw")
    assert reply(s, "AUTH", "admin", "pw") == err(
        "WRONGPASS invalid username-password pair or user is disabled."
    )
    assert reply(s, "HELLO", "3", "AUTH", "default", "nope") == err(
        "WRONGPASS invalid username-password pair or user is disabled."
    )
    assert not s.authenticated
    assert cmd(s, "HELLO", "3", "AUTH", "default", "pw", "SETNAME", "n") == Reply(hello_map(3), 3)
    assert s.authenticated and s.name == b"n"
    t = session(password=b"pw")
    assert reply(t, "AUTH", "default", "pw") == OK


def test_quit_before_auth_closes() -> None:
    """QUIT is allowed before authentication."""
    s = session(password=b"pw")
    assert cmd(s, "QUIT") == ReplyAndClose(OK, 2)


# -- client handshakes ------------------------------------------------------------------------


def test_redis_py_connect_sequence() -> None:
    """redis-py 8's on_connect: HELLO 3, CLIENT SETINFO LIB-NAME/LIB-VER, then SELECT for db=."""
    s = session()
    hello = cmd(s, "HELLO", "3")
    assert isinstance(hello, Reply) and isinstance(hello.result, dict)
    assert hello.result[b"proto"] == 3  # redis-py raises "Invalid RESP version" otherwise
    assert cmd(s, "CLIENT", "SETINFO", "LIB-NAME", "redis-py") == Reply(OK, 3)
    assert cmd(s, "CLIENT", "SETINFO", "LIB-VER", "8.1.0") == Reply(OK, 3)
    assert cmd(s, "SELECT", "2") == Reply(OK, 3)
    assert cmd(s, "SET", "k", "v") == Forward([b"SET", b"k", b"v"], b"2", 3)
    assert (s.lib_name, s.lib_ver) == (b"redis-py", b"8.1.0")


def test_redis_py_connect_sequence_with_password() -> None:
    """With a password redis-py sends HELLO 3 AUTH default <pw> and expects the map."""
    s = session(password=b"pw")
    hello = cmd(s, "HELLO", "3", "AUTH", "default", "pw")
    assert hello == Reply(hello_map(3), 3)
    assert cmd(s, "CLIENT", "SETINFO", "LIB-NAME", "redis-py") == Reply(OK, 3)


def test_redis_cli_command_docs_has_the_shapes_redis_cli_asserts() -> None:
    """COMMAND DOCS maps every name to a map of bulk strings, subcommands as nested maps."""
    docs = reply(session(), "COMMAND", "DOCS")
    assert isinstance(docs, dict)
    assert set(docs) == {spec.name.encode() for spec in CommandTable.default()}

    def check(entry: Result) -> None:
        assert isinstance(entry, dict)
        for key, value in entry.items():
            assert isinstance(key, bytes)
            if key == b"subcommands":
                assert isinstance(value, dict)
                for sub in value.values():
                    check(sub)
            else:
                assert isinstance(value, bytes), (key, value)

    for entry in docs.values():
        check(entry)
    assert docs[b"get"] == {
        b"summary": b"Returns the string value of a key.",
        b"since": b"1.0.0",
        b"group": b"string",
    }
    client = docs[b"client"]
    assert isinstance(client, dict) and isinstance(client[b"subcommands"], dict)
    assert b"client|setname" in client[b"subcommands"]


def test_redis_benchmark_config_get_save_and_appendonly() -> None:
    """redis-benchmark reads element [1] of CONFIG GET save / appendonly: two-element replies."""
    s = session()
    assert reply(s, "CONFIG", "GET", "save") == {b"save": b""}
    assert reply(s, "CONFIG", "GET", "appendonly") == {b"appendonly": b"yes"}


# -- SELECT -------------------------------------------------------------------------------------


def test_select_takes_numbers_and_bucket_names() -> None:
    """SELECT n (redis-cli -n, redis-py db=) and SELECT <bucket name> pick the bucket."""
    s = session()
    assert reply(s, "SELECT", "15") == OK and s.bucket == b"15"
    assert reply(s, "SELECT", "users.v2:eu/1") == OK and s.bucket == b"users.v2:eu/1"
    assert reply(s, "SELECT", "-1") == err("ERR DB index is out of range")
    assert s.bucket == b"users.v2:eu/1"
    for bad in (b"a b", b"x" * 65, b"\xff", b""):
        result = reply(s, "SELECT", bad)
        assert isinstance(result, ErrorReply) and result.message.startswith(
            "ERR DB index is out of range"
        )
    assert s.bucket == b"users.v2:eu/1"


# -- CLIENT -----------------------------------------------------------------------------------


def test_client_setname_getname_follow_redis_rules() -> None:
    """Names are bytes ! to ~; the empty name clears it; GETNAME of no name is null."""
    s = session()
    assert reply(s, "CLIENT", "GETNAME") is None
    assert reply(s, "CLIENT", "SETNAME", "my-app") == OK
    assert reply(s, "CLIENT", "GETNAME") == b"my-app"
    bad = err("ERR Client names cannot contain spaces, newlines or special characters.")
    assert reply(s, "CLIENT", "SETNAME", "a b") == bad
    assert reply(s, "CLIENT", "SETNAME", "a\nb") == bad
    assert reply(s, "CLIENT", "SETNAME", b"caf\xc3\xa9") == bad
    assert reply(s, "CLIENT", "SETNAME", "") == OK
    assert reply(s, "CLIENT", "GETNAME") is None
    assert reply(s, "CLIENT", "SETNAME") == err(
        "ERR wrong number of arguments for 'client|setname' command"
    )


def test_client_setinfo_validates_attribute_and_value() -> None:
    """Only LIB-NAME and LIB-VER; the error names the attribute as the client spelled it."""
    s = session()
    assert reply(s, "CLIENT", "SETINFO", "lib-name", "redis-py(django_v5)") == OK
    assert reply(s, "CLIENT", "SETINFO", "FOO", "x") == err("ERR Unrecognized option 'FOO'")
    assert reply(s, "CLIENT", "SETINFO", "LIB-VER", "1 0") == err(
        "ERR LIB-VER cannot contain spaces, newlines or special characters."
    )
    assert reply(s, "CLIENT", "SETINFO", "LIB-NAME") == err(
        "ERR wrong number of arguments for 'client|setinfo' command"
    )


def test_client_unknown_subcommand_keeps_the_connection_usable() -> None:
    """CLIENT x is Redis's 'unknown subcommand ... Try CLIENT HELP.'; the next command runs."""
    s = session()
    assert reply(s, "client", "bogus", "1") == err(
        "ERR unknown subcommand 'bogus'. Try CLIENT HELP."
    )
    assert reply(s, "CLIENT", "PAUSE", "100") == err(
        "ERR unknown subcommand 'PAUSE'. Try CLIENT HELP."
    )
    assert reply(s, "CLIENT") == err("ERR wrong number of arguments for 'client' command")
    assert reply(s, "PING") == PONG


def test_client_id_info_and_list() -> None:
    """CLIENT ID is the server-assigned id; INFO and LIST use Redis's line format."""
    env = Env()
    s, other = session(client_id=7), session(client_id=8)
    env.open_sessions = [s, other]
    reply(s, "CLIENT", "SETNAME", "app", env=env)
    reply(s, "CLIENT", "SETINFO", "LIB-NAME", "redis-py", env=env)
    reply(s, "SELECT", "3", env=env)
    info = reply(s, "CLIENT", "INFO", env=env)
    assert isinstance(info, Verbatim) and info.format == "txt"
    line = info.text
    assert line.endswith("\n") and line.count("\n") == 1
    fields = dict(token.split("=", 1) for token in line.split())
    assert fields["id"] == "7" and fields["name"] == "app" and fields["db"] == "3"
    assert fields["addr"] == "127.0.0.1:5000" and fields["laddr"] == "127.0.0.1:6399"
    assert fields["age"] == "10" and fields["idle"] == "0" and fields["flags"] == "N"
    assert fields["cmd"] == "client|info" and fields["resp"] == "2"
    assert fields["lib-name"] == "redis-py" and fields["lib-ver"] == ""
    assert fields["multi"] == "-1" and fields["bucket"] == "3"
    listing = reply(s, "CLIENT", "LIST", env=env)
    assert isinstance(listing, Verbatim)
    assert [ln.split()[0] for ln in listing.text.splitlines()] == ["id=7", "id=8"]
    only = reply(s, "CLIENT", "LIST", "ID", "8", env=env)
    assert isinstance(only, Verbatim) and only.text.startswith("id=8 ")
    assert reply(s, "CLIENT", "LIST", "ID", "x", env=env) == err("ERR Invalid client ID")
    assert reply(s, "CLIENT", "LIST", "TYPE", "pubsub", env=env) == Verbatim("")
    assert reply(s, "CLIENT", "LIST", "TYPE", "nope", env=env) == err(
        "ERR Unknown client type 'nope'"
    )
    assert reply(s, "CLIENT", "LIST", "bogus", env=env) == err("ERR syntax error")


def test_client_info_db_is_minus_one_for_named_buckets() -> None:
    """redis-py parses db= as an integer, so a named bucket shows db=-1 and bucket=<name>."""
    s = session()
    reply(s, "SELECT", "users")
    reply(s, "MULTI")
    info = reply(s, "CLIENT", "INFO")  # queued, not answered...
    assert info == QUEUED
    reply(s, "DISCARD")
    result = reply(s, "CLIENT", "INFO")
    assert isinstance(result, Verbatim)
    assert " db=-1 " in result.text and "bucket=users" in result.text


def test_client_switches_and_tracking() -> None:
    """NO-EVICT/NO-TOUCH on|off are accepted; tracking is off and cannot be switched on."""
    s = session()
    assert reply(s, "CLIENT", "NO-EVICT", "on") == OK and s.no_evict
    assert reply(s, "CLIENT", "NO-TOUCH", "ON") == OK and s.no_touch
    assert reply(s, "CLIENT", "NO-EVICT", "maybe") == err("ERR syntax error")
    assert reply(s, "CLIENT", "TRACKING", "off") == OK
    assert reply(s, "CLIENT", "TRACKING", "on") == err(
        "ERR client-side caching (CLIENT TRACKING) is not supported"
    )
    assert reply(s, "CLIENT", "TRACKING", "sideways") == err("ERR syntax error")
    assert reply(s, "CLIENT", "REPLY", "ON") == OK
    assert reply(s, "CLIENT", "REPLY", "OFF") == err(
        "ERR CLIENT REPLY OFF and SKIP are not supported"
    )
    assert reply(s, "CLIENT", "GETREDIR") == -1
    assert reply(s, "CLIENT", "TRACKINGINFO") == {
        b"flags": [b"off"],
        b"redirect": -1,
        b"prefixes": [],
    }
    info = reply(s, "CLIENT", "INFO")
    assert isinstance(info, Verbatim) and " flags=eT " in info.text


def test_client_help_lists_served_subcommands() -> None:
    """CLIENT HELP uses Redis's header and footer and names the subcommands we serve."""
    lines = reply(session(), "CLIENT", "HELP")
    assert isinstance(lines, list)
    assert lines[0] == Simple(
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    )
    assert lines[-2:] == [Simple("HELP"), Simple("    Print this help.")]
    assert Simple("SETINFO") in lines and Simple("KILL") in lines
    assert Simple("PAUSE") not in lines


# -- CONFIG -----------------------------------------------------------------------------------


def test_config_get_globs_over_parameter_names() -> None:
    """CONFIG GET takes several patterns, globs case-insensitively, never repeats a name."""
    s = session()
    assert reply(s, "CONFIG", "GET", "maxmemory*") == {
        b"maxmemory": b"0",
        b"maxmemory-policy": b"noeviction",
    }
    assert reply(s, "CONFIG", "GET", "APPEND*", "appendonly") == {
        b"appendfsync": b"always",
        b"appendonly": b"yes",
    }
    everything = reply(s, "CONFIG", "GET", "*")
    assert isinstance(everything, dict)
    assert everything[b"databases"] == b"16" and everything[b"port"] == b"6399"
    assert everything[b"dir"] == b"/var/lib/minidb" and everything[b"timeout"] == b"30"
    assert b"requirepass" not in everything
    assert reply(s, "CONFIG", "GET", "nosuch") == {}
    assert reply(s, "CONFIG", "GET") == err(
        "ERR wrong number of arguments for 'config|get' command"
    )


def test_config_set_resetstat_rewrite() -> None:
    """Parameters are fixed: the value they have is OK, anything else Redis's errors."""
    s = session()
    assert reply(s, "CONFIG", "SET", "save", "") == OK
    assert reply(s, "CONFIG", "SET", "appendonly", "no") == err(
        "ERR CONFIG SET failed (possibly related to argument 'appendonly') - "
        "can't set immutable config"
    )
    assert reply(s, "CONFIG", "SET", "save", "", "nosuch", "1") == err(
        "ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'"
    )
    assert reply(s, "CONFIG", "SET", "a", "b", "c") == err("ERR syntax error")
    assert reply(s, "CONFIG", "SET", "save") == err(
        "ERR wrong number of arguments for 'config|set' command"
    )
    result = reply(s, "CONFIG", "RESETSTAT")
    assert isinstance(result, ErrorReply) and result.code == "ERR"
    assert reply(s, "CONFIG", "REWRITE") == err("ERR The server is running without a config file")
    assert reply(s, "CONFIG", "FROB") == err("ERR unknown subcommand 'FROB'. Try CONFIG HELP.")


# -- COMMAND ----------------------------------------------------------------------------------


def test_command_count_info_and_bare_command() -> None:
    """COMMAND lists every top-level command as Redis's 10-element entry; COUNT matches."""
    s = session()
    table = CommandTable.default()
    everything = reply(s, "COMMAND")
    assert isinstance(everything, list) and len(everything) == len(table)
    assert reply(s, "COMMAND", "COUNT") == len(table)
    get, missing, setname = reply(s, "COMMAND", "INFO", "get", "nosuch", "CLIENT|SETNAME")  # type: ignore[misc]
    assert get == [
        b"get",
        2,
        [Simple("readonly"), Simple("fast")],
        1,
        1,
        1,
        [Simple("@string"), Simple("@read"), Simple("@fast")],
        [],
        [
            {
                b"flags": [Simple("RO")],
                b"begin_search": {b"type": b"index", b"spec": {b"index": 1}},
                b"find_keys": {
                    b"type": b"range",
                    b"spec": {b"lastkey": 0, b"keystep": 1, b"limit": 0},
                },
            }
        ],
        [],
    ]
    assert missing is None
    assert isinstance(setname, list) and setname[:2] == [b"client|setname", 3]
    mset = reply(s, "COMMAND", "INFO", "mset")
    assert isinstance(mset, list) and isinstance(mset[0], list)
    assert mset[0][3:6] == [1, -1, 2]
    client = reply(s, "COMMAND", "INFO", "client")
    assert isinstance(client, list) and isinstance(client[0], list)
    assert len(client[0][9]) == len(table.top(b"client").subcommands)  # type: ignore[union-attr, arg-type]


def test_command_info_with_a_huge_argument_count() -> None:
    """COMMAND INFO with 100k names answers 100k nulls promptly and the session stays usable."""
    s = session()
    started = time.perf_counter()
    result = reply(s, "COMMAND", "INFO", *([b"\xff" * 200] * 100_000))
    assert (
        isinstance(result, list) and len(result) == 100_000 and set(map(id, result)) == {id(None)}
    )
    assert time.perf_counter() - started < 5.0
    assert reply(s, "PING") == PONG


def test_command_list_and_filters() -> None:
    """COMMAND LIST names subcommands too; FILTERBY PATTERN globs, ACLCAT uses categories."""
    s = session()
    names = reply(s, "COMMAND", "LIST")
    assert isinstance(names, list) and b"client|setinfo" in names and b"get" in names
    assert reply(s, "COMMAND", "LIST", "FILTERBY", "PATTERN", "client|set*") == [
        b"client|setinfo",
        b"client|setname",
    ]
    strings = reply(s, "COMMAND", "LIST", "FILTERBY", "ACLCAT", "string")
    assert isinstance(strings, list) and b"get" in strings and b"del" not in strings
    assert reply(s, "COMMAND", "LIST", "FILTERBY", "MODULE", "json") == []
    assert reply(s, "COMMAND", "LIST", "FILTERBY", "COLOUR", "x") == err("ERR syntax error")
    assert reply(s, "COMMAND", "DOCS", "get", "nosuch") == {
        b"get": {
            b"summary": b"Returns the string value of a key.",
            b"since": b"1.0.0",
            b"group": b"string",
        }
    }


def test_command_table_can_be_replaced_by_the_engine_table() -> None:
    """A table built from other data specs routes, checks arity and reports only those."""
    from minidb.server.resp._commands_meta import CONNECTION_COMMANDS, CommandSpec

    table = CommandTable((*CONNECTION_COMMANDS, CommandSpec("frob", 3, ("write",))))
    s = RespSession(1, SessionConfig(facts=FACTS, commands=table))
    assert s.handle([b"FROB", b"a", b"b"], Env()) == Forward([b"FROB", b"a", b"b"], b"0", 2)
    assert reply(s, "GET", "k") == err("ERR unknown command 'GET', with args beginning with: 'k' ")
    assert reply(s, "FROB") == err("ERR wrong number of arguments for 'frob' command")
    with pytest.raises(ValueError, match="twice"):
        CommandTable((*CONNECTION_COMMANDS, CommandSpec("ping", 1)))


# -- INFO -------------------------------------------------------------------------------------

SNAP = InfoSnapshot(
    uptime_s=90061.5,
    unix_time_us=1_700_000_000_250_000,
    connected_clients=3,
    used_memory=1536,
    total_connections_received=10,
    total_commands_processed=99,
    keyspace_hits=5,
    keyspace_misses=2,
    buckets=(
        BucketStats(b"users", 4, 1),
        BucketStats(b"10", 1),
        BucketStats(b"2", 7, 2),
        BucketStats(b"a:b", 1),
        BucketStats(b"empty", 0),
    ),
    commands=(CommandStats("get", 4, 10), CommandStats("set", 0)),
)


def info_text(*sections: str) -> str:
    result = reply(session(), "INFO", *sections, env=Env(snap=SNAP))
    assert isinstance(result, Verbatim) and result.format == "txt"
    return result.text


def test_info_default_sections_in_redis_order() -> None:
    """INFO shows Redis's default sections in Redis's order, CRLF lines, blank between."""
    text = info_text()
    headers = [line for line in text.split("\r\n") if line.startswith("#")]
    assert headers == [
        "# Server", "# Clients", "# Memory", "# Persistence", "# Stats", "# Replication",
        "# CPU", "# Modules", "# Errorstats", "# Cluster", "# Keyspace",
    ]  # fmt: skip
    assert "\r\n\r\n# Clients\r\n" in text and text.endswith("\r\n") and "\n\n" not in text
    assert "redis_version:7.2.0\r\n" in text and "minidb_version:0.9.0\r\n" in text
    for line in ("arch_bits:64", "cluster_enabled:0", "role:master", "connected_clients:3",
                 "used_memory:1536", "used_memory_human:1.50K", "aof_enabled:1",
                 "uptime_in_days:1", "tcp_port:6399", "process_id:4242"):  # fmt: skip
        assert line + "\r\n" in text, line
    assert "cmdstat_" not in text


def test_info_keyspace_lines_per_bucket() -> None:
    """Numbered buckets first by number, then names; empty ones omitted; ':' escaped."""
    assert info_text("keyspace") == (
        "# Keyspace\r\n"
        "db2:keys=7,expires=2,avg_ttl=0\r\n"
        "db10:keys=1,expires=0,avg_ttl=0\r\n"
        "dba%3Ab:keys=1,expires=0,avg_ttl=0\r\n"
        "dbusers:keys=4,expires=1,avg_ttl=0\r\n"
    )


def test_info_all_everything_and_explicit_sections() -> None:
    """all/everything add commandstats; names are case-insensitive; unknown names show nothing."""
    for word in ("all", "everything", "ALL"):
        assert "cmdstat_get:calls=4,usec=10,usec_per_call=2.50,rejected_calls=0,failed_calls=0" in (
            info_text(word)
        )
    assert "cmdstat_set" not in info_text("commandstats")
    assert info_text("CLIENTS", "server").startswith("# Server\r\n")
    assert info_text("bogus") == ""
    assert info_text("cpu").startswith("# CPU\r\nused_cpu_sys:0.000000\r\n")


# -- MULTI / EXEC / DISCARD / WATCH -----------------------------------------------------------


def test_multi_exec_forwards_the_queue_as_one_transaction() -> None:
    """Commands after MULTI are +QUEUED and EXEC sends them, with their buckets, as one group."""
    s, owner = session(), FakeOwner()
    assert reply(s, "MULTI") == OK
    assert reply(s, "SET", "k", "v") == QUEUED
    assert reply(s, "PING") == QUEUED
    assert reply(s, "SELECT", "other") == QUEUED
    assert reply(s, "GET", "k") == QUEUED
    assert s.bucket == b"0"  # queued commands have not run yet
    tx = cmd(s, "EXEC")
    assert isinstance(tx, ForwardTransaction)
    assert tx.commands == (
        TransactionCommand([b"SET", b"k", b"v"], b"0"),
        TransactionCommand([b"GET", b"k"], b"other"),
    )
    assert tx.watch is None and s.bucket == b"other" and not s.in_multi
    assert owner.transaction(tx) == [OK, PONG, OK, None]


def test_exec_of_connection_commands_only_is_answered_locally() -> None:
    """MULTI PING ECHO EXEC needs no owner: the array comes back at once; empty is []."""
    s = session()
    reply(s, "MULTI")
    reply(s, "PING")
    reply(s, "ECHO", "e")
    assert reply(s, "EXEC") == [PONG, b"e"]
    reply(s, "MULTI")
    assert reply(s, "EXEC") == []


def test_multi_errors_nested_exec_discard_without_multi() -> None:
    """Redis's texts for nested MULTI, EXEC or DISCARD without MULTI; nesting does not doom."""
    s = session()
    assert reply(s, "EXEC") == err("ERR EXEC without MULTI")
    assert reply(s, "DISCARD") == err("ERR DISCARD without MULTI")
    reply(s, "MULTI")
    assert reply(s, "MULTI") == err("ERR MULTI calls can not be nested")
    assert reply(s, "PING") == QUEUED
    assert reply(s, "EXEC") == [PONG]


def test_discard_drops_the_queue_and_the_watch() -> None:
    """DISCARD answers OK, forgets the queue and unwatches."""
    s = session()
    assert isinstance(cmd(s, "WATCH", "k"), ForwardWatch)
    reply(s, "MULTI")
    reply(s, "SET", "k", "v")
    assert reply(s, "DISCARD") == OK
    assert not s.in_multi and s.watched_keys == 0
    assert cmd(s, "GET", "k") == Forward([b"GET", b"k"], b"0", 2)


def test_execabort_after_unknown_command_or_wrong_arity_in_multi() -> None:
    """A queued command that fails its checks dooms the transaction: EXEC is EXECABORT."""
    for bad in (("NOPE", "x"), ("GET",), ("CLIENT", "bogus")):
        s = session()
        reply(s, "MULTI")
        reply(s, "SET", "k", "v")
        assert isinstance(reply(s, *bad), ErrorReply)
        assert reply(s, "GET", "k") == QUEUED
        assert reply(s, "EXEC") == err(
            "EXECABORT Transaction discarded because of previous errors."
        )
        assert not s.in_multi
        assert reply(s, "EXEC") == err("ERR EXEC without MULTI")
        assert s.statistics().aborted == 1


def test_rejected_exec_inside_multi_is_execabort_with_its_reason() -> None:
    """EXEC with arguments inside MULTI: Redis's rejectCommand turns the arity error into
    ``EXECABORT Transaction discarded because of: <error>`` and discards the transaction."""
    s = session()
    reply(s, "MULTI")
    assert reply(s, "SET", "k", "v") == QUEUED
    assert reply(s, "EXEC", "now") == err(
        "EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command"
    )
    assert not s.in_multi and s.queued == 0
    assert reply(s, "EXEC") == err("ERR EXEC without MULTI")
    assert s.statistics().aborted == 1 and s.statistics().rejected == 1


def test_rejected_exec_drops_the_watch() -> None:
    """A rejected EXEC discards the transaction with its WATCH, as Redis's execCommandAbort
    does (the next transaction starts unwatched)."""
    s = session()
    assert isinstance(cmd(s, "WATCH", "k"), ForwardWatch)
    reply(s, "MULTI")
    reply(s, "EXEC", "x")
    assert s.watched_keys == 0
    reply(s, "MULTI")
    reply(s, "SET", "k", "v")
    action = cmd(s, "EXEC")
    assert isinstance(action, ForwardTransaction) and action.watch is None


def test_rejected_exec_outside_multi_is_execabort_too() -> None:
    """Redis answers any rejected EXEC with EXECABORT, in MULTI or not: before AUTH it is
    ``EXECABORT ... because of: NOAUTH Authentication required.``."""
    s = session(password=b"pw")
    assert reply(s, "EXEC") == err(
        "EXECABORT Transaction discarded because of: NOAUTH Authentication required."
    )
    assert reply(s, "MULTI") == err("NOAUTH Authentication required.")
    reply(s, "AUTH", "pw")
    assert reply(s, "EXEC", "a", "b") == err(
        "EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command"
    )


def test_a_transaction_longer_than_the_limit_is_doomed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Queuing past MAX_QUEUED_COMMANDS is refused and EXEC then answers EXECABORT."""
    monkeypatch.setattr(_resp_session, "MAX_QUEUED_COMMANDS", 3)
    s = session()
    reply(s, "MULTI")
    for _ in range(3):
        assert reply(s, "SET", "k", "v") == QUEUED
    result = reply(s, "SET", "k", "v")
    assert isinstance(result, ErrorReply) and result.message.startswith("ERR transaction too long")
    assert reply(s, "EXEC") == err("EXECABORT Transaction discarded because of previous errors.")


def test_client_list_id_answers_in_the_order_asked() -> None:
    """CLIENT LIST ID 8 7 8 lists 8, 7, 8 (Redis's order), skipping ids nobody has."""
    env = Env()
    s, other = session(client_id=7), session(client_id=8)
    env.open_sessions = [s, other]
    listing = reply(s, "CLIENT", "LIST", "ID", "8", "7", "99", "8", env=env)
    assert isinstance(listing, Verbatim)
    ids = [line.split()[0] for line in listing.text.splitlines()]
    assert ids == ["id=8", "id=7", "id=8"]


def test_reset_inside_multi_ends_it_and_drops_authentication() -> None:
    """RESET is not queued: it ends the transaction and forgets the AUTH at once."""
    s = session(password=b"pw")
    reply(s, "AUTH", "pw")
    reply(s, "MULTI")
    assert reply(s, "RESET") == Simple("RESET")
    assert not s.in_multi and not s.authenticated
    assert reply(s, "MULTI") == err("NOAUTH Authentication required.")


def test_watch_inside_multi_is_refused_without_dooming() -> None:
    """WATCH inside MULTI is Redis's error, and the transaction still runs."""
    s = session()
    reply(s, "MULTI")
    assert reply(s, "WATCH", "k") == err("ERR WATCH inside MULTI is not allowed")
    reply(s, "PING")
    assert reply(s, "EXEC") == [PONG]


def test_watch_then_untouched_key_executes() -> None:
    """WATCH registers with the owner; nothing touched the key, so EXEC runs."""
    s, owner = session(), FakeOwner()
    watch = cmd(s, "WATCH", "k", "j")
    assert isinstance(watch, ForwardWatch) and watch.keys == (b"k", b"j") and watch.bucket == b"0"
    assert owner.watch(watch) == OK
    assert s.watched_keys == 2
    reply(s, "MULTI")
    reply(s, "SET", "k", "1")
    tx = cmd(s, "EXEC")
    assert isinstance(tx, ForwardTransaction) and tx.watch is watch.watch
    assert owner.transaction(tx) == [OK]
    assert s.watched_keys == 0


def test_watch_then_touched_key_aborts_with_null_array() -> None:
    """Another client writing a watched key between WATCH and EXEC makes EXEC a null array."""
    s, owner = session(), FakeOwner()
    watch = cmd(s, "WATCH", "k")
    assert isinstance(watch, ForwardWatch)
    owner.watch(watch)
    owner.write(b"0", b"k", b"other client")
    reply(s, "MULTI")
    reply(s, "SET", "k", "mine")
    tx = cmd(s, "EXEC")
    assert isinstance(tx, ForwardTransaction)
    assert owner.transaction(tx) is NULL_ARRAY
    assert owner.data[(b"0", b"k")] == b"other client"


def test_watch_with_only_connection_commands_still_asks_the_owner() -> None:
    """MULTI PING EXEC under a WATCH must reach the owner, which alone knows if it is dirty."""
    s, owner = session(), FakeOwner()
    watch = cmd(s, "WATCH", "k")
    assert isinstance(watch, ForwardWatch)
    owner.watch(watch)
    reply(s, "MULTI")
    reply(s, "PING")
    tx = cmd(s, "EXEC")
    assert isinstance(tx, ForwardTransaction) and tx.commands == ()
    assert owner.transaction(tx) == [PONG]
    owner.write(b"0", b"k", b"x")  # the finished watch is no longer anyone's concern
    assert tx.watch is not None and tx.watch.dirty


def test_unwatch_starts_a_fresh_watch() -> None:
    """After UNWATCH an earlier registration cannot abort a later transaction."""
    s, owner = session(), FakeOwner()
    first = cmd(s, "WATCH", "k")
    assert isinstance(first, ForwardWatch)
    owner.watch(first)
    assert reply(s, "UNWATCH") == OK and s.watched_keys == 0
    owner.write(b"0", b"k", b"x")
    reply(s, "MULTI")
    reply(s, "GET", "k")
    tx = cmd(s, "EXEC")
    assert isinstance(tx, ForwardTransaction) and tx.watch is None
    assert owner.transaction(tx) == [b"x"]
    second = cmd(s, "WATCH", "j")
    assert isinstance(second, ForwardWatch) and second.watch is not first.watch


def test_assemble_checks_the_owner_answered_every_command() -> None:
    """A result list of the wrong length is a bug in the owner, not a reply."""
    tx = ForwardTransaction((TransactionCommand([b"GET", b"k"], b"0"),), None, 2)
    with pytest.raises(ValueError, match="1 commands"):
        tx.assemble([])


# -- QUIT, RESET --------------------------------------------------------------------------------


def test_quit_replies_ok_then_nothing_pipelined_after_it_runs() -> None:
    """QUIT is +OK then close; commands already read behind it are never run or answered."""
    s = session()
    assert cmd(s, "QUIT") == ReplyAndClose(OK, 2)
    assert cmd(s, "SET", "k", "v") == NoReply()
    assert cmd(s, "QUIT") == NoReply()
    assert s.statistics().forwarded == 0


def test_quit_inside_multi_runs_at_once() -> None:
    """QUIT is not queued by MULTI (Redis runs it immediately)."""
    s = session()
    reply(s, "MULTI")
    assert cmd(s, "QUIT") == ReplyAndClose(OK, 2)


def test_reset_restores_a_fresh_connection() -> None:
    """RESET: protocol 2, bucket 0, no name, no transaction or watch; answers +RESET in RESP2."""
    s = session()
    reply(s, "HELLO", "3", "SETNAME", "n")
    reply(s, "SELECT", "9")
    cmd(s, "WATCH", "k")
    reply(s, "MULTI")
    assert cmd(s, "RESET") == Reply(Simple("RESET"), 2)
    assert (s.protocol, s.bucket, s.name, s.in_multi, s.watched_keys) == (2, b"0", None, False, 0)


def test_statistics_count_what_the_session_did() -> None:
    """statistics() counts commands, rejections, forwards and transactions."""
    s = session()
    cmd(s, "GET", "k")
    cmd(s, "NOPE")
    reply(s, "MULTI")
    cmd(s, "SET", "k", "v")
    cmd(s, "EXEC")
    stats = s.statistics()
    assert (stats.commands, stats.rejected, stats.forwarded, stats.transactions) == (5, 1, 2, 1)


# -- glob ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        (b"*", b"", True),
        (b"max*", b"maxmemory-policy", True),
        (b"m?xmemory", b"maxmemory", True),
        (b"[a-c]ppendonly", b"appendonly", True),
        (b"[^a]ppendonly", b"appendonly", False),
        (b"\\*", b"*", True),
        (b"\\*", b"a", False),
        (b"APPEND*", b"appendfsync", True),
        (b"*only", b"appendonly", True),
        (b"*onlyx", b"appendonly", False),
        (b"a*b*c", b"aXbYc", True),
        (b"a*b*c", b"aXbY", False),
    ],
)
def test_glob_matches_like_redis(pattern: bytes, text: bytes, expected: bool) -> None:
    """Redis's glob: * ? [a-c] [^a] and backslash escapes, case-insensitive."""
    assert glob_match(pattern, text) is expected


def test_glob_is_not_exponential_on_hostile_patterns() -> None:
    """``*a*a*...*b`` against a long run of a's finishes quickly (no backtracking blow-up)."""
    started = time.perf_counter()
    assert not glob_match(b"*a" * 40 + b"*b", b"a" * 1000)
    assert time.perf_counter() - started < 2.0
    assert not glob_match(b"*" * 5000, b"x")  # over MAX_PATTERN_BYTES: matches nothing
