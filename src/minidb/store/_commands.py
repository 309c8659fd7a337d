"""The command engine: the table of Redis commands and ``execute``, protocol-neutral.

``execute(keyspace, session, argv, journal, now_ms)`` runs one command (``argv[0]`` its name,
any case) against the keyspace and returns its result (``_results``); what it changed is in
``journal`` as one closed group of ops, the group the owner writes to the log as one record.
The owner runs commands one at a time, so each is atomic; ``execute_transaction`` runs an
``EXEC``'s queued commands back to back as one group.

MULTI/EXEC, as a connection drives it:

1. ``MULTI``: the connection starts queueing. Each queued ``argv`` is checked with
   ``validate`` (unknown command, wrong arity); an error there is answered at once and makes
   the later ``EXEC`` fail with ``EXECABORT``, as in Redis. Otherwise it is answered
   ``QUEUED``.
2. ``EXEC``: the queued argvs go to the owner as ONE message, which calls
   ``execute_transaction``. If the session's WATCH saw a change since ``WATCH``, it returns
   None (the null reply) and runs nothing. Otherwise every command runs in order with nothing
   in between (the owner serves nobody else meanwhile), each result is kept (an error is the
   command's result; the others still run, as in Redis), and all changes form one journal
   group: one log record, replayed all or nothing.
3. Either way the session's WATCH is dropped (``UNWATCH``'s job too, and ``DISCARD``'s).

Time: one ``now_ms`` serves a whole command or transaction, like Redis's command time
snapshot, so ``SET k v PX 10`` then ``PTTL k`` in one EXEC answers exactly 10.
"""

from __future__ import annotations

import logging

from minidb.store import (
    _hashes,
    _keys,
    _lists,
    _pubsub,
    _sets,
    _streams,
    _strings,
    _zsets,
    scripting,
)
from minidb.store._args import Command, Session
from minidb.store._blocking import WouldBlock
from minidb.store._journal import OpJournal
from minidb.store._keyspace import MAX_KEY_BYTES, Keyspace
from minidb.store._results import OK, CommandError, ErrorReply, Result, wrong_arity

COMMANDS: dict[bytes, Command] = {
    cmd.name.encode(): cmd
    for cmd in (
        *_strings.COMMANDS, *_keys.COMMANDS, *_hashes.COMMANDS, *_sets.COMMANDS,
        *_lists.COMMANDS, *_zsets.COMMANDS, *_pubsub.COMMANDS, *_streams.COMMANDS,
        *scripting.COMMANDS,
    )
}  # fmt: skip
"""Lower-case name -> command."""

INTERNAL_ERROR = "ERR internal error in '{name}': nothing of it was applied (see the server log)"
"""The reply to a command whose handler raised: a bug, logged with its traceback."""

logger = logging.getLogger("minidb.store")

MAX_QUOTED_CHARS = 128
"""How much of an unknown command and its arguments its error quotes (Redis's ``%.128s``)."""


def lookup_command(name: bytes) -> Command | None:
    """The command called ``name`` (any case), or None."""
    return COMMANDS.get(name.lower())


def _unknown(argv: list[bytes]) -> ErrorReply:
    quoted = ""
    for arg in argv[1:]:
        if len(quoted) >= MAX_QUOTED_CHARS:
            break
        room = MAX_QUOTED_CHARS - len(quoted)
        quoted += f"'{arg.decode('utf-8', 'replace')[:room]}' "
    name = argv[0][:MAX_QUOTED_CHARS].decode("utf-8", "replace")
    text = f"ERR unknown command '{name}', with args beginning with: {quoted}"
    return ErrorReply(text.replace("\r", " ").replace("\n", " "))


def validate(argv: list[bytes]) -> ErrorReply | None:
    """The error a command gets before it runs (unknown, wrong arity), or None if it can run."""
    if not argv:
        return ErrorReply("ERR empty command")
    cmd = COMMANDS.get(argv[0].lower())
    if cmd is None:
        return _unknown(argv)
    arity = cmd.arity
    if (arity > 0 and len(argv) != arity) or len(argv) < -arity:
        return ErrorReply(wrong_arity(cmd.name))
    return None


def _run(
    ks: Keyspace, session: Session, argv: list[bytes], journal: OpJournal, now_ms: int
) -> Result:
    cmd = COMMANDS.get(argv[0].lower()) if argv else None
    if cmd is None or (cmd.arity > 0 and len(argv) != cmd.arity) or len(argv) < -cmd.arity:
        refused = validate(argv)
        assert refused is not None
        return refused
    try:
        return _handle(cmd, ks, session, argv, journal, now_ms)
    except CommandError as exc:
        # Handlers check before they change anything, so an error leaves no partial change.
        return exc.reply


def _handle(
    cmd: Command, ks: Keyspace, session: Session, argv: list[bytes], journal: OpJournal,
    now_ms: int,
) -> Result:
    """``cmd``'s handler, contained: it raises only ``CommandError`` (a reply)."""
    mark = journal.mark()
    try:
        return cmd.handler(ks, session, argv, journal, now_ms)
    except CommandError:
        raise
    except Exception:
        # A bug in a handler (whatever a client sent) must cost that one command, not the
        # owner: an exception escaping here would end the owner task, and with it the store
        # for every client. What the command changed before it raised is taken back (its
        # undo entries and its ops, nothing earlier in the group), so the log and the
        # keyspace agree and nothing half-done is acknowledged.
        ks.rollback_to(journal, mark)
        logger.exception("command_failed command=%r", cmd.name)
        return ErrorReply(INTERNAL_ERROR.format(name=cmd.name))


_GET_NAMES = frozenset({b"GET", b"get"})
_SET_NAMES = frozenset({b"SET", b"set"})
"""The spellings of GET and SET that ``execute`` runs inline (clients send one of these)."""


def execute(
    ks: Keyspace, session: Session, argv: list[bytes], journal: OpJournal, now_ms: int
) -> Result:
    """Run one command; its changes become one group of ``journal.records``."""
    ks.sync_clock(now_ms)
    # The plain GET and SET, most of any workload, inline: the same calls their handlers make
    # (``_strings.get``, ``_strings.set_`` without options), without the table lookup, the
    # arity check and the handler call. Anything else takes the general route below.
    size = len(argv)
    if size == 2 and argv[0] in _GET_NAMES:
        try:
            result: Result = ks.get(session.bucket, argv[1], now_ms, journal)
        except CommandError as exc:  # WRONGTYPE: the key holds a container
            result = exc.reply
    elif size == 3 and argv[0] in _SET_NAMES:
        key, value = argv[1], argv[2]
        if len(key) > MAX_KEY_BYTES or len(value) > ks.max_value_bytes:
            return _run(ks, session, argv, journal, now_ms)  # its error, as the handler words it
        ks.put_command(session.bucket, key, value, journal)  # closes its group
        return OK
    else:
        result = _run(ks, session, argv, journal, now_ms)
    journal.close_group()
    return result


BLOCKING: frozenset[bytes] = frozenset(
    name for name, cmd in COMMANDS.items() if "blocking" in cmd.flags
)
"""Lower-case names of the commands that may block (BLPOP...; see ``_blocking``)."""


def execute_blocking(
    ks: Keyspace, session: Session, argv: list[bytes], journal: OpJournal, now_ms: int
) -> Result | WouldBlock:
    """``execute`` for a connection's lone blocking command: what would block comes back as
    its ``WouldBlock`` (``execute`` answers it with the reply Redis gives in MULTI)."""
    ks.sync_clock(now_ms)
    cmd = COMMANDS.get(argv[0].lower())
    refused = validate(argv)
    result: Result | WouldBlock
    if cmd is None or refused is not None:
        result = refused
    else:
        try:
            result = _handle(cmd, ks, session, argv, journal, now_ms)
        except WouldBlock as exc:
            result = exc
        except CommandError as exc:
            result = exc.reply
    journal.close_group()
    return result


def execute_transaction(
    ks: Keyspace,
    session: Session,
    queued: list[list[bytes]],
    journal: OpJournal,
    now_ms: int,
) -> list[Result] | None:
    """Run an EXEC: None if a watched key changed, else every queued command's result; all
    their changes form one group of ``journal.records`` (see the module docstring)."""
    watch = session.watch
    if watch is not None:
        ks.unwatch(watch)
        session.watch = None
        if watch.dirty:
            return None
    ks.sync_clock(now_ms)
    results = [_run(ks, session, argv, journal, now_ms) for argv in queued]
    journal.close_group()
    return results
