"""Blocked clients (BLPOP, BLMOVE, BZPOPMIN and friends): the waiter registry, pure.

Theory of operation, after Redis 7's ``blocking.c``. A blocking command that finds nothing to
serve raises ``WouldBlock`` from its handler. Where blocking is not allowed (inside
MULTI/EXEC, a script, any plain ``execute``), the command engine answers it like any
``CommandError``: with ``WouldBlock.reply``, the reply Redis gives a blocking command that may
not block (a null array, BLMOVE's null). Only a connection's lone blocking request, run with
``execute_blocking``, lets it through: the owner then registers a ``Waiter`` here.

A waiter is keys plus a ``serve`` callable: the registry knows nothing of lists or sorted
sets (XREAD BLOCK can wait through it the same way). ``serve`` runs the command again, as
Redis 7 re-executes a blocked client's command, and gives its reply, or None while it would
still block.

Which keys became ready: one keyspace ``Watch`` per waited key (``_KeyWatch``). The keyspace
already touches the watches of every key it stores, changes or deletes, so whatever makes a
waited key non-empty (a push, LMOVE into it, ZADD, RENAME or COPY onto it, a ``*STORE``) marks
it ready, and a key nobody waits on costs nothing more than it did (the keyspace's one
``if self._watched`` test). A touch that did not make the key servable (a SET replacing the
list, a pop) only costs one look at the key when ready keys are served.

``serve_ready`` is what the owner calls after each request while ``ready`` is non-empty: per
ready key, its waiters in the order they blocked (FIFO, as Redis serves them), each as its own
command, while the key holds a value of the type they wait for. A key of another type keeps
its waiters waiting (Redis 7.2: a list or zset waiter is only woken by its own type). A served
waiter leaves the registry (all its keys) and is handed back to the owner, which releases its
reply after the group's log sync, like every write's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from minidb.protocol._results import NULL_ARRAY
from minidb.store._keyspace import Keyspace, Watch
from minidb.store._results import CommandError, Result

if TYPE_CHECKING:
    from minidb.store._journal import OpJournal

TIMEOUT_NOT_FLOAT = "ERR timeout is not a float or out of range"
TIMEOUT_NEGATIVE = "ERR timeout is negative"
TIMEOUT_OUT_OF_RANGE = "ERR timeout is out of range"
_LLONG_MAX = (1 << 63) - 1
# What strtold takes (Redis's string2ld), without the hex forms: a decimal with an optional
# exponent, or inf/infinity; no spaces, no underscores (Python's float() takes both).
_FLOAT = re.compile(rb"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?)", re.I)


def parse_timeout(text: bytes, now_ms: int = 0) -> float:
    """A blocking command's timeout in seconds (0: forever), as Redis 7.2's
    ``getTimeoutFromObjectOrReply`` reads it: rounded up to whole milliseconds, refused when
    the deadline (``now_ms`` plus it) would not fit in a signed 64-bit millisecond count."""
    if _FLOAT.fullmatch(text) is None:
        raise CommandError(TIMEOUT_NOT_FLOAT)
    ms = float(text) * 1000.0
    if ms > _LLONG_MAX:
        raise CommandError(TIMEOUT_OUT_OF_RANGE)
    if ms == -math.inf or math.ceil(ms) < 0:
        raise CommandError(TIMEOUT_NEGATIVE)
    whole = math.ceil(ms)
    if whole > _LLONG_MAX - now_ms:
        raise CommandError(TIMEOUT_OUT_OF_RANGE)
    return whole / 1000.0


class WouldBlock(CommandError):
    """A blocking command found nothing to serve: block on ``keys`` of the session's bucket
    for ``timeout`` seconds (0: forever) until a value of type ``kind`` is there. ``reply`` is
    the answer where it may not block (MULTI/EXEC, scripts)."""

    def __init__(
        self, keys: tuple[bytes, ...], timeout: float, kind: type, reply: Result
    ) -> None:
        super().__init__("ERR blocked")
        self.keys = keys
        self.timeout = timeout
        self.kind = kind
        self.reply = reply  # type: ignore[assignment]


def pop_first(
    argv: list[bytes],
    now_ms: int,
    kind: type,
    find: Callable[[bytes], Any],
    pop: Callable[[bytes, Any], list[Result]],
) -> Result:
    """BLPOP, BRPOP, BZPOPMIN, BZPOPMAX (``key... timeout``): the timeout checked first, then
    [key, *what ``pop`` took] of the first key ``find`` finds non-empty, in argument order
    (a key of another type answers WRONGTYPE from ``find``); else block on them all."""
    timeout = parse_timeout(argv[-1], now_ms)
    keys = tuple(argv[1:-1])
    for key in keys:
        found = find(key)
        if found is not None:
            return [key, *pop(key, found)]
    raise WouldBlock(keys, timeout, kind, NULL_ARRAY)


Serve = Callable[[Keyspace, "OpJournal", int], "bytes | None"]
"""``serve(keyspace, journal, now_ms)``: run the blocked command again; its reply, or None
while it would still block."""


class Waiter:
    """One blocked request: the keys it waits on and how to serve it; ``timed_out`` is its
    reply at the deadline (Redis: a null array for every list or zset waiter). ``owner`` is
    whatever the owner keeps with it (the batch to answer, the timer), ``release`` how anyone
    on the loop ends the wait (``release(reply)``; None: the client is gone; False if it was
    no longer waiting); ``reply`` is set once served."""

    __slots__ = (
        "bucket", "keys", "kind", "owner", "release", "reply", "serve", "timed_out", "timeout",
    )

    def __init__(
        self,
        bucket: bytes,
        keys: tuple[bytes, ...],
        kind: type,
        timeout: float,
        serve: Serve,
        timed_out: bytes,
    ) -> None:
        self.bucket = bucket
        self.keys = tuple(dict.fromkeys(keys))  # BLPOP k k waits once on k
        self.kind = kind
        self.timeout = timeout
        self.serve = serve
        self.timed_out = timed_out
        self.owner: Any = None
        self.release: Callable[[bytes | None], bool] | None = None
        self.reply: bytes | None = None


class _KeyWatch(Watch):
    """The keyspace's watch of one waited key: a touch marks the key ready."""

    __slots__ = ("_pair", "_ready")

    def __init__(self, pair: tuple[bytes, bytes], ready: dict[tuple[bytes, bytes], None]) -> None:
        self._pair = pair
        self._ready = ready
        super().__init__()

    @property
    def dirty(self) -> bool:
        return False

    @dirty.setter
    def dirty(self, value: bool) -> None:
        if value:
            self._ready[self._pair] = None


class BlockingRegistry:
    """Waiters by (bucket, key), each key's in the order they blocked; the keys ready to be
    looked at. Exactly one owner calls it."""

    def __init__(self, keyspace: Keyspace) -> None:
        self._ks = keyspace
        self._by_key: dict[tuple[bytes, bytes], dict[Waiter, None]] = {}
        self._watches: dict[tuple[bytes, bytes], _KeyWatch] = {}
        self.ready: dict[tuple[bytes, bytes], None] = {}
        """Waited keys touched since they were last served (insertion order)."""
        self._waiters: dict[Waiter, None] = {}

    def __len__(self) -> int:
        """Waiters registered (Redis's ``blocked_clients``)."""
        return len(self._waiters)

    def __contains__(self, waiter: object) -> bool:
        return waiter in self._waiters

    def waiters(self) -> list[Waiter]:
        """Every waiter registered, in the order they blocked."""
        return list(self._waiters)

    def keys(self) -> int:
        """Distinct keys waited on."""
        return len(self._by_key)

    def add(self, waiter: Waiter) -> None:
        """Register ``waiter`` at the back of each of its keys' queues."""
        self._waiters[waiter] = None
        for key in waiter.keys:
            pair = (waiter.bucket, key)
            queue = self._by_key.get(pair)
            if queue is None:
                queue = self._by_key[pair] = {}
                watch = self._watches[pair] = _KeyWatch(pair, self.ready)
                self._ks.watch(waiter.bucket, (key,), into=watch)
            queue[waiter] = None

    def remove(self, waiter: Waiter) -> bool:
        """Forget ``waiter`` (served, timed out, unblocked, disconnected); False if it was
        not registered."""
        if waiter not in self._waiters:
            return False
        del self._waiters[waiter]
        for key in waiter.keys:
            pair = (waiter.bucket, key)
            queue = self._by_key[pair]
            del queue[waiter]
            if not queue:
                del self._by_key[pair]
                self._ks.unwatch(self._watches.pop(pair))
                self.ready.pop(pair, None)
        return True

    def serve_ready(self, journal: OpJournal, now_ms: int) -> list[Waiter]:
        """Serve the waiters of every ready key (see the module docstring); those served, in
        the order served, each with its ``reply``, out of the registry. Serving one may make
        another key ready (BLMOVE pushes): that is served too, before this returns."""
        ks = self._ks
        ready = self.ready
        served: list[Waiter] = []
        while ready:
            pair = next(iter(ready))
            del ready[pair]
            queue = self._by_key.get(pair)
            if not queue:
                continue
            bucket, key = pair
            for waiter in list(queue):
                value = ks.peek(bucket, key)
                if value is None:
                    break
                if type(value) is not waiter.kind:
                    break  # another type: its waiters keep waiting (Redis 7.2)
                reply = waiter.serve(ks, journal, now_ms)
                if reply is None:
                    continue
                waiter.reply = reply
                self.remove(waiter)
                served.append(waiter)
            # The pops just made touched the key again: every waiter of it was looked at.
            ready.pop(pair, None)
        return served


class Blocked(bytes):
    """What an ``Executor`` returns for a request that blocked (empty, never written): the
    owner registers ``waiter`` and holds the request's reply until it is served, times out or
    is unblocked. A request that blocks must be the last its connection sent: nothing after
    it runs until then (the owner hands the rest of the batch back)."""

    waiter: Waiter

    @classmethod
    def on(cls, waiter: Waiter) -> Blocked:
        blocked = cls()
        blocked.waiter = waiter
        return blocked
