"""``DurableLog``: the write-ahead log the store's data owner writes through.

It ties the pieces together: replay at open (``_recovery``), group-committed appends to the
newest segment (``_writer``), each segment closed by an END record before the next is created
(so replay can tell a cut segment from a missing one), checkpoints that replace the history
by a snapshot (``_checkpoint``, ``_manifest``), and the fail-stop rule for disk errors. It
implements the store's ``CommitLog`` protocol (``append``, ``sync``, ``wants_checkpoint``,
``checkpoint``, ``close``) and is synchronous.

Threads: one thread (the owner's loop) calls everything, except that the write-and-fdatasync
half of a sync may run in a worker thread while the owner keeps appending the next batch:
``batch = log.seal()`` on the owner's thread, then ``log.write_sealed(batch)`` in the worker,
one at a time and in order. ``sync()`` is simply both halves on the calling thread. The records
are framed and buffered here, not in the segment writer, so a segment can be rolled by the
worker without losing what the owner appends meanwhile.

Write now, sync later (``--fsync everysec`` / ``no``, Redis's ``appendfsync``): the owner calls
``write_pending()`` (the records reach the page cache, so a process kill loses nothing) and
acknowledges; ``datasync()`` makes them durable, from a worker thread, one at a time, while the
owner goes on writing. A lock keeps a segment from being closed (rolled) under a ``datasync``
in flight. A failed ``datasync`` fails the log exactly as a failed ``sync`` does.

Shipping (``minidb.replication``): ``set_observer(fn)`` has ``fn(position)`` called with a
``LogPosition`` after every write that adds records, every segment roll and every finished
checkpoint, on whichever thread did it; it must only record the value and wake its reader
(no I/O, no blocking). ``hold_for_shipping()`` makes checkpoints keep the segments and
snapshots the reader has not shipped yet; ``release_shipped(...)`` moves its watermark and
deletes what is no longer held. Without a hold, a checkpoint deletes what it covers at once.

Lifecycle::

    REPLAYING --replay() exhausted--> OPEN --close()--> CLOSED
        |                               |
        +--CorruptionError (stays)      +--any write/fsync OSError--> FAILED (refuses all writes)

Fail-stop, because of fsyncgate: after a failed fsync Linux may already have marked the dirty
pages clean and dropped them, so a later fsync that succeeds proves nothing about the records
of the failed batch. A failed log therefore refuses every later write; a restart replays what
really is on disk. The failed batch itself is cut off the segment (truncated back to the end of
the last synced batch) so that a write answered "not logged" does not reappear at replay.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import NamedTuple

from minidb import _failpoints
from minidb.errors import WalError
from minidb.wal._checkpoint import snapshot_chunks
from minidb.wal._files import (
    MANIFEST_NAME,
    Listing,
    list_dir,
    lock_dir,
    remove,
    segment_name,
    snapshot_name,
    write_atomically,
)
from minidb.wal._format import (
    FILE_HEADER_SIZE,
    FORMAT_VERSION,
    LEGACY_VERSION,
    encode_end,
    encode_records,
)
from minidb.wal._fs import active
from minidb.wal._manifest import Manifest
from minidb.wal._ops import Op
from minidb.wal._payload import frame_groups
from minidb.wal._recovery import FileReport, Recovery
from minidb.wal._writer import ZERO_AHEAD_BYTES, SegmentWriter

logger = logging.getLogger("minidb.wal")

# Checkpoint after this much log since the last one: restart replays at most about this much
# history on top of the snapshot (the issue's --checkpoint-bytes default).
DEFAULT_CHECKPOINT_BYTES = 64 * 1024 * 1024
# ...and not before the history is this many times the last snapshot's size (Redis's
# auto-aof-rewrite-percentage 100). A checkpoint rewrites the whole store, so with a fixed
# trigger alone a load of N keys would rewrite O(N^2 / checkpoint_bytes) bytes: importing 10M
# rows (1.5 GB of log) would write about 23 snapshots averaging half the data. Growing the
# trigger with the snapshot keeps the rewriting to about twice the data whatever its size,
# at the price of a restart replaying up to one snapshot's worth of history on top of it.
DEFAULT_CHECKPOINT_GROWTH = 1.0
# Start a new segment once the current one holds this much, so no single file grows without
# bound between checkpoints and a damaged file costs at most this much of the history.
DEFAULT_SEGMENT_BYTES = 16 * 1024 * 1024


class _State(enum.Enum):
    REPLAYING = "replaying"
    OPEN = "open"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class WalStatistics:
    """Counters of one ``DurableLog`` since it was opened."""

    appends: int  # records appended (minidb_wal_appends_total)
    syncs: int  # fdatasyncs that carried records (minidb_wal_syncs_total)
    bytes: int  # record bytes written to segments
    checkpoints: int
    segments_created: int
    replayed: int  # records yielded by replay, snapshot included
    torn_bytes_cut: int  # bytes of torn tail cut off at open
    log_bytes: int  # bytes of log since the last checkpoint (what wants_checkpoint compares)
    failed: bool  # fail-stop: the log refuses writes until restarted


class LogPosition(NamedTuple):
    """How far the log's files go, for a reader of them that runs beside the owner.

    Records numbered below ``next_number`` are written (in the page cache at least), the
    newest of them in segment ``segment_base``, whose first ``segment_size`` bytes hold whole
    records; ``snapshot_base`` is the newest finished checkpoint's (``None``: none yet).
    """

    segment_base: int
    segment_size: int
    next_number: int
    snapshot_base: int | None


@dataclass(frozen=True, slots=True)
class SealedBatch:
    """Records taken out of the buffer by ``seal()``, framed and numbered, to be written."""

    first_number: int
    count: int
    data: bytes = field(repr=False)


class DurableLog:
    """A checksummed, segmented write-ahead log with snapshots, in one data directory."""

    def __init__(
        self,
        directory: str,
        lock_fd: int,
        *,
        checkpoint_bytes: int,
        segment_bytes: int,
        checkpoint_growth: float = DEFAULT_CHECKPOINT_GROWTH,
    ) -> None:
        self.directory = directory
        self.checkpoint_bytes = checkpoint_bytes
        self.checkpoint_growth = checkpoint_growth
        self._snapshot_bytes = 0  # size of the newest snapshot file (0: none)
        self.segment_bytes = segment_bytes
        self._lock_fd = lock_fd
        self._state = _State.REPLAYING
        self._recovery: Recovery | None = None
        self._writer: SegmentWriter | None = None
        # Framed records appended since the last seal: one each (``append_all``), or a
        # group's joined (``append_groups``).
        self._buffer: list[bytes] = []
        self._buffered = 0  # how many records ``_buffer`` holds
        self._next_number = 0  # the sequence number the next appended record gets
        self._failure: str | None = None
        self.torn_tail: FileReport | None = None  # what open cut off, for the caller to log
        self._appends = self._syncs = self._bytes = self._checkpoints = 0
        self._segments_created = self._replayed = self._torn_bytes_cut = self._log_bytes = 0
        self._log_bytes_at_begin = 0
        self._checkpoint_in_flight = False
        self._unsynced = False  # write_pending wrote what no fdatasync has covered yet
        self._segment_lock = threading.Lock()  # no segment closes under a datasync
        self._snapshot_base: int | None = None  # the snapshot the manifest names
        self._observer: Callable[[LogPosition], None] | None = None
        # Shipping hold: records below ``_shipped_number`` and snapshots up to
        # ``_shipped_snapshot`` are shipped; ``None`` (no hold) deletes at checkpoint time.
        self._shipped_number: int | None = None
        self._shipped_snapshot: int | None = None
        self._cleanup_lock = threading.Lock()  # a checkpoint's and a release's deletions
        # The published position: replaced whole, under this lock, by whichever thread wrote,
        # so a reader never sees a size and a record count from two different moments.
        self._position = LogPosition(0, FILE_HEADER_SIZE, 0, None)
        self._publish_lock = threading.Lock()

    # -- opening and replay ----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        data_dir: str | os.PathLike[str],
        *,
        checkpoint_bytes: int = DEFAULT_CHECKPOINT_BYTES,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        checkpoint_growth: float = DEFAULT_CHECKPOINT_GROWTH,
    ) -> DurableLog:
        """Open (or create) the log in ``data_dir``; call ``replay()`` before appending.

        Raises ``CorruptionError`` for a damaged manifest here, and for damaged records while
        ``replay()`` is iterated; ``WalError`` if another process has the directory open.
        """
        directory = os.fspath(data_dir)
        active().makedirs(directory)
        lock_fd = lock_dir(directory)
        log = cls(
            directory, lock_fd, checkpoint_bytes=checkpoint_bytes, segment_bytes=segment_bytes,
            checkpoint_growth=checkpoint_growth,
        )
        try:
            log._open()
        except BaseException:
            log.close()
            raise
        return log

    def _open(self) -> None:
        listing = list_dir(self.directory)
        if listing.is_empty() or _creation_interrupted(self.directory, listing):
            remove(self.directory, [*listing.segments.values(), *listing.temporaries])
            with _creating(self.directory, segment_name(0)):
                self._writer = SegmentWriter.create(self.directory, 0, self._zero_ahead())
            self._segments_created += 1
            with _creating(self.directory, MANIFEST_NAME):
                write_atomically(self.directory, MANIFEST_NAME, [Manifest(None, 0).encode()])
            self._state = _State.OPEN
            self._publish(self._writer, 0)
            return
        self._recovery = Recovery(self.directory)
        self._snapshot_base = self._recovery.read_manifest().snapshot
        if self._snapshot_base is not None:
            with contextlib.suppress(OSError):  # a missing snapshot is the replay's to report
                self._snapshot_bytes = os.path.getsize(
                    os.path.join(self.directory, snapshot_name(self._snapshot_base))
                )

    def replay(self) -> Iterator[list[Op]]:
        """Yield every record's operations, snapshot first; afterwards the log is appendable.

        Each list is one record, to be applied whole (a multi-key write is one record). A torn
        tail of the newest segment is cut off and kept in ``torn_tail`` for the caller to log
        (the server logs it as one structured event). A newest segment of an older format
        version is left as it is and a new segment is started, so a file never mixes versions.
        Raises ``CorruptionError`` for any other damage; the log then stays unusable.
        """
        recovery = self._recovery
        if recovery is None:
            return
        for entry in recovery.records():
            self._replayed += 1
            yield entry.ops
        tail = recovery.tail
        assert tail is not None, "records() sets the tail when it completes"
        if tail.torn is not None:
            self.torn_tail = tail.torn
            self._torn_bytes_cut = tail.torn.size - tail.good_offset
        empty = tail.good_offset == FILE_HEADER_SIZE
        if tail.good_offset < FILE_HEADER_SIZE or (empty and tail.version != FORMAT_VERSION):
            # A torn header, or an old-version segment without records: write it again.
            with _creating(self.directory, segment_name(tail.base)):
                self._writer = SegmentWriter.create(
                    self.directory, tail.base, self._zero_ahead()
                )
        else:
            self._writer = SegmentWriter.reopen(
                self.directory, tail.base, tail.good_offset, self._zero_ahead()
            )
            if tail.version != FORMAT_VERSION or tail.sealed:
                # Never append to an older version's file, nor after an END that closed one
                # (a crash between closing a segment and creating the next leaves that). An
                # open version-2 segment is closed with its END first (version 2 frames END
                # as version 3 does), so it reads as closed, not cut, once another follows.
                close = not tail.sealed and tail.version != LEGACY_VERSION
                with _creating(self.directory, segment_name(tail.next_number)):
                    self._start_segment(tail.next_number, close=close)
        self._next_number = tail.next_number
        remove(self.directory, recovery.stale_files())
        self._log_bytes = recovery.log_bytes
        self._recovery = None
        self._state = _State.OPEN
        self._publish(self._writer, self._next_number)

    # -- the CommitLog protocol -------------------------------------------------------------

    def append(self, record: bytes) -> None:
        """Buffer one record, an encoded payload (``encode_ops``); nothing is durable until
        ``sync``.

        Raises ``WalError`` if the log is not open or has failed, or the record is too long
        (refused, the log is fine), and ``OSError`` for an injected write failure (after which
        the log has failed).
        """
        self.append_all([record])

    def append_all(self, records: list[bytes]) -> None:
        """``append`` each of ``records``, in order, as one call: the owner's way to buffer a
        whole group (one check of the log's state, one framing loop).

        Raises like ``append``; a record too long refuses the whole call (nothing buffered).
        """
        self._before_append(len(records))
        try:
            framed = encode_records(self._next_number, records)
        except ValueError as exc:  # too long: these records are refused, the log is fine
            raise WalError(str(exc), path=self.directory) from None
        self._buffer += framed
        self._buffered_records(len(framed))

    def append_groups(self, groups: list[list[Op]]) -> None:
        """``append`` one record per group of ops (``encode_ops`` of each), in order, encoded
        and framed in one call (``frame_groups``, in C when built): the owner's group commit.

        Raises like ``append``; a group that does not encode, or is too long, refuses the whole
        call (nothing buffered; the log is fine).
        """
        self._before_append(len(groups))
        if not groups:
            return
        try:
            framed = frame_groups(self._next_number, groups)
        except ValueError as exc:  # a group that does not encode, or too long: refused
            raise WalError(str(exc), path=self.directory) from None
        self._buffer.append(framed)
        self._buffered_records(len(groups))

    def _before_append(self, count: int) -> None:
        """Refuse to append unless the log is open; the ``wal.append`` failpoint, once for
        each of the ``count`` records about to be added (a hit fails the log)."""
        self._writable()
        if _failpoints.ACTIVE:
            for _ in range(count):
                try:
                    _failpoints.hit("wal.append")
                except OSError as exc:
                    self._fail(exc)
                    raise

    def _buffered_records(self, count: int) -> None:
        """Count ``count`` records just framed into the buffer, numbered from the next."""
        self._buffered += count
        self._next_number += count
        self._appends += count

    def sync(self) -> None:
        """Write every appended record and fdatasync once; return only when they are durable.

        No-op when nothing is pending. Raises ``OSError`` if the write or the sync fails (the
        log has then failed for good) and ``WalError`` if it had already failed.
        """
        batch = self.seal()
        if batch is not None:
            self.write_sealed(batch)
        elif self._unsynced:
            self.datasync()

    def write_pending(self) -> None:
        """Write every appended record without fdatasync (owner's thread): safe from a process
        kill once this returns, durable on power loss only after the next ``datasync``.

        Raises ``OSError`` if the write fails (the log has then failed; the batch is cut off)
        and ``WalError`` if it had already failed.
        """
        batch = self.seal()
        if batch is None:
            return
        writer = self._writable()
        written_size: int | None = None
        try:
            if writer.size >= self.segment_bytes:
                writer = self._start_segment(batch.first_number)
            written_size = writer.size
            writer.write(batch.data)
        except OSError as exc:
            if written_size is not None:
                self._cut_failed_batch(writer, written_size)
            self._fail(exc)
            raise
        self._unsynced = True
        self._bytes += len(batch.data)
        self._log_bytes += len(batch.data)
        self._publish(writer, batch.first_number + batch.count)

    def datasync(self) -> bool:
        """fdatasync what ``write_pending`` wrote; False if nothing was waiting. May run in a
        worker thread, one call at a time, while the owner keeps writing.

        Raises ``OSError`` if the fdatasync fails: the log has then failed for good (fsyncgate:
        a later success would prove nothing), and ``WalError`` if it had already failed.
        """
        with self._segment_lock:
            if not self._unsynced:
                return False
            writer = self._writable()
            # Cleared before the sync: whatever is written meanwhile sets it again, and this
            # sync may or may not cover it, so the next call syncs again.
            self._unsynced = False
            try:
                if _failpoints.ACTIVE:
                    _failpoints.hit("wal.sync")
                writer.datasync()
            except OSError as exc:
                self._fail(exc)
                raise
            self._syncs += 1
        return True

    def seal(self) -> SealedBatch | None:
        """Take every record appended so far out of the buffer (``None`` if there are none).

        Owner's thread. The records are not durable, and must not be acknowledged, until
        ``write_sealed`` of this batch has returned.
        """
        self._writable()
        if not self._buffered:
            return None
        count = self._buffered
        batch = SealedBatch(self._next_number - count, count, b"".join(self._buffer))
        self._buffer = []
        self._buffered = 0
        return batch

    def write_sealed(self, batch: SealedBatch) -> None:
        """Write a sealed batch and fdatasync once; may run in a worker thread (see the top).

        Batches must be written in the order they were sealed, one at a time.
        """
        writer = self._writable()
        synced_size: int | None = None
        try:
            if writer.size >= self.segment_bytes:
                writer = self._start_segment(batch.first_number)
            synced_size = writer.size
            writer.write(batch.data)
            if _failpoints.ACTIVE:
                _failpoints.hit("wal.sync")
            writer.datasync()
        except OSError as exc:
            if synced_size is not None:
                self._cut_failed_batch(writer, synced_size)
            self._fail(exc)
            raise
        self._unsynced = False  # the fdatasync covered what write_pending wrote before
        self._syncs += 1
        self._bytes += len(batch.data)
        self._log_bytes += len(batch.data)
        self._publish(writer, batch.first_number + batch.count)

    def wants_checkpoint(self) -> bool:
        """Whether the log written since the last checkpoint is at least ``checkpoint_bytes``
        and at least ``checkpoint_growth`` times the last snapshot's size."""
        return (
            self._state is _State.OPEN
            and not self._checkpoint_in_flight
            and self._log_bytes >= self.checkpoint_bytes
            and self._log_bytes >= self._snapshot_bytes * self.checkpoint_growth
        )

    def checkpoint(self, records: Iterable[bytes]) -> None:
        """Replace the history by a snapshot of ``records`` (the whole store as encoded payloads,
        one ``Put`` per key).

        ``begin_checkpoint`` and ``finish_checkpoint`` on the calling thread; see those to
        keep writing while the snapshot is written. A disk error fails the log.
        """
        self.finish_checkpoint(self.begin_checkpoint(), records)

    def begin_checkpoint(self) -> int:
        """Sync what is pending and start a new segment; return the snapshot's position.

        Owner's thread, with no ``write_sealed`` in flight, at the moment the store's contents
        are captured (a copy of the map): the snapshot must hold exactly the effects of the
        records numbered below the returned position, and all of those are durable by now.
        Appends may continue as soon as this returns.
        """
        self.sync()
        base = self._next_number
        self._log_bytes_at_begin = self._log_bytes
        self._checkpoint_in_flight = True
        if self._writable().holds_records:  # they become history, covered by the snapshot
            try:
                writer = self._start_segment(base)
            except OSError as exc:
                self._fail(exc)
                raise
            self._publish(writer, base)
        return base

    def finish_checkpoint(self, base: int, records: Iterable[bytes]) -> None:
        """Write the snapshot for ``base``, switch the manifest, delete what it covers.

        May run in a worker thread while the owner appends and syncs: it only touches the
        snapshot, the manifest and segments below ``base``. Order: snapshot (temp, fsync,
        rename, fsync dir), manifest (the same; this rename is the switch), then deletions,
        so a crash anywhere leaves a directory that replays correctly.
        """
        self._writable()
        try:
            size = write_atomically(
                self.directory, snapshot_name(base), snapshot_chunks(base, records)
            )
            write_atomically(self.directory, MANIFEST_NAME, [Manifest(base, base).encode()])
            self._snapshot_base = base
            self._snapshot_bytes = size
            self._remove_covered()
        except OSError as exc:
            self._fail(exc)
            raise
        self._checkpoints += 1
        # What was written since begin_checkpoint is not covered by this snapshot.
        self._log_bytes -= self._log_bytes_at_begin
        self._checkpoint_in_flight = False
        with self._publish_lock:
            self._position = self._position._replace(snapshot_base=base)
            self._tell_observer()

    # -- shipping ---------------------------------------------------------------------------

    def position(self) -> LogPosition:
        """How far the files go now (see ``LogPosition``); the log must be open."""
        self._writable()
        return self._position

    def set_observer(self, observer: Callable[[LogPosition], None] | None) -> None:
        """Have ``observer(position)`` called after each write, segment roll and checkpoint.

        It runs on the thread that wrote (the owner's, or the sync worker's), inside the
        write path: it must only store the value and wake its reader, never block.
        """
        self._observer = observer

    def hold_for_shipping(self) -> None:
        """From now on, keep what a checkpoint covers until ``release_shipped`` says it is
        shipped, so a slow or absent object store cannot make the log drop unshipped records."""
        with self._cleanup_lock:
            if self._shipped_number is None:
                self._shipped_number = 0

    def release_shipped(self, next_number: int, snapshot_base: int | None) -> None:
        """Records below ``next_number`` and the snapshot at ``snapshot_base`` (and older) are
        shipped: delete the covered files no longer held. Any thread; raises ``OSError``."""
        with self._cleanup_lock:
            self._shipped_number = max(self._shipped_number or 0, next_number)
            if snapshot_base is not None:
                self._shipped_snapshot = max(self._shipped_snapshot or 0, snapshot_base)
        self._remove_covered()

    def _remove_covered(self) -> None:
        # Segments below the manifest's snapshot and older snapshots are history; with a hold,
        # only those entirely shipped go (a segment's end is the next segment's base).
        base = self._snapshot_base
        if base is None:
            return
        with self._cleanup_lock:
            listing = list_dir(self.directory)
            bases = sorted(listing.segments)
            shipped = self._shipped_number
            shipped_snap = -1 if self._shipped_snapshot is None else self._shipped_snapshot
            old_segments = [
                listing.segments[b] for b, end in itertools.pairwise(bases)
                if b < base and (shipped is None or end <= shipped)
            ]
            old_snapshots = [
                name for b, name in listing.snapshots.items()
                if b < base and (shipped is None or b <= shipped_snap)
            ]
            remove(self.directory, old_segments + old_snapshots)

    def _publish(self, writer: SegmentWriter, next_number: int) -> None:
        # Called by the thread that just wrote (writes are one at a time), so the writer's
        # size and ``next_number`` describe the same moment.
        with self._publish_lock:
            self._position = LogPosition(
                writer.base, writer.size, next_number, self._snapshot_base
            )
            self._tell_observer()

    def _tell_observer(self) -> None:
        # The records are written whatever the observer does: its failure must not turn into
        # a failed write (the owner would refuse an acknowledged batch), so it is only logged.
        observer = self._observer
        if observer is not None:
            try:
                observer(self._position)
            except Exception:
                logger.exception("wal position observer failed")

    def close(self) -> None:
        """Release the files and the directory lock; records appended but not synced are
        dropped (they were never acknowledged); records written but not yet synced (``--fsync
        everysec`` / ``no``) are synced first, on a log that has not failed. Idempotent."""
        if self._state is _State.OPEN and self._unsynced:
            with contextlib.suppress(OSError):  # _fail logged it; nothing else to do now
                self.datasync()
        if self._state is _State.OPEN and self._writer is not None:
            # A cleanly closed segment holds its records only (the next start finds no torn
            # tail to cut); if this fails, the zeros are cut at the next start as one.
            with contextlib.suppress(OSError):
                self._writer.cut_zeros()
        self._buffer = []
        self._buffered = 0
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._lock_fd >= 0:
            active().close(self._lock_fd)
            self._lock_fd = -1
        self._state = _State.CLOSED

    # -- introspection ----------------------------------------------------------------------

    @property
    def next_number(self) -> int:
        """The sequence number the next appended record gets (after replay: the log's end)."""
        return self._next_number

    @property
    def failure(self) -> str | None:
        """Why the log refuses writes (fail-stop), or ``None`` while it is healthy."""
        return self._failure

    def statistics(self) -> WalStatistics:
        """A snapshot of the counters."""
        return WalStatistics(
            appends=self._appends,
            syncs=self._syncs,
            bytes=self._bytes,
            checkpoints=self._checkpoints,
            segments_created=self._segments_created,
            replayed=self._replayed,
            torn_bytes_cut=self._torn_bytes_cut,
            log_bytes=self._log_bytes,
            failed=self._state is _State.FAILED,
        )

    def __enter__(self) -> DurableLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------

    def _writable(self) -> SegmentWriter:
        if self._state is _State.FAILED:
            raise WalError(
                f"log refuses writes after a disk error: {self._failure}", path=self.directory
            )
        if self._state is not _State.OPEN or self._writer is None:
            raise WalError(f"log is {self._state.value}, not open for writing", path=self.directory)
        return self._writer

    def _zero_ahead(self) -> int:
        # Zeros written ahead of the records (``SegmentWriter``): a MiB, or a small test
        # segment's size, so a segment's zeros never much outgrow the segment.
        return min(ZERO_AHEAD_BYTES, self.segment_bytes)

    def _start_segment(self, base: int, *, close: bool = True) -> SegmentWriter:
        # The current segment is fully synced (a failed sync would have failed the log). It is
        # closed with an END record holding its count, made durable before the next segment
        # exists, so replay can tell an older segment that was cut (no END) from a missing
        # next one. ``close`` is false for a segment that cannot take one (a version-1 file,
        # or one already closed).
        with self._segment_lock:
            old = self._writer
            assert old is not None
            if close:
                old.seal(encode_end(base, base - old.base))
                self._unsynced = False
            new = SegmentWriter.create(self.directory, base, self._zero_ahead())
            old.close()
            self._writer = new
            self._segments_created += 1
            return new

    def _cut_failed_batch(self, writer: SegmentWriter, synced_size: int) -> None:
        # The batch is answered "not logged", so it must not come back at replay: its bytes
        # may well have reached the file (a failed fdatasync says nothing about which pages
        # made it). Cut them off. If even that fails the disk is beyond our word; a restart
        # may then replay records that were refused, never lose acknowledged ones.
        try:
            writer.cut(synced_size)
        except OSError as exc:
            logger.error(
                "wal could not cut a failed batch file=%s offset=%d reason=%r",
                os.path.basename(writer.path), synced_size, exc.strerror or str(exc),
            )

    def _fail(self, exc: OSError) -> None:
        self._failure = f"{exc.strerror or exc}"
        self._state = _State.FAILED
        logger.error("wal failed, refusing further writes reason=%r", self._failure)


def _creation_interrupted(directory: str, listing: Listing) -> bool:
    """Whether the directory is a fresh store whose creation crashed before its manifest.

    Creation writes ``wal-0`` (header only) and then the manifest, so no manifest, no snapshot
    and nothing but a header-sized-or-smaller segment 0 means no record was ever written.
    """
    if listing.manifest or listing.snapshots or set(listing.segments) - {0}:
        return False
    if 0 not in listing.segments:
        return True  # only temporaries
    size = os.stat(os.path.join(directory, segment_name(0))).st_size
    return size <= FILE_HEADER_SIZE


@contextlib.contextmanager
def _creating(directory: str, name: str) -> Iterator[None]:
    """Name the file in any ``OSError`` while creating it (a bare ``write`` or ``fsync`` error
    says nothing about which file could not be written). ``wal.create`` injects one."""
    path = os.path.join(directory, name)
    try:
        if _failpoints.ACTIVE:
            _failpoints.hit("wal.create")
        yield
    except OSError as exc:
        raise WalError(
            f"cannot create {path}: {exc.strerror or exc}", path=path, offset=None
        ) from exc


def open_log(
    data_dir: str | os.PathLike[str],
    *,
    checkpoint_bytes: int = DEFAULT_CHECKPOINT_BYTES,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    checkpoint_growth: float = DEFAULT_CHECKPOINT_GROWTH,
) -> tuple[DurableLog, Iterator[list[Op]]]:
    """Open the log in ``data_dir`` and return it with the replay of its records.

    Apply every yielded list of operations (one record, atomically), in order, before the
    first ``append``. ``CorruptionError`` can
    come from this call (manifest) or from the iteration (records).
    """
    log = DurableLog.open(
        data_dir, checkpoint_bytes=checkpoint_bytes, segment_bytes=segment_bytes,
        checkpoint_growth=checkpoint_growth,
    )
    return log, log.replay()
