"""minidb's write-ahead log: checksummed records in segments, snapshots, replay, fail-stop.

The format is specified in ``docs/wal-format.md``. The store's data owner uses ``open_log``
(or ``DurableLog.open`` plus ``replay()``) and the ``CommitLog`` calls ``append``, ``sync``,
``wants_checkpoint``, ``checkpoint`` and ``close``; this package knows nothing of the store.
``minidb.wal.testing`` simulates a power loss underneath the log, for crash-safety tests.
"""

from minidb.wal._durable import (
    DEFAULT_CHECKPOINT_BYTES,
    DEFAULT_SEGMENT_BYTES,
    DurableLog,
    WalStatistics,
    open_log,
)

__all__ = [
    "DEFAULT_CHECKPOINT_BYTES",
    "DEFAULT_SEGMENT_BYTES",
    "DurableLog",
    "WalStatistics",
    "open_log",
]
