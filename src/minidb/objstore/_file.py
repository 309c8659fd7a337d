"""``FileStore``: the ``file:DIR`` backend's async shell over ``_filecore.FileCore``.

The blocking core runs in a small private thread pool so the event loop never waits on a disk
or a lock. This module is the one place where ``OSError`` becomes an ``ObjectStoreError``
(``_call``); statistics are counted here, on the loop thread. A cancelled call does not stop
the thread it started: like any write whose answer was not seen, a cancelled write is
ambiguous and the caller re-reads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import time
from collections.abc import AsyncIterable, Callable, Mapping
from typing import BinaryIO, TypeVar

from ._errors import (
    AmbiguousWrite,
    InvalidKey,
    NotFound,
    ObjectStoreError,
    PreconditionFailed,
    TransientError,
)
from ._filecore import FileCore, TempObject
from ._presign import sign, verify_presigned
from ._retry import settle_create
from ._types import (
    LIST_PAGE_MAX,
    Capabilities,
    ListPage,
    Object,
    ObjectReader,
    ObjectStore,
    StatisticsCounter,
    StoreStatistics,
    check_expires,
)

FILE_THREADS = 4
"""Threads doing the file backend's blocking work (disk I/O, fsync, flock waits)."""

T = TypeVar("T")


class FileStore(ObjectStore):
    """Objects as files under one directory; see docs/objstore.md for the guarantees."""

    capabilities = Capabilities(conditional_delete=True, multipart=False)

    def __init__(
        self,
        root: str,
        *,
        presign_secret: bytes | None = None,
        base_url: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._core = FileCore(root)
        self.root = self._core.root
        self.endpoint = f"file:{self.root}"
        self._secret = presign_secret
        self._base_url = base_url
        # Presigned expiry is wall-clock unix time by nature (it is checked by another
        # process); the clock is injectable so tests can expire URLs without sleeping.
        self._clock = clock
        self._stats = StatisticsCounter()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=FILE_THREADS, thread_name_prefix="minidb-objstore-file"
        )

    async def _call(
        self, key: str | None, fn: Callable[..., T], *args: object, request: bool = True
    ) -> T:
        """``fn(*args)`` in the store's threads, counted as a request unless it reads more
        of an object already open (S3 bills the GET once, not per chunk of its body)."""
        if request:
            self._stats.requests += 1
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, fn, *args)
        except PreconditionFailed:
            self._stats.precondition_failures += 1
            raise
        except AmbiguousWrite:
            self._stats.ambiguous_writes += 1
            raise
        except ObjectStoreError as exc:
            self._stats.errors += 1
            exc.endpoint = exc.endpoint or self.endpoint
            raise
        except OSError as exc:
            self._stats.errors += 1
            raise _os_error(exc, key, self.endpoint) from exc

    # -- reads -------------------------------------------------------------------------------

    async def get(self, key: str) -> Object:
        data, etag = await self._call(key, self._core.get, key)
        self._stats.bytes_read += len(data)
        return Object(data, etag)

    async def open_read(self, key: str) -> ObjectReader:
        file, etag, size = await self._call(key, self._core.open, key)
        return _FileReader(self, file, etag, size)

    async def list(
        self, prefix: str = "", start_after: str | None = None, limit: int = LIST_PAGE_MAX
    ) -> ListPage:
        return await self._call(prefix, self._core.list, prefix, start_after, limit)

    # -- writes ------------------------------------------------------------------------------

    async def put_if_absent(self, key: str, data: bytes) -> str:
        return await self._write(key, data, create=True, if_match=None)

    async def compare_and_set(self, key: str, data: bytes, etag: str) -> str:
        return await self._write(key, data, create=False, if_match=etag)

    async def put(self, key: str, data: bytes) -> str:
        return await self._write(key, data, create=False, if_match=None)

    async def _write(self, key: str, data: bytes, *, create: bool, if_match: str | None) -> str:
        self._core.path(key)  # refuse a bad key before any file is created
        temp, etag = await self._call(key, self._core.write_temp, data)
        try:
            result = await self._commit(key, temp, etag, create=create, if_match=if_match)
        finally:
            temp.discard()
        self._stats.bytes_written += len(data)
        return result

    async def _commit(
        self, key: str, temp: TempObject, etag: str, *, create: bool, if_match: str | None
    ) -> str:
        if create:
            return await self._call(key, self._core.commit_create, key, temp, etag)
        return await self._call(key, self._core.commit_replace, key, temp, etag, if_match)

    async def delete(self, key: str, etag: str | None = None) -> None:
        await self._call(key, self._core.delete, key, etag)

    async def upload(
        self, key: str, chunks: AsyncIterable[bytes], if_absent: bool = True
    ) -> str:
        self._core.path(key)
        temp = await self._call(key, self._core.new_temp)
        try:
            async for chunk in chunks:
                # One caller chunk in memory at a time: the file is the buffer.
                self._stats.note_buffer(len(chunk))
                await self._call(key, temp.write, chunk)
            etag = await self._call(key, temp.finish)
            if if_absent:
                # The chunks are consumed: this store settles the create itself (_retry).
                result = await settle_create(
                    self, key, etag, lambda: self._commit(key, temp, etag, create=True,
                                                          if_match=None)
                )
            else:
                result = await self._commit(key, temp, etag, create=False, if_match=None)
        finally:
            temp.discard()
        self._stats.bytes_written += temp.size
        return result

    # -- presigned URLs ----------------------------------------------------------------------

    def _presign_secret(self) -> bytes:
        if self._secret is None:
            self._secret = self._core.presign_secret()
        return self._secret

    def presign_get(self, key: str, expires_s: int) -> str:
        return self._presign("GET", key, expires_s)

    def presign_put(self, key: str, expires_s: int) -> str:
        return self._presign("PUT", key, expires_s)

    def _presign(self, method: str, key: str, expires_s: int) -> str:
        self._core.path(key)  # a bad key must not even create the secret
        expires_at = int(self._clock()) + check_expires(expires_s)
        return sign(self._presign_secret(), method, key, expires_at, self._base_url)

    def verify_presigned(
        self, method: str, path: str, query: str | Mapping[str, str], now: float | None = None
    ) -> str:
        """The key a request to a URL of ``presign_*`` may use, or ``PresignError`` (403)."""
        when = self._clock() if now is None else now
        return verify_presigned(self._presign_secret(), method, path, query, when)

    # -- the rest ----------------------------------------------------------------------------

    def statistics(self) -> StoreStatistics:
        return self._stats.snapshot()

    async def close(self) -> None:
        self._pool.shutdown(wait=True)


class _FileReader(ObjectReader):
    def __init__(self, store: FileStore, file: BinaryIO, etag: str, size: int) -> None:
        self._store = store
        self._file = file
        self.etag = etag
        self.size = size

    async def read(self, n: int = -1) -> bytes:
        data = await self._store._call(None, self._file.read, n, request=False)
        self._store._stats.bytes_read += len(data)
        return data

    async def aclose(self) -> None:
        self._file.close()


TRANSIENT_ERRNOS = frozenset({
    errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ETIMEDOUT, errno.ESTALE, errno.EMFILE,
    errno.ENFILE, errno.ENOLCK,
})
"""File-system errors that a later try can get past and that leave nothing applied: a resource
briefly short (file descriptors, locks), an interrupted or timed-out call, a stale handle of a
network file system. A write fails before its commit step (the temp file, the link or the
rename) or not at all; a failure after it, the directory's fsync, is the core's
``AmbiguousWrite``. Full disks, quotas and I/O errors are not transient: they need an
operator."""


def _os_error(exc: OSError, key: str | None, endpoint: str) -> ObjectStoreError:
    """The one translation of a file-system error into the object-store hierarchy."""
    if isinstance(exc, FileNotFoundError):
        return NotFound(f"no object {key!r}", key=key, status=404, endpoint=endpoint)
    if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR):
        return InvalidKey(f"key {key!r} is not usable here: {exc}", key=key, endpoint=endpoint)
    code = errno.errorcode.get(exc.errno or 0, "OSError")
    kind = TransientError if exc.errno in TRANSIENT_ERRNOS else ObjectStoreError
    return kind(f"{endpoint}: {exc}", key=key, status=500, code=code, endpoint=endpoint)
