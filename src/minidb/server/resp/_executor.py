"""How the data owner runs a RESP connection's data commands: ``RespExecutor``.

A RESP connection hands the owner batches of ``OwnerRequest``s (one per forwarded command: a
``Forward`` as its session decided on it, which carries the connection's ``OwnerSide``, or a
``RespRequest`` around a ``ForwardWatch`` or a ``ForwardTransaction``) together with the
server's one ``RespExecutor``. The owner knows nothing of RESP: per request it calls
``execute(state, request, journal, now_ms)`` and gets the reply in wire form; after a failed
log write it asks ``is_write`` and answers writes with ``refusal``. The executor runs the store's
command engine (``store._commands``) on the shared keyspace (``state.keyspace``) and encodes
the result with the RESP encoder in the protocol the action carries (fixed when the session
handled the command, so a pipelined ``HELLO 3`` does not change an earlier reply).

Per-connection state the owner keeps. Each connection has one ``OwnerSide``: the store's
``Session`` (selected bucket, protocol, the keyspace ``Watch``) and the session's ``WatchSet``
that watch belongs to. Only the owner touches it. The RESP session never tells the owner about
``UNWATCH``/``DISCARD``: it replaces its ``WatchSet`` instead, and the owner, on the next
``WATCH`` or ``EXEC`` carrying a different (or no) ``WatchSet``, drops the stale keyspace watch
first. A closing connection sends one last ``UNWATCH`` request (``unwatch_request``) so the
keyspace forgets its keys.

Blocking commands (BLPOP...) come as a ``RespRequest`` around a ``BlockingCall``, the last
request of their batch (the connection sends nothing after one until it is answered). One that
finds nothing to serve is answered ``Blocked``: its ``Waiter`` runs the command again when a key
it waits on is ready (Redis 7 re-executes it too), with the session's bucket and protocol of
the call, and the owner holds its reply until then (``store._blocking``). ``side.waiter`` is
the connection's current waiter, for CLIENT UNBLOCK and the connection's close.

Write-ness comes from the command table's flags (``write``): a transaction is a write if any
of its commands is. With ``journal`` None (the store is read-only, or a failed group is answered
again) writes are refused and reads run against a scratch journal nobody logs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from minidb.protocol import ErrorReply, RespEncoder
from minidb.protocol._results import NULL_ARRAY, Result
from minidb.server.resp._errors import READONLY
from minidb.server.resp._types import (
    Forward,
    ForwardTransaction,
    ForwardWatch,
    PlainRun,
    TurnRun,
    WatchSet,
)
from minidb.store import (
    COMMANDS,
    REPLICA_REFUSAL,
    UNBOUNDED_OUTPUT,
    OpJournal,
    Session,
    execute,
    execute_transaction,
    run_plain,
)
from minidb.store._blocking import Blocked, Waiter, WouldBlock
from minidb.store._commands import execute_blocking
from minidb.store._keyspace import Keyspace

DEFAULT_MAX_REPLY = 1 << 62
"""``RespExecutor``'s reply bound when none is given (tests of the engine alone)."""

READ_ONLY_REASON = "read-only: the write-ahead log failed"
"""What a write is refused with when the owner runs it with no journal."""

_UNWATCH = [b"UNWATCH"]
_PING = frozenset({b"PING", b"ping"})
_PONG = b"+PONG\r\n"
_SELECT = b"SELECT"
_WRITES = frozenset(name for name, cmd in COMMANDS.items() if "write" in cmd.flags)


class HasKeyspace(Protocol):
    """The owner's state as the executor uses it: the one shared keyspace."""

    @property
    def keyspace(self) -> Keyspace: ...


@dataclass(eq=False, slots=True)
class OwnerSide:
    """One connection's state on the owner's side; only the owner reads or writes it."""

    session: Session = field(default_factory=Session)
    token: WatchSet | None = None
    """The RESP session's ``WatchSet`` that ``session.watch`` was registered for."""
    waiter: Waiter | None = None
    """The last blocking command's wait (``release`` None once it ended)."""

    @property
    def blocked(self) -> bool:
        """Whether the connection waits in a blocking command now."""
        waiter = self.waiter
        return waiter is not None and waiter.release is not None

    def unblock(self, reply: bytes | None) -> bool:
        """End the wait, answering ``reply`` (None: nobody reads it); False if not blocked."""
        waiter = self.waiter
        release = waiter.release if waiter is not None else None
        return release is not None and release(reply)


class BlockingCall:
    """A blocking command (BLPOP...) as the connection sends it: the last of its batch."""

    __slots__ = ("forward",)

    def __init__(self, forward: Forward) -> None:
        self.forward = forward


class RespRequest:
    """A WATCH, an EXEC or the closing UNWATCH (``action`` None) of one connection, as the
    owner receives it (a data command comes as its ``Forward``)."""

    __slots__ = ("action", "side")

    def __init__(
        self,
        action: ForwardWatch | ForwardTransaction | BlockingCall | None,
        side: OwnerSide,
    ) -> None:
        self.action = action
        self.side = side

    @property
    def verb(self) -> str:
        """The command's name in upper case (metrics of refused requests)."""
        action = self.action
        if action is None:
            return "UNWATCH"
        if type(action) is BlockingCall:
            return action.forward.verb
        return "WATCH" if type(action) is ForwardWatch else "EXEC"


OwnerRequest = Forward | PlainRun | TurnRun | RespRequest
"""What the owner runs for a RESP connection: a data command, a run of plain ones (or one that
already ran in the loop turn's group), or WATCH / EXEC / UNWATCH."""


class CommandCounts:
    """Calls, failed calls and rejections per command name (lower case), what ``INFO
    commandstats`` shows and ``/metrics`` exports."""

    def __init__(self) -> None:
        self.raw_calls: dict[bytes, int] = {}
        """Data commands run, by the name as the client sent it (any case)."""
        self._calls: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.rejected: dict[str, int] = {}
        """Refused before running: unknown, wrong arity, not authenticated."""
        self.errors: dict[str, int] = {}
        """Error replies by code (``ERR``, ``WRONGTYPE``...)."""

    @property
    def calls(self) -> dict[str, int]:
        """Calls by lower-case name, data and connection commands together."""
        out = dict(self._calls)
        for raw, count in self.raw_calls.items():
            name = raw.lower().decode("ascii", "replace")
            out[name] = out.get(name, 0) + count
        return out

    def count(self, name: str, result: Result) -> None:
        self._calls[name] = self._calls.get(name, 0) + 1
        if type(result) is ErrorReply:
            self.failed[name] = self.failed.get(name, 0) + 1
            self.error(result)

    def failure(self, raw_name: bytes, error: ErrorReply) -> None:
        """A data command counted in ``raw_calls`` answered an error."""
        name = raw_name.lower().decode("ascii", "replace")
        self.failed[name] = self.failed.get(name, 0) + 1
        self.error(error)

    def reject(self, name: str, error: ErrorReply) -> None:
        self.rejected[name] = self.rejected.get(name, 0) + 1
        self.error(error)

    def error(self, error: ErrorReply) -> None:
        code = error.code
        self.errors[code] = self.errors.get(code, 0) + 1


class RespExecutor:
    """Runs RESP data commands for the owner (the ``store.Executor`` contract)."""

    def __init__(
        self, counts: CommandCounts | None = None, *, max_reply_bytes: int = DEFAULT_MAX_REPLY
    ) -> None:
        self.counts = counts if counts is not None else CommandCounts()
        self.max_reply_bytes = max_reply_bytes
        """The longest reply built: a longer one is answered ``ERR reply too large`` instead,
        before it is joined (the server passes its hard output limit less the soft one, so
        a connection given replies while under its soft limit never holds more than the
        hard one; see ``server._connection``)."""
        self.raw_calls = self.counts.raw_calls
        """The command counts a plain run adds to, by name as sent."""
        self._encoders = {2: RespEncoder(2), 3: RespEncoder(3)}
        self.scratch = OpJournal()
        """An inline read's journal: it never notes anything."""

    def execute(
        self,
        state: HasKeyspace,
        request: OwnerRequest,
        journal: OpJournal | None,
        now_ms: int,
        room: int = UNBOUNDED_OUTPUT,
    ) -> bytes:
        """Run ``request`` on ``state.keyspace``; its reply in wire form (a ``PlainRun``: the
        replies of the commands it ran, as far as ``room`` went; see ``remainder``)."""
        kind = type(request)
        if journal is None:
            if kind is PlainRun:
                return b"".join(
                    self.execute(state, forward, None, now_ms)
                    for forward in request.forwards()  # type: ignore[union-attr]
                )
            if self.is_write(request):
                return self.refusal(request, READ_ONLY_REASON)
            journal = OpJournal()  # reads may expire keys lazily; nobody logs this one
        ks = state.keyspace
        if kind is PlainRun:
            # A PlainRun in one call of run_plain (a request at -P 1: no second frame); its
            # ``stop`` is set to where it stopped.
            run: PlainRun = request  # type: ignore[assignment]
            side: OwnerSide = run.side  # type: ignore[assignment]
            session = side.session
            session.bucket = run.bucket
            session.protocol = run.protocol

            def fallback(argv: list[bytes]) -> bytes:
                return self._command(ks, session, argv, journal, now_ms)

            run.stop, replies, _ = run_plain(
                ks, journal, run.argvs, run.start, run.bucket, run.protocol, now_ms, room,
                self.max_reply_bytes, self.raw_calls, fallback,
            )
            return replies
        if kind is Forward:
            forward: Forward = request  # type: ignore[assignment]
            owner_side: OwnerSide = forward.side  # type: ignore[assignment]
            session = owner_side.session
            session.bucket = forward.bucket
            session.protocol = forward.protocol
            return self._command(ks, session, forward.argv, journal, now_ms)
        wrapped: RespRequest = request  # type: ignore[assignment]
        action = wrapped.action
        side = wrapped.side
        session = side.session
        if action is None:  # the connection closed: forget its watch
            self._drop_watch(ks, side, journal, now_ms)
            return b""
        if type(action) is BlockingCall:
            return self._blocking(ks, side, action.forward, journal, now_ms)
        if type(action) is ForwardWatch:
            watch: ForwardWatch = action
            if side.token is not watch.watch:
                self._drop_watch(ks, side, journal, now_ms)
                side.token = watch.watch
            session.bucket = watch.bucket
            result = execute(ks, session, [b"WATCH", *watch.keys], journal, now_ms)
            self.counts.count("watch", result)
            return self._encoders[watch.protocol].encode(result)
        transaction: ForwardTransaction = action  # type: ignore[assignment]
        result = self._transaction(ks, side, transaction, journal, now_ms)
        self.counts.count("exec", result)
        encoder = self._encoders[transaction.protocol]
        reply = encoder.encode_within(result, self.max_reply_bytes)
        if type(reply) is bytes:
            return reply
        # The transaction ran and its writes stand: keep the reply of each command that
        # fits and answer the others too large, so the client still learns what happened.
        room = self.max_reply_bytes - 64  # the array's header, with room to spare
        fitted: list[Result] = []
        for item in result:  # type: ignore[union-attr]
            part = encoder.encode_within(item, room)
            if type(part) is bytes:
                room -= len(part)
                fitted.append(item)
            else:
                fitted.append(self._too_large(part))  # type: ignore[arg-type]
        return encoder.encode(fitted)

    def _command(
        self, ks: Keyspace, session: Session, argv: list[bytes], journal: OpJournal, now_ms: int
    ) -> bytes:
        """One data command (a bare PING, inside a ``PlainRun``, is answered here)."""
        calls = self.raw_calls
        # Counted under the name as sent (one dict update, no lower() or decode per
        # command); CommandCounts folds the case when it is read.
        calls[argv[0]] = calls.get(argv[0], 0) + 1
        if len(argv) == 1 and argv[0] in _PING:
            return _PONG
        result = execute(ks, session, argv, journal, now_ms)
        if type(result) is ErrorReply:
            self.counts.failure(argv[0], result)
        reply = self._encoders[session.protocol].encode_within(result, self.max_reply_bytes)
        if type(reply) is bytes:
            return reply
        error = self._too_large(reply)  # type: ignore[arg-type]
        self.counts.failure(argv[0], error)
        return error.wire

    def _blocking(
        self, ks: Keyspace, side: OwnerSide, forward: Forward, journal: OpJournal, now_ms: int
    ) -> bytes:
        """A blocking command: its reply if it can be served now, else ``Blocked`` with the
        waiter that serves it later (see the module docstring)."""
        argv = forward.argv
        calls = self.raw_calls
        calls[argv[0]] = calls.get(argv[0], 0) + 1
        session = side.session

        def attempt(ks: Keyspace, journal: OpJournal, now_ms: int) -> bytes | WouldBlock:
            session.bucket = forward.bucket
            session.protocol = forward.protocol
            result = execute_blocking(ks, session, argv, journal, now_ms)
            if type(result) is WouldBlock:
                return result
            if type(result) is ErrorReply:
                self.counts.failure(argv[0], result)
            return self._encoders[forward.protocol].encode(result)  # type: ignore[arg-type]

        def serve(ks: Keyspace, journal: OpJournal, now_ms: int) -> bytes | None:
            reply = attempt(ks, journal, now_ms)
            return None if type(reply) is WouldBlock else reply  # type: ignore[return-value]

        first = attempt(ks, journal, now_ms)
        if type(first) is not WouldBlock:
            return first  # type: ignore[return-value]
        waiter = Waiter(
            forward.bucket, first.keys, first.kind, first.timeout, serve,
            self._encoders[forward.protocol].encode(NULL_ARRAY),
        )
        side.waiter = waiter
        return Blocked.on(waiter)

    def run_inline(self, state: HasKeyspace, run: PlainRun, now_ms: int, room: int) -> bytes:
        """The replies of the plain reads at the head of ``run``, served in a connection's
        callback while the owner is idle (see ``store._plainrun``); ``run.start`` moves past
        them. Nothing is changed or journaled."""
        run.start, replies, _ = run_plain(
            state.keyspace, self.scratch, run.argvs, run.start, run.bucket, run.protocol,
            now_ms, room, self.max_reply_bytes, self.raw_calls, None,
        )
        return replies

    def remainder(self, request: OwnerRequest) -> PlainRun | None:
        """What ``execute`` left unrun of ``request`` for want of room (a ``PlainRun``'s
        commands after the one whose reply crossed it), or None."""
        return request.remainder() if type(request) is PlainRun else None

    def expand(self, request: OwnerRequest) -> list[OwnerRequest]:
        """The single commands ``request`` stands for (the owner answers each on its own when
        writes are refused)."""
        if isinstance(request, tuple):  # a TurnRun (no other request is a tuple)
            request = PlainRun.of_turn(request)
        if type(request) is PlainRun:
            return request.forwards()  # type: ignore[return-value]
        return [request]

    def _too_large(self, size: int) -> ErrorReply:
        return ErrorReply(
            f"ERR reply too large: {size} bytes, limit {self.max_reply_bytes}"
            " (--output-hard-limit less --output-soft-limit)"
        )

    def _transaction(
        self,
        ks: Keyspace,
        side: OwnerSide,
        action: ForwardTransaction,
        journal: OpJournal,
        now_ms: int,
    ) -> Result:
        if action.watch is None or action.watch is not side.token:
            self._drop_watch(ks, side, journal, now_ms)
        side.token = None  # execute_transaction consumes the watch either way
        session = side.session
        session.protocol = action.protocol
        # A SELECT queued inside MULTI gave the later commands another bucket: the store's own
        # SELECT switches between them, and its OK is not part of the EXEC reply.
        queued: list[list[bytes]] = []
        selects: list[int] = []
        if action.commands:
            session.bucket = bucket = action.commands[0].bucket
            for command in action.commands:
                if command.bucket != bucket:
                    bucket = command.bucket
                    selects.append(len(queued))
                    queued.append([_SELECT, bucket])
                queued.append(command.argv)
        results = execute_transaction(ks, session, queued, journal, now_ms)
        if results is not None and selects:
            skip = set(selects)
            results = [r for i, r in enumerate(results) if i not in skip]
        return action.assemble(results)

    def _drop_watch(self, ks: Keyspace, side: OwnerSide, journal: OpJournal, now_ms: int) -> None:
        if side.session.watch is not None:
            execute(ks, side.session, _UNWATCH, journal, now_ms)
        side.token = None

    def is_write(self, request: OwnerRequest) -> bool:
        """Whether ``request`` may change the keyspace (the command table's ``write`` flag)."""
        if type(request) is Forward:
            return request.argv[0].lower() in _WRITES
        if type(request) is PlainRun:
            run = request.argvs[request.start:request.stop]
            return any(argv[0].lower() in _WRITES for argv in run)
        action = request.action  # type: ignore[union-attr]
        kind = type(action)
        if kind is BlockingCall:
            return True  # its pops are writes (a replica refuses them)
        if kind is ForwardTransaction:
            return any(c.argv[0].lower() in _WRITES for c in action.commands)  # type: ignore[union-attr]
        return False

    def refusal(self, request: OwnerRequest, reason: str) -> bytes:
        """``-ERR <reason>`` for ``request`` (a replica's refusal in Redis's ``READONLY``
        words), counted as a failed call of its command."""
        if isinstance(request, tuple):  # a TurnRun (no other request is a tuple)
            request = PlainRun.of_turn(request)
        if type(request) is PlainRun:
            return b"".join(self.refusal(f, reason) for f in request.forwards())
        if reason == REPLICA_REFUSAL:
            error = READONLY
        else:
            error = ErrorReply("ERR " + reason.replace("\r", " ").replace("\n", " "))
        self.counts.count(request.verb.lower(), error)
        return error.wire


def unwatch_request(side: OwnerSide) -> RespRequest:
    """The request a closing connection sends so the keyspace forgets its WATCH (its reply,
    empty, goes nowhere)."""
    return RespRequest(None, side)


__all__ = [
    "BlockingCall",
    "CommandCounts",
    "OwnerRequest",
    "OwnerSide",
    "RespExecutor",
    "RespRequest",
    "unwatch_request",
]
