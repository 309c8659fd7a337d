"""``CLIENT``: the subcommands that read and set one connection's own attributes.

What is served: ID, GETNAME/SETNAME (Redis's name rules: bytes ``!``..``~`` only, empty
clears), SETINFO LIB-NAME/LIB-VER, INFO and LIST (Redis's line format), NO-EVICT and
NO-TOUCH (accepted: minidb never evicts and keeps no access times), GETREDIR/TRACKINGINFO
(tracking is always off), TRACKING OFF and REPLY ON (the only modes there are), HELP, and
UNBLOCK (ends another connection's BLPOP and the like: ``store._blocking``). Not served, with
an error that says so: TRACKING ON (no invalidation messages), REPLY OFF/SKIP. KILL, PAUSE and
UNPAUSE act on other connections and are not in the table, so they get Redis's ``unknown
subcommand`` error.
"""

from __future__ import annotations

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
