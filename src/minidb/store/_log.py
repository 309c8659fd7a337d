"""The durability hook: what the data owner needs from a commit log, and two simple logs.

The owner depends only on the ``CommitLog`` protocol, so the write-ahead log plugs in without
the owner knowing files exist. ``NullLog`` keeps nothing (a store that is only in memory);
``MemoryLog`` keeps records in a list and can be told to fail, which is how the owner's
group-commit and fail-stop rules are tested without a disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from minidb.wal import Op, encode_groups


class CommitLog(Protocol):
    """Where the owner writes a batch's records before releasing its replies."""

    def append(self, record: bytes) -> None:
        """Add one record: the encoded operations of one write (``minidb.wal.encode_ops``)."""

    def append_all(self, records: list[bytes]) -> None:
        """``append`` each of ``records`` in order."""

    def append_groups(self, groups: list[list[Op]]) -> None:
        """``append`` one record per group of ops (``encode_ops`` of each), in order: the
        owner's whole group commit in one call (a log may encode and frame them together)."""

    def sync(self) -> None:
        """Make everything appended so far durable; raise ``OSError`` if that failed."""

    def write_pending(self) -> None:
        """Write everything appended so far without making it durable yet (it survives a
        process kill, not a power loss); raise ``OSError`` if that failed."""

    def datasync(self) -> bool:
        """Make what ``write_pending`` wrote durable (any thread, one call at a time); False
        if nothing was waiting; raise ``OSError`` if that failed (the log has failed)."""

    def wants_checkpoint(self) -> bool:
        """Whether enough log has grown since the last checkpoint to write a new one."""

    def checkpoint(self, records: Iterable[bytes]) -> None:
        """Replace the history by ``records`` (the whole store as encoded ``Put`` payloads)."""

    def begin_checkpoint(self) -> int:
        """First half of ``checkpoint``, on the owner: sync, mark where the snapshot stands,
        and return that position; appends may go on right after."""

    def finish_checkpoint(self, base: int, records: Iterable[bytes]) -> None:
        """Second half, possibly in a worker thread: write ``records`` (the store as it was at
        ``begin_checkpoint``) as the snapshot for ``base`` and drop the history it covers."""

    def close(self) -> None:
        """Release files; called once after the owner has stopped."""


class SplitSyncLog(CommitLog, Protocol):
    """A log whose sync can be split so the write and fdatasync run in a worker thread."""

    def seal(self) -> object | None:
        """Take the records appended so far out of the buffer (None if there are none)."""

    def write_sealed(self, batch: Any) -> None:
        """Write and fdatasync a sealed batch; one at a time, in seal order, on any thread."""


class NullLog:
    """A log that keeps nothing: writes are acknowledged once applied in memory."""

    def append(self, record: bytes) -> None:
        pass

    def append_all(self, records: list[bytes]) -> None:
        pass

    def append_groups(self, groups: list[list[Op]]) -> None:
        pass

    def sync(self) -> None:
        pass

    def write_pending(self) -> None:
        pass

    def datasync(self) -> bool:
        return False

    def wants_checkpoint(self) -> bool:
        return False

    def checkpoint(self, records: Iterable[bytes]) -> None:
        pass

    def begin_checkpoint(self) -> int:
        return 0

    def finish_checkpoint(self, base: int, records: Iterable[bytes]) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class MemoryLog:
    """An in-memory log for tests: ``synced`` holds what a power loss would keep, ``written``
    what a process kill would.

    ``fail_append`` / ``fail_sync`` make the next call raise ``OSError`` with that errno
    (``fail_sync`` also the next ``datasync``).
    """

    appended: list[bytes] = field(default_factory=list)
    written: list[bytes] = field(default_factory=list)
    synced: list[bytes] = field(default_factory=list)
    syncs: int = 0
    checkpoints: int = 0
    checkpoint_every: int = 0
    fail_append: int = 0
    fail_sync: int = 0
    closed: bool = False

    def append(self, record: bytes) -> None:
        if self.fail_append:
            code, self.fail_append = self.fail_append, 0
            raise OSError(code, os.strerror(code))
        self.appended.append(record)

    def append_all(self, records: list[bytes]) -> None:
        for record in records:
            self.append(record)

    def append_groups(self, groups: list[list[Op]]) -> None:
        self.append_all(encode_groups(groups))

    def sync(self) -> None:
        if self.fail_sync:
            code, self.fail_sync = self.fail_sync, 0
            raise OSError(code, os.strerror(code))
        self.syncs += 1
        self.written = list(self.appended)
        self.synced = list(self.appended)

    def write_pending(self) -> None:
        self.written = list(self.appended)

    def datasync(self) -> bool:
        if self.synced == self.written:
            return False
        if self.fail_sync:
            code, self.fail_sync = self.fail_sync, 0
            raise OSError(code, os.strerror(code))
        self.syncs += 1
        self.synced = list(self.written)
        return True

    def wants_checkpoint(self) -> bool:
        return bool(self.checkpoint_every) and len(self.appended) >= self.checkpoint_every

    def checkpoint(self, records: Iterable[bytes]) -> None:
        self.finish_checkpoint(self.begin_checkpoint(), records)

    def begin_checkpoint(self) -> int:
        self.sync()
        return len(self.appended)

    def finish_checkpoint(self, base: int, records: Iterable[bytes]) -> None:
        self.checkpoints += 1
        snapshot = list(records)
        self.appended = snapshot + self.appended[base:]
        self.written = snapshot + self.written[base:]
        self.synced = snapshot + self.synced[base:]

    def close(self) -> None:
        self.closed = True

