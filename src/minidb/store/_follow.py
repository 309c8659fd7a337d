"""A replica's side of the owner: records a primary already logged, applied in order.

A read replica's data owner is an ordinary ``StoreOwner`` in the replica role: its clients'
writes are refused with ``REPLICA_REFUSAL`` (the line protocol's ``ERR read-only replica``; the
RESP layer translates it into Redis's ``READONLY`` reply), and the one thing that changes its
keyspace is a batch of ``ShippedRecord``s run by a ``FollowExecutor``, sent by whoever tails the
primary's shipped log. Those batches go through the same mailbox and the same group commit as
everything else, so the one-owner rule holds and reads interleave with the applying.

Theory of operation. Each shipped record is one record of the primary's log: its operations are
applied whole (``Keyspace.apply_ops``, the very call recovery makes) and noted in the owner's
journal as one closed group, so the owner appends exactly one record to the replica's own log
for it, in order. The replica's log therefore numbers its records as the primary's did (a restore
started it at the primary's numbers), a restart resumes from its own log, and a promoted replica
continues the primary's sequence. Nothing here is undone if the replica's own log then fails: the
records are already durable on the primary's store, the owner turns read-only (fail-stop) and a
restart replays the local log and fetches the rest again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from minidb.protocol import error_reply
from minidb.store._mailbox import UNBOUNDED_OUTPUT
from minidb.wal import Op

if TYPE_CHECKING:
    from minidb.store._journal import OpJournal
    from minidb.store._state import StoreState

REPLICA_REFUSAL = "read-only replica"
"""Why a replica refuses a client's write; the line protocol answers ``ERR read-only replica``."""

APPLIED = b""
"""A ``FollowExecutor`` reply: the record was applied and will be in this group's log sync."""


class ShippedRecord(NamedTuple):
    """One record of the primary's log: its sequence number and its decoded operations."""

    number: int
    ops: list[Op]


class FollowExecutor:
    """Runs ``ShippedRecord`` batches for the owner (the ``store.Executor`` contract).

    The reply is ``APPLIED``, or an error reply if the owner could not take the record (its
    own log failed: then nothing of the batch was applied, and the follower must stop).
    """

    def execute(
        self,
        state: StoreState,
        request: ShippedRecord,
        journal: OpJournal | None,
        now_ms: int,
        room: int = UNBOUNDED_OUTPUT,
    ) -> bytes:
        if journal is None:
            return error_reply("read-only: the replica's own log failed")
        ops = request.ops
        state.keyspace.apply_ops(ops, now_ms)
        for op in ops:
            journal.add(op)
        journal.close_group()  # one shipped record, one record of this log
        return APPLIED

    def is_write(self, request: ShippedRecord) -> bool:
        return True

    def refusal(self, request: ShippedRecord, reason: str) -> bytes:
        return error_reply(reason)

    def remainder(self, request: ShippedRecord) -> None:
        return None  # a record is applied whole

    def expand(self, request: ShippedRecord) -> list[ShippedRecord]:
        return [request]
