"""The connection-level half of the RESP listener: one ``RespSession`` per client connection.

Pure: no sockets, no asyncio, no clock (wall time comes from the ``SessionEnv`` the connection
passes in). The connection decodes each command to ``argv`` and calls ``handle``; the session
decides, as Redis's ``processCommand`` does, in this order:

1. empty argv, or anything after ``QUIT``: nothing (``NoReply``); an HTTP request line
   (``POST``, ``Host:``): close silently, as Redis does against cross-protocol scripting;
2. unknown command or subcommand, wrong arity, not authenticated: an error reply, which inside
   ``MULTI`` also dooms the transaction (``EXEC`` then answers ``EXECABORT``). A rejected
   ``EXEC`` itself (arguments, not authenticated) answers ``EXECABORT Transaction discarded
   because of: <the error>`` and discards the transaction, in ``MULTI`` or not, as Redis's
   ``rejectCommand`` does: a client pipelining ``MULTI ... EXEC`` then knows the transaction
   is over whatever EXEC's error;
3. inside ``MULTI``, everything but EXEC/DISCARD/MULTI/WATCH/QUIT/RESET is queued (``+QUEUED``);
4. a connection command (PING, HELLO, AUTH, SELECT, CLIENT, CONFIG, COMMAND, INFO, ...) is
   answered here (``Reply``); a data command goes to the data owner with the selected bucket
   (``Forward``); ``WATCH`` registers with the owner (``ForwardWatch``); ``EXEC`` sends the
   queued data commands as one atomic group (``ForwardTransaction``).

State per connection: protocol version (2 until ``HELLO 3``), selected bucket (``b"0"``,
Redis's db 0), authenticated, id, name, lib-name/lib-ver, the MULTI queue and the watch.

Connection commands queued in a transaction run when ``EXEC`` is handled, in queue order, so a
``SELECT`` inside ``MULTI`` applies to the data commands queued after it. They run even if the
owner then aborts the transaction because a watched key changed (Redis would not run them):
the session cannot wait for the owner's verdict before handling the next pipelined command.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Protocol

from minidb.protocol import MAX_NAME_CHARS
from minidb.server.resp._admin import command_command, config_command
from minidb.server.resp._client import client_command, is_blocked
from minidb.server.resp._commands_meta import CommandSpec, CommandTable
from minidb.server.resp._errors import (
    BAD_CLIENT_NAME,
    EXECABORT,
    HELLO_NOAUTH,
    NO_PASSWORD,
    NOAUTH,
    SYNTAX,
    WRONGPASS,
    exec_abort,
    one_line,
    printable,
    unknown_command,
    unknown_subcommand,
    wrong_arity,
)
from minidb.server.resp._info import InfoSnapshot, ServerFacts, render_info, sections_for
from minidb.server.resp._pubsub import (
    ALLOWED_WHEN_SUBSCRIBED,
    NOT_IN_MULTI,
    SUBSCRIBE_FAMILY,
    psubscribe,
    pubsub_command,
    punsubscribe,
    subscribe,
    subscribed_mode_error,
    unsubscribe,
    with_pubsub_figures,
)
from minidb.server.resp._types import (
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
    parse_integer,
)
from minidb.store import plain_arity, plain_end
from minidb.store._pubsub import Message, PubSub, Receiver

DEFAULT_BUCKET = b"0"
"""What a new connection has selected: Redis's db 0."""
DEFAULT_USER = b"default"
"""The one user: ``AUTH default <password>`` and ``HELLO 3 AUTH default <password>``."""
MAX_QUEUED_COMMANDS = 100_000
"""Commands one MULTI may queue. Redis bounds it only by memory; here the owner runs a whole
transaction as one group, so its length is also how long every other client waits."""
_TOO_LONG = ErrorReply(f"ERR transaction too long: at most {MAX_QUEUED_COMMANDS} queued commands")
_RUN_IN_MULTI = frozenset({"exec", "discard", "multi", "watch", "quit", "reset"})
_BUCKET = re.compile(rb"[A-Za-z0-9_.:/-]{1,%d}" % MAX_NAME_CHARS)
_HTTP = frozenset({b"post", b"host:"})
RUN_ARITY = plain_arity()
"""The plain commands' arities under both spellings: where a run ends (``plain_end``)."""
_PLAIN_NAMES = {spelling: spelling.lower().decode() for spelling in RUN_ARITY}
"""A plain command's name as sent -> its ``last_command`` (without a lower() per run)."""


class SessionEnv(Protocol):
    """What a session asks of its server while handling a command."""

    def unix_time(self) -> float:
        """Wall-clock seconds since the epoch (TIME, CLIENT INFO age and idle)."""
        ...

    def snapshot(self) -> InfoSnapshot:
        """The figures ``INFO`` shows, read now."""
        ...

    def sessions(self) -> Iterable[RespSession]:
        """Every open RESP session (``CLIENT LIST``)."""
        ...


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """What every session of one server shares."""

    facts: ServerFacts
    commands: CommandTable = field(default_factory=CommandTable.default)
    password: bytes | None = None
    """``--requirepass`` / ``MINIDB_PASSWORD``; ``None``: every connection is authenticated."""
    pubsub: PubSub = field(default_factory=PubSub)
    """The subscriptions of every session (a server's connection uses its owner's instead)."""


@dataclass(frozen=True, slots=True)
class SessionStatistics:
    """What one session has done since its connection opened."""

    commands: int
    rejected: int
    """Unknown command, wrong arity or not authenticated."""
    forwarded: int
    transactions: int
    aborted: int
    """``EXEC`` answered ``EXECABORT``."""


_Handler = Callable[["RespSession", list[bytes], SessionEnv], Result]


class RespSession:
    """The state of one RESP connection and the decision for each of its commands."""

    __slots__ = (
        "__dict__", "_queue", "authenticated", "bucket", "closing", "last_interaction",
        "last_plain", "plain_taken", "protocol", "restricted",
    )  # fmt: skip
    # The fields the RESP connection's C data_received (``server.resp._cconnection``) reads
    # and sets at their offsets, once per read; the others live in the instance dict.

    def __init__(
        self,
        client_id: int,
        config: SessionConfig,
        *,
        addr: str = "",
        laddr: str = "",
        created_at: float = 0.0,
    ) -> None:
        self.id = client_id
        self.config = config
        self.addr = addr
        self.laddr = laddr
        self.created_at = created_at
        self.last_interaction = created_at
        self.protocol = 2
        self.bucket = DEFAULT_BUCKET
        self.authenticated = config.password is None
        self.name: bytes | None = None
        self.lib_name: bytes | None = None
        self.lib_ver: bytes | None = None
        self.no_evict = self.no_touch = False
        self.closing = False
        self._last_command = "NULL"
        self.last_plain: list[list[bytes]] | None = None
        """The commands of the last read the express lane took whole (every one plain and
        counted in ``plain_taken``): ``last_command`` names its last one when asked."""
        self.plain_taken = 0
        """Commands the express lane took (counted as commands and as forwarded)."""
        self.owner_side: object = None
        """The connection's state on the data owner's side, passed on in each ``Forward``."""
        self.close_connection: Callable[[], None] | None = None
        """The connection's: close it once the replies it is owed are written (CLIENT KILL)."""
        self.pubsub = config.pubsub
        self.subscriber: Receiver = _Inbox()
        """Who this session's subscriptions deliver to (its connection, once it has one)."""
        self.restricted = False
        """Subscribed in RESP2: only the subscribe family, PING, QUIT and RESET may run."""
        self._table = config.commands
        self._plain = config.commands.plain_data
        self._queue: list[tuple[list[bytes], CommandSpec]] | None = None
        self._doomed = False
        self._watch: WatchSet | None = None
        self._watched: set[tuple[bytes, bytes]] = set()
        self.rejected = 0
        """Commands refused so far (unknown, wrong arity, not authenticated)."""
        self._commands = self._forwarded = 0
        self._transactions = self._aborted = 0

    @property
    def last_command(self) -> str:
        """The name of the last command run (CLIENT INFO's ``cmd``), "NULL" before any."""
        plain = self.last_plain
        if plain is not None:
            return _PLAIN_NAMES[plain[-1][0]]
        return self._last_command

    @last_command.setter
    def last_command(self, name: str) -> None:
        self._last_command = name
        self.last_plain = None

    @property
    def in_multi(self) -> bool:
        return self._queue is not None

    @property
    def queued(self) -> int:
        """Commands queued in the open transaction."""
        return len(self._queue or ())

    @property
    def watched_keys(self) -> int:
        return len(self._watched)

    def statistics(self) -> SessionStatistics:
        return SessionStatistics(
            self._commands + self.plain_taken, self.rejected, self._forwarded + self.plain_taken,
            self._transactions, self._aborted,
        )

    # -- the decision ------------------------------------------------------------------------

    def handle(self, argv: list[bytes], env: SessionEnv) -> Action:
        """Decide what ``argv`` (one decoded command) does; see the module docstring.

        ``last_interaction`` is the connection's to set, once per read (as Redis does in
        ``readQueryFromClient``), not once per command."""
        if self.closing or not argv:
            return NoReply()
        self._commands += 1
        # The common case first: a data command spelled as clients send it (GET, get), with
        # its arity, authenticated, outside MULTI: forwarded with no further lookup.
        spec = self._plain.get(argv[0])
        if spec is not None and self._queue is None and self.authenticated:
            arity = spec.arity
            if len(argv) == arity if arity > 0 else len(argv) >= -arity:
                self.last_command = spec.name
                self._forwarded += 1
                return Forward(argv, self.bucket, self.protocol, self.owner_side)
        spec = self._table.lookup(argv)
        if spec is None:
            if argv[0].lower() in _HTTP:
                self.closing = True
                return Close()
            top = self._table.top(argv[0])
            return self._reject(unknown_subcommand(argv) if top else unknown_command(argv))
        self.last_command = spec.name
        if not spec.arity_ok(len(argv)):
            return self._reject(wrong_arity(spec.name), spec)
        if not self.authenticated and not spec.no_auth:
            return self._reject(NOAUTH, spec)
        if self._queue is not None and spec.top in SUBSCRIBE_FAMILY:
            return self._reject(NOT_IN_MULTI, spec)
        if self.restricted and spec.top not in ALLOWED_WHEN_SUBSCRIBED:
            return self._reject(subscribed_mode_error(spec.name), spec)
        if self._queue is not None and spec.name not in _RUN_IN_MULTI:
            if self._doomed:  # a doomed transaction is not worth the memory (Redis)
                return Reply(QUEUED, self.protocol)
            if len(self._queue) >= MAX_QUEUED_COMMANDS:
                return self._reject(_TOO_LONG)
            self._queue.append((argv, spec))
            return Reply(QUEUED, self.protocol)
        if not spec.local:
            self._forwarded += 1
            return Forward(argv, self.bucket, self.protocol, self.owner_side)
        if spec.name == "quit":
            self.closing = True
            return ReplyAndClose(OK, self.protocol)
        if spec.name == "exec":
            return self._exec(env)
        if spec.name == "watch":
            return self._watch_keys(argv)
        result = _HANDLERS[spec.top](self, argv, env)
        return Reply(result, self.protocol)  # after the handler: HELLO 3 answers in RESP3

    def plain_run(
        self, commands: list[list[bytes]], start: int, end: int | None = None
    ) -> int:
        """Where the run of plain commands that starts at ``commands[start]`` ends: each a
        command of ``store.PLAIN_ARITY`` spelled as clients send it, with its arity, while
        the session is authenticated and outside MULTI, so ``handle`` would forward each as
        it is. They are counted as forwarded; the connection sends them to the owner as one
        ``PlainRun`` (see ``store._plainrun``). ``end``: ``plain_end``'s answer, if known."""
        if end is None:
            end = self.plain_end(commands, start)
        if end > start:
            self._commands += end - start
            self._forwarded += end - start
            self.last_command = _PLAIN_NAMES[commands[end - 1][0]]
        return end

    def plain_end(self, commands: list[list[bytes]], start: int) -> int:
        """``plain_run`` without counting anything: where the run would end."""
        if not self.plain_ready():
            return start
        return plain_end(commands, start, RUN_ARITY)

    def plain_ready(self) -> bool:
        """Whether the session is in its plain state (authenticated, outside MULTI, not
        closing, not restricted to pub/sub), where a plain command is forwarded as it is."""
        return (
            self._queue is None and self.authenticated and not self.closing
            and not self.restricted
        )

    def _reject(self, error: ErrorReply, spec: CommandSpec | None = None) -> Reply:
        self.rejected += 1
        if spec is not None and spec.name == "exec":
            self._end_transaction()
            self._aborted += 1
            return Reply(exec_abort(error), self.protocol)
        if self._queue is not None:
            self._doomed = True
        return Reply(error, self.protocol)

    # -- transactions ------------------------------------------------------------------------

    def _end_transaction(self) -> tuple[list[tuple[list[bytes], CommandSpec]], WatchSet | None]:
        queue, watch = self._queue or [], self._watch
        self._queue, self._doomed, self._watch = None, False, None
        self._watched.clear()
        return queue, watch

    def _exec(self, env: SessionEnv) -> Action:
        if self._queue is None:
            return Reply(ErrorReply("ERR EXEC without MULTI"), self.protocol)
        doomed = self._doomed
        queue, watch = self._end_transaction()
        if doomed:
            self._aborted += 1
            return Reply(EXECABORT, self.protocol)
        self._transactions += 1
        commands: list[TransactionCommand] = []
        local: list[tuple[int, Result]] = []
        for position, (argv, spec) in enumerate(queue):
            if spec.local:
                local.append((position, _HANDLERS[spec.top](self, argv, env)))
            else:
                commands.append(TransactionCommand(argv, self.bucket))
        if not commands and watch is None:
            return Reply([result for _, result in local], self.protocol)
        self._forwarded += 1
        return ForwardTransaction(tuple(commands), watch, self.protocol, tuple(local))

    def _multi(self, argv: list[bytes], env: SessionEnv) -> Result:
        if self._queue is not None:
            return ErrorReply("ERR MULTI calls can not be nested")
        self._queue = []
        return OK

    def _discard(self, argv: list[bytes], env: SessionEnv) -> Result:
        if self._queue is None:
            return ErrorReply("ERR DISCARD without MULTI")
        self._end_transaction()
        return OK

    def _watch_keys(self, argv: list[bytes]) -> Action:
        if self._queue is not None:
            return Reply(ErrorReply("ERR WATCH inside MULTI is not allowed"), self.protocol)
        if self._watch is None:
            self._watch = WatchSet()
        self._watched.update((self.bucket, key) for key in argv[1:])
        self._forwarded += 1
        return ForwardWatch(tuple(argv[1:]), self.bucket, self._watch, self.protocol)

    def _unwatch(self, argv: list[bytes], env: SessionEnv) -> Result:
        # A fresh WatchSet next time: the owner may still hold (weakly) the old one.
        self._watch = None
        self._watched.clear()
        return OK

    # -- pub/sub -------------------------------------------------------------------------------

    def pubsub_changed(self) -> None:
        """Subscriptions or protocol changed: in RESP2 with subscriptions the connection may
        run only the subscribe family, PING, QUIT and RESET (Redis 7), so the fast path for
        data commands is off (an empty table) and runs of plain commands are not made."""
        self.restricted = self.protocol == 2 and self.pubsub.subscribed(self.subscriber)
        self._plain = {} if self.restricted else self._table.plain_data

    def forget_subscriptions(self) -> None:
        """RESET or a closed connection: every subscription goes, without confirmations."""
        self.pubsub.drop(self.subscriber)
        self.pubsub_changed()

    @property
    def subscriptions(self) -> tuple[int, int, int]:
        """Channels, patterns and shard channels subscribed to (CLIENT LIST's sub, psub, ssub)."""
        me, registry = self.subscriber, self.pubsub
        return (
            len(registry.channels_of(me)),
            len(registry.patterns_of(me)),
            registry.shard_count(me),
        )

    # -- connection commands -----------------------------------------------------------------

    def _ping(self, argv: list[bytes], env: SessionEnv) -> Result:
        if len(argv) > 2:  # arity -1 admits it; Redis's pingCommand refuses it
            return ErrorReply("ERR wrong number of arguments for 'ping' command")
        if self.restricted:  # Redis answers a subscribed RESP2 client with an array
            return [b"pong", argv[1] if len(argv) == 2 else b""]
        return argv[1] if len(argv) == 2 else PONG

    def _echo(self, argv: list[bytes], env: SessionEnv) -> Result:
        return argv[1]

    def _time(self, argv: list[bytes], env: SessionEnv) -> Result:
        micros = int(env.unix_time() * 1_000_000)
        return [str(micros // 1_000_000).encode(), str(micros % 1_000_000).encode()]

    def _credentials_ok(self, user: bytes, password: bytes) -> bool:
        expected = self.config.password
        if expected is None:
            return user == DEFAULT_USER  # Redis's default user is "nopass": any password
        # Compare the password in constant time even for a wrong user name.
        return hmac.compare_digest(password, expected) & (user == DEFAULT_USER)

    def _auth(self, argv: list[bytes], env: SessionEnv) -> Result:
        if len(argv) > 3:
            return SYNTAX
        if len(argv) == 2:
            if self.config.password is None:
                return NO_PASSWORD
            user, password = DEFAULT_USER, argv[1]
        else:
            user, password = argv[1], argv[2]
        if not self._credentials_ok(user, password):
            return WRONGPASS
        self.authenticated = True
        return OK

    def _hello(self, argv: list[bytes], env: SessionEnv) -> Result:
        version = 0
        i = 1
        if len(argv) >= 2:
            parsed = parse_integer(argv[1])
            if parsed is None:
                return ErrorReply("ERR Protocol version is not an integer or out of range")
            version = parsed
            if version not in (2, 3):
                return ErrorReply("NOPROTO unsupported protocol version")
            i = 2
        credentials: tuple[bytes, bytes] | None = None
        name: bytes | None = None
        while i < len(argv):
            option, more = argv[i].lower(), len(argv) - 1 - i
            if option == b"auth" and more >= 2:
                credentials = (argv[i + 1], argv[i + 2])
                i += 3
            elif option == b"setname" and more >= 1:
                name = argv[i + 1]
                if not printable(name):
                    return BAD_CLIENT_NAME
                i += 2
            else:
                return one_line(b"ERR Syntax error in HELLO option '" + argv[i] + b"'")
        if credentials is not None:
            if not self._credentials_ok(*credentials):
                return WRONGPASS
            self.authenticated = True
        if not self.authenticated:
            return HELLO_NOAUTH
        if name is not None:
            self.name = name or None
        if version:
            self.protocol = version
            self.pubsub_changed()  # subscribed and back to RESP2: restricted again
        return {
            b"server": b"redis",
            b"version": self.config.facts.redis_version.encode(),
            b"proto": self.protocol,
            b"id": self.id,
            b"mode": b"standalone",
            b"role": b"master",
            b"modules": [],
        }

    def _select(self, argv: list[bytes], env: SessionEnv) -> Result:
        name = argv[1]
        number = parse_integer(name)
        if number is not None and number < 0:
            return ErrorReply("ERR DB index is out of range")
        if _BUCKET.fullmatch(name) is None:
            return ErrorReply(
                "ERR DB index is out of range: a database is a number or a bucket name of "
                f"1-{MAX_NAME_CHARS} characters from [A-Za-z0-9_.:/-]"
            )
        self.bucket = name
        return OK

    def _reset(self, argv: list[bytes], env: SessionEnv) -> Result:
        self._end_transaction()
        self.protocol = 2
        self.bucket = DEFAULT_BUCKET
        self.authenticated = self.config.password is None
        self.name = None
        self.no_evict = self.no_touch = False
        self.forget_subscriptions()
        return Simple("RESET")

    def _info(self, argv: list[bytes], env: SessionEnv) -> Result:
        snapshot = env.snapshot()
        blocked = sum(map(is_blocked, env.sessions()))
        if blocked:
            snapshot = replace(snapshot, blocked_clients=blocked)
        snapshot = with_pubsub_figures(snapshot, self.pubsub)
        return Verbatim(render_info(sections_for(argv[1:]), self.config.facts, snapshot))

    def _client(self, argv: list[bytes], env: SessionEnv) -> Result:
        return client_command(self, argv, env)

    def _config(self, argv: list[bytes], env: SessionEnv) -> Result:
        return config_command(argv, self._table, self.config.facts)

    def _command(self, argv: list[bytes], env: SessionEnv) -> Result:
        return command_command(argv, self._table)


class _Inbox:
    """A session's subscriber until a connection takes its place: keeps what it receives
    (the pure tests read it)."""

    __slots__ = ("received",)

    def __init__(self) -> None:
        self.received: list[tuple[Message, bytes | None]] = []

    def receive(self, messages: list[tuple[Message, bytes | None]]) -> None:
        self.received += messages


_HANDLERS: dict[str, _Handler] = {
    "auth": RespSession._auth,
    "client": RespSession._client,
    "command": RespSession._command,
    "config": RespSession._config,
    "discard": RespSession._discard,
    "echo": RespSession._echo,
    "hello": RespSession._hello,
    "info": RespSession._info,
    "multi": RespSession._multi,
    "ping": RespSession._ping,
    "psubscribe": psubscribe,
    "pubsub": pubsub_command,
    "punsubscribe": punsubscribe,
    "reset": RespSession._reset,
    "select": RespSession._select,
    "ssubscribe": subscribe,
    "subscribe": subscribe,
    "sunsubscribe": unsubscribe,
    "time": RespSession._time,
    "unsubscribe": unsubscribe,
    "unwatch": RespSession._unwatch,
}
"""Connection commands by top-level name (QUIT, EXEC and WATCH return actions, see ``handle``)."""
