"""The data directory on disk: file names, listing, reading, atomic replacement, the lock.

With ``_writer`` this is where the log touches the file system; everything it reads is handed to
the pure decoders as a buffer. Directory fsyncs are issued here because a created or renamed
file is not durable until its directory entry is (the ALICE study found most crash bugs right
there). Every call that changes or syncs a file goes through ``_fs.active()``, the seam the
power-loss simulator (``minidb.wal.testing``) replaces; reads use the real files.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from minidb.errors import WalError
from minidb.wal._coalesce import coalesce
from minidb.wal._fs import active

MANIFEST_NAME = "MANIFEST"
LOCK_NAME = "LOCK"
TMP_SUFFIX = ".tmp"

_SEGMENT = re.compile(r"^wal-([0-9a-f]{16})\.log$")
_SNAPSHOT = re.compile(r"^snapshot-([0-9a-f]{16})\.snap$")

# Snapshot and manifest files are written in pieces of about this size: big enough that the
# syscall count does not matter, small enough that a large snapshot is never one huge bytes.
WRITE_CHUNK_BYTES = 1 << 20


def segment_name(base: int) -> str:
    """The file name of the segment whose first record is number ``base``."""
    return f"wal-{base:016x}.log"


def snapshot_name(base: int) -> str:
    """The file name of the snapshot consistent with the log up to (not including) ``base``."""
    return f"snapshot-{base:016x}.snap"


@dataclass
class Listing:
    """What a data directory holds, by role; foreign files are not listed."""

    manifest: bool = False
    segments: dict[int, str] = field(default_factory=dict)
    snapshots: dict[int, str] = field(default_factory=dict)
    temporaries: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (self.manifest or self.segments or self.snapshots or self.temporaries)


def list_dir(directory: str) -> Listing:
    """Sort the directory's minidb files by role (``LOCK`` and foreign files are skipped)."""
    listing = Listing()
    for name in os.listdir(directory):
        if name == MANIFEST_NAME:
            listing.manifest = True
        elif name.endswith(TMP_SUFFIX):
            listing.temporaries.append(name)
        elif m := _SEGMENT.match(name):
            listing.segments[int(m.group(1), 16)] = name
        elif m := _SNAPSHOT.match(name):
            listing.snapshots[int(m.group(1), 16)] = name
    return listing


@contextlib.contextmanager
def mapped(path: str) -> Iterator[bytes]:
    """The file's bytes as a read-only buffer (an mmap, so a large snapshot is not copied)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b""
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            yield m  # type: ignore[misc]  # mmap supports the buffer protocol the decoders use


def write_atomically(directory: str, name: str, chunks: Iterable[bytes]) -> int:
    """Replace ``name`` with ``chunks``: temp file, fsync, rename, fsync the directory.

    Returns the bytes written. Readers see the old file or the new one, never a mixture, even
    across a crash. A failure removes the temp file and raises the ``OSError``.
    """
    fs = active()
    tmp = os.path.join(directory, name + TMP_SUFFIX)
    fd = fs.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    total = 0
    try:
        for block in coalesce(chunks, WRITE_CHUNK_BYTES):
            fs.write_all(fd, block)
            total += len(block)
        fs.fsync(fd)
    except BaseException:
        fs.close(fd)
        with contextlib.suppress(OSError):
            fs.unlink(tmp)
        raise
    fs.close(fd)
    fs.rename(tmp, os.path.join(directory, name))
    fs.fsync_dir(directory)
    return total


def remove(directory: str, names: Iterable[str]) -> None:
    """Delete files that are no longer part of the log, then make the deletions durable."""
    fs = active()
    removed = False
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            fs.unlink(os.path.join(directory, name))
            removed = True
    if removed:
        fs.fsync_dir(directory)


def lock_dir(directory: str) -> int:
    """Take the directory's exclusive lock; return its fd (closing it releases the lock).

    Two processes appending to one log would interleave records; the kernel drops the lock when
    the holder dies, so a ``kill -9`` never leaves a stale lock behind.
    """
    fs = active()
    fd = fs.open(os.path.join(directory, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fs.close(fd)
        raise WalError(
            f"data dir {directory} is in use by another process", path=directory
        ) from None
    return fd
