"""``CLIENT``: the subcommands that read and set one connection's own attributes.

What is served: ID, GETNAME/SETNAME (Redis's name rules: bytes ``!``..``~`` only, empty
clears), SETINFO LIB-NAME/LIB-VER, INFO and LIST (Redis's line format), NO-EVICT and
NO-TOUCH (accepted: minidb never evicts and keeps no access times), GETREDIR/TRACKINGINFO
(tracking is always off), TRACKING OFF and REPLY ON (the only modes there are), HELP,
UNBLOCK (ends another connection's BLPOP and the like: ``store._blocking``) and KILL (below).
Not served, with an error that says so: TRACKING ON (no invalidation messages), REPLY
OFF/SKIP. PAUSE and UNPAUSE are not in the table, so they get Redis's ``unknown subcommand``
error.

KILL is Redis 7's ``clientKillCommand``: the old form ``KILL <ip:port>`` (``+OK`` or ``No such
client``; it may kill the caller itself) and the filters ``ID``, ``ADDR``, ``LADDR``, ``USER``,
``TYPE``, ``SKIPME`` and ``MAXAGE`` (7.4), which answer how many were killed. The parsing and
matching are pure (``parse_kill``, ``kill_matches``); closing is the connection's, through the
session's ``close_connection`` hook: the target runs nothing more, its wait (BLPOP...) and its
subscriptions end at once, and it closes once the replies it was already owed are written.
Killing the caller is Redis's ``CLIENT_CLOSE_AFTER_REPLY``: its own reply is still sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from minidb.server.resp._commands_meta import help_lines
from minidb.server.resp._errors import BAD_CLIENT_NAME, SYNTAX, one_line, printable, text
from minidb.server.resp._types import OK, ErrorReply, Result, Verbatim, parse_integer

if TYPE_CHECKING:
    from minidb.server.resp._session import RespSession, SessionEnv

_CLIENT_TYPES = (b"normal", b"master", b"replica", b"slave", b"pubsub")
UNBLOCKED_ERROR = b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"
"""What ``CLIENT UNBLOCK <id> ERROR`` answers the blocked client (Redis's words)."""


def is_blocked(session: RespSession) -> bool:
    """Whether the session's connection waits in a blocking command (BLPOP...) now."""
    return bool(getattr(session.owner_side, "blocked", False))


def client_info_line(session: RespSession, now: float) -> str:
    """One connection's line of ``CLIENT LIST`` / ``CLIENT INFO``, in Redis's field order.

    ``db`` is the selected bucket when it is a number (redis-py parses it as an integer) and
    -1 otherwise; the extra ``bucket`` field always names it. Buffer sizes are not tracked
    here and read 0.
    """
    flags = "".join(
        flag
        for flag, on in (
            ("P", session.pubsub.subscribed(session.subscriber)),
            ("b", is_blocked(session)),
            ("x", session.in_multi),
            ("c", session.closing),
            ("e", session.no_evict),
            ("T", session.no_touch),
        )
        if on
    )
    bucket = session.bucket.decode()
    sub, psub, ssub = session.subscriptions
    return (
        f"id={session.id} addr={session.addr} laddr={session.laddr} fd=-1 "
        f"name={text(session.name or b'')} age={max(0, int(now - session.created_at))} "
        f"idle={max(0, int(now - session.last_interaction))} flags={flags or 'N'} "
        f"db={bucket if bucket.isdigit() else -1} sub={sub} psub={psub} ssub={ssub} "
        f"multi={session.queued if session.in_multi else -1} "
        "qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 "
        f"events=r cmd={session.last_command} user=default redir=-1 resp={session.protocol} "
        f"lib-name={text(session.lib_name or b'')} lib-ver={text(session.lib_ver or b'')} "
        f"bucket={bucket}"
    )


def client_command(session: RespSession, argv: list[bytes], env: SessionEnv) -> Result:
    """``CLIENT <subcommand>``; the table has checked the subcommand and its arity."""
    sub = argv[1].lower()
    if sub == b"id":
        return session.id
    if sub == b"getname":
        return session.name
    if sub == b"setname":
        if not printable(argv[2]):
            return BAD_CLIENT_NAME
        session.name = argv[2] or None
        return OK
    if sub == b"setinfo":
        return _setinfo(session, argv[2], argv[3])
    if sub == b"info":
        return Verbatim(client_info_line(session, env.unix_time()) + "\n")
    if sub == b"list":
        return _list(argv, env)
    if sub in (b"no-evict", b"no-touch", b"reply", b"tracking"):
        return _switch(session, sub, argv)
    if sub == b"getredir":
        return -1
    if sub == b"unblock":
        return _unblock(argv, env)
    if sub == b"kill":
        return _kill(session, argv, env)
    if sub == b"trackinginfo":
        return {b"flags": [b"off"], b"redirect": -1, b"prefixes": []}
    container = session.config.commands.top(b"client")
    assert container is not None
    return help_lines(container)


def _unblock(argv: list[bytes], env: SessionEnv) -> Result:
    """Redis's ``CLIENT UNBLOCK <id> [TIMEOUT|ERROR]``: 1 if that client was blocked (it is
    answered its timeout reply, or the UNBLOCKED error), else 0."""
    if len(argv) > 4:
        return one_line(
            b"ERR unknown subcommand or wrong number of arguments for '" + argv[1][:128]
            + b"'. Try CLIENT HELP."
        )
    error = False
    if len(argv) == 4:
        how = argv[3].lower()
        if how not in (b"timeout", b"error"):
            return ErrorReply("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
        error = how == b"error"
    wanted = parse_integer(argv[2])
    if wanted is None:
        return ErrorReply("ERR value is not an integer or out of range")
    target = next((s for s in env.sessions() if s.id == wanted), None)
    if target is None or not is_blocked(target):
        return 0
    side: Any = target.owner_side  # the connection's OwnerSide (server.resp._executor)
    return int(side.unblock(UNBLOCKED_ERROR if error else side.waiter.timed_out))


KILL_USER = b"default"
"""The one user there is (``AUTH default``): ``KILL USER default`` matches every client."""


@dataclass(frozen=True, slots=True)
class KillFilter:
    """What ``CLIENT KILL`` matches: every field that is set must match (Redis's AND)."""

    addr: bytes | None = None
    laddr: bytes | None = None
    kind: bytes | None = None
    """``normal``, ``pubsub``, ``master`` or ``replica`` (``slave`` is read as ``replica``)."""
    client_id: int | None = None
    max_age: int | None = None
    """Only clients connected at least this many seconds."""
    skip_me: bool = True
    old_form: bool = False
    """``CLIENT KILL <ip:port>``: answers ``+OK`` or ``No such client``, and may kill the
    caller."""


def parse_kill(argv: list[bytes]) -> KillFilter | ErrorReply:
    """``CLIENT KILL``'s arguments (``argv[2:]``) as Redis 7.4's ``clientKillCommand`` reads
    them, with its errors: an option without a value, or an unknown one, is a syntax error."""
    if len(argv) == 3:
        return KillFilter(addr=argv[2], skip_me=False, old_form=True)
    if len(argv) < 3:
        return SYNTAX
    fields: dict[str, Any] = {}
    for i in range(2, len(argv), 2):
        if i + 1 >= len(argv):
            return SYNTAX
        option, value = argv[i].lower(), argv[i + 1]
        if option == b"id":
            wanted = parse_integer(value)
            if wanted is None or wanted < 1:
                return ErrorReply("ERR client-id should be greater than 0")
            fields["client_id"] = wanted
        elif option == b"maxage":
            age = parse_integer(value)
            if age is None:
                return ErrorReply("ERR maxage is not an integer or out of range")
            if age <= 0:
                return ErrorReply("ERR maxage should be greater than 0")
            fields["max_age"] = age
        elif option == b"type":
            kind = value.lower()
            if kind not in _CLIENT_TYPES:
                return one_line(b"ERR Unknown client type '" + value + b"'")
            fields["kind"] = b"replica" if kind == b"slave" else kind
        elif option in (b"addr", b"laddr"):
            fields[option.decode()] = value
        elif option == b"user":
            if value != KILL_USER:
                return one_line(b"ERR No such user '" + value + b"'")
        elif option == b"skipme" and value.lower() in (b"yes", b"no"):
            fields["skip_me"] = value.lower() == b"yes"
        else:
            return SYNTAX
    return KillFilter(**fields)


def client_kind(session: RespSession) -> bytes:
    """Redis's ``getClientType`` as a name: a subscriber is ``pubsub``; there are no
    replicas or masters among RESP sessions."""
    return b"pubsub" if session.pubsub.subscribed(session.subscriber) else b"normal"


def kill_matches(wanted: KillFilter, target: RespSession, killer: RespSession, now: float) -> bool:
    """Whether ``CLIENT KILL`` with ``wanted``, sent by ``killer`` at ``now``, kills
    ``target`` (a client already killed is gone: it matches nothing)."""
    if target.closing:
        return False
    if wanted.addr is not None and target.addr.encode() != wanted.addr:
        return False
    if wanted.laddr is not None and target.laddr.encode() != wanted.laddr:
        return False
    if wanted.kind is not None and client_kind(target) != wanted.kind:
        return False
    if wanted.client_id is not None and target.id != wanted.client_id:
        return False
    if target is killer and wanted.skip_me:
        return False
    return wanted.max_age is None or int(now - target.created_at) >= wanted.max_age


def _kill(session: RespSession, argv: list[bytes], env: SessionEnv) -> Result:
    wanted = parse_kill(argv)
    if isinstance(wanted, ErrorReply):
        return wanted
    now = env.unix_time()
    killed = [s for s in env.sessions() if kill_matches(wanted, s, session, now)]
    for target in killed:
        target.closing = True  # runs nothing more, from its next command on
        if target.close_connection is not None:
            target.close_connection()
    if wanted.old_form:
        return OK if killed else ErrorReply("ERR No such client")
    return len(killed)


def _setinfo(session: RespSession, attr: bytes, value: bytes) -> Result:
    which = attr.lower()
    if which not in (b"lib-name", b"lib-ver"):
        return one_line(b"ERR Unrecognized option '" + attr + b"'")
    if not printable(value):
        # Redis names the attribute as the client spelled it.
        return one_line(b"ERR " + attr + b" cannot contain spaces, newlines or special characters.")
    if which == b"lib-name":
        session.lib_name = value or None
    else:
        session.lib_ver = value or None
    return OK


def _list(argv: list[bytes], env: SessionEnv) -> Result:
    sessions = list(env.sessions())
    if len(argv) == 4 and argv[2].lower() == b"type":
        kind = argv[3].lower()
        if kind not in _CLIENT_TYPES:
            return one_line(b"ERR Unknown client type '" + argv[3] + b"'")
        if kind in (b"normal", b"pubsub"):  # a subscriber is of type pubsub (Redis)
            wanted = kind == b"pubsub"
            sessions = [s for s in sessions if s.pubsub.subscribed(s.subscriber) is wanted]
        else:
            sessions = []  # no replicas
    elif len(argv) > 3 and argv[2].lower() == b"id":
        ids = [parse_integer(arg) for arg in argv[3:]]
        if None in ids:
            return ErrorReply("ERR Invalid client ID")
        # Redis answers in the order asked, once per id given; a dict keeps this linear.
        by_id = {s.id: s for s in sessions}
        sessions = [by_id[i] for i in ids if i in by_id]
    elif len(argv) != 2:
        return SYNTAX
    now = env.unix_time()
    return Verbatim("".join(client_info_line(s, now) + "\n" for s in sessions))


def _switch(session: RespSession, sub: bytes, argv: list[bytes]) -> Result:
    mode = argv[2].lower()
    if sub == b"tracking":
        if mode == b"off" and len(argv) == 3:
            return OK
        if mode in (b"on", b"off"):
            return ErrorReply("ERR client-side caching (CLIENT TRACKING) is not supported")
        return SYNTAX
    if sub == b"reply":
        if mode == b"on":
            return OK
        if mode in (b"off", b"skip"):
            return ErrorReply("ERR CLIENT REPLY OFF and SKIP are not supported")
        return SYNTAX
    if mode not in (b"on", b"off"):
        return SYNTAX
    if sub == b"no-evict":
        session.no_evict = mode == b"on"
    else:
        session.no_touch = mode == b"on"
    return OK
