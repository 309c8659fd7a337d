"""One RESP client connection: ``RespConnection``, the Redis protocol's part of ``Connection``.

Everything a wire protocol shares (flow control, the in-flight bound, ordered replies, output
bounds, timers, containment) is ``Connection``'s; this module adds the RESP decoder and the
session in front of it.

Theory of operation. ``Connection`` asks its decoder for at most N requests at a time.
``RespRequests`` is that decoder: it frames commands with ``RespDecoder`` and passes each argv
through the connection's ``RespSession`` there and then, in arrival order, so the session's
state (protocol, bucket, auth, MULTI) is always that of the command being decided. What it
returns per command is either

- a request for the owner, which runs it with the server's ``RespExecutor``: the ``Forward``
  itself (it carries the connection's ``OwnerSide``), or a ``RespRequest`` around a
  ``ForwardWatch`` or ``ForwardTransaction``, or
- the reply already encoded (a connection command, an error the session gave), which needs no
  owner at all.

Authentication reaches down to the framing: before it, the decoder holds commands to Redis's
limits for unauthenticated clients and hands them out one at a time, and ``RespRequests``
tells it whether the session is authenticated before each decode, so the command after a
pipelined ``AUTH`` is framed with the normal limits and the one after ``RESET`` with those
before AUTH (from the next decode on: commands decoded with it in one batch keep theirs).

``RespConnection._send`` cuts the list into runs: a run of owner requests becomes one batch for
the mailbox, a run of local replies a batch that is answered already. Both join the
connection's one ordered queue of batches, so a local reply leaves exactly in its place: after
the owner's replies to the commands before it, before those of the commands after it. Local
replies count towards the in-flight bound like any other, so a client pipelining thousands of
PINGs is paused by TCP flow control like one pipelining GETs.

Blocking commands (BLPOP...). A blocking command ends its take: it goes to the owner as a
``BlockingCall``, the last request of its batch, and the commands after it wait in the decoder
(``hold``) until every reply owed is written, its own included; so a blocked connection runs
nothing else, and its replies stay in order. Meanwhile it keeps reading only while nothing
complete is waiting (a pipelined command after it pauses reading, as the in-flight bound
does). A client that leaves (EOF or reset) while blocked ends its wait at once: the waiter is
removed, nothing is left behind.

Subscriptions in order. The session applies a (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE or RESET when
it decides it, while a PUBLISH before it runs later, on the owner; so such a command
(``ACTS_ON_SUBSCRIPTIONS``) that comes while owner requests of this connection are
unanswered, in this take or an earlier one, is not decided yet: the take ends before it and
it waits in the decoder (``hold``, as behind a blocking command) until they are answered and
written. Then PUBLISH sees the subscriptions of its own place in the stream, as in Redis. With
nothing in flight (the usual SUBSCRIBE) it costs one test.

Closing. ``QUIT`` is answered ``+OK`` and a protocol error ``-ERR Protocol error: ...``; in
both cases the decoder stops there (pipelined commands after it are dropped unread, never run)
and the connection drains: it closes once every reply before it, and it, are written. An HTTP
request line sent to the port closes without a reply, as Redis does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sized
from typing import Any

from minidb._accelerators import load
from minidb.protocol import RespDecoder, RespEncoder, RespProtocolError
from minidb.server._connection import Connection
from minidb.server._hub import Hub
from minidb.server.resp._executor import (
    BlockingCall,
    OwnerSide,
    RespExecutor,
    RespRequest,
    unwatch_request,
)
from minidb.server.resp._pubsub import ACTS_ON_SUBSCRIPTIONS, message_frames
from minidb.server.resp._session import RUN_ARITY, RespSession, SessionConfig, SessionEnv
from minidb.server.resp._types import (
    Close,
    ErrorReply,
    Forward,
    ForwardTransaction,
    ForwardWatch,
    NoReply,
    PlainRun,
    Reply,
    ReplyAndClose,
)
from minidb.store import PLAIN_READS, Express, Mailbox, OpJournal, StoreOwner, express
from minidb.store._commands import BLOCKING
from minidb.store._pubsub import Message

BUSY_REPLY = b"-ERR busy: the server is overloaded, retry later\r\n"
"""A request the owner did not answer within ``--request-timeout`` (genuine overload)."""
UNAVAILABLE_REPLY = b"-ERR store unavailable\r\n"

_OWNER_ACTIONS = (Forward, ForwardWatch, ForwardTransaction)
_BLOCKING = frozenset(name.decode() for name in BLOCKING)
"""The session's ``last_command`` of a blocking command."""


class RespContext:
    """What every RESP connection of one listener shares."""

    def __init__(
        self,
        config: SessionConfig,
        executor: RespExecutor,
        env: SessionEnv,
        *,
        max_bulk_bytes: int,
        next_id: Callable[[], int],
    ) -> None:
        self.config = config
        self.executor = executor
        self.env = env
        self.max_bulk_bytes = max_bulk_bytes
        self.next_id = next_id


class RespRequests:
    """The ``Decoder`` a ``RespConnection`` drives: RESP framing, then the session's decision
    per command (see the module docstring). Entries are ``RespRequest``s or encoded replies."""

    __slots__ = ("__dict__", "closing", "decoder", "held", "runs")
    # The fields the C data_received (``_cconnection``) reads and sets at their offsets.

    def __init__(self, session: RespSession, side: OwnerSide, context: RespContext) -> None:
        self.session = session
        self.side = side
        session.owner_side = side  # its Forwards go to the owner as they are
        self._context = context
        self._env = context.env
        self.decoder = self._new_decoder()
        """The framing (replaced by ``discard_partial``); the express lane calls it directly."""
        self._encoders = {2: RespEncoder(2), 3: RespEncoder(3)}
        self.held: list[list[bytes]] = []
        """Commands decoded (by ``has_request`` or the express lane), not yet decided."""
        self._held_whole = False
        """``held`` is a whole read (``hold_whole``): the decoder holds nothing after it."""
        self.closing = False
        """No more commands: QUIT, a protocol error, or an HTTP request was decided."""
        self.protocol_error: RespProtocolError | None = None
        self.watched = False
        """A WATCH was sent to the owner: the keyspace may hold a watch of this connection."""
        self.runs = False
        """A ``PlainRun`` was made: from then on this connection's requests do not all weigh
        one."""
        self.hold = False
        """A blocking command was taken, or a subscription change waits for the owner's
        replies before it: nothing more is taken until every reply owed is written."""
        self.unanswered: Sized = ()
        """The connection's batches not yet written (its queue): a subscription change waits
        while it is not empty."""

    def receive(self, data: bytes) -> None:
        if not self.closing:
            # Once per read, as Redis's readQueryFromClient does: CLIENT INFO's idle time.
            self.session.last_interaction = self._env.unix_time()
            self.decoder.feed(data)

    def hold_whole(self, commands: list[list[bytes]]) -> None:
        """``commands``, a whole read the express lane decoded but could not take as one run:
        held for ``next_requests`` to decide, in order (the decoder holds nothing after them)."""
        self.held = commands
        self._held_whole = True

    def _new_decoder(self) -> RespDecoder:
        return RespDecoder(
            max_bulk_bytes=self._context.max_bulk_bytes,
            authenticated=self.session.authenticated,
        )

    def has_request(self) -> bool:
        if self.closing:
            return False
        if not self.held:
            self.decoder.authenticated = self.session.authenticated
            try:
                self.held = self.decoder.next_commands(1)
            except RespProtocolError:
                return True  # its error reply is a request to answer
        return bool(self.held)

    def discard_partial(self) -> None:
        self.decoder = self._new_decoder()

    def next_requests(self, limit: int) -> list[Any]:
        out: list[Any] = []
        counts = self._context.executor.counts
        session = self.session
        side = self.side
        env = self._env
        decoder = self.decoder
        taken = 0  # commands taken (a PlainRun stands for several)
        if self.hold:
            return out  # the connection's next take, once every reply owed is written
        unanswered = self.unanswered
        while taken < limit and not self.closing:
            commands = self.held
            self.held = []
            # Whether the decoder may hold more complete commands after these: fewer than
            # asked for means it has none left (nor an error to raise, checked below), which
            # spares a read of one request (redis-benchmark -P 1) a second, empty decode; so
            # does a whole read the express lane decoded.
            more = not self._held_whole
            self._held_whole = False
            if not commands:
                # The decoder frames with the session's authentication of this moment, and
                # before AUTH gives one command per call (see the module docstring).
                authenticated = session.authenticated
                if decoder.authenticated is not authenticated:
                    decoder.authenticated = authenticated
                wanted = limit - taken if authenticated else 1
                try:
                    commands = decoder.next_commands(wanted)
                except RespProtocolError as exc:
                    self.protocol_error = exc
                    self.closing = True
                    out.append(exc.reply)
                    break
                if not commands:
                    break
                more = len(commands) == wanted or decoder.error is not None
            taken += len(commands)
            at, end = 0, len(commands)
            while at < end:
                # Plain commands back to back go to the owner as one run (store._plainrun).
                stop = session.plain_end(commands, at)
                if stop - at == 1 and commands[at][0] not in PLAIN_READS:
                    stop = at  # a lone write goes as its Forward: one call less than a run
                if stop > at:
                    session.plain_run(commands, at, stop)
                    last = out[-1] if out else None
                    if type(last) is PlainRun:  # the run goes on from the last decode
                        last.argvs += commands[at:stop]
                        last.stop = len(last.argvs)
                    else:
                        run = commands if stop - at == end else commands[at:stop]
                        out.append(PlainRun(run, session.bucket, session.protocol, side))
                    self.runs = True
                    at = stop
                    continue
                argv = commands[at]
                if (out or unanswered) and _waits_for_owner(argv, out, unanswered):
                    # Decided now it would act before the owner's requests ahead of it run:
                    # it waits for their replies (see "Subscriptions in order").
                    self.hold = True
                    self.held = commands[at:]
                    break
                at += 1
                rejected = session.rejected
                action = session.handle(argv, env)
                kind = type(action)
                if kind is Forward:
                    if session.last_command in _BLOCKING:
                        # The last of this take: what follows waits for its reply.
                        out.append(RespRequest(BlockingCall(action), side))  # type: ignore[arg-type]
                        self.hold = True
                        self.held = commands[at:]
                        break
                    out.append(action)  # it carries the side: the owner's request as it is
                elif kind in _OWNER_ACTIONS:
                    out.append(RespRequest(action, side))  # type: ignore[arg-type]
                    if kind is ForwardWatch:
                        self.watched = True
                elif kind is Reply or kind is ReplyAndClose:
                    reply: Reply = action  # type: ignore[assignment]
                    result = reply.result
                    name = session.last_command
                    if type(result) is ErrorReply and session.rejected != rejected:
                        counts.reject(name, result)
                    else:
                        counts.count(name, result)
                    out.append(self._encoders[reply.protocol].encode(result))
                    if kind is ReplyAndClose:
                        self.closing = True
                        break
                elif kind is Close:
                    self.closing = True
                    break
                else:
                    assert kind is NoReply, action
            if not more or self.hold:
                break
        if self.closing:
            self.held = []
            self.discard_partial()
        return out


class RespConnection(Connection):
    """A RESP client: ``RespRequests`` framing, ``RespExecutor`` batches, RESP refusals."""

    __slots__ = (
        "_executor", "_express_head", "_owner", "_unix_time", "requests_decoder", "session",
        "side",
    )  # fmt: skip
    # With ``Connection``'s: the fields the C data_received reads at their offsets.

    busy_reply = BUSY_REPLY
    unavailable_reply = UNAVAILABLE_REPLY
    listener = "resp"

    def __init__(self, hub: Hub, loop: asyncio.AbstractEventLoop, context: RespContext) -> None:
        self._context = context
        self._executor = self._batch_executor = context.executor
        self._unix_time = context.env.unix_time
        self._owner = hub.owner
        self.side = OwnerSide()
        self.session = session = RespSession(context.next_id(), context.config)
        # Subscriptions live in the owner's registry, where PUBLISH looks, under this
        # connection: its messages are written here (``receive``).
        session.pubsub = hub.owner.pubsub
        session.subscriber = self
        self.requests_decoder = RespRequests(session, self.side, context)
        session.close_connection = self.kill
        super().__init__(hub, loop, self.requests_decoder)
        self.requests_decoder.unanswered = self._pending
        executor = self._executor
        # The express lane's items that stay the same for this connection (``ExpressLane``'s
        # head, in its order); data_received adds the five that change from read to read.
        self._express_head = (
            self._max_in_flight, RUN_ARITY, PLAIN_READS, self._owner.state.keyspace,
            executor.scratch, self.output_room, executor.max_reply_bytes, executor.raw_calls,
        )  # fmt: skip

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        session = self.session
        session.addr = _address(transport.get_extra_info("peername"))
        session.laddr = _address(transport.get_extra_info("sockname"))
        session.created_at = session.last_interaction = self._context.env.unix_time()
        super().connection_made(transport)

    def _take(self) -> None:
        decoder = self.requests_decoder
        while True:
            if decoder.hold and not self._pending:
                decoder.hold = False  # every reply it waited for is written: go on
            if not decoder.hold:
                super()._take()
            if not decoder.hold or self._pending or self._closed:
                break
            # Held, yet nothing is owed: what came before was answered at once (plain reads
            # served inline, refusals), and no flush will call back; go on now.
        if decoder.hold:
            # Blocked (or about to be): what follows waits for the reply, and a backlog has
            # the flush that writes it take again.
            self._backlog = not self._closed and self._has_request()
            self._set_reading()
        if self.requests_decoder.closing and not self._draining and not self._closed:
            # QUIT, a protocol error or an HTTP request line: nothing after it is read, and
            # the connection closes once what it owes is written (at once if nothing).
            self.begin_drain()

    def data_received(self, data: bytes) -> None:
        # The express lane (issue 18): with nothing of this connection in flight or held, and
        # the session in its plain state, a read of plain commands is decoded and taken as one
        # run in one C call (store.express), without a session decision per command, and
        # while the owner is idle its reads at the head are served in that call; what is
        # left (a write first of all) runs here too, in the loop turn's group, while the
        # owner is idle (see "Writes of the turn" in store._actor), else goes to the owner as
        # one batch when the mailbox has room for it, else the general way, in order. This
        # runs once per read (once per request at redis-benchmark -P 1), so it is written out
        # in one function; with the accelerator it is C (``_cconnection``, installed below),
        # and this is its reference.
        requests = self.requests_decoder
        session = self.session
        if (
            self._pending or self._deferred or self._backlog or self._draining or self._closed
            or self._in_turn or requests.closing or requests.held or not session.plain_ready()
        ):
            super().data_received(data)
            return
        try:
            owner = self._owner
            idle = owner.waiting and not owner.mailbox.queued
            turn = owner.turn_journal if idle else None  # (paused output: no room, no run)
            # (+ is one tuple; (*head, ...) builds a list first)
            taken = requests.decoder.take_whole(data, express, self._express_head + (  # noqa: RUF005
                session.bucket, session.protocol, owner.clock if idle else None,
                not owner.turn,  # reads are served at once only while no turn is open
                turn,  # and the rest may join the turn
            ))  # fmt: skip
            if taken is None:
                super().data_received(data)
                return
            self._express_taken(taken, turn)
        except Exception as exc:
            self._fail("data_received", exc)

    # The Python data_received, kept when the accelerator replaces it (at the end of the
    # module): the reference, and what the C method hands a subclass or an unset field.
    data_received_py = data_received

    def _express_taken(self, taken: Express, turn: OpJournal | None) -> None:
        """What the express lane's C call took of a read (``store.Express``): count it,
        write the replies of the reads it served, join the loop turn's group with what it ran
        there, and pass the rest on (see ``data_received``). ``turn``: the journal of the
        turn's group the call was given, or None. The C ``data_received`` does this itself
        for the two common outcomes, every command served (reads) or run in the turn
        (writes), and calls this for the others."""
        requests = self.requests_decoder
        session = self.session
        owner = self._owner
        commands, end, served, replies, turned, turn_replies = taken
        # Once per read, as Redis's readQueryFromClient does: CLIENT INFO's idle time.
        session.last_interaction = self._unix_time()
        if end != len(commands):
            requests.hold_whole(commands)
            self._fresh = True
            self._take()
            return
        # session.plain_run(commands, 0, end), spelled out: the read's commands are the run
        session.plain_taken += end
        session.last_plain = commands
        requests.runs = True
        if served:  # _served_inline and _write, spelled out
            self._idle_from = self._loop_time()
            self.requests += served
            owner.inline += served
            transport = self._transport
            assert transport is not None  # it is the one calling
            transport.write(replies)
            if self._output_paused and transport.get_write_buffer_size() > self._hard_limit:
                self._drop_for_output(transport)
            if served == end:
                return
        if turned != served:
            # Run in the loop turn's group by that C call (see "Writes of the turn" in
            # store._actor), answered once the turn's writes are logged; kept as a TurnRun
            # (a PlainRun only if the log write fails).
            count = turned - served
            owner.join_turn(self, self._executor, (
                commands, session.bucket, session.protocol, self.side, served, turned
            ), turn_replies, count)
            self._joined_turn(count)
            if turned == end:
                return
            served = turned  # the rest needs Python, or room
        run = PlainRun(commands, session.bucket, session.protocol, self.side, served)
        if turn is not None and not self._output_paused:
            # The rest in the turn too, through the executor (the Python engine).
            room = self.output_room() - len(turn_replies)  # those are not written yet
            if room >= 0:
                owner.run_in_turn(self, self._executor, run, room)
                self._joined_turn(run.stop - served)
                if run.stop == end:
                    return
                # Out of output room: the rest goes the usual way, as what the C run
                # leaves does (an owner's group ends the turn before it runs).
                served = run.stop
                run = PlainRun(commands, session.bucket, session.protocol, self.side, served)
        if not self._output_paused and self._mailbox.room_for(self, True) >= (
            weight := end - served  # len(run), without the call
        ):
            # What _take would do for this one run, without its loop.
            super()._send_to_owner([run], weight)
            return
        self._deferred.append(run)  # sent before anything else, as handed back
        self._fresh = True
        self._take()

    def _joined_turn(self, count: int) -> None:
        """``count`` requests ran in the loop turn's group: their replies come with
        ``turn_answered``; count them as served here (the hub's latency zero)."""
        self._in_turn = True
        self._idle_from = self._loop_time()  # a take: the idle timeout counts from here
        self.requests += count
        self._owner.inline += count

    def _send_to_owner(self, requests: list[Any], weight: int) -> None:
        first = requests[0]
        if type(first) is PlainRun and not self._pending and self._owner.idle:
            served = self._serve_inline(first)
            weight -= served
            if served and not len(first):
                requests = requests[1:]
                if not requests:
                    return
        super()._send_to_owner(requests, weight)

    def _serve_inline(self, run: PlainRun) -> int:
        """Serve the plain reads at the head of ``run`` here and now, while the owner is idle
        and nothing of this connection waits (see "Inline reads" in ``store._actor``); how
        many. What they leave of ``run`` goes to the owner as usual."""
        if run.argvs[run.start][0] not in PLAIN_READS:
            return 0  # a write first (SET at -P 1): not even a C call
        room = self.output_room()
        if room < 0:
            return 0
        owner = self._owner
        start = run.start
        replies = self._executor.run_inline(owner.state, run, owner.clock(), room)
        served = run.start - start
        if served:
            self._served_inline(served, replies)
        return served

    def _served_inline(self, served: int, replies: bytes) -> None:
        """``served`` requests were answered inline with ``replies``: count them and write."""
        self._idle_from = self._loop_time()  # a take: the idle timeout counts from here
        self.requests += served
        self._owner.inline += served  # the owner's answers; the hub's latency zero
        self._write(replies)

    def _weigh(self, requests: list[Any]) -> int:
        if not self.requests_decoder.runs:
            return len(requests)
        if len(requests) == 1:
            return self._weight_of(requests[0])
        return sum(map(self._weight_of, requests))

    def _weight_of(self, request: Any) -> int:
        return len(request) if type(request) is PlainRun else 1

    def _refusals(self, requests: list[Any], reply: bytes) -> list[bytes]:
        return [reply * self._weight_of(request) for request in requests]

    def _on_idle(self) -> None:
        if self.session.pubsub.subscribed(self):
            # A subscriber waits for messages, not for replies: Redis never times it out.
            self._arm_idle(self._loop_time() + self._idle_s)
            return
        super()._on_idle()

    def receive(self, messages: list[tuple[Message, bytes | None]]) -> None:
        """Pub/sub messages for this client (the owner's call when a group is released), in
        the protocol the session speaks now: after every reply already owed, and counted
        against the output limits like any reply (past the hard limit: dropped)."""
        try:
            self.push(self.frames(messages))
        except Exception as exc:
            self._fail("receive", exc)

    def frames(self, messages: list[tuple[Message, bytes | None]]) -> bytes:
        """Messages' wire form in the protocol the session speaks now: what ``receive``
        writes, and what the owner appends to a reply of a request that published to this
        very client (``store._pubsub``, "A publisher's own messages")."""
        return message_frames(messages, self.session.protocol)

    def begin_drain(self) -> None:
        # Shutting down: a blocked client is closed without its reply, as Redis closes its
        # clients, rather than held until the grace period ends.
        if self.side.unblock(None):
            self._write_answered()
        super().begin_drain()

    def kill(self) -> None:
        """CLIENT KILL (its session is ``closing`` already): nothing more is read or run, its
        wait (BLPOP...) and subscriptions end now, as Redis's ``freeClient`` ends them; it
        closes once the replies it was owed are written. The drain starts on the next loop
        pass: the killer may be this very connection, in the middle of a take, whose own
        reply must still go out (Redis's ``CLIENT_CLOSE_AFTER_REPLY``)."""
        try:
            self.requests_decoder.closing = True
            self.session.forget_subscriptions()
            if self.side.unblock(None):
                self._write_answered()
            self._loop.call_soon(self._drain_killed)
        except Exception as exc:
            self._fail("kill", exc)

    def _drain_killed(self) -> None:
        try:
            if not self._draining and not self._closed:
                self.begin_drain()
        except Exception as exc:
            self._fail("kill", exc)

    def eof_received(self) -> bool:
        # A blocked client that stops sending is gone, as Redis sees it: end the wait now
        # (nothing else would: its reply may never come).
        try:
            if self.side.unblock(None):
                self._write_answered()
        except Exception as exc:
            self._fail("eof_received", exc)
        return super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.side.unblock(None)  # the waiter goes with the client
        self.session.forget_subscriptions()
        super().connection_lost(exc)
        if self.requests_decoder.watched:
            # The keyspace holds this connection's watch: one last request forgets it. Sent
            # past the room check (one request over capacity at most per closing connection).
            self._send_last([unwatch_request(self.side)])


def _waits_for_owner(argv: list[bytes], out: list[Any], unanswered: Sized) -> bool:
    """Whether ``argv`` changes what a PUBLISH sees of this connection while an owner request
    before it (in ``out``, this take's, or ``unanswered``) has not run yet."""
    if not argv or argv[0].lower() not in ACTS_ON_SUBSCRIPTIONS:
        return False
    return bool(unanswered) or any(type(request) is not bytes for request in out)


def _address(peer: object) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "")


PYTHON_TWINS: dict[str, Callable[..., Any]] = {
    "data_received": RespConnection.data_received_py,
    "turn_answered": Connection.turn_answered,
    "output_room": Connection.output_room,
}
"""The Python methods of ``RespConnection`` that ``_cconnection`` replaces: the reference (the
twin tests put them back), and what the C methods hand a subclass or an unset field."""

_cconnection = load("minidb.server.resp._cconnection")
if _cconnection is not None:
    # In C: the express lane's gate and bookkeeping, the turn's replies and the output room
    # read the connection's, its session's and its owner's slots at their offsets, once per
    # read (see _cconnection.c).
    for _name, _method in _cconnection.methods(
        (RespConnection, RespRequests, RespSession, StoreOwner, Mailbox),
        {**PYTHON_TWINS, "general_data_received": Connection.data_received},
        express,
    ).items():
        setattr(RespConnection, _name, _method)
