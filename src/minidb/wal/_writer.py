"""One open log segment file: append framed bytes, fdatasync, and start new segments.

The writer knows files, not records: ``DurableLog`` frames and buffers the records and hands
this class whole batches, so a batch can be written while the next one is being buffered. It
does not decide what an ``OSError`` means; ``DurableLog`` turns any of them into fail-stop.
Its file operations go through the ``FileSystem`` that was active when it was created (``_fs``),
kept for its whole life so that the per-batch write and fdatasync cost no extra lookup.

Zero-filled ahead (docs/wal-format.md, "Zero-filled space ahead"): a batch is written with
``pwrite`` at the segment's end, and whenever it reaches past the space already written, the
writer writes zeros up to ``zero_ahead`` bytes beyond it first. Most fdatasyncs then cover an
overwrite of blocks the file already has, inside its size, and commit no new size or block
(on ext4 no journal commit): measured on this project's machine (``bench/sync_cost.py``), a
write + fdatasync of 1.5 KB took 129 us there against 193 us for an append, which took
durable SET at ``-P 1`` from 0.82-0.88x Redis to 1.08-1.19x. The zeros after the last record
are what a reader already takes for a torn tail; a sealed segment and a cleanly closed one
are cut to their records (``cut_zeros``), so only a crash leaves them.
"""

from __future__ import annotations

import os

from minidb.wal._files import segment_name
from minidb.wal._format import FILE_HEADER_SIZE, FileKind, encode_header
from minidb.wal._fs import FileSystem, active

ZERO_AHEAD_BYTES = 1 << 20
"""Zeros written past a batch that reaches the end of the written space (one such write, and
one fdatasync that commits a new size, per MiB of log)."""


class SegmentWriter:
    """Appends to ``wal-<base>.log``; ``size`` is what has been written to it so far (the
    records; the file may hold zeros after them, up to ``zeroed``)."""

    def __init__(
        self, directory: str, base: int, fd: int, size: int, fs: FileSystem,
        zero_ahead: int = ZERO_AHEAD_BYTES,
    ) -> None:
        self.directory = directory
        self.base = base
        self.path = os.path.join(directory, segment_name(base))
        self.size = size
        self.zeroed = size
        """Where the written space ends: records, then zeros."""
        self.zero_ahead = zero_ahead
        self._fd = fd
        self._fs = fs

    @classmethod
    def create(
        cls, directory: str, base: int, zero_ahead: int = ZERO_AHEAD_BYTES
    ) -> SegmentWriter:
        """Create an empty segment: header written and fsynced, directory entry fsynced."""
        fs = active()
        path = os.path.join(directory, segment_name(base))
        # O_TRUNC: a segment with this name can only be a header-less leftover of a crash
        # during its creation (replay refuses anything else before we get here).
        fd = fs.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            fs.write_all(fd, encode_header(FileKind.SEGMENT, base))
            fs.fsync(fd)
            fs.fsync_dir(directory)
        except BaseException:
            fs.close(fd)
            raise
        return cls(directory, base, fd, FILE_HEADER_SIZE, fs, zero_ahead)

    @classmethod
    def reopen(
        cls, directory: str, base: int, size: int, zero_ahead: int = ZERO_AHEAD_BYTES
    ) -> SegmentWriter:
        """Continue an existing segment, cutting it to ``size`` (its last good record) first."""
        fs = active()
        path = os.path.join(directory, segment_name(base))
        fd = fs.open(path, os.O_WRONLY)
        try:
            if os.fstat(fd).st_size != size:
                fs.ftruncate(fd, size)
                fs.fsync(fd)
        except BaseException:
            fs.close(fd)
            raise
        return cls(directory, base, fd, size, fs, zero_ahead)

    @property
    def holds_records(self) -> bool:
        """Whether anything but the header has been written."""
        return self.size > FILE_HEADER_SIZE

    def write(self, data: bytes) -> None:
        """Write framed records (not yet durable), zeros after them first if they reach past
        the written space."""
        end = self.size + len(data)
        if end > self.zeroed and self.zero_ahead > 0:
            self._fs.pwrite_all(self._fd, bytes(self.zero_ahead), end)
            self.zeroed = end + self.zero_ahead
        self._fs.pwrite_all(self._fd, data, self.size)
        self.size = end
        self.zeroed = max(self.zeroed, end)

    def cut_zeros(self) -> None:
        """Cut the zeros after the records, durably (nothing to do if there are none)."""
        if self.zeroed > self.size:
            self._fs.ftruncate(self._fd, self.size)
            self.zeroed = self.size
            self.datasync()

    def seal(self, end_record: bytes) -> None:
        """Close the segment with ``end_record`` (its END), durably, and nothing after it.

        The zeros are cut, and the cut synced, before END is written (with no zeros after
        it): a reader refuses bytes after an END, and a crash between a write of END and a
        cut of the zeros could leave the END's block written without the new size."""
        self.cut_zeros()
        self.zero_ahead = 0
        self.write(end_record)
        self.datasync()

    def cut(self, size: int) -> None:
        """Truncate the file back to ``size`` (the end of its last synced batch) and sync."""
        self._fs.ftruncate(self._fd, size)
        self._fs.fdatasync(self._fd)
        self.size = self.zeroed = size

    def datasync(self) -> None:
        """Wait until everything written is on the disk."""
        self._fs.fdatasync(self._fd)

    def close(self) -> None:
        """Close the file. Idempotent."""
        if self._fd >= 0:
            self._fs.close(self._fd)
            self._fd = -1
