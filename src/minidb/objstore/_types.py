"""The object-storage interface: value types, the ``ObjectStore`` ABC, the limits (pure).

A backend implements ``ObjectStore``; callers see only this module's types and ``_errors``.
Every method except ``presign_*``, ``capabilities``, ``endpoint`` and ``statistics`` is async.
The semantics each backend must give (and the contract suite checks) are in docs/objstore.md.
"""

from __future__ import annotations

import abc
import builtins
import dataclasses
from collections.abc import AsyncIterable, AsyncIterator
from types import TracebackType

LIST_PAGE_MAX = 1000
"""Most entries one ``list`` call returns (S3's MaxKeys ceiling)."""

PRESIGN_MAX_EXPIRES_S = 604_800
"""Longest lifetime of a presigned URL, in seconds (SigV4's 7-day limit)."""

READ_CHUNK_BYTES = 1 << 20
"""Chunk size, in bytes, of ``async for chunk in reader`` (bounds a streaming read's buffer)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Object:
    """A whole object and the ETag it had when read."""

    data: bytes
    etag: str


@dataclasses.dataclass(frozen=True, slots=True)
class ListEntry:
    """One key of a listing; no body is read to produce it."""

    key: str
    size: int
    etag: str


@dataclasses.dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a listing in ascending UTF-8 key order.

    ``next_start_after`` is the ``start_after`` of the next page, or ``None`` when this page
    is the last.
    """

    entries: tuple[ListEntry, ...]
    next_start_after: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend enforces beyond the conditional PUTs every backend must."""

    conditional_delete: bool
    multipart: bool


@dataclasses.dataclass(frozen=True, slots=True)
class StoreStatistics:
    """Counters of one store since it was opened."""

    requests: int
    """Requests as S3 bills them: a streamed read of an object's body is its one GET."""
    errors: int
    precondition_failures: int
    ambiguous_writes: int
    bytes_read: int
    bytes_written: int
    peak_upload_buffer_bytes: int
    """The most bytes ``upload`` held in memory at once (bounded by the part size)."""


class StatisticsCounter:
    """The mutable counters behind ``StoreStatistics`` (one per store, single-threaded use)."""

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.precondition_failures = 0
        self.ambiguous_writes = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.peak_upload_buffer_bytes = 0

    def note_buffer(self, nbytes: int) -> None:
        self.peak_upload_buffer_bytes = max(self.peak_upload_buffer_bytes, nbytes)

    def snapshot(self) -> StoreStatistics:
        return StoreStatistics(
            requests=self.requests,
            errors=self.errors,
            precondition_failures=self.precondition_failures,
            ambiguous_writes=self.ambiguous_writes,
            bytes_read=self.bytes_read,
            bytes_written=self.bytes_written,
            peak_upload_buffer_bytes=self.peak_upload_buffer_bytes,
        )


class ObjectReader(abc.ABC):
    """A streaming read of one object: ``await read(n)`` or ``async for chunk in reader``.

    ``etag`` and ``size`` describe the object as it was when the read started. Always close
    it (``async with reader:`` or ``await reader.aclose()``).
    """

    etag: str
    size: int

    @abc.abstractmethod
    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all that remain if ``n < 0``); ``b""`` at the end."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release the connection or file descriptor."""

    async def __aenter__(self) -> ObjectReader:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while chunk := await self.read(READ_CHUNK_BYTES):
            yield chunk


class ObjectStore(abc.ABC):
    """Conditional object storage (see docs/objstore.md for each operation's semantics)."""

    endpoint: str
    capabilities: Capabilities

    @abc.abstractmethod
    async def get(self, key: str) -> Object:
        """The whole object; ``NotFound`` if absent."""

    @abc.abstractmethod
    async def open_read(self, key: str) -> ObjectReader:
        """A streaming read of the object; ``NotFound`` if absent."""

    @abc.abstractmethod
    async def put_if_absent(self, key: str, data: bytes) -> str:
        """Create the object; ``PreconditionFailed`` if the key exists. Returns the ETag."""

    @abc.abstractmethod
    async def compare_and_set(self, key: str, data: bytes, etag: str) -> str:
        """Replace the object if its ETag is ``etag``; returns the new ETag."""

    @abc.abstractmethod
    async def put(self, key: str, data: bytes) -> str:
        """Write the object unconditionally; returns the ETag."""

    @abc.abstractmethod
    async def delete(self, key: str, etag: str | None = None) -> None:
        """Delete (only if the ETag is ``etag``, when given); absent is fine without ``etag``."""

    @abc.abstractmethod
    async def list(
        self, prefix: str = "", start_after: str | None = None, limit: int = LIST_PAGE_MAX
    ) -> ListPage:
        """One page of keys under ``prefix``, ascending, strictly after ``start_after``."""

    async def list_every(
        self, prefix: str = "", start_after: str | None = None, page_size: int = LIST_PAGE_MAX
    ) -> builtins.list[ListEntry]:  # (``list`` here is the method above)
        """Every key under ``prefix`` after ``start_after``, ascending, following the pages
        (for listings known to stay small, such as the replication layout's)."""
        entries: builtins.list[ListEntry] = []
        while True:
            page = await self.list(prefix, start_after=start_after, limit=page_size)
            entries.extend(page.entries)
            if page.next_start_after is None:
                return entries
            start_after = page.next_start_after

    @abc.abstractmethod
    def presign_get(self, key: str, expires_s: int) -> str:
        """A URL that lets its bearer GET the object until it expires."""

    @abc.abstractmethod
    def presign_put(self, key: str, expires_s: int) -> str:
        """A URL that lets its bearer PUT the object until it expires."""

    @abc.abstractmethod
    async def upload(
        self, key: str, chunks: AsyncIterable[bytes], if_absent: bool = True
    ) -> str:
        """Store a stream of chunks with bounded memory; returns the ETag."""

    @abc.abstractmethod
    def statistics(self) -> StoreStatistics:
        """The store's counters."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release clients, threads and descriptors; the store is unusable afterwards."""


def check_list_limit(limit: int) -> int:
    """``limit`` if it is a valid page size, else ``ValueError``."""
    if not 1 <= limit <= LIST_PAGE_MAX:
        raise ValueError(f"limit must be in 1..{LIST_PAGE_MAX}, not {limit}")
    return limit


def check_expires(expires_s: int) -> int:
    """``expires_s`` if it is a valid presigned-URL lifetime, else ``ValueError``."""
    if not 1 <= expires_s <= PRESIGN_MAX_EXPIRES_S:
        raise ValueError(f"expires_s must be in 1..{PRESIGN_MAX_EXPIRES_S}, not {expires_s}")
    return expires_s
