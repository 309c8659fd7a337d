"""What a group of commands did to the keyspace: the ops for the log, and how to undo them.

``OpJournal.records`` is a list of groups, each a ``list[Op]``, oldest first: every group is to
be written to the log as ONE record, replayed whole or not at all. The command engine closes a
group after each command, or once after a whole ``EXEC``; ``Keyspace.expire_due`` closes its
own, bounded in size; an empty group is dropped. The ops are effects (``Put`` of the resulting
value with its deadline, ``Expire`` with an absolute time), never commands.

``undo`` holds, newest last, the state each change replaced: ``KeyUndo`` (the old value and
deadline; value None if the key did not exist), ``FlushUndo`` (the bucket dicts a flush
dropped, kept whole, so journaling a flush costs O(1)) and ``PutsUndo`` (the old plain values
of a run of puts without expiry, one list entry per put instead of a tuple: a ``BULK``
frame's rows). ``Keyspace.rollback`` applies them
newest first, which is how the owner takes a group back when the log fails.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from minidb.wal._ops import Op

if TYPE_CHECKING:
    from minidb.store._keyspace import Stored


class KeyUndo(NamedTuple):
    """A key's state before a change: value None means the key did not exist."""

    bucket: bytes
    key: bytes
    value: bytes | None
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


UndoEntry = KeyUndo | FlushUndo | PutsUndo


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

    def clear(self) -> None:
        self.records = []
        self.undo = []
        self._open = []
