"""A run of plain Redis commands in one call: ``run_plain``, with its C twin.

Theory of operation
===================

A RESP connection that reads ``GET a`` ``SET b 1`` ``GET b`` (redis-benchmark, a pipelining
client) sends them to the data owner as one ``PlainRun`` rather than one request per command,
and the owner runs the whole run with one call of ``run_plain``: Python runs once per run, not
once per command. What makes a command *plain* is decided on both sides:

- the connection (``PLAIN_ARITY``): its name is one of the plain commands with an arity the
  command table accepts, and the session is in its plain state (authenticated, outside
  ``MULTI``); every such command would have been forwarded to the owner as it is;
- the owner (the C twin, ``_cplain.c``): the keys it touches hold strings, without a deadline or
  with one not yet passed, nobody WATCHes a key when it writes, the bucket keeps no SCAN index
  when it adds or removes keys, and the command answers no error. Then it runs in C: the
  bucket's dict changes in place, the journal gets exactly what ``Keyspace`` would note (a
  ``KeyUndo`` per key replaced, one closed group of ``Put``/``Remove`` ops per command) and the
  reply is encoded into the run's one buffer. Anything else, decided before anything changes,
  is handed to ``fallback(argv)``: the Python engine (``execute`` and the RESP encoder), which
  answers it as it answers any forwarded command; the run then goes on in C with the next.

``run_plain_python`` is the reference: it hands every command to ``fallback``. Property tests
hold the two to each other: the same replies byte for byte, the same keyspace, the same journal
(and so the same log bytes) and the same counts, for random runs over random keyspaces.

Inline reads. With ``fallback`` None, a run is a connection's read served in its own
callback while the owner is idle (waiting for work with an empty mailbox, so no group is
half done and the journal is empty): the C twin runs only reads (GET, MGET, EXISTS, TTL, PTTL,
PING) as far as they are plain, and stops at the first command that is not, which goes to the
owner with the rest. It changes nothing (a key past its deadline is not plain: its lazy
expiry is a write, the owner's), so it needs no log. The Python twin runs nothing inline.

Runs of the loop turn's group. ``express`` also runs, the owner idle, what follows those
reads with writes allowed and the owner's journal (the C twin's ``run_with``): a run of the
loop turn's group (``store._actor``, "Writes of the turn"), plain as for the owner and noted
in the journal exactly as the owner's run notes it, stopping at the first command Python must
run, which the connection runs in the turn through the executor. The Python twin runs nothing
there either: the connection runs every command through the executor.

The turn's answers. Once the loop turn's group is logged, ``answer_turn`` hands each of its
runs its replies (``sink.turn_answered``), in the order they ran: once per request at
redis-benchmark ``-P 1``, so the C twin's loop spares a dozen bytecodes a request.

Output room. A run stops after the command whose reply took ``room`` below zero, as the owner
does between requests; the commands from ``next`` on are not run, and the caller hands them
back (see ``store._actor``, "Output room").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from minidb._accelerators import load
from minidb.protocol import MAX_VALUE_BYTES, NIL, OK, Bulk, Delete, Get, Request, Set
from minidb.store._journal import KeyUndo, OpJournal, PutsUndo
from minidb.store._keyspace import Keyspace, _Expiring
from minidb.wal._ops import Put, Remove

PLAIN_ARITY: dict[bytes, int] = {
    b"get": 2, b"set": -3, b"mget": -2, b"mset": -3, b"del": -2, b"unlink": -2,
    b"exists": -2, b"incr": 2, b"decr": 2, b"incrby": 3, b"decrby": 3, b"expire": -3,
    b"pexpire": -3, b"ttl": 2, b"pttl": 2, b"ping": -1,
}
"""The commands a connection may put in a run, lower case, with their arity as Redis's command
table gives it (negative: at least that many). PING stands alone: with an argument it is the
session's (its reply depends on the protocol), so a run takes it only bare (see
``plain_arity``). Those without a C handler (EXPIRE, SET with options) run through the
fallback, inside the run."""

PLAIN_READS: frozenset[bytes] = frozenset(
    spelling for name in (b"get", b"mget", b"exists", b"ttl", b"pttl", b"ping")
    for spelling in (name, name.upper())
)
"""The plain commands that only read, as clients spell them: what an inline run (no fallback)
serves; the C twin stops at any other."""

Fallback = Callable[[list[bytes]], bytes]
"""Runs one command through the Python engine; its reply in wire form."""


def plain_arity() -> dict[bytes, int]:
    """``PLAIN_ARITY`` under the two spellings clients send (``get``, ``GET``), with PING only
    bare (arity exactly 1): the connection's lookup, without folding the case."""
    table = {name: (1 if name == b"ping" else arity) for name, arity in PLAIN_ARITY.items()}
    return {**table, **{name.upper(): arity for name, arity in table.items()}}


def plain_end_python(commands: list[list[bytes]], start: int, arities: dict[bytes, int]) -> int:
    """Where the run of commands from ``commands[start]`` whose names ``arities`` holds (as
    sent), each with its arity (negative: at least), ends. The reference of the C twin."""
    end, size = start, len(commands)
    while end < size:
        argv = commands[end]
        arity = arities.get(argv[0]) if argv else None
        if arity is None or (len(argv) != arity if arity > 0 else len(argv) < -arity):
            break
        end += 1
    return end


def run_plain_python(
    ks: Keyspace,
    journal: OpJournal,
    argvs: list[list[bytes]],
    start: int,
    bucket: bytes,
    protocol: int,
    now_ms: int,
    room: int,
    max_reply: int,
    calls: dict[bytes, int],
    fallback: Fallback | None,
) -> tuple[int, bytes, int]:
    """Run ``argvs[start:]`` in order while ``room`` is not negative; (the index of the first
    command not run, every reply joined, the room left). The reference: every command goes
    to ``fallback``, which counts it in ``calls`` itself. Without one (an inline read, see
    the module docstring) nothing runs here: only the C twin runs plain reads itself."""
    if fallback is None:
        return start, b"", room
    replies = []
    at, end = start, len(argvs)
    while at < end and room >= 0:
        reply = fallback(argvs[at])
        at += 1
        replies.append(reply)
        room -= len(reply)
    return at, b"".join(replies), room


Scan = Callable[[bytes, int, list[list[bytes]], int, int, int], int]
"""The RESP decoder's ``scan_raw(data, pos, out, limit, max_count, max_bulk)`` (protocol's
``_cresp``): the commands of a read, as far as they are complete and plainly valid."""

ExpressLane = tuple[int, dict[bytes, int], frozenset[bytes], Keyspace, OpJournal,
                    Callable[[], int], int, dict[bytes, int], bytes, int,
                    Callable[[], int] | None, bool, OpJournal | None]  # fmt: skip
"""``express``'s last argument: (limit, arities, reads, ks, journal, room_of, max_reply, calls,
bucket, protocol, clock, inline, turn): the read's limit, ``plain_end``'s arities, the
commands an inline read may start with (``PLAIN_READS``), an inline ``run_plain``'s arguments,
the output room and the clock as callables asked only when something runs (``clock`` None:
the owner is not idle, nothing does), whether reads may be served at once (``inline``), and
the owner's journal when the loop turn's group may take a run (``turn``, else None). The
first eight are a connection's for its life, the last five change from read to read: a
connection builds the head once and adds the tail per read."""

Express = tuple[list[list[bytes]], int, int, bytes, int, bytes]
"""What ``express`` took: (commands, where their plain run ends, reads served, their replies,
where the run in the loop turn's group stopped, its replies)."""


def express_python(
    scan: Scan, data: bytes, max_count: int, max_bulk: int, lane: ExpressLane
) -> Express | None:
    """A RESP connection's express lane in one call: ``scan`` decodes the whole read ``data``
    (None if it is not entirely complete, plainly valid commands, at most ``limit``);
    ``plain_end`` says where their plain run ends. The reference of the C twin, which makes
    one call of the three and, the owner idle, also serves the plain reads at the head at once
    (``inline``) and runs what follows in the loop turn's group (``turn``) as far as it is
    plain: like ``run_plain_python`` without a fallback, this one runs nothing itself, and the
    caller runs every command the usual way."""
    limit, arities = lane[0], lane[1]
    commands: list[list[bytes]] = []
    if scan(data, 0, commands, limit, max_count, max_bulk) != len(data) or not commands:
        return None
    return commands, plain_end_python(commands, 0, arities), 0, b"", 0, b""


def wall_clock_ms_python() -> int:
    """The owner's default clock: milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


def answer_turn_python(turn: list[tuple[Any, Any, Any, bytes]]) -> None:
    """Hand each run of the loop turn's group, ``(sink, executor, request, replies)``, its
    replies, in order."""
    for sink, _, _, replies in turn:
        sink.turn_answered(replies)


_c = load("minidb.store._cplain")
if _c is not None:
    _c.bind(KeyUndo, Put, Remove, _Expiring)
    _c.bind_line(Get, Set, Delete, Bulk, PutsUndo, MAX_VALUE_BYTES, OK, NIL)

run_plain: Callable[..., tuple[int, bytes, int]] = (
    _c.run if _c is not None else run_plain_python
)
"""``run_plain_python``, in C when the accelerator is built (see the module docstring)."""

plain_end: Callable[[list[list[bytes]], int, dict[bytes, int]], int] = (
    _c.plain_end if _c is not None else plain_end_python
)
"""``plain_end_python``, in C when the accelerator is built."""

express: Callable[[Scan, bytes, int, int, ExpressLane], Express | None] = (
    _c.express if _c is not None else express_python
)
"""``express_python``, in C when the accelerator is built."""

wall_clock_ms: Callable[[], int] = (
    _c.wall_clock_ms if _c is not None else wall_clock_ms_python
)
"""``wall_clock_ms_python``, in C when the accelerator is built: the express lane asks the
clock once per read it serves, where a Python function would be a frame of its own."""

answer_turn: Callable[[list[tuple[Any, Any, Any, bytes]]], None] = (
    _c.answer_turn if _c is not None else answer_turn_python
)
"""``answer_turn_python``, in C when the accelerator is built."""

ACCELERATED = _c is not None

LineCounts = tuple[int, int, int, int, int]
"""What ``run_line`` ran itself: GETs, GET hits, SETs (rows of a frame included), DELs, DEL
hits (what it handed to the fallback, ``StoreState.execute``, counted itself)."""

run_line: Callable[
    [Keyspace, OpJournal, list[Request], int, int, Callable[[Request], bytes]],
    tuple[list[bytes], int, LineCounts],
] | None = _c.run_line if _c is not None else None
"""The C twin of ``StoreState.execute_all_python`` (one connection's batch of line requests;
``_cplain.c``, "the line protocol's batch", says which it runs itself), or None when the
accelerator is not built."""
