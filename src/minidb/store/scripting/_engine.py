"""Running one script: ``ScriptEngine``, the bridge between Lua and the command engine.

A script runs inside the data owner like an ``EXEC`` whose commands are decided as it runs:
every ``redis.call`` goes through the store's command engine (``_commands._run``) with the
owner's journal, without closing a group, so everything the script changed is part of the
group of the command that ran it (``EVAL``): one log record, replayed whole or not at all, made
of the effects (``Put``, ``Remove``...), never of the script. Nobody else runs meanwhile.

What ``redis.call`` may run: the store's commands, ``PING`` and ``ECHO``; Redis's errors for
the rest ("Unknown Redis command called from script", "This Redis command is not allowed from
script" for MULTI/EXEC/WATCH/EVAL/SCRIPT/blocking commands, as Redis 7.0 answers them), and for
a write in ``EVAL_RO``/``EVALSHA_RO``. ``SELECT`` inside a script changes the script's database
only, as in Redis 7. ``PUBLISH`` works: its messages leave with the group's replies, after
the log write, like any PUBLISH.

The time limit (``time_limit_ms``, ``--lua-time-limit``): past it the sandbox's count hook stops
the script with ``ERR Script killed ...`` and, better than Redis (which can stop a script only
before it wrote), everything the script changed is taken back through the journal's undo
entries, so the reply is an error and the store is as before the script (and what it
PUBLISHed is not delivered). The owner serves no
one while a script runs (one thread), so there is no ``BUSY`` state and ``SCRIPT KILL`` always
answers ``NOTBUSY``: the time limit is how a runaway script ends.

Errors are worded as Redis 7's: a failing ``redis.call`` or a runtime error ends the script
with ``<error> script: <sha>, on @user_script:<line>.``; writes done before the error stand (as
in Redis); ``redis.pcall`` returns the error as ``{err=...}``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from minidb.protocol._results import SIMPLE_PONG
from minidb.store._args import Command, Session
from minidb.store._journal import OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._pubsub import registry_for
from minidb.store._results import ErrorReply, Result
from minidb.store.scripting import _libs, _msgpack
from minidb.store.scripting._cache import MAX_SCRIPT_BYTES, ScriptCache, sha1_of
from minidb.store.scripting._convert import argument_of, error_text, reply_of, to_lua
from minidb.store.scripting._sandbox import DEFAULT_MAX_MEMORY, LuaError, Sandbox
from minidb.store.scripting._shebang import Script, one_line, parse_shebang

DEFAULT_TIME_LIMIT_MS = 5000
"""How long a script may run before it is stopped and undone (Redis's ``lua-time-limit``
default; there it only lets other clients SCRIPT KILL it)."""

NOT_IN_SCRIPTS = frozenset({
    b"multi", b"exec", b"discard", b"watch", b"unwatch", b"eval", b"evalsha", b"eval_ro",
    b"evalsha_ro", b"script", b"subscribe", b"psubscribe", b"ssubscribe", b"unsubscribe",
    b"punsubscribe", b"sunsubscribe", b"auth", b"hello", b"quit", b"reset", b"client",
    b"monitor", b"wait",
})  # fmt: skip
"""Commands Redis flags ``noscript`` (blocking ones are found by their ``blocking`` flag)."""

NO_ARGUMENTS = "ERR Please specify at least one argument for this redis lib call"
BAD_ARGUMENT = "ERR Lua redis lib command arguments must be strings or integers"
UNKNOWN_IN_SCRIPT = "ERR Unknown Redis command called from script"
ARITY_IN_SCRIPT = "ERR Wrong number of args calling Redis command from script"
NOT_ALLOWED = "ERR This Redis command is not allowed from script"
WRITE_IN_READ_ONLY = "ERR Write commands are not allowed from read-only scripts."
NOSCRIPT = "NOSCRIPT No matching script. Please use EVAL."
NOT_BUSY = "NOTBUSY No scripts in execution right now."
TOO_MANY_SCRIPTS = "ERR too many scripts loaded: SCRIPT FLUSH frees the cache"
SCRIPT_TOO_LONG = f"ERR script too long: at most {MAX_SCRIPT_BYTES} bytes"


WRITE_FLAG_IN_READ_ONLY = "ERR Can not execute a script with write flag using *_ro command."


def killed_message(limit_ms: int) -> str:
    return (
        f"ERR Script killed by time limit: it ran longer than {limit_ms} ms "
        "(--lua-time-limit) and its writes were rolled back"
    )


@dataclass(slots=True)
class _Running:
    """The script being run: what ``redis.call`` runs its commands against."""

    ks: Keyspace
    session: Session
    journal: OpJournal
    now_ms: int
    read_only: bool


class ScriptEngine:
    """The server's scripting: its Lua sandbox (made at the first script), its cache, and the
    run of one script at a time."""

    def __init__(
        self,
        *,
        time_limit_ms: int = DEFAULT_TIME_LIMIT_MS,
        max_memory: int = DEFAULT_MAX_MEMORY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.time_limit_ms = time_limit_ms
        self.max_memory = max_memory
        self.clock = clock
        self.cache = ScriptCache()
        self._sandbox: Sandbox | None = None
        self._commands: dict[bytes, Command] = {}
        self._run_command: Callable[[Keyspace, Session, list[bytes], OpJournal, int], Result]
        self._table: Callable[[Any], Any]
        self._running: _Running | None = None
        self._deadline: float | None = None
        self._killed = False
        self.scripts_run = self.scripts_killed = 0

    # -- the sandbox and the cache --------------------------------------------------------

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = self._make_sandbox()
        return self._sandbox

    def _make_sandbox(self) -> Sandbox:
        # The command table, bound once: the command engine imports this package, so it is
        # complete only by the time the first script runs (an import per call costs ~4 us).
        from minidb.store._commands import COMMANDS, _run

        self._commands, self._run_command = COMMANDS, _run
        box = Sandbox(
            self._call, self._call_raising, _describe, self._time_up, max_memory=self.max_memory
        )
        table = self._table = box.table
        box.install("redis", {
            b"call": box.call,
            b"pcall": box.pcall,
            b"error_reply": _libs.error_reply_of(table),
            b"status_reply": _libs.status_reply_of(table),
            b"sha1hex": _libs.sha1hex,
            b"log": _libs.redis_log,
            b"LOG_DEBUG": 0, b"LOG_VERBOSE": 1, b"LOG_NOTICE": 2, b"LOG_WARNING": 3,
            b"setresp": self._setresp,
            b"set_repl": _libs.redis_set_repl,
            b"replicate_commands": lambda *args: True,
            b"breakpoint": lambda *args: False,
            b"debug": lambda *args: None,
            b"REPL_NONE": 0, b"REPL_AOF": 1, b"REPL_SLAVE": 2, b"REPL_REPLICA": 2,
            b"REPL_ALL": 3,
            b"REDIS_VERSION": b"7.2.0", b"REDIS_VERSION_NUM": 0x070200,
        })  # fmt: skip
        box.install("cjson", _libs.cjson_library(table))
        box.install("bit", _libs.BIT_LIBRARY)
        box.install("cmsgpack", _msgpack.cmsgpack_library(table))
        return box

    def compile(self, body: bytes) -> tuple[bytes, Script] | ErrorReply:
        """The script's SHA1 and compiled form (from the cache, or compiled), or the error."""
        if len(body) > MAX_SCRIPT_BYTES:
            return ErrorReply(SCRIPT_TOO_LONG)
        sha = sha1_of(body)
        script = self.cache.get(sha)
        if script is not None:
            return sha, script
        shebang = parse_shebang(body)
        if isinstance(shebang, ErrorReply):
            return shebang
        flags, code = shebang
        try:
            fn, error = self.sandbox.compile(code)
        except LuaError as exc:  # out of memory while compiling
            return ErrorReply(one_line(f"ERR Error compiling script (new function): {exc}"))
        if fn is None:
            return ErrorReply(one_line(f"ERR Error compiling script (new function): {error}"))
        return sha, Script(fn, flags)

    def load(self, body: bytes) -> Result:
        """``SCRIPT LOAD``: the SHA1, the script kept."""
        compiled = self.compile(body)
        if isinstance(compiled, ErrorReply):
            return compiled
        sha, script = compiled
        if not self.cache.add_loaded(sha, script):
            return ErrorReply(TOO_MANY_SCRIPTS)
        return sha

    # -- running ---------------------------------------------------------------------------

    def run(
        self,
        ks: Keyspace,
        session: Session,
        sha: bytes,
        script: Script,
        keys: list[bytes],
        args: list[bytes],
        journal: OpJournal,
        now_ms: int,
        *,
        read_only: bool,
    ) -> Result:
        """Run ``script`` (compiled, cached); its reply. Its changes are noted in ``journal``'s
        open group (or none, if it was stopped by the time limit)."""
        if self._running is not None:
            return ErrorReply(NOT_ALLOWED)  # redis.call('eval') never gets here; belt and braces
        if script.flags is not None:
            if read_only and b"no-writes" not in script.flags:
                return ErrorReply(WRITE_FLAG_IN_READ_ONLY)
            read_only = read_only or b"no-writes" in script.flags
        box = self.sandbox
        records_mark, ops_mark, undo_mark = (
            len(journal.records), len(journal.open_ops), len(journal.undo)
        )
        outbox = registry_for(ks).outbox
        published_mark = len(outbox)
        # The script's own session: a SELECT inside it is the script's business (Redis 7).
        own = Session(bucket=session.bucket, protocol=2)
        self._running = _Running(ks, own, journal, now_ms, read_only)
        self._killed = False
        self._deadline = self.clock() + self.time_limit_ms / 1000
        self.scripts_run += 1
        try:
            ok, value = box.run(script.fn, keys, args)
        except LuaError as exc:  # the state ran out of memory outside the script's pcall
            ok, value = False, (str(exc) or "not enough memory").encode()
        finally:
            self._running = None
            self._deadline = None
            if self._killed:
                box.clear_hook()
        trailer = f" script: {sha.decode()}"
        if self._killed:
            self.scripts_killed += 1
            _take_back(ks, journal, records_mark, ops_mark, undo_mark)
            del outbox[published_mark:]  # what it published is not delivered either
            return ErrorReply(killed_message(self.time_limit_ms) + trailer + _where(value))
        if ok:
            try:
                return reply_of(value)
            except LuaError as exc:
                return ErrorReply(one_line(f"{_running_error(sha)}: {exc}"))
        message = error_text(value)
        if message is None:  # not a table: Lua's own message (no memory, error in handler)
            box.collect_garbage()
            text = value.decode("utf-8", "replace") if type(value) is bytes else str(value)
            if "not enough memory" in text:
                text += f" (the Lua state is bounded at {self.max_memory} bytes)"
            return ErrorReply(one_line(f"{_running_error(sha)}: {text}"))
        return ErrorReply(one_line(message + trailer + _where(value)))

    def _time_up(self) -> bytes | None:
        """The count hook's question: the kill message once the script's time is up."""
        deadline = self._deadline
        if deadline is None:
            return None
        if self._killed or self.clock() > deadline:
            self._killed = True
            return killed_message(self.time_limit_ms).encode()
        return None

    def _call(self, *args: Any) -> tuple[bool, Any]:
        """``redis.pcall``: (True, the result as a Lua value) or (False, the error's text)."""
        running = self._running
        if running is None:
            return False, NOT_ALLOWED.encode()
        if not args:
            return False, NO_ARGUMENTS.encode()
        argv = []
        for arg in args:
            word = argument_of(arg)
            if word is None:
                return False, BAD_ARGUMENT.encode()
            argv.append(word)
        result = self._dispatch(running, argv)
        if type(result) is ErrorReply:
            return False, result.message.encode("utf-8", "surrogateescape")
        return True, to_lua(result, self._table)

    def _call_raising(self, *args: Any) -> Any:
        """``redis.call``: the result as a Lua value, or the error raised (as a
        ``ScriptCallError``, which the sandbox turns into ``{err=...}``)."""
        ok, value = self._call(*args)
        if not ok:
            raise ScriptCallError(value)
        return value

    def _dispatch(self, running: _Running, argv: list[bytes]) -> Result:
        name = argv[0].lower()
        if name in NOT_IN_SCRIPTS:
            return ErrorReply(NOT_ALLOWED)
        if name == b"ping" and len(argv) <= 2:
            return argv[1] if len(argv) == 2 else SIMPLE_PONG
        if name == b"echo":
            return argv[1] if len(argv) == 2 else ErrorReply(ARITY_IN_SCRIPT)
        cmd = self._commands.get(name)
        if cmd is None:
            return ErrorReply(UNKNOWN_IN_SCRIPT)
        if (cmd.arity > 0 and len(argv) != cmd.arity) or len(argv) < -cmd.arity:
            return ErrorReply(ARITY_IN_SCRIPT)
        if "blocking" in cmd.flags:
            return ErrorReply(NOT_ALLOWED)
        if running.read_only and "write" in cmd.flags:
            return ErrorReply(WRITE_IN_READ_ONLY)
        return self._run_command(
            running.ks, running.session, argv, running.journal, running.now_ms
        )

    def _setresp(self, version: Any = None, *rest: Any) -> None:
        if version != 2 or rest:
            raise _libs.ScriptLibraryError(
                "RESP version must be 2 (minidb's scripts speak RESP2 only)"
            )


class ScriptCallError(Exception):
    """A ``redis.call`` answered an error; ``message`` is its text (``ERR ...``)."""

    def __init__(self, message: bytes) -> None:
        super().__init__(message.decode("utf-8", "replace"))
        self.message = message


def _describe(error: Any) -> tuple[bytes, bool]:
    """A Python exception raised into a script: its text, and whether it is a ``redis.call``
    error (its text is the reply's) rather than a library's (Lua's wording is added)."""
    if isinstance(error, ScriptCallError):
        return error.message, True
    return str(error).encode("utf-8", "surrogateescape"), False


def _where(error: Any) -> str:
    """``, on @user_script:<line>.`` from an error table that has its place, else ``""``."""
    try:
        source, line = error[b"source"], error[b"line"]
    except (TypeError, LuaError):
        return ""
    if type(source) is bytes and type(line) in (int, float):
        return f", on {source.decode('utf-8', 'replace')}:{int(line)}."
    return ""


def _running_error(sha: bytes) -> str:
    return f"ERR Error running script (call to f_{sha.decode()})"


def _take_back(
    ks: Keyspace, journal: OpJournal, records_mark: int, ops_mark: int, undo_mark: int
) -> None:
    """Undo what was noted in ``journal`` after the marks (newest first), and forget it."""
    taken = OpJournal()
    taken.undo = journal.undo[undo_mark:]
    del journal.undo[undo_mark:]
    ops = journal.open_ops
    if len(journal.records) > records_mark:  # a group closed meanwhile: reopen the first
        kept = journal.records[records_mark][:ops_mark]
        del journal.records[records_mark:]
        ops[:] = kept  # open_ops is the open group itself
    else:
        del ops[ops_mark:]
    ks.rollback(taken)
