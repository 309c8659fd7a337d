"""The data owner: the one task that holds the keyspace, fed through the bounded mailbox.

Nothing else touches the data, so there is no lock around it. Per wakeup the owner takes every
batch waiting (up to ``max_drain`` requests, counted in batch ``size``: a ``BULK`` frame weighs
its rows) and commits them as a group:

1. run every request in order, at one wall-clock time ``now_ms`` for the whole group (from the
   clock the owner is given): a line-protocol request through ``StoreState.execute``, another
   protocol's through its batch's ``Executor`` (``_mailbox``); every change is noted in the
   owner's one ``OpJournal``, in groups of ``Op``s;
2. ``append`` each journal group as one record (``encode_ops``) to the commit log and ``sync``
   once (nothing if the group only read);
3. only then hand each batch its replies and ask each connection to flush, once.

The store is never ahead of the log. We keep an undo list rather than applying writes only
after the sync: requests later in the same group must see the earlier writes (a pipelined
``SET`` then ``GET`` answers the new value), and an undo list gives that with one tuple per
write, where deferring the writes would need a second lookup layer on every read. If
``append`` or ``sync`` fails, the group's writes are rolled back newest first (the journal's
undo), every write of the group is answered ``ERR not logged: <reason>`` (an executor's
``refusal``), its reads are answered again from the
rolled-back state (so no reply ever shows a value that is not durable), and the owner turns
read-only for good: after a failed fsync the kernel may have dropped the dirty pages, so a later
successful fsync proves nothing (fsyncgate). Reads keep being served; a restart replays the log.

Where the fsync runs: on the loop thread, as Redis does with ``appendfsync always``. The
alternative (``sync_in_thread``, ``minidb serve --sync-in thread``, kept for benchmarking other
disks) hands the write and fdatasync of ``seal()``-ed records to one worker thread and awaits
it, so the loop keeps reading connections while the disk works; the next group gathers in the
mailbox but is not applied until the sync returned, so no pipelined rollback is needed and no
reply is released early. Measured with ``bench/durability.py --part server --sync-in
loop,thread`` (50 connections, 2 shared cores): with the disk quiet (fdatasync ~150 us) the loop
sync was as fast or faster (depth 1: 39.7k vs 38.1k req/s; depth 16: 223k vs 197k; one
connection at depth 16: 53k vs 40k, the thread hand-off is pure cost there); only with the disk
contended (fdatasync 2-4 ms) did the thread win, by 1.1-1.7x. Not a clear win, so the simpler
loop sync is the default.

``fsync`` (Redis's ``appendfsync``): ``always`` (the default) is all of the above: a reply is
released only once its records are fdatasynced. ``everysec``: step 2 only writes the records
(``write_pending``: in the page cache, safe from a process kill) before the replies go out, and
a background task has the log ``datasync()`` in a worker thread once a second, off the owner's
path; a failed datasync turns the store read-only exactly as a failed sync does. ``no``: only
written; the kernel writes back when it likes (checkpoints and a clean shutdown still sync).

``commit_delay`` (Postgres's ``commit_delay``): a group that wrote waits that long (loop
clock) before its sync and takes in whatever arrived meanwhile, so more writes share one sync.
Without one, a group that wrote under ``always`` (loop sync) still lets the loop poll the
sockets before its sync, again while a poll brings more (``GATHER_POLLS`` at most): the sync
blocks the loop, so the clients a group leaves out (their request arrived just behind the
poll that woke the owner) would otherwise each wait out a whole further sync, and the groups
would split in two (measured, 50 clients, ``redis-benchmark -P 1``/``-P 16``: 27/303 appends
per sync before, 43/625 with it). It costs a lone client two loop turns, a fraction of a sync.

Checkpoints: when the log asks, the owner does only ``begin_checkpoint`` (sync, new segment)
and a copy of the map, which is the whole pause writes see (``checkpoint_pause_*``); encoding
and writing the snapshot run in a worker thread from the copy.

Output room: what the owner builds for a connection is bounded in bytes, not requests. Before
a batch it asks its sink for ``output_room()`` (a connection: its soft output limit less its
unsent bytes) and, within one group, subtracts the size of every reply it builds for that
sink. It runs a request only while that room is not negative, so it stops after the reply
that crossed it; what it did not run goes back to the sender as ``Batch.leftover`` (and every
later batch of that sink in the group goes back whole), to be sent again once the client has
read. So a connection is never given more than its room plus one reply (a protocol bounds
one reply itself: RESP refuses one larger than ``--output-hard-limit`` less the soft limit),
however many requests it pipelines and however large their replies are.

Inline reads: while the owner is ``idle`` (waiting for work with an empty mailbox), a RESP
connection may run the plain reads at the head of what it read in its own callback, with the
C run (``store._plainrun``), and write their replies at once, instead of a batch, a mailbox
wakeup, a group and a flush. Nothing is overtaken (nothing waits), no group is half done
(nothing shown is unlogged) and nothing changes (a key past its deadline stops the inline
run: its removal is a write, the owner's), so the promises above hold. Only while no turn's
group is open (below): a read served then could show a write not yet logged.

Writes of the turn: while the owner is idle, a RESP connection may also run a plain run that
writes (or reads, once a turn is open) in its own callback: in the express lane's C call as far
as the C run takes it (``join_turn``), the rest through its executor (``run_in_turn``) as far
as its output room goes; what is left then goes to the owner's mailbox as usual, and runs after
the turn (an owner's group ends it first). The run changes the keyspace at once, its journal is
the owner's, and its replies wait. The first run of a loop turn schedules ``_turn_over``, which
runs after the turn's other callbacks (after one more poll under ``always`` with the loop sync,
while polls bring more runs, as a group gathers) and calls ``end_turn``: the turn's records are
written (and synced, as the policy says) in one call, then each connection is handed its
replies (``turn_answered``), so the promises of a group hold for the turn's group: nothing is
answered before it is logged (and synced under ``always``), a failed write or sync rolls the
turn back and answers it as ``_fail_group`` answers a group, and an owner that stops refuses
it. Every group the owner runs, and the owner's exit, ends an open turn first, so the log keeps
the order in which the keyspace changed, and a connection's later replies follow its turn's.
Not with ``sync_in_thread`` or ``commit_delay`` (the owner's group waits on purpose there), nor
while writes are refused, the owner stops, or failpoints are set. A connection in the turn
takes nothing more until it is answered (its express lane is closed while ``_in_turn``), and
its run is one read within its in-flight bound, so a turn holds at most one read per
connection, as a group of the owner holds at most ``max_drain`` requests. This is the group
commit of a loop turn (Redis's ``beforeSleep`` writes the AOF once per turn the same way): per
request it spares the batch, the mailbox, the owner's wakeup, its group loop and the flush
(measured in docs/architecture.md, "Sixth round"). An earlier variant applied the write in the
callback but still logged and released it with the owner's next group; it saved little.

Fairness: the owner yields to the loop after a group whenever batches are already waiting, so
reads and timers interleave with groups (see ``_mailbox`` for how room is shared).

Expiry: the owner keeps one loop timer at the keyspace's ``next_expiry_ms()`` (a wall-clock ms
mapped onto ``loop.time()`` through its own clock), re-armed after every group that wrote
(moved in place with ``loop.reschedule`` where the loop has it). When it fires it wakes the
owner, which runs ``expire_due`` as a group of its own: the removals are logged and synced like
any write (one or more records), so a replay agrees. Keys are never scanned for expiry; a read
before the timer fires already treats a key past its deadline as gone (the keyspace checks).

Replica role (``replica=True``, ``minidb serve --replica-of``): the owner refuses its clients'
writes with ``REPLICA_REFUSAL`` and serves their reads; the keyspace changes only through
batches of a ``FollowExecutor`` (``_follow``), records a primary logged, which are applied and
logged here like any group. The expiry timer removes due keys without logging them (the
primary logs their removal, which arrives as a shipped record). ``promote()`` makes it a primary:
from the next group on, client writes are taken and logged after the last record it applied.

Pub/sub: PUBLISH runs here in order with the data commands and only notes its message
(``_pubsub``); ``_release`` delivers the group's messages after its replies, so a subscriber
never sees a message before the writes that preceded the PUBLISH are logged and synced. A
connection's messages go right after the reply of its own request that published to it
(``PubSub.after_reply``, Redis 7.2's order), inside its replies, so released with them.

Blocked clients (BLPOP and friends, ``_blocking``): a request an executor answers
``Blocked`` registers its ``Waiter`` in ``blocking`` and its batch is ``held``: not answered
with its group, and nothing after it runs (handed back). After every request that left a
waited key ready (and once more at the end of the group), the owner serves the key's waiters
in the order they blocked: each pop is a write of the current group, journaled there, and its
reply is released with the group's, after the log sync. A wait also ends at its deadline (a
timer on the loop: ``call_at``, so the runtime's wheel), by CLIENT UNBLOCK or by the client
leaving; those change no data, so they answer at once, from any loop callback.

Failpoints: ``store.owner`` is hit once per group (``crash-after(N)`` kills the owner after N
groups); ``store.apply`` delays each group on the loop clock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import cast

from minidb import _failpoints
from minidb.errors import WalError
from minidb.protocol import (
    UNAVAILABLE,
    WRITES,
    Bulk,
    Delete,
    Expire,
    Persist,
    Request,
    Set,
    error_reply,
)
from minidb.store._blocking import Blocked, BlockingRegistry, Waiter
from minidb.store._follow import REPLICA_REFUSAL, FollowExecutor
from minidb.store._journal import OpJournal
from minidb.store._log import CommitLog, SplitSyncLog
from minidb.store._mailbox import Batch, Executor, Mailbox, ReplySink, TurnSink
from minidb.store._plainrun import answer_turn, wall_clock_ms
from minidb.store._pubsub import PubSub, registry_for
from minidb.store._state import StoreState

logger = logging.getLogger("minidb.store")

DEFAULT_MAX_DRAIN = 4096
"""Requests the owner takes per wakeup at most, so one group's latency stays bounded."""

BATCH_SIZE_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
"""Upper bounds of the batch-size histogram buckets, in requests per group (a ``BULK`` frame
counts its rows)."""

FSYNC_POLICIES = ("always", "everysec", "no")
"""When acknowledged writes are fdatasynced (see the module docstring)."""
EVERYSEC_INTERVAL_S = 1.0
"""Seconds between background fdatasyncs with ``fsync="everysec"`` (Redis: one second)."""

GATHER_POLLS = 4
"""Socket polls a writing group may wait for (while each brings more requests) before its
sync with ``fsync="always"``, so requests arriving just behind the group share its sync."""

_REPLICA_REPLY = error_reply(REPLICA_REFUSAL)

EXECUTOR_VERB = "COMMAND"
"""The verb label under which refused writes of an ``Executor``'s batches are counted."""


async def _one_poll() -> None:
    """Return once the loop has polled its sockets and run what that poll delivered.

    A task resumed by ``sleep(0)`` runs ahead of the I/O callbacks of the poll that follows,
    so it takes two: the first lets one poll happen, the second lets its callbacks run."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


@dataclass(frozen=True, slots=True)
class OwnerStatistics:
    """What the owner has done since start."""

    groups: int
    requests: int
    """Requests answered, a ``BULK`` frame counting its rows (batch ``size``)."""
    appends: int
    syncs: int
    checkpoints: int
    not_logged: int
    read_only_refusals: int
    refused: dict[tuple[str, str], int]
    """(verb, outcome) -> writes refused: outcome ``not_logged``, ``read_only`` or ``replica``."""
    mailbox_depth: int
    mailbox_capacity: int
    read_only: str | None
    batch_size_buckets: tuple[int, ...]
    """Groups per ``BATCH_SIZE_BOUNDS`` bucket (not cumulative; last one is "more")."""
    batch_size_sum: int
    checkpoint_pause_last_s: float
    """How long the last checkpoint blocked the owner (sync, new segment, copy of the map)."""
    checkpoint_pause_max_s: float
    checkpoint_failures: int
    expiry_groups: int
    """Groups the expiry timer ran."""
    expired_by_timer: int
    """Keys those groups removed."""
    replica: bool
    """Whether the owner is in the replica role (refusing its clients' writes)."""
    inline_requests: int = 0
    """Of ``requests``, the plain reads connections served in their own callback while the
    owner was idle."""


def _verb(request: Request) -> str:
    return _VERBS.get(type(request), "OTHER")


_VERBS: dict[type, str] = {
    Set: "SET", Delete: "DEL", Expire: "EXPIRE", Persist: "PERSIST", Bulk: "BULK",
}
"""The verb label of each line-protocol write, for the refusal counts."""


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    return str(exc) or type(exc).__name__


class _Held:
    """The owner's side of one waiter: the held batch, the replies of what ran before the
    blocked request, and the timeout timer."""

    __slots__ = ("batch", "prefix", "request", "timer")

    def __init__(self, batch: Batch, prefix: list[bytes], request: object) -> None:
        self.batch = batch
        self.prefix = prefix
        self.request = request
        self.timer: asyncio.TimerHandle | None = None


class StoreOwner:
    """Owns a ``StoreState`` (its keyspace) and a ``CommitLog``; ``run()`` is the task body.

    ``clock`` gives the wall-clock milliseconds each group runs at (default
    ``wall_clock_ms``); tests derive it from the loop's virtual clock.
    """

    __slots__ = (
        "__dict__", "__weakref__", "_turn_requests", "clock", "inline", "mailbox", "turn",
        "turn_journal", "waiting",
    )  # fmt: skip
    # The fields a RESP connection's C data_received (``server.resp._cconnection``) reads
    # and sets at their offsets, once per read; the others live in the instance dict.

    def __init__(
        self,
        state: StoreState,
        log: CommitLog,
        *,
        mailbox: int,
        max_drain: int = DEFAULT_MAX_DRAIN,
        commit_delay: float = 0.0,
        sync_in_thread: bool = False,
        clock: Callable[[], int] = wall_clock_ms,
        fsync: str = "always",
        replica: bool = False,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
        self.state = state
        self.clock = clock
        self.fsync = fsync
        self._background_sync: asyncio.Task[None] | None = None
        self.log = log
        self.mailbox = Mailbox(mailbox)
        self.max_drain = max_drain
        self.commit_delay = commit_delay
        if sync_in_thread and not hasattr(log, "write_sealed"):
            raise ValueError("sync_in_thread needs a log with seal() and write_sealed()")
        self.sync_in_thread = sync_in_thread
        self._gathers = fsync == "always" and not sync_in_thread
        """Whether a writing group takes in one more poll of the sockets before its sync."""
        self._sync_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._checkpoint: asyncio.Future[None] | None = None
        self._pause_last = self._pause_max = 0.0
        self._checkpoint_failures = 0
        self.journal = OpJournal()
        self._read_only: str | None = None
        self._replica = replica
        self._groups = self._requests = self._appends = self._syncs = self._checkpoints = 0
        self._not_logged = self._read_only_refusals = 0
        self._refused: dict[tuple[str, str], int] = {}
        self._sizes = [0] * (len(BATCH_SIZE_BOUNDS) + 1)
        self._size_sum = 0
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._expiry_at: int | None = None
        self._expiry_pending = False
        self._expiry_groups = self._expired = 0
        self.waiting = False
        """Awaiting the mailbox: no group is half done (read as the attribute on a
        connection's hot path, with ``mailbox.queued``: ``idle`` without a call)."""
        self.inline = 0
        """Requests connections served inline (see "Inline reads") or ran in the loop's turn
        (see "Writes of the turn"): the owner's answers, which the connection adds here
        itself (hot path: no call)."""
        self.turn: list[tuple[TurnSink, Executor, object, bytes]] = []
        """The loop turn's group (see "Writes of the turn"): per run a connection ran in its
        own callback, its sink, executor, request and replies, until ``end_turn``."""
        self._turns = not sync_in_thread and not commit_delay
        """Whether this owner's policy lets the loop turn's group take runs at all."""
        self.turn_journal: OpJournal | None = None
        """``journal`` while the loop turn's group takes runs (when the owner is idle): the
        task runs and is not stopping, writes are taken, no failpoint is set, and the policy
        lets it (``_turns``); else None. Kept current by ``_update_turns``; read as the
        attribute on a connection's hot path (the express lane passes it to its C call)."""
        self._rooms: dict[ReplySink, int] = {}
        """Per sink, the output room left in the group being applied (see "Output room")."""
        self.blocking = BlockingRegistry(state.keyspace)
        """The blocked clients (see "Blocked clients")."""
        self._woken: list[Waiter] = []
        """Waiters served in the group being applied: answered with it, after its sync."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = False
        self._turn_ms = 0
        """The wall-clock time of the loop turn's group (one for the group, as ``now_ms``)."""
        self._turn_polls = self._turn_seen = self._turn_requests = self._turn_number = 0
        self.pubsub: PubSub = registry_for(state.keyspace)
        """Subscriptions, and the messages the group's PUBLISHes left for ``_release``."""

    # -- the task ------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the mailbox until it is closed and drained; die loudly on any error."""
        loop = asyncio.get_running_loop()
        batches: list[Batch] = []
        self._loop = loop
        self._running = True
        self._update_turns()
        try:
            self._arm_expiry(loop)
            if self.fsync == "everysec":
                self._background_sync = loop.create_task(
                    self._sync_every_second(loop), name="minidb-wal-everysec"
                )
            while True:
                self.waiting = True
                try:
                    batches = await self.mailbox.get(self.max_drain)
                finally:
                    self.waiting = False
                self.end_turn()  # the turn's writes changed the keyspace first
                if self._expiry_pending:
                    self._expiry_pending = False
                    self._expire_due(loop)
                if not batches:
                    if self.mailbox.closed and not self.mailbox:
                        break
                    continue
                if _failpoints.ACTIVE:
                    _failpoints.hit("store.owner")
                    delay = _failpoints.hit("store.apply")
                    if delay:
                        await asyncio.sleep(delay)
                now_ms = self.clock()
                results = self._apply(batches, now_ms)
                if self.journal.records and self.commit_delay:
                    # Postgres's commit_delay: the sync is about to be paid, so let whatever
                    # arrives meanwhile share it. Reads-only groups never wait.
                    await asyncio.sleep(self.commit_delay)
                    results += self._take_more(batches, now_ms)
                elif self.journal.records and self._gathers:
                    # The same without a set delay: poll the sockets while that brings more
                    # requests (GATHER_POLLS at most), so a straggler shares this sync instead
                    # of paying the next one. (The polls run the connections' timers, which
                    # leave the group's batches alone: ``Batch.applied``.)
                    for _ in range(GATHER_POLLS):
                        await _one_poll()
                        more = self._take_more(batches, now_ms)
                        if not more:
                            break
                        results += more
                wrote = bool(self.journal.records)
                if self.sync_in_thread and wrote and self.fsync == "always":
                    results = await self._log_in_thread(loop, batches, results, now_ms)
                else:
                    results = self._log(batches, results, now_ms)
                self._release(batches, results)
                batches = []
                self._after_group(loop, wrote)
                if self.mailbox:
                    # Releasing the group let connections with a backlog refill the mailbox at
                    # once; without this yield the owner would serve them group after group
                    # and never let the loop read a quiet client's socket (or fire a timer).
                    await asyncio.sleep(0)
            self.end_turn()
            if self._checkpoint is not None:
                await asyncio.shield(self._checkpoint)
        except BaseException:
            # A group applied but neither logged nor failed (cancelled mid-group) must not stay
            # in the state: its writes were never acknowledged and a checkpoint would keep them.
            if self.journal.undo:
                self.state.rollback(self.journal)
            turn, self.turn = self.turn, []
            for sink, executor, request, _ in turn:  # ran, rolled back, never logged
                sink.turn_answered(executor.refusal(request, "store unavailable"))
            # The data dies with this task: whoever still waits learns it now, and the
            # mailbox refuses everything from here on.
            self.mailbox.close()
            woken = [w.owner.batch for w in self._woken]
            self._woken.clear()
            self._refuse(batches + self.mailbox.take_all() + woken, UNAVAILABLE)
            raise
        finally:
            self._running = False
            self.turn_journal = None
            if self._background_sync is not None:
                self._background_sync.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._background_sync
                self._background_sync = None
            if self._expiry_timer is not None:
                self._expiry_timer.cancel()
                self._expiry_timer = None
            self._end_waits("store unavailable")
            if self._sync_executor is not None:
                self._sync_executor.shutdown(wait=False)

    def close(self) -> None:
        """Stop taking new batches; ``run()`` returns once the queued ones are committed."""
        self.mailbox.close()
        self._update_turns()

    def _update_turns(self) -> None:
        """Set ``turn_journal`` from what it depends on (call when one of them changes)."""
        takes = (
            self._turns and self._running and self._read_only is None and not self._replica
            and not self.mailbox.closed and not _failpoints.ACTIVE
        )
        self.turn_journal = self.journal if takes else None

    # -- fsync everysec ------------------------------------------------------------------

    async def _sync_every_second(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have the log fdatasync what was written, once a second, in one worker thread (one
        sync at a time); a failure is fail-stop: the store turns read-only."""
        executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="minidb-wal-sync")
        try:
            while self._read_only is None:
                await asyncio.sleep(EVERYSEC_INTERVAL_S)
                try:
                    if await loop.run_in_executor(executor, self.log.datasync):
                        self._syncs += 1
                except (OSError, WalError) as exc:
                    self._read_only = _reason(exc)
                    self._update_turns()
                    logger.error("wal_datasync_failed reason=%r", self._read_only)
        finally:
            executor.shutdown(wait=True)

    # -- expiry --------------------------------------------------------------------------

    def _arm_expiry(self, loop: asyncio.AbstractEventLoop) -> None:
        """Put the expiry timer at the keyspace's next deadline (or take it away)."""
        at = self.state.keyspace.next_expiry_ms()
        timer = self._expiry_timer
        if at is None:
            if timer is not None:
                timer.cancel()
                self._expiry_timer = self._expiry_at = None
            return
        if at == self._expiry_at and timer is not None:
            return
        when = loop.time() + max(0, at - self.clock()) / 1000
        self._expiry_at = at
        reschedule = getattr(loop, "reschedule", None)
        if timer is not None and reschedule is not None and reschedule(timer, when):
            return
        if timer is not None:
            timer.cancel()
        self._expiry_timer = loop.call_at(when, self._expiry_fired)

    def _expiry_fired(self) -> None:
        self._expiry_timer = self._expiry_at = None
        self._expiry_pending = True
        self.mailbox.wake()

    def _expire_due(self, loop: asyncio.AbstractEventLoop) -> None:
        """The expiry timer's group: remove what is due, log and sync it, re-arm."""
        self.expire_now(self.clock())
        self._arm_expiry(loop)

    def expire_now(self, now_ms: int) -> int:
        """Remove the keys due by ``now_ms`` as a group of their own, logged and synced like
        writes (read-only: removed without a record; the log already implies them); how many.
        """
        journal = self.journal if self._read_only is None and not self._replica else None
        expired = self.state.keyspace.expire_due(now_ms, journal)
        if expired:
            self._expiry_groups += 1
            self._expired += len(expired)
            self._log([], [], now_ms)
        return len(expired)

    # -- the loop turn's group ------------------------------------------------------------

    def run_in_turn(
        self, sink: TurnSink, executor: Executor, request: Sized, room: int
    ) -> bytes:
        """Run ``request`` (a connection's plain run) now, in the connection's callback, as
        part of the loop turn's group (see "Writes of the turn"); its replies, which the
        connection holds until ``end_turn`` hands them back (``sink.turn_answered``). The
        caller checked that the owner is idle and its ``turn_journal`` set."""
        if not self.turn:
            self._open_turn()
        now_ms = self._turn_ms
        replies = executor.execute(self.state, request, self.journal, now_ms, room)
        if self.blocking.ready:  # a waited key made ready: its waiters are served now
            self._serve_waiters(now_ms)
        self.turn.append((sink, executor, request, replies))
        self._turn_requests += len(request)
        return replies

    def join_turn(
        self, sink: TurnSink, executor: Executor, request: object, replies: bytes, count: int
    ) -> None:
        """``request`` (``count`` commands) already ran in the loop turn's group, in the C
        call of the connection's express lane (``store.express``, given ``turn_journal``
        while the owner was idle), answering ``replies``: hold them for ``end_turn`` as for
        ``run_in_turn``. (Plain strings only: no waited key can have become ready.)"""
        if not self.turn:
            self._open_turn()
        self.turn.append((sink, executor, request, replies))
        self._turn_requests += count

    def _open_turn(self) -> None:
        self._turn_ms = self.clock()
        self._turn_polls = self._turn_seen = self._turn_requests = 0
        self._turn_number += 1
        assert self._loop is not None  # turn_journal set: the task runs
        self._loop.call_soon(self._turn_over, self._turn_number)

    def _turn_over(self, number: int) -> None:
        """The loop turn that began the group is over: end it, or under ``always`` (loop
        sync) let the loop poll once more first while each poll brings more runs
        (``GATHER_POLLS`` at most), as a group the owner runs gathers (see the module
        docstring): the sync blocks the loop, and the clients a poll just missed would each
        wait out a further one."""
        if number != self._turn_number:
            return  # that turn's group was ended by an owner's group; this one has its own
        turn = self.turn
        if (
            self._gathers and self.journal.records and len(turn) > self._turn_seen
            and self._turn_polls < GATHER_POLLS
        ):
            self._turn_seen = len(turn)
            self._turn_polls += 1
            assert self._loop is not None
            # Scheduled now, it runs after the callbacks of the poll that comes first.
            self._loop.call_soon(self._turn_over, number)
            return
        self.end_turn()

    def end_turn(self) -> None:
        """Log the loop turn's group (one write, and the sync under ``always``), then hand
        each connection its replies; after a failed write or sync, as ``_fail_group``
        answers a group. Runs at the end of the turn (scheduled by its first run), and
        before any other group, so the log keeps the order in which the keyspace changed."""
        turn = self.turn
        if not turn:
            return
        self.turn = []
        journal = self.journal
        journal.close_group()
        wrote = bool(journal.records)
        self._count_group(self._turn_requests)
        reason = self._write_log() if wrote else None
        if reason is None:
            answer_turn(turn)
        else:
            batches = [
                Batch([request], sink, 0.0, executor=executor)
                for sink, executor, request, _ in turn
            ]
            answers = self._fail_group(batches, reason, self._turn_ms)
            for batch, replies_of in zip(batches, answers, strict=True):
                cast(TurnSink, batch.sink).turn_answered(b"".join(replies_of))
        if self._woken:
            for woken in dict.fromkeys(batch.sink for batch in self._answer_woken()):
                woken.flush()
        if wrote:
            assert self._loop is not None
            self._after_group(self._loop, wrote)

    def _after_group(self, loop: asyncio.AbstractEventLoop, wrote: bool) -> None:
        """After a group (the owner's, or the loop turn's): the expiry timer re-armed if it
        wrote (a new deadline may come first), and a checkpoint begun in a thread if due."""
        if wrote:
            self._arm_expiry(loop)
        job = self._begin_checkpoint()
        if job is not None:
            self._checkpoint = loop.run_in_executor(None, job)
            self._checkpoint.add_done_callback(self._checkpoint_done)

    # -- one group -----------------------------------------------------------------------

    def commit(self, batches: list[Batch]) -> None:
        """Apply, log, sync and answer one group of batches (see the module docstring);
        a checkpoint it triggers runs to completion here, on the caller's thread."""
        self.end_turn()
        now_ms = self.clock()
        self._release(batches, self._log(batches, self._apply(batches, now_ms), now_ms))
        job = self._begin_checkpoint()
        if job is not None:
            try:
                job()
            except (OSError, WalError) as exc:
                self._checkpoint_failed(exc)
            else:
                self._checkpoints += 1

    def _take_more(self, batches: list[Batch], now_ms: int) -> list[list[bytes]]:
        """Add to the group (``batches``) what waits in the mailbox and fits, applied; its
        results."""
        room = self.max_drain - sum(b.size for b in batches)
        more = self.mailbox.take(room)
        if not more:
            return []
        batches += more
        return self._apply(more, now_ms)

    def _apply(self, batches: list[Batch], now_ms: int) -> list[list[bytes]]:
        """Run ``batches`` in order; their replies. A batch whose sink has no output room
        left is run only as far as its room goes (see "Output room" above)."""
        state = self.state
        read_only = self._read_only is not None
        journal = self.journal
        rooms = self._rooms
        results = []
        replica = self._replica
        tail = None
        ready = self.blocking.ready
        pubsub = self.pubsub
        for b in batches:
            b.applied = True
            sink = b.sink
            blocked = False
            room = rooms.get(sink)
            if room is None:
                room = sink.output_room()
            if room < 0:
                replies: list[bytes] = []
            elif read_only:
                replies, room = self._execute_refusing(b, now_ms, "read_only", room)
            elif replica and type(b.executor) is not FollowExecutor:
                replies, room = self._execute_refusing(b, now_ms, "replica", room)
            elif b.executor is None:
                replies, room = state.execute_all(b.requests, journal, now_ms, room)
            else:
                executor = b.executor
                run = executor.execute
                replies = []
                for request in b.requests:
                    reply = run(state, request, journal, now_ms, room)
                    if type(reply) is Blocked:
                        self._block(b, replies, request, reply.waiter)
                        blocked = True
                        break
                    if pubsub.fresh:  # it published: its messages so far follow its reply
                        reply += pubsub.after_reply(sink)
                    replies.append(reply)
                    room -= len(reply)
                    if ready:  # it made a waited key ready: its waiters come next
                        self._serve_waiters(now_ms)
                    if room < 0:
                        # A request standing for several (a run of commands) may have
                        # stopped inside: what it left goes back first.
                        tail = executor.remainder(request)
                        break
            requests = b.requests
            ran = len(replies) + blocked
            if tail is not None or ran < len(requests):
                # Out of room: the rest goes back to the sender unrun, and so does every
                # later batch of it in this group, so its requests still run in order.
                b.leftover = requests[ran:]
                if tail is not None:
                    b.leftover.insert(0, tail)
                    tail = None
                b.requests = requests[:ran]
                room = -1
            if blocked:
                room = -1  # a blocked client runs nothing more meanwhile
            rooms[sink] = room
            results.append(replies)
        journal.close_group()  # whatever an executor left open is part of this group
        if ready and not read_only and not replica:
            self._serve_waiters(now_ms)
        return results

    def _log(
        self, batches: list[Batch], results: list[list[bytes]], now_ms: int
    ) -> list[list[bytes]]:
        """Append the group's records and sync on this thread; the replies to release."""
        if not self.journal.records:
            return results
        reason = self._write_log()
        if reason is not None:
            return self._fail_group(batches, reason, now_ms)
        return results

    def _write_log(self) -> str | None:
        """Append the journal's records, sync or write them as the policy says, and clear
        it; None, or why the log failed (the journal is left for the rollback)."""
        journal = self.journal
        try:
            # The whole group in one call, not a few per write (a bulk load's group holds
            # thousands of SETs): the log encodes and frames its records together.
            self.log.append_groups(journal.records)
            if self.fsync == "always":
                self.log.sync()
            else:
                self.log.write_pending()
        except (OSError, WalError, ValueError) as exc:
            return _reason(exc)
        self._appends += len(journal.records)
        if self.fsync == "always":
            self._syncs += 1
        journal.clear()
        return None

    async def _log_in_thread(
        self,
        loop: asyncio.AbstractEventLoop,
        batches: list[Batch],
        results: list[list[bytes]],
        now_ms: int,
    ) -> list[list[bytes]]:
        """Like ``_log``, but the write and fdatasync run in a worker thread while the loop
        keeps reading connections (the next group gathers in the mailbox, unapplied)."""
        journal = self.journal
        log = cast(SplitSyncLog, self.log)
        try:
            log.append_groups(journal.records)
            sealed = log.seal()
            if self._sync_executor is None:
                # One thread: sealed batches must be written one at a time, in order.
                self._sync_executor = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="minidb-wal-sync"
                )
            await loop.run_in_executor(self._sync_executor, log.write_sealed, sealed)
        except (OSError, WalError, ValueError) as exc:
            return self._fail_group(batches, _reason(exc), now_ms)
        self._appends += len(journal.records)
        self._syncs += 1
        journal.clear()
        return results

    def _release(self, batches: list[Batch], results: list[list[bytes]]) -> None:
        self._rooms.clear()
        count = 0
        for batch, replies in zip(batches, results, strict=True):
            # rows: a frame's one reply stands for each of them (a batch cut short counts
            # the requests it ran; its leftover is counted when it comes back)
            count += batch.size if batch.leftover is None else len(batch.requests)
            if batch.replies is None and not batch.held:
                batch.replies = replies
        if self._woken:
            batches = [*batches, *self._answer_woken()]  # their sinks are flushed below
        self._count_group(count)
        # One flush per connection per group: each connection writes its replies once.
        for sink in dict.fromkeys(b.sink for b in batches):
            sink.flush()
        if self.pubsub.outbox:  # delivered only now: logged (and synced) with what preceded
            self.pubsub.release()

    def _count_group(self, count: int) -> None:
        """The statistics of one group of ``count`` requests (its size in the histogram)."""
        self._groups += 1
        self._requests += count
        self._size_sum += count
        self._sizes[bisect_left(BATCH_SIZE_BOUNDS, count)] += 1

    def _answer_woken(self) -> list[Batch]:
        """Answer the batches of the waiters this group served; those batches."""
        batches = []
        for waiter in self._woken:
            held: _Held = waiter.owner
            held.batch.held = False
            held.batch.replies = [*held.prefix, waiter.reply or b""]
            batches.append(held.batch)
        self._woken.clear()
        return batches

    def _execute_refusing(
        self, batch: Batch, now_ms: int, outcome: str, room: int
    ) -> tuple[list[bytes], int]:
        """A client's batch while writes are refused: reads run (nothing journaled), writes
        are answered ``read-only: <reason>`` (``outcome`` "read_only": the log failed; an
        executor refuses them itself, seeing no journal) or ``read-only replica`` ("replica");
        as far as ``room`` goes, like ``_apply``. The replies and the room left."""
        state = self.state
        executor = batch.executor
        replica = outcome == "replica"
        replies = []
        for request in batch.requests:
            if room < 0:
                break
            if executor is not None:
                parts = []
                for single in executor.expand(request):
                    if not executor.is_write(single):
                        parts.append(executor.execute(state, single, None, now_ms))
                        if self.pubsub.fresh:  # as in _apply
                            parts.append(self.pubsub.after_reply(batch.sink))
                        continue
                    self._count_refused(EXECUTOR_VERB, outcome)
                    if replica:
                        parts.append(executor.refusal(single, REPLICA_REFUSAL))
                    else:
                        self._read_only_refusals += 1
                        parts.append(executor.execute(state, single, None, now_ms))
                reply = parts[0] if len(parts) == 1 else b"".join(parts)
            elif isinstance(request, WRITES):
                self._count_refused(_verb(request), outcome)
                if replica:
                    reply = _REPLICA_REPLY
                else:
                    self._read_only_refusals += 1
                    reply = error_reply("read-only: " + (self._read_only or ""))
            else:
                reply = state.execute(request, None, now_ms)
            replies.append(reply)
            room -= len(reply)
        return replies, room

    def _fail_group(self, batches: list[Batch], reason: str, now_ms: int) -> list[list[bytes]]:
        state = self.state
        state.rollback(self.journal)
        self.pubsub.discard()  # the reads run again below, PUBLISH among them
        self._read_only = reason
        self._update_turns()
        why = "not logged: " + reason
        not_logged = error_reply(why)
        results = []
        for batch in batches:
            executor = batch.executor
            replies = []
            for request in batch.requests:
                if executor is not None:
                    parts = []
                    for single in executor.expand(request):
                        if executor.is_write(single):
                            self._not_logged += 1
                            self._count_refused(EXECUTOR_VERB, "not_logged")
                            parts.append(executor.refusal(single, why))
                        else:
                            parts.append(executor.execute(state, single, None, now_ms))
                            if self.pubsub.fresh:  # as in _apply
                                parts.append(self.pubsub.after_reply(batch.sink))
                    replies.append(b"".join(parts))
                elif isinstance(request, WRITES):
                    self._not_logged += 1
                    self._count_refused(_verb(request), "not_logged")
                    replies.append(not_logged)
                else:
                    replies.append(state.execute(request, None, now_ms))
            results.append(replies)
        for waiter in self._woken:  # its pop is rolled back: a write not logged
            held = waiter.owner
            executor = held.batch.executor
            self._not_logged += 1
            self._count_refused(EXECUTOR_VERB, "not_logged")
            waiter.reply = executor.refusal(held.request, why) if executor else not_logged
        for waiter in self.blocking.waiters():
            if any(waiter.owner.batch is batch for batch in batches):
                self._forget(waiter)  # blocked in this group: answered with its refusals
        self._end_waits("read-only: " + reason)  # no write can serve the others any more
        return results

    # -- blocked clients -----------------------------------------------------------------

    def _block(self, batch: Batch, prefix: list[bytes], request: object, waiter: Waiter) -> None:
        """Hold ``batch`` (its last request run is ``request``, which blocked) until
        ``waiter`` is served, times out or is released."""
        if batch.replies is not None:
            return  # answered busy while it waited in the mailbox: the client moved on
        batch.held = True
        held = waiter.owner = _Held(batch, prefix, request)
        waiter.release = lambda reply: self._end_wait(waiter, reply)
        self.blocking.add(waiter)
        loop = self._loop
        if waiter.timeout and loop is not None:
            held.timer = loop.call_at(
                loop.time() + waiter.timeout, self._end_wait, waiter, waiter.timed_out
            )

    def _serve_waiters(self, now_ms: int) -> None:
        """Serve the waiters of the keys made ready (journaled in this group)."""
        for waiter in self.blocking.serve_ready(self.journal, now_ms):
            waiter.release = None
            held: _Held = waiter.owner
            if held.timer is not None:
                held.timer.cancel()
                held.timer = None
            self._woken.append(waiter)

    def _forget(self, waiter: Waiter) -> _Held | None:
        """Take ``waiter`` out of the registry, its timer off, its batch no longer held;
        what the owner kept with it, or None if it was not waiting."""
        if not self.blocking.remove(waiter):
            return None
        waiter.release = None
        held: _Held = waiter.owner
        if held.timer is not None:
            held.timer.cancel()
            held.timer = None
        held.batch.held = False
        return held

    def _end_wait(self, waiter: Waiter, reply: bytes | None) -> bool:
        """End a wait without serving it: at its deadline, CLIENT UNBLOCK (``reply`` what
        the client is answered) or the client gone (None). False if it was not waiting.
        Nothing changes in the data, so this may run from any loop callback."""
        held = self._forget(waiter)
        if held is None:
            return False
        batch = held.batch
        if batch.replies is None:
            batch.replies = [*held.prefix, reply or b""]
        if reply is not None:
            batch.sink.flush()
        return True

    def _end_waits(self, reason: str) -> None:
        """Writes are over (the owner stops, or the log failed): every client still blocked
        is refused for ``reason``, as its write would be."""
        for waiter in self.blocking.waiters():
            held: _Held = waiter.owner
            executor = held.batch.executor
            refusal = executor.refusal(held.request, reason) if executor else b""
            self._end_wait(waiter, refusal)

    def _count_refused(self, verb: str, outcome: str) -> None:
        key = (verb, outcome)
        self._refused[key] = self._refused.get(key, 0) + 1

    # -- checkpoints ---------------------------------------------------------------------

    def _begin_checkpoint(self) -> Callable[[], None] | None:
        """If the log wants a checkpoint: do the owner's part now and return the rest.

        The owner's part is ``begin_checkpoint`` (sync, start a new segment) and a copy of the
        map; that is the whole time writes stop, measured as the checkpoint pause. The job
        returned encodes and writes the snapshot from the copy, on any thread.
        """
        if self._read_only is not None or self._checkpoint is not None:
            return None
        if not self.log.wants_checkpoint():
            return None
        started = time.perf_counter()
        try:
            base = self.log.begin_checkpoint()
        except (OSError, WalError) as exc:
            self._checkpoint_failed(exc)
            return None
        records = self.state.frozen_snapshot()
        pause = time.perf_counter() - started
        self._pause_last = pause
        self._pause_max = max(self._pause_max, pause)
        logger.info(
            "checkpoint_begin keys=%d base=%d pause_ms=%.3f", len(self.state), base, pause * 1e3
        )
        log = self.log

        def finish() -> None:
            log.finish_checkpoint(base, records)

        return finish

    def _checkpoint_done(self, future: asyncio.Future[None]) -> None:
        self._checkpoint = None
        if future.cancelled():
            return
        exc = future.exception()
        if exc is None:
            self._checkpoints += 1
        else:
            self._checkpoint_failed(exc)

    def _checkpoint_failed(self, exc: BaseException) -> None:
        # Every acknowledged group is already durable; what failed is the log's future (it
        # fails itself), so stop taking writes rather than ask it again.
        self._checkpoint_failures += 1
        self._read_only = _reason(exc)
        self._update_turns()
        logger.error("checkpoint_failed reason=%r", self._read_only)

    def final_checkpoint(self) -> bool:
        """Write a checkpoint now, on this thread (clean shutdown: the next start replays only
        the snapshot). Call after ``run()`` returned. False if the log refused."""
        if self._read_only is not None:
            return False
        try:
            self.log.checkpoint(self.state.snapshot())
        except (OSError, WalError) as exc:
            self._checkpoint_failed(exc)
            return False
        self._checkpoints += 1
        return True

    def _refuse(self, batches: list[Batch], reply: bytes) -> None:
        """Answer every batch not yet answered with ``reply`` (the line protocol's form; an
        executor's batch gets its own ``refusal`` of the same reason)."""
        reason = reply.decode().removeprefix("ERR ").rstrip("\n")
        for batch in batches:
            if batch.replies is None:
                executor: Executor | None = batch.executor
                if executor is None:
                    batch.replies = [reply] * len(batch.requests)
                else:
                    batch.replies = [executor.refusal(r, reason) for r in batch.requests]
        sinks: dict[ReplySink, None] = dict.fromkeys(b.sink for b in batches)
        for sink in sinks:
            sink.flush()

    # -- observing -----------------------------------------------------------------------

    @property
    def replica(self) -> bool:
        """Whether the owner is in the replica role (see the module docstring)."""
        return self._replica

    def promote(self) -> None:
        """Leave the replica role: the next group takes client writes. Whoever feeds it
        ``FollowExecutor`` batches must have stopped (the sequence is this log's from now)."""
        self._replica = False
        self._update_turns()

    @property
    def idle(self) -> bool:
        """Whether a connection may serve a plain read in its own callback now (see
        "Inline reads"): the owner waits for work, none is queued, so no group is half
        done (the journal is empty) and nobody is overtaken."""
        return self.waiting and not self.mailbox.queued and not self.turn

    @property
    def read_only(self) -> str | None:
        """Why the store refuses writes, or None while it takes them."""
        return self._read_only

    def statistics(self) -> OwnerStatistics:
        return OwnerStatistics(
            groups=self._groups,
            requests=self._requests + self.inline,
            appends=self._appends,
            syncs=self._syncs,
            checkpoints=self._checkpoints,
            not_logged=self._not_logged,
            read_only_refusals=self._read_only_refusals,
            refused=dict(self._refused),
            mailbox_depth=len(self.mailbox),
            mailbox_capacity=self.mailbox.capacity,
            read_only=self._read_only,
            batch_size_buckets=tuple(self._sizes),
            batch_size_sum=self._size_sum,
            checkpoint_pause_last_s=self._pause_last,
            checkpoint_pause_max_s=self._pause_max,
            checkpoint_failures=self._checkpoint_failures,
            expiry_groups=self._expiry_groups,
            expired_by_timer=self._expired,
            replica=self._replica,
            inline_requests=self.inline,
        )
