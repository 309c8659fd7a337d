"""The scripting commands of the command table: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT.

They run on the server's one ``ScriptEngine`` (``ENGINE``; the server sets its time limit at
start with ``configure``). ``EVAL`` and ``EVALSHA`` carry the ``write`` flag, so a replica or a
store whose log failed refuses them whole (use ``EVAL_RO``: its scripts may only read), as
Redis 7 does for a script not declared ``no-writes``.
"""

from __future__ import annotations

from minidb.store._args import Command, Session, command, int_arg
from minidb.store._journal import OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._results import OK, CommandError, ErrorReply, Result
from minidb.store.scripting._engine import NOSCRIPT, NOT_BUSY, ScriptEngine

ENGINE = ScriptEngine()
"""The process's script engine: one server per process, so this is the server-wide cache."""

NEGATIVE_KEYS = "ERR Number of keys can't be negative"
TOO_MANY_KEYS = "ERR Number of keys can't be greater than number of args"


def configure(*, time_limit_ms: int) -> None:
    """Set the time limit of ``ENGINE`` (``--lua-time-limit``)."""
    ENGINE.time_limit_ms = time_limit_ms


def _keys_and_args(argv: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    numkeys = int_arg(argv[2])
    if numkeys > len(argv) - 3:
        raise CommandError(TOO_MANY_KEYS)
    if numkeys < 0:
        raise CommandError(NEGATIVE_KEYS)
    return argv[3:3 + numkeys], argv[3 + numkeys:]


def _script_command(name: str, flags: str, *, by_sha: bool, read_only: bool) -> Command:
    """EVAL (the body given), EVALSHA (a cached one), read-only or not."""

    def handler(
        ks: Keyspace, session: Session, argv: list[bytes], journal: OpJournal, now_ms: int
    ) -> Result:
        keys, args = _keys_and_args(argv)
        if by_sha:
            sha = argv[1].lower()
            script = ENGINE.cache.get(sha) if len(sha) == 40 else None
            if script is None:
                return ErrorReply(NOSCRIPT)
        else:
            compiled = ENGINE.compile(argv[1])
            if isinstance(compiled, ErrorReply):
                return compiled
            sha, script = compiled
            ENGINE.cache.add_evaluated(sha, script)
        return ENGINE.run(
            ks, session, sha, script, keys, args, journal, now_ms, read_only=read_only
        )

    return Command(name, -3, frozenset(flags.split()), handler)


eval_ = _script_command("eval", "write noscript", by_sha=False, read_only=False)
eval_ro = _script_command("eval_ro", "readonly noscript", by_sha=False, read_only=True)
evalsha = _script_command("evalsha", "write noscript", by_sha=True, read_only=False)
evalsha_ro = _script_command("evalsha_ro", "readonly noscript", by_sha=True, read_only=True)


_SCRIPT_HELP: list[Result] = [
    b"SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"EXISTS <sha1> [<sha1> ...]",
    b"    Return information about the existence of the scripts in the script cache.",
    b"FLUSH [ASYNC|SYNC]",
    b"    Flush the Lua scripts cache. Very dangerous on replicas.",
    b"    When called without the optional mode argument, the behavior is determined by the",
    b"    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    b"    * ASYNC: Asynchronously flush the scripts cache.",
    b"    * SYNC: Synchronously flush the scripts cache.",
    b"KILL",
    b"    Kill the currently executing Lua script.",
    b"LOAD <script>",
    b"    Load a script into the scripts cache without executing it.",
    b"HELP",
    b"    Print this help.",
]


@command("script", -2, "readonly", "noscript")
def script(
    ks: Keyspace, session: Session, argv: list[bytes], journal: OpJournal, now_ms: int
) -> Result:
    sub = argv[1].lower()
    count = len(argv)
    if sub == b"load" and count == 3:
        return ENGINE.load(argv[2])
    if sub == b"exists" and count >= 3:
        return [1 if ENGINE.cache.exists(sha) else 0 for sha in argv[2:]]
    if sub == b"flush" and count <= 3:
        if count == 3 and argv[2].lower() not in (b"async", b"sync"):
            return ErrorReply("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
        ENGINE.cache.flush()
        return OK
    if sub == b"kill" and count == 2:
        # The owner runs one thing at a time: a running script is never found here.
        return ErrorReply(NOT_BUSY)
    if sub == b"help" and count == 2:
        return _SCRIPT_HELP
    name = argv[1].decode("utf-8", "replace")
    if sub in (b"load", b"exists", b"flush", b"kill", b"help"):
        return ErrorReply(f"ERR wrong number of arguments for 'script|{sub.decode()}' command")
    return ErrorReply(f"ERR unknown subcommand '{name[:128]}'. Try SCRIPT HELP.")


COMMANDS: tuple[Command, ...] = (eval_, eval_ro, evalsha, evalsha_ro, script)
