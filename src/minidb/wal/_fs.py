"""The one seam between the log and the OS calls that change or sync files.

Every call the WAL makes to create, write, truncate, sync, rename or delete a file, or to sync
the data directory, goes through a ``FileSystem``. The default, ``OS``, *is* the ``os``
functions (held as static methods, so ``fs.write`` is ``os.write`` itself, not a wrapper; the
hot path costs one attribute lookup, as ``os.write`` does). Reads (listing, ``mmap``,
``fstat``) stay on the real files: only what decides durability needs to be observed.

Tests replace it with ``using(fs)``: ``minidb.wal.testing.CrashFS`` records what a power loss
would keep and rebuilds the directory as a disk could leave it. ``active()`` is read when an
operation starts (a ``SegmentWriter`` keeps the one it was created with), so a log opened
inside ``using()`` keeps writing through that file system until it is closed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY
"""How a directory is opened to fsync it (its entries: created, renamed, removed files)."""


def _makedirs(path: str) -> None:
    os.makedirs(path, exist_ok=True)


class FileSystem:
    """The mutating file operations the WAL uses; this class is the real thing.

    A replacement overrides the primitives (``open`` ... ``makedirs``); ``write_all`` and
    ``fsync_dir`` are built from them, so it sees every byte and every sync.
    """

    open = staticmethod(os.open)
    close = staticmethod(os.close)
    write = staticmethod(os.write)
    pwrite = staticmethod(os.pwrite)
    fsync = staticmethod(os.fsync)
    # fdatasync flushes the data and the metadata needed to read it back (the size) but not the
    # modification time, which replay never looks at. Not every platform has it.
    fdatasync = staticmethod(getattr(os, "fdatasync", os.fsync))
    ftruncate = staticmethod(os.ftruncate)
    rename = staticmethod(os.rename)
    unlink = staticmethod(os.unlink)
    makedirs = staticmethod(_makedirs)

    def write_all(self, fd: int, data: bytes) -> None:
        """``write`` until every byte is written; a short write is not an error by itself."""
        view = memoryview(data)
        while view:
            written = self.write(fd, view)
            view = view[written:]

    def pwrite_all(self, fd: int, data: bytes, offset: int) -> None:
        """``pwrite`` at ``offset`` until every byte is written."""
        view = memoryview(data)
        while view:
            written = self.pwrite(fd, view, offset)
            view = view[written:]
            offset += written

    def fsync_dir(self, directory: str) -> None:
        """Make the directory's entries (created, renamed, removed files) durable."""
        fd = self.open(directory, DIRECTORY_FLAGS)
        try:
            self.fsync(fd)
        finally:
            self.close(fd)


OS = FileSystem()
"""The real file system."""

_active: FileSystem = OS


def active() -> FileSystem:
    """The file system the WAL writes through now (``OS`` unless a test installed another)."""
    return _active


@contextlib.contextmanager
def using(fs: FileSystem) -> Iterator[FileSystem]:
    """Route the WAL's file operations through ``fs`` inside the block (tests; not nestable
    across threads: it is one process-wide setting)."""
    global _active
    previous, _active = _active, fs
    try:
        yield fs
    finally:
        _active = previous
