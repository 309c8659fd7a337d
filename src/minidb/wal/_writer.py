"""One open log segment: records framed into a buffer, then written and fdatasynced together.

The buffer is what makes group commit cheap: ``append`` costs a ``struct.pack`` and a CRC, and
``sync`` costs one ``write`` and one ``fdatasync`` however many records are waiting. This class
does not decide what an ``OSError`` means; ``DurableLog`` turns any of them into fail-stop.
"""

from __future__ import annotations

import os

from minidb.wal._files import fsync_dir, segment_name, write_all
from minidb.wal._format import FILE_HEADER_SIZE, FileKind, encode_header, encode_record

# fdatasync flushes the data and the metadata needed to read it back (the file size) but not the
# modification time, which replay never looks at. Measured on this machine it costs the same as
# fsync for appends, so it is the cheaper-or-equal choice. Not every platform has it.
_datasync = getattr(os, "fdatasync", os.fsync)


class SegmentWriter:
    """Appends framed records to ``wal-<base>.log``; numbers continue from ``next_number``."""

    def __init__(self, directory: str, base: int, fd: int, size: int, next_number: int) -> None:
        self.directory = directory
        self.base = base
        self.path = os.path.join(directory, segment_name(base))
        self.size = size  # bytes on disk (written, maybe not yet synced)
        self.next_number = next_number  # the number the next appended record gets
        self._fd = fd
        self._buffer: list[bytes] = []
        self._pending = 0  # records in the buffer
        self.buffered_bytes = 0

    @classmethod
    def create(cls, directory: str, base: int) -> SegmentWriter:
        """Create an empty segment: header written and fsynced, directory entry fsynced."""
        path = os.path.join(directory, segment_name(base))
        # O_TRUNC: a segment with this name can only be a header-less leftover of a crash
        # during creation (replay refuses anything else before we get here).
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            write_all(fd, encode_header(FileKind.SEGMENT, base))
            os.fsync(fd)
            fsync_dir(directory)
        except BaseException:
            os.close(fd)
            raise
        return cls(directory, base, fd, FILE_HEADER_SIZE, base)

    @classmethod
    def reopen(cls, directory: str, base: int, size: int, next_number: int) -> SegmentWriter:
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
        return cls(directory, base, fd, size, next_number)

    @property
    def pending(self) -> int:
        """How many appended records are not yet written."""
        return self._pending

    @property
    def first_pending_number(self) -> int:
        """The number of the oldest record not yet written (``next_number`` if none)."""
        return self.next_number - self._pending

    def append(self, payload: bytes) -> int:
        """Frame ``payload`` as the next record into the buffer; return its framed size."""
        framed = encode_record(self.next_number, payload)
        self._buffer.append(framed)
        self.buffered_bytes += len(framed)
        self._pending += 1
        self.next_number += 1
        return len(framed)

    def adopt(self, framed: bytes, count: int) -> None:
        """Take ``count`` records framed (and numbered) by the previous segment's writer."""
        self._buffer.append(framed)
        self.buffered_bytes += len(framed)
        self._pending += count
        self.next_number += count

    def take_buffer(self) -> bytes:
        """Remove and return the buffered records, to be written here or into a new segment."""
        data = b"".join(self._buffer)
        self._buffer.clear()
        self._pending = self.buffered_bytes = 0
        return data

    def write(self, data: bytes) -> None:
        """Write framed records (not yet durable)."""
        write_all(self._fd, data)
        self.size += len(data)

    def datasync(self) -> None:
        """Wait until everything written is on the disk."""
        _datasync(self._fd)

    def close(self) -> None:
        """Close the file; anything still buffered is dropped (it was never acknowledged)."""
        self._buffer.clear()
        self._pending = self.buffered_bytes = 0
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
