"""minidb's write-ahead log: checksummed records in segments, snapshots, replay, fail-stop.

The format is specified in ``docs/wal-format.md``. The store's data owner uses ``open_log``
(or ``DurableLog.open`` plus ``replay()``) and the ``CommitLog`` calls ``append``, ``sync``,
``wants_checkpoint``, ``checkpoint`` and ``close``; this package knows nothing of the store.
Records carry operations (``Put``, ``Remove``, ``Expire``, ``Flush``), encoded by ``encode_ops``;
replay yields them decoded, one list per record.
``minidb.wal.testing`` simulates a power loss underneath the log, for crash-safety tests.
"""

from minidb.wal._durable import (
    DEFAULT_CHECKPOINT_BYTES,
    DEFAULT_SEGMENT_BYTES,
    DurableLog,
    WalStatistics,
    open_log,
)
from minidb.wal._ops import Expire, Flush, Op, Put, Remove
from minidb.wal._payload import (
    PayloadError,
    decode_ops,
    encode_ops,
    encode_put,
    encode_remove,
)
from minidb.wal._seed import Seed, holds_store, segment_copy_records

__all__ = [
    "DEFAULT_CHECKPOINT_BYTES",
    "DEFAULT_SEGMENT_BYTES",
    "DurableLog",
    "Expire",
    "Flush",
    "Op",
    "PayloadError",
    "Put",
    "Remove",
    "Seed",
    "WalStatistics",
    "decode_ops",
    "encode_ops",
    "encode_put",
    "encode_remove",
    "holds_store",
    "open_log",
    "segment_copy_records",
]
