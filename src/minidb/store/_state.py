"""The line protocol's view of the keyspace: ``StoreState``, a pure class with no asyncio in it.

Both protocols share ONE ``Keyspace`` (``state.keyspace``): a ``SET k v`` of the Redis protocol
in bucket ``0`` is the line protocol's ``GET 0 k``. ``StoreState.execute(request, journal,
now_ms)`` runs one line request against it and returns the reply in wire form; every change
goes through the keyspace's primitives, which note in the owner's ``OpJournal`` the ``Op`` it
amounts to and how to undo it (a SET is a ``Put``, a DEL a ``Remove``, each its own journal
group, so its own log record; a DEL only when the key existed). Replay applies the logged ops
to the keyspace directly (``Keyspace.apply_ops``), so a value comes back exactly as it was
acknowledged, byte for byte.

What the line protocol cannot carry. The keyspace holds any bytes; this protocol's names are
``[A-Za-z0-9_.:/-]{1,64}`` and its values one line of UTF-8 of at most 4096 bytes. A GET of a
value it cannot carry is answered ``ERR not representable in the line protocol`` and a SCAN
skips a key that is not a name: never a mangled reply. An expired key is never returned either
(the keyspace checks deadlines on every read, removing the key on the spot). A key holding a
hash or a set (written over RESP) has no line form: its GET answers ``ERR wrong type`` and
SCAN skips it; DEL, EXPIRE, TTL and PERSIST work on it as on any key, and SET replaces it.

Theory of operation for SCAN: keys are visited in byte order, and the cursor is ``+`` followed
by the last key returned, so a scan resumes *after* that key whatever was inserted or deleted in
between. Every key present for the whole scan is therefore returned exactly once; a key written
or deleted meanwhile may or may not be. To find "the next keys after X" cheaply, the keyspace
keeps a sorted list of the keys of a bucket that has been scanned this way
(``Keyspace.sorted_keys``); buckets that are never scanned pay nothing. Keys skipped (not a
name, or expired) do not count towards the page, so a page is short only at the end.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

from minidb.protocol import (
    MAX_VALUE_BYTES,
    NIL,
    OK,
    SCAN_START,
    Bulk,
    Delete,
    Expire,
    Get,
    Invalid,
    Persist,
    Request,
    Scan,
    Set,
    Ttl,
    error_reply,
    keys_reply,
    value_reply,
)
from minidb.protocol._line import LF, NOT_REPRESENTABLE, can_carry, is_name
from minidb.store._journal import OpJournal
from minidb.store._keyspace import Keyspace, SnapshotParts
from minidb.store._mailbox import UNBOUNDED_OUTPUT
from minidb.store._plainrun import run_line
from minidb.store._results import WrongTypeError
from minidb.store._values import KIND_OF, Value
from minidb.wal import Put, encode_container, encode_ops, encode_put, pack_payloads, pack_puts

WRONG_TYPE = error_reply("wrong type")
"""The line protocol's GET of a key holding a hash or a set."""


def encode_put_op(op: Put) -> bytes:
    """The log payload of one ``Put`` (the common case, a value without expiry, packed without
    the general encoder)."""
    if op.expire_at_ms is None:
        return encode_put(op.bucket, op.key, op.value)
    return encode_ops((op,))


def _snapshot_payloads(parts: SnapshotParts, done: Callable[[], None] | None) -> Iterator[bytes]:
    # Strings without expiry, the bulk, are packed a bucket at a time (in C when built); the
    # containers of a bucket that holds some, and every key with an expiry, go through the
    # general encoders, packed into records as the strings are.
    try:
        for name, bucket, has_containers in parts.buckets:
            yield from pack_puts(name, bucket)
            if has_containers:
                yield from pack_payloads(_containers_of(name, bucket))
        yield from pack_payloads(map(_encode_expiring, parts.expiring))
    finally:
        if done is not None:
            done()


def _containers_of(name: bytes, bucket: dict[bytes, object]) -> Iterator[bytes]:
    """The payloads of the containers without expiry of one bucket."""
    for key, value in bucket.items():
        kind = KIND_OF.get(type(value))
        if kind is not None:
            yield from encode_container(name, key, kind.code, kind.elements(value))


def _encode_expiring(entry: tuple[bytes, bytes, Value, int]) -> bytes:
    name, key, value, deadline = entry
    if type(value) is bytes:
        return encode_put_op(Put(name, key, value, deadline))
    kind = KIND_OF[type(value)]
    return b"".join(encode_container(name, key, kind.code, kind.elements(value), deadline))


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """Counts of what the keyspace holds and what the line protocol asked of it since start."""

    buckets: int
    keys: int
    gets: int
    get_hits: int
    sets: int
    dels: int
    del_hits: int
    scans: int
    invalid: int
    not_representable: int
    """GETs answered ``ERR not representable in the line protocol``."""
    wrong_type: int
    """GETs of a key holding a hash or a set, answered ``ERR wrong type``."""
    expiry_requests: int
    """EXPIRE, TTL and PERSIST requests."""


class StoreState:
    """The line protocol over one ``Keyspace``; no locks: exactly one owner calls it."""

    def __init__(self, keyspace: Keyspace | None = None) -> None:
        self.keyspace = keyspace if keyspace is not None else Keyspace()
        self._gets = self._get_hits = self._sets = 0
        self._dels = self._del_hits = self._scans = self._invalid = self._unrepresentable = 0
        self._expiry_requests = 0
        self._wrong_type = 0

    # -- applying requests -------------------------------------------------------------------

    def apply(self, request: Request, now_ms: int = 0) -> bytes:
        """Apply one request without journaling and return its reply line (tests use this;
        at the default ``now_ms`` no deadline has passed)."""
        return self.execute(request, None, now_ms)

    def execute(self, request: Request, journal: OpJournal | None, now_ms: int) -> bytes:
        """Apply one request at ``now_ms``, noting its changes in ``journal`` (one closed
        group per change); return the reply line."""
        # Dispatch on the exact type, most frequent first: this runs once per request, and an
        # ``isinstance`` chain or a ``match`` statement costs measurably more here.
        kind = type(request)
        ks = self.keyspace
        if kind is Get:
            self._gets += 1
            # The keyspace's dicts read directly: a key without expiry is a plain ``bytes``
            # entry, and this is ``Keyspace.get`` without two calls on the hottest path.
            bucket = ks._buckets.get(request.bucket)  # type: ignore[union-attr]
            value = bucket.get(request.key) if bucket else None  # type: ignore[union-attr]
            if value is None:
                return NIL
            if type(value) is not bytes:
                request = cast(Get, request)
                try:
                    value = ks.get(request.bucket, request.key, now_ms, journal)
                except WrongTypeError:
                    self._wrong_type += 1
                    return WRONG_TYPE
                if journal is not None:
                    journal.close_group()  # a lazy expiry is a change of its own
                if value is None:
                    return NIL
            # ``can_carry`` inlined for the common ASCII value: this runs on every hit.
            if not (
                len(value) <= MAX_VALUE_BYTES and LF not in value and value.isascii()
            ) and not can_carry(value):
                self._unrepresentable += 1
                return NOT_REPRESENTABLE
            self._get_hits += 1
            return b"VALUE " + value + b"\n"
        if kind is Set:
            self._sets += 1
            # No ``cast`` here: it is a function call, once per write.
            ks.put_command(request.bucket, request.key, request.value, journal)  # type: ignore[union-attr]
            return OK
        if kind is Bulk:
            return self._bulk(request, journal, now_ms)  # type: ignore[arg-type]
        if kind is Delete:
            request = cast(Delete, request)
            self._dels += 1
            found = ks.exists(request.bucket, request.key, now_ms, journal)
            if found:
                ks.remove(request.bucket, request.key, journal)
            if journal is not None:
                journal.close_group()
            if not found:
                return NIL
            self._del_hits += 1
            return OK
        if kind is Scan:
            request = cast(Scan, request)
            self._scans += 1
            return self._scan(request, journal, now_ms)
        if kind is Expire or kind is Persist or kind is Ttl:
            return self._expiry(request, journal, now_ms)  # type: ignore[arg-type]
        request = cast(Invalid, request)
        self._invalid += 1
        return error_reply(request.reason)

    def execute_all(
        self,
        requests: list[Request],
        journal: OpJournal | None,
        now_ms: int,
        room: int = UNBOUNDED_OUTPUT,
    ) -> tuple[list[bytes], int]:
        """``execute`` each of one connection's batch of requests, in order, while ``room``
        (bytes of replies the connection may still be given) is not negative; their replies
        (fewer than the requests if it ran out) and the room left.

        In C when the accelerator is built (``_plainrun.run_line``): plain GETs, SETs, DELs
        and frames of SETs run there, anything else through ``execute``, in its place. It
        needs a journal with no group open (every line request closes its own, so that is
        the owner's case); otherwise, and as the reference, ``execute_all_python``.
        """
        if run_line is None or journal is None or journal._open:
            return self.execute_all_python(requests, journal, now_ms, room)
        execute = self.execute
        replies, room, counts = run_line(
            self.keyspace, journal, requests, now_ms, room,
            lambda request: execute(request, journal, now_ms),
        )  # fmt: skip
        gets, get_hits, sets, dels, del_hits = counts
        self._gets += gets
        self._get_hits += get_hits
        self._sets += sets
        self._dels += dels
        self._del_hits += del_hits
        return replies, room

    def execute_all_python(
        self,
        requests: list[Request],
        journal: OpJournal | None,
        now_ms: int,
        room: int = UNBOUNDED_OUTPUT,
    ) -> tuple[list[bytes], int]:
        """``execute_all`` in Python: the reference of its C twin.

        A run of SETs (what a pipelined bulk load sends) goes to the keyspace as one
        ``put_commands`` call: each SET is still its own journal group, so its own log record,
        exactly as ``execute`` would note it; the replies are all ``OK`` (a run is never cut:
        its replies are three bytes each, and it is at most one connection's in-flight bound).
        """
        replies: list[bytes] = []
        execute = self.execute
        size = len(requests)
        at = 0
        while at < size and room >= 0:
            if type(requests[at]) is not Set:
                reply = execute(requests[at], journal, now_ms)
                replies.append(reply)
                room -= len(reply)
                at += 1
                continue
            end = at + 1
            while end < size and type(requests[end]) is Set:
                end += 1
            run = requests if at == 0 and end == size else requests[at:end]
            self.keyspace.put_commands(run, journal)  # type: ignore[arg-type]
            self._sets += end - at
            replies += [OK] * (end - at)
            room -= len(OK) * (end - at)
            at = end
        return replies, room

    def rollback(self, journal: OpJournal) -> None:
        """Take back every change noted in ``journal``, newest first."""
        self.keyspace.rollback(journal)

    # -- reading the whole store -------------------------------------------------------------

    def snapshot(self) -> Iterator[bytes]:
        """The whole keyspace as snapshot record payloads, many keys each: what a checkpoint
        writes. Iterate it before the next change (``frozen_snapshot`` for later)."""
        return _snapshot_payloads(self.keyspace.snapshot_parts(), None)

    def frozen_snapshot(self) -> Iterator[bytes]:
        """``snapshot()`` of the keyspace as it is now, safe to iterate in another thread later
        (``Keyspace.frozen_snapshot_parts``: the copy made here is the owner's whole pause).
        Once iterated to its end (or closed), its containers need no copy-on-write any more."""
        ks = self.keyspace
        parts = ks.frozen_snapshot_parts()
        return _snapshot_payloads(parts, lambda: ks.snapshot_done(parts))

    def __len__(self) -> int:
        return len(self.keyspace)

    def statistics(self) -> StoreStatistics:
        ks = self.keyspace
        return StoreStatistics(
            buckets=len(ks.buckets()),
            keys=len(ks),
            gets=self._gets,
            get_hits=self._get_hits,
            sets=self._sets,
            dels=self._dels,
            del_hits=self._del_hits,
            scans=self._scans,
            invalid=self._invalid,
            not_representable=self._unrepresentable,
            wrong_type=self._wrong_type,
            expiry_requests=self._expiry_requests,
        )

    # -- internals ---------------------------------------------------------------------------

    def _bulk(self, request: Bulk, journal: OpJournal | None, now_ms: int) -> bytes:
        """A frame: every row applied as one journal group (one log record), ``OK <n>``."""
        rows = request.rows
        found = self.keyspace.write_group(rows, now_ms, journal)  # rows are the tuples it takes
        dels = 3 * len(rows) - sum(map(len, rows))  # a SET is 3 fields, a DEL 2: counted in C
        self._sets += len(rows) - dels
        self._dels += dels
        self._del_hits += found
        return b"OK %d\n" % len(rows)

    def _expiry(
        self, request: Expire | Ttl | Persist, journal: OpJournal | None, now_ms: int
    ) -> bytes:
        """EXPIRE (``OK``, ``NIL`` if missing), TTL (``VALUE <seconds>`` rounded to the
        nearest second as Redis does, ``VALUE -1`` without expiry, ``NIL`` if missing) and
        PERSIST (``OK`` if an expiry was removed, ``NIL`` if missing or none)."""
        self._expiry_requests += 1
        ks = self.keyspace
        ks.sync_clock(now_ms)
        found = ks.lookup(request.bucket, request.key, now_ms, journal)
        if type(request) is Ttl:
            reply = NIL
            if found is not None:
                deadline = found[1]
                reply = b"VALUE -1\n" if deadline is None else (
                    value_reply(b"%d" % ((deadline - now_ms + 500) // 1000))
                )
        elif found is None:
            reply = NIL
        elif type(request) is Expire:
            reply = OK
            if request.seconds == 0:
                ks.remove(request.bucket, request.key, journal)  # due now: gone, as in Redis
            else:
                deadline = now_ms + request.seconds * 1000
                ks.set_expiry(request.bucket, request.key, deadline, journal)
        elif found[1] is None:
            reply = NIL
        else:
            ks.set_expiry(request.bucket, request.key, None, journal)
            reply = OK
        if journal is not None:
            journal.close_group()
        return reply

    def _scan(self, request: Scan, journal: OpJournal | None, now_ms: int) -> bytes:
        ks = self.keyspace
        name = request.bucket
        order = ks.sorted_keys(name)
        if order is None:
            return keys_reply(SCAN_START, [])
        at = 0 if request.cursor == SCAN_START else bisect_right(order, request.cursor[1:])
        page: list[bytes] = []
        limit = request.limit
        expired = []
        # Nothing in the loop changes ``order``: expired keys found are removed after it.
        while at < len(order) and len(page) < limit:
            key = order[at]
            at += 1
            if not is_name(key) or type(ks.peek(name, key)) is not bytes:
                continue  # not a name, or a container: skipped, never mangled
            if ks.expired(name, key, now_ms):
                expired.append(key)
                continue
            page.append(key)
        done = at >= len(order)
        for key in expired:
            ks.exists(name, key, now_ms, journal)  # found expired: removed, journaled
        if expired and journal is not None:
            journal.close_group()
        return keys_reply(SCAN_START if done else b"+" + page[-1], page)
