"""minidb.store: the data (``StoreState``, pure) and its one owner (``StoreOwner``, an actor).

Connections send ``Batch``es through the owner's bounded ``Mailbox``; the owner applies each
group, writes it to its ``CommitLog`` and syncs once before any reply of the group is released.
"""

from minidb.store._actor import BATCH_SIZE_BOUNDS, OwnerStatistics, StoreOwner
from minidb.store._log import CommitLog, MemoryLog, NullLog
from minidb.store._mailbox import Batch, Mailbox, ReplySink, RoomWaiter
from minidb.store._state import Journal, StoreState, StoreStatistics

__all__ = [
    "BATCH_SIZE_BOUNDS",
    "Batch",
    "CommitLog",
    "Journal",
    "Mailbox",
    "MemoryLog",
    "NullLog",
    "OwnerStatistics",
    "ReplySink",
    "RoomWaiter",
    "StoreOwner",
    "StoreState",
    "StoreStatistics",
]
