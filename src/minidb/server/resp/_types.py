"""What a RESP connection's session produces: reply values and the actions it asks for.

Reply values are the protocol layer's result vocabulary (``minidb.protocol._results``: bytes,
int, None, list, dict, float, bool, ``Simple``, ``ErrorReply``, ``Verbatim``, ``NULL_ARRAY``),
the same types the data commands answer with, so one ``RespEncoder`` writes both without a
mapping layer. Redis answers INFO/CLIENT INFO with a verbatim string and an aborted EXEC with a
null *array*, which is why those two are part of the vocabulary.

Actions: ``RespSession.handle`` returns exactly one per command, and the connection carries it
out in command order (replies leave in the order the commands arrived, whether answered
locally or by the data owner). Every action carries the protocol version its reply must be
encoded with, fixed when the command was handled: a ``HELLO 3`` pipelined behind a ``GET``
must not change how the ``GET``'s later reply is written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from minidb.protocol._results import (
    NULL_ARRAY,
    SIMPLE_OK,
    SIMPLE_PONG,
    SIMPLE_QUEUED,
    ErrorReply,
    Result,
    Simple,
    Verbatim,
)

__all__ = [
    "NULL_ARRAY",
    "OK",
    "PONG",
    "QUEUED",
    "Action",
    "Close",
    "ErrorReply",
    "Forward",
    "ForwardTransaction",
    "ForwardWatch",
    "NoReply",
    "PlainRun",
    "Reply",
    "ReplyAndClose",
    "Result",
    "Simple",
    "TransactionCommand",
    "Verbatim",
    "WatchSet",
    "parse_integer",
]

OK = SIMPLE_OK
QUEUED = SIMPLE_QUEUED
PONG = SIMPLE_PONG


# -- actions -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer ``result`` now (in turn); the command needed no data."""

    result: Result
    protocol: int


@dataclass(frozen=True, slots=True)
class ReplyAndClose:
    """Answer ``result``, then close the connection once it is written (``QUIT``)."""

    result: Result
    protocol: int


@dataclass(frozen=True, slots=True)
class Close:
    """Close without a reply (an HTTP request line sent to the RESP port)."""


@dataclass(frozen=True, slots=True)
class NoReply:
    """Nothing to do: an empty command, or one that arrived after ``QUIT``."""


@dataclass(slots=True)
class Forward:
    """Run a data command on the data owner against ``bucket``; its result is the reply.

    Not frozen, unlike the other actions: one is made per data command, and a frozen
    dataclass's ``__init__`` (``object.__setattr__`` per field) costs several times more.
    Nobody changes it after ``handle`` returns it. It is also what the data owner receives
    (one object per data command): ``side`` is the connection's state on the owner's side,
    opaque to the session, which only passes on its ``owner_side``."""

    argv: list[bytes]
    bucket: bytes
    protocol: int
    side: object = field(default=None, compare=False, repr=False)

    @property
    def verb(self) -> str:
        """The command's name in upper case (metrics of refused requests)."""
        return self.argv[0].decode("ascii", "replace").upper()


class PlainRun:
    """Plain data commands a connection read back to back, sent to the owner as ONE request
    (``store.run_plain`` runs them in one call; see ``store._plainrun``).

    The run is ``argvs[start:stop]``. The owner sets ``stop`` to where it stopped: a lack of
    output room can leave the commands after it unrun, and those go back to the connection as
    a new run (``remainder``). A run weighs its commands (in flight, in the mailbox)."""

    __slots__ = ("argvs", "bucket", "protocol", "side", "start", "stop")

    def __init__(
        self, argvs: list[list[bytes]], bucket: bytes, protocol: int, side: object,
        start: int = 0,
    ) -> None:
        self.argvs = argvs
        self.bucket = bucket
        self.protocol = protocol
        self.side = side
        self.start = start
        self.stop = len(argvs)

    def __len__(self) -> int:
        """Commands in the run."""
        return self.stop - self.start

    def remainder(self) -> PlainRun | None:
        """A new run of the commands after ``stop``, or None if none is left."""
        if self.stop >= len(self.argvs):
            return None
        return PlainRun(self.argvs, self.bucket, self.protocol, self.side, self.stop)

    @classmethod
    def of_turn(cls, ran: TurnRun) -> PlainRun:
        """The run a ``TurnRun`` stands for."""
        argvs, bucket, protocol, side, start, stop = ran
        run = cls(argvs, bucket, protocol, side, start)
        run.stop = stop
        return run

    def forwards(self) -> list[Forward]:
        """The commands of the run, one ``Forward`` each (the owner's slow paths)."""
        return [
            Forward(argv, self.bucket, self.protocol, self.side)
            for argv in self.argvs[self.start:self.stop]
        ]

    @property
    def verb(self) -> str:
        """The first command's name in upper case (metrics of refused requests)."""
        return self.argvs[self.start][0].decode("ascii", "replace").upper()


TurnRun = tuple[list[list[bytes]], bytes, int, object, int, int]
"""``(argvs, bucket, protocol, side, start, stop)``: a ``PlainRun`` that the express lane's
C call already ran in the loop turn's group, as a plain tuple. It is needed only if the
turn's log write fails (``Executor.expand`` and ``refusal`` then make the ``PlainRun``,
``PlainRun.of_turn``), so a SET at ``redis-benchmark -P 1`` does not build one per request."""


@dataclass(eq=False, slots=True, weakref_slot=True)
class WatchSet:
    """The watch of one connection, shared by reference with the data owner.

    The owner registers it (weakly) under every key a ``ForwardWatch`` names and sets
    ``dirty`` when one of them is written, expires or is flushed; it reads ``dirty`` when the
    ``ForwardTransaction`` carrying it arrives. The session never writes to it after creating
    it: ``UNWATCH``, ``EXEC`` and ``DISCARD`` replace it with a fresh one, so a registration
    still queued in the mailbox can only touch an object nobody will ask about again, and the
    owner's weak references let dropped watches vanish without an unwatch message.
    """

    dirty: bool = False


@dataclass(frozen=True, slots=True)
class ForwardWatch:
    """``WATCH``: the owner registers ``watch`` under each of ``keys`` in ``bucket``.

    The owner processes a connection's messages in order, so whatever it applies after this
    message counts as touching the keys. The reply is ``+OK``.
    """

    keys: tuple[bytes, ...]
    bucket: bytes
    watch: WatchSet
    protocol: int


@dataclass(frozen=True, slots=True)
class TransactionCommand:
    """One queued data command of a transaction, with the bucket selected when it ran."""

    argv: list[bytes]
    bucket: bytes


@dataclass(frozen=True, slots=True)
class ForwardTransaction:
    """``EXEC``: run ``commands`` on the owner as one atomic group, unless ``watch`` is dirty.

    The owner answers ``None`` if ``watch`` is dirty (nothing runs) and otherwise the results
    of ``commands`` in order; ``assemble`` turns that into the reply. Connection commands
    queued in the transaction (``PING``, ``SELECT``...) already ran when ``EXEC`` was handled,
    and ``local`` holds their results by position in the transaction.
    """

    commands: tuple[TransactionCommand, ...]
    watch: WatchSet | None
    protocol: int
    local: tuple[tuple[int, Result], ...] = field(default=())

    @property
    def size(self) -> int:
        return len(self.commands) + len(self.local)

    def assemble(self, results: Sequence[Result] | None) -> Result:
        """The ``EXEC`` reply: the null array if aborted, else every result in queue order."""
        if results is None:
            return NULL_ARRAY
        if len(results) != len(self.commands):
            raise ValueError(f"{len(results)} results for {len(self.commands)} commands")
        local = dict(self.local)
        data = iter(results)
        return [local[i] if i in local else next(data) for i in range(self.size)]


Action: TypeAlias = (
    Reply | ReplyAndClose | Close | NoReply | Forward | ForwardWatch | ForwardTransaction
)


_INTEGER = re.compile(rb"-?[1-9][0-9]{0,18}|0")


def parse_integer(word: bytes) -> int | None:
    """An integer argument as Redis's ``string2ll`` reads one (no sign, space or leading
    zero; 64-bit signed), or ``None``."""
    if _INTEGER.fullmatch(word) is None:
        return None
    value = int(word)
    return value if -(2**63) <= value < 2**63 else None
