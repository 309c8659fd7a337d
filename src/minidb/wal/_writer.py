"""One open log segment file: append framed bytes, fdatasync, and start new segments.

The writer knows files, not records: ``DurableLog`` frames and buffers the records and hands
this class whole batches, so a batch can be written while the next one is being buffered. It
does not decide what an ``OSError`` means; ``DurableLog`` turns any of them into fail-stop.
"""

from __future__ import annotations

import os

from minidb.wal._files import fsync_dir, segment_name, write_all
from minidb.wal._format import FILE_HEADER_SIZE, FileKind, encode_header

# fdatasync flushes the data and the metadata needed to read it back (the file size) but not the
# modification time, which replay never looks at. Measured on this machine it costs the same as
# fsync for appends, so it is the cheaper-or-equal choice. Not every platform has it.
_datasync = getattr(os, "fdatasync", os.fsync)


class SegmentWriter:
    """Appends to ``wal-<base>.log``; ``size`` is what has been written to it so far."""

    def __init__(self, directory: str, base: int, fd: int, size: int) -> None:
        self.directory = directory
        self.base = base
        self.path = os.path.join(directory, segment_name(base))
        self.size = size
        self._fd = fd

    @classmethod
    def create(cls, directory: str, base: int) -> SegmentWriter:
        """Create an empty segment: header written and fsynced, directory entry fsynced."""
        path = os.path.join(directory, segment_name(base))
        # O_TRUNC: a segment with this name can only be a header-less leftover of a crash
        # during its creation (replay refuses anything else before we get here).
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            write_all(fd, encode_header(FileKind.SEGMENT, base))
            os.fsync(fd)
            fsync_dir(directory)
        except BaseException:
            os.close(fd)
            raise
        return cls(directory, base, fd, FILE_HEADER_SIZE)

    @classmethod
    def reopen(cls, directory: str, base: int, size: int) -> SegmentWriter:
        """Continue an existing segment, cutting it to ``size`` (its last good record) first."""
        path = os.path.join(directory, segment_name(base))
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            if os.fstat(fd).st_size != size:
                os.ftruncate(fd, size)
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(directory, base, fd, size)

    @property
    def holds_records(self) -> bool:
        """Whether anything but the header has been written."""
        return self.size > FILE_HEADER_SIZE

    def write(self, data: bytes) -> None:
        """Write framed records (not yet durable)."""
        write_all(self._fd, data)
        self.size += len(data)

    def cut(self, size: int) -> None:
        """Truncate the file back to ``size`` (the end of its last synced batch) and sync."""
        os.ftruncate(self._fd, size)
        _datasync(self._fd)
        self.size = size

    def datasync(self) -> None:
        """Wait until everything written is on the disk."""
        _datasync(self._fd)

    def close(self) -> None:
        """Close the file. Idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
