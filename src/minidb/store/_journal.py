"""What a group of commands did to the keyspace: the ops for the log, and how to undo them.

``OpJournal.records`` is a list of groups, each a ``list[Op]``, oldest first: every group is to
be written to the log as ONE record, replayed whole or not at all. The command engine closes a
group after each command, or once after a whole ``EXEC``; ``Keyspace.expire_due`` closes its
own, bounded in size; an empty group is dropped. The ops are effects (``Put`` of the resulting
value with its deadline, ``Expire`` with an absolute time), never commands.

``undo`` holds, newest last, the state each change replaced: ``KeyUndo`` (the old value, a
string or the container object itself, and deadline; value None if the key did not exist),
``FlushUndo`` (the bucket dicts a flush dropped, kept whole, so journaling a flush costs O(1)),
``PutsUndo`` (the old plain values of a run of puts without expiry, one list entry per put
instead of a tuple: a ``BULK`` frame's rows) and a ``ContainerUndo`` per change to some
elements of a container (``FieldsUndo`` of a hash, ``MembersUndo`` of a set, ``ListUndo`` of
a list, ``ScoresUndo`` of a sorted set): what those elements were, so an undo costs what the
change touched, never a copy of the container.
``Keyspace.rollback`` applies them newest first, which is how the owner takes a group back
when the log fails.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from minidb.store._values import list_revert
from minidb.store._zsetvalue import zset_revert
from minidb.wal._ops import Op

if TYPE_CHECKING:
    from minidb.store._keyspace import Stored
    from minidb.store._values import ListUndoData, Value


class KeyUndo(NamedTuple):
    """A key's state before a change: value None means the key did not exist."""

    bucket: bytes
    key: bytes
    value: Value | None
    expire_at_ms: int | None


class FlushUndo(NamedTuple):
    """The buckets a flush dropped, name -> the dict itself."""

    buckets: dict[bytes, dict[bytes, Stored]]


class PutsUndo(NamedTuple):
    """A run of puts: ``writes[start + i]`` (a tuple starting with its bucket and key)
    replaced ``olds[i]``, a plain value, or None if the key did not exist."""

    writes: Sequence[tuple[bytes, ...]]
    start: int
    olds: list[bytes | None]


class ContainerUndo:
    """A change to some elements of the container at ``(bucket, key)``: ``revert`` takes it
    back, given the container the key holds then (found by key: the object may be a copy)."""

    __slots__ = ("bucket", "encoding", "key")

    def __init__(self, bucket: bytes, key: bytes, encoding: str) -> None:
        self.bucket = bucket
        self.key = key
        self.encoding = encoding
        """The container's encoding before the change (a change may convert it)."""

    def revert(self, container: Any) -> None:
        raise NotImplementedError


class FieldsUndo(ContainerUndo):
    """Fields of a hash set or deleted: each field with its value before, None if absent."""

    __slots__ = ("olds",)

    def __init__(
        self, bucket: bytes, key: bytes, encoding: str, olds: list[tuple[bytes, bytes | None]]
    ) -> None:
        super().__init__(bucket, key, encoding)
        self.olds = olds

    def revert(self, container: Any) -> None:
        for field, old in reversed(self.olds):
            if old is None:
                del container[field]
            else:
                container[field] = old
        container.encoding, container.scan = self.encoding, None


class MembersUndo(ContainerUndo):
    """Members of a set added (absent before) or removed (present before)."""

    __slots__ = ("added", "removed")

    def __init__(
        self, bucket: bytes, key: bytes, encoding: str, added: list[bytes], removed: list[bytes]
    ) -> None:
        super().__init__(bucket, key, encoding)
        self.added = added
        self.removed = removed

    def revert(self, container: Any) -> None:
        container.difference_update(self.added)
        container.update(self.removed)
        container.encoding, container.scan = self.encoding, None


class ListUndo(ContainerUndo):
    """One list op applied (``_values.list_apply``): what it returned, and the list's
    listpack size before it."""

    __slots__ = ("lpbytes", "undo")

    def __init__(
        self, bucket: bytes, key: bytes, encoding: str, lpbytes: int, undo: ListUndoData
    ) -> None:
        super().__init__(bucket, key, encoding)
        self.lpbytes = lpbytes
        self.undo = undo

    def revert(self, container: Any) -> None:
        list_revert(container, self.undo)
        container.encoding, container.lpbytes = self.encoding, self.lpbytes


class ScoresUndo(ContainerUndo):
    """Members of a sorted set whose scores were set or that were removed: each member with
    its score before, None if absent (``_zsetvalue.zset_add`` / ``zset_remove``)."""

    __slots__ = ("olds",)

    def __init__(
        self, bucket: bytes, key: bytes, encoding: str, olds: list[tuple[bytes, float | None]]
    ) -> None:
        super().__init__(bucket, key, encoding)
        self.olds = olds

    def revert(self, container: Any) -> None:
        zset_revert(container, self.olds)
        container.encoding = self.encoding


UndoEntry = KeyUndo | FlushUndo | PutsUndo | ContainerUndo


class OpJournal:
    """What a group of commands did: log records (groups of ``Op``) and how to undo them."""

    __slots__ = ("_open", "records", "undo")

    def __init__(self) -> None:
        self.records: list[list[Op]] = []
        """Closed groups, oldest first; each is to be written as one log record."""
        self.undo: list[UndoEntry] = []
        self._open: list[Op] = []

    def add(self, op: Op) -> None:
        """Note ``op`` in the open group."""
        self._open.append(op)

    def close_group(self) -> None:
        """End the open group: it becomes one record, unless it is empty."""
        if self._open:
            self.records.append(self._open)
            self._open = []

    @property
    def open_ops(self) -> list[Op]:
        """The ops of the group not yet closed."""
        return self._open

    def ops(self) -> Iterator[Op]:
        """Every op noted, closed groups first, in order."""
        for group in self.records:
            yield from group
        yield from self._open

    def mark(self) -> tuple[int, int, int]:
        """Where the journal stands now, for ``Keyspace.rollback_to``: its undo entries, its
        closed groups and the ops of its open group, counted."""
        return len(self.undo), len(self.records), len(self._open)

    def truncate(self, records_mark: int, ops_mark: int) -> None:
        """Forget the ops noted since ``records`` had ``records_mark`` groups and the open
        group ``ops_mark`` ops. Groups closed since then are undone too: the ops they took
        from the open group before the mark become the open group again."""
        since = [op for group in self.records[records_mark:] for op in group]
        since.extend(self._open)
        del self.records[records_mark:]
        self._open = since[:ops_mark]

    def clear(self) -> None:
        self.records = []
        self.undo = []
        self._open = []
