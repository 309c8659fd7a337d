"""One open log segment file: append framed bytes, fdatasync, and start new segments.

The writer knows files, not records: ``DurableLog`` frames and buffers the records and hands
this class whole batches, so a batch can be written while the next one is being buffered. It
does not decide what an ``OSError`` means; ``DurableLog`` turns any of them into fail-stop.
Its file operations go through the ``FileSystem`` that was active when it was created (``_fs``),
kept for its whole life so that the per-batch write and fdatasync cost no extra lookup.
"""

from __future__ import annotations

import os

from minidb.wal._files import segment_name
from minidb.wal._format import FILE_HEADER_SIZE, FileKind, encode_header
from minidb.wal._fs import FileSystem, active


class SegmentWriter:
    """Appends to ``wal-<base>.log``; ``size`` is what has been written to it so far."""

    def __init__(self, directory: str, base: int, fd: int, size: int, fs: FileSystem) -> None:
        self.directory = directory
        self.base = base
        self.path = os.path.join(directory, segment_name(base))
        self.size = size
        self._fd = fd
        self._fs = fs

    @classmethod
    def create(cls, directory: str, base: int) -> SegmentWriter:
        """Create an empty segment: header written and fsynced, directory entry fsynced."""
        fs = active()
        path = os.path.join(directory, segment_name(base))
        # O_TRUNC: a segment with this name can only be a header-less leftover of a crash
        # during its creation (replay refuses anything else before we get here).
        fd = fs.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            fs.write_all(fd, encode_header(FileKind.SEGMENT, base))
            fs.fsync(fd)
            fs.fsync_dir(directory)
        except BaseException:
            fs.close(fd)
            raise
        return cls(directory, base, fd, FILE_HEADER_SIZE, fs)

    @classmethod
    def reopen(cls, directory: str, base: int, size: int) -> SegmentWriter:
        """Continue an existing segment, cutting it to ``size`` (its last good record) first."""
        fs = active()
        path = os.path.join(directory, segment_name(base))
        fd = fs.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            if os.fstat(fd).st_size != size:
                fs.ftruncate(fd, size)
                fs.fsync(fd)
        except BaseException:
            fs.close(fd)
            raise
        return cls(directory, base, fd, size, fs)

    @property
    def holds_records(self) -> bool:
        """Whether anything but the header has been written."""
        return self.size > FILE_HEADER_SIZE

    def write(self, data: bytes) -> None:
        """Write framed records (not yet durable)."""
        self._fs.write_all(self._fd, data)
        self.size += len(data)

    def cut(self, size: int) -> None:
        """Truncate the file back to ``size`` (the end of its last synced batch) and sync."""
        self._fs.ftruncate(self._fd, size)
        self._fs.fdatasync(self._fd)
        self.size = size

    def datasync(self) -> None:
        """Wait until everything written is on the disk."""
        self._fs.fdatasync(self._fd)

    def close(self) -> None:
        """Close the file. Idempotent."""
        if self._fd >= 0:
            self._fs.close(self._fd)
            self._fd = -1
