"""The errors of WAL shipping and restore, rooted at ``MinidbError``.

::

    ReplicationError          generation (the one concerned, when known)
    ├── GenerationConflict    another server owns the prefix (``current``): refused at start
    ├── Fenced                this server's generation was taken over; it ships no more
    └── RestoreError          what was shipped cannot give the point asked for
        ├── GapError          records ``missing_first..missing_last`` are in no object
        └── DamagedObject     one object is damaged (size, checksum, name or contents)

Each carries the object key or the generations involved as fields, so callers (the CLI, the
tests) never parse messages.
"""

from __future__ import annotations

from minidb.errors import MinidbError


class ReplicationError(MinidbError):
    """Shipping to, or restoring from, object storage failed."""

    def __init__(self, message: str, *, generation: str | None = None) -> None:
        super().__init__(message)
        self.generation = generation


class GenerationConflict(ReplicationError):
    """The prefix is shipped to by ``owner`` (another server); start with takeover to fence it."""

    def __init__(self, message: str, *, generation: str | None, owner: str) -> None:
        super().__init__(message, generation=generation)
        self.owner = owner


class Fenced(ReplicationError):
    """``generation`` is no longer the prefix's current one: ``by`` took it over."""

    def __init__(self, message: str, *, generation: str, by: str | None) -> None:
        super().__init__(message, generation=generation)
        self.by = by


class RestoreError(ReplicationError):
    """The shipped objects cannot rebuild the requested point."""


class GapError(RestoreError):
    """No object holds records ``missing_first..missing_last``; ``after`` is the last object
    before the gap (``None`` if the gap starts the chain), ``before`` the first after it."""

    def __init__(
        self,
        message: str,
        *,
        generation: str | None,
        missing_first: int,
        missing_last: int | None,
        after: str | None,
        before: str | None,
    ) -> None:
        super().__init__(message, generation=generation)
        self.missing_first = missing_first
        self.missing_last = missing_last
        self.after = after
        self.before = before


class DamagedObject(RestoreError):
    """Object ``key`` failed a check; ``reason`` says which (size, checksum, name, contents)."""

    def __init__(
        self, message: str, *, key: str, reason: str, generation: str | None = None
    ) -> None:
        super().__init__(message, generation=generation)
        self.key = key
        self.reason = reason
