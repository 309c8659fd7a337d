"""minidb's write-ahead log: checksummed records in segments, snapshots, replay, fail-stop.

The format is specified in ``docs/wal-format.md``. The store's data owner uses ``open_log``
(or ``DurableLog.open`` plus ``replay()``) and the ``CommitLog`` calls ``append``, ``sync``,
``wants_checkpoint``, ``checkpoint`` and ``close``; this package knows nothing of the store.
Records carry operations (``Put``, ``Remove``, ``Expire``, ``Flush``; for typed values
``PutContainer``, ``AddElements``, ``RemoveElements``, ``Rename``, ``Copy``), encoded by
``encode_ops``; replay yields them decoded, one list per record.
``minidb.wal.testing`` simulates a power loss underneath the log, for crash-safety tests.
"""

from minidb.wal._durable import (
    DEFAULT_CHECKPOINT_BYTES,
    DEFAULT_SEGMENT_BYTES,
    DurableLog,
    LogPosition,
    WalStatistics,
    open_log,
)
from minidb.wal._files import segment_name, snapshot_name
from minidb.wal._format import FILE_HEADER_SIZE, FileKind, decode_count, encode_header
from minidb.wal._format import RECORD_HEADER_SIZE as _RECORD_HEADER_SIZE
from minidb.wal._ops import (
    KIND_HASH,
    KIND_LIST,
    KIND_SET,
    KIND_ZSET,
    AddElements,
    Copy,
    Expire,
    Flush,
    ListInsert,
    ListPop,
    ListPush,
    ListRemove,
    ListSet,
    Op,
    Put,
    PutContainer,
    Remove,
    RemoveElements,
    Rename,
    decode_score,
    encode_score,
)
from minidb.wal._payload import (
    PayloadError,
    decode_ops,
    encode_container,
    encode_groups,
    encode_ops,
    encode_put,
    encode_remove,
    pack_payloads,
    pack_puts,
)
from minidb.wal._seed import Seed, holds_store, segment_copy_records

END_RECORD_BYTES = _RECORD_HEADER_SIZE + 8
"""Size of the END record that closes a segment (header plus its u64 count)."""


def segment_header(base: int) -> bytes:
    """The file header of a segment (current version) whose first record is ``base``."""
    return encode_header(FileKind.SEGMENT, base)


__all__ = [
    "DEFAULT_CHECKPOINT_BYTES",
    "DEFAULT_SEGMENT_BYTES",
    "END_RECORD_BYTES",
    "FILE_HEADER_SIZE",
    "KIND_HASH",
    "KIND_LIST",
    "KIND_SET",
    "KIND_ZSET",
    "AddElements",
    "Copy",
    "DurableLog",
    "Expire",
    "Flush",
    "ListInsert",
    "ListPop",
    "ListPush",
    "ListRemove",
    "ListSet",
    "LogPosition",
    "Op",
    "PayloadError",
    "Put",
    "PutContainer",
    "Remove",
    "RemoveElements",
    "Rename",
    "Seed",
    "WalStatistics",
    "decode_count",
    "decode_ops",
    "decode_score",
    "encode_container",
    "encode_groups",
    "encode_ops",
    "encode_put",
    "encode_remove",
    "encode_score",
    "holds_store",
    "open_log",
    "pack_payloads",
    "pack_puts",
    "segment_copy_records",
    "segment_header",
    "segment_name",
    "snapshot_name",
]
