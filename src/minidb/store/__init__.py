"""minidb.store: the data (one ``Keyspace``, pure; ``StoreState`` is the line protocol's view of
it, the command engine the Redis protocol's) and its one owner (``StoreOwner``, an actor).

Connections send ``Batch``es through the owner's bounded ``Mailbox`` (another protocol's with
its ``Executor``); the owner applies each group, writes it to its ``CommitLog`` and syncs once
before any reply of the group is released.
"""

from minidb.store._actor import BATCH_SIZE_BOUNDS, FSYNC_POLICIES, OwnerStatistics, StoreOwner
from minidb.store._args import Command, Session
from minidb.store._commands import COMMANDS, execute, execute_transaction, lookup_command, validate
from minidb.store._follow import APPLIED, REPLICA_REFUSAL, FollowExecutor, ShippedRecord
from minidb.store._journal import OpJournal
from minidb.store._keyspace import (
    DEFAULT_MAX_VALUE_BYTES,
    MAX_KEY_BYTES,
    Keyspace,
    KeyspaceStatistics,
    Watch,
)
from minidb.store._log import CommitLog, MemoryLog, NullLog
from minidb.store._mailbox import UNBOUNDED_OUTPUT, Batch, Executor, Mailbox, ReplySink, RoomWaiter
from minidb.store._plainrun import (
    PLAIN_ARITY,
    PLAIN_READS,
    Express,
    ExpressLane,
    express,
    express_python,
    plain_arity,
    plain_end,
    plain_end_python,
    run_plain,
    run_plain_python,
)
from minidb.store._results import CommandError, ErrorReply, Result, Simple
from minidb.store._state import StoreState, StoreStatistics

__all__ = [
    "APPLIED",
    "BATCH_SIZE_BOUNDS",
    "COMMANDS",
    "DEFAULT_MAX_VALUE_BYTES",
    "FSYNC_POLICIES",
    "MAX_KEY_BYTES",
    "PLAIN_ARITY",
    "PLAIN_READS",
    "REPLICA_REFUSAL",
    "UNBOUNDED_OUTPUT",
    "Batch",
    "Command",
    "CommandError",
    "CommitLog",
    "ErrorReply",
    "Executor",
    "Express",
    "ExpressLane",
    "FollowExecutor",
    "Keyspace",
    "KeyspaceStatistics",
    "Mailbox",
    "MemoryLog",
    "NullLog",
    "OpJournal",
    "OwnerStatistics",
    "ReplySink",
    "Result",
    "RoomWaiter",
    "Session",
    "ShippedRecord",
    "Simple",
    "StoreOwner",
    "StoreState",
    "StoreStatistics",
    "Watch",
    "execute",
    "execute_transaction",
    "express",
    "express_python",
    "lookup_command",
    "plain_arity",
    "plain_end",
    "plain_end_python",
    "run_plain",
    "run_plain_python",
    "validate",
]
