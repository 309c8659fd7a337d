"""``S3Store``: the ``s3://BUCKET/PREFIX`` backend on botocore, run in a bounded thread pool.

Two botocore clients share the credentials: ``_once`` makes exactly one attempt per call
(conditional writes, deletes with an ETag, multipart completion) so no automatic retry can turn
a landed-but-unanswered write into a 412 that looks like a loss; ``_retrying`` uses botocore's
standard retries for idempotent calls (reads, lists, unconditional writes and deletes, parts).
Both sign with SigV4 (``signature_version="s3v4"``: with a custom endpoint botocore would
otherwise presign with SigV2). Every failure goes through ``_s3_errors.translate``.

What a caller cannot retry, this module does (``_retry``): ``upload`` sends a failed part
again, and settles its conditional completion by comparing the stored ETag with the one S3
gives the bytes sent (the MD5, or for a multipart upload the MD5 of the parts' MD5s and
``-N``; buckets with SSE-KMS or SSE-C encryption have other ETags, so there a lost answer is
reported as ``PreconditionFailed`` rather than settled); a streamed read cut short resumes
with a ranged GET ``If-Match`` the ETag it started with.

Why botocore and not an async client: see "Object storage client" in docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import contextlib
import functools
import hashlib
import os
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any, TypeVar

import botocore.session
from botocore.config import Config

from ._errors import AmbiguousWrite, ObjectStoreError, PreconditionFailed, TransientError
from ._keys import check_key, check_prefix
from ._retry import RETRY_TRIES, retry_wait, settle_create
from ._s3_errors import translate
from ._types import (
    LIST_PAGE_MAX,
    Capabilities,
    ListEntry,
    ListPage,
    Object,
    ObjectReader,
    ObjectStore,
    StatisticsCounter,
    StoreStatistics,
    check_expires,
    check_list_limit,
)

S3_THREADS = 16
"""Threads (and pooled connections) for blocking botocore calls: concurrent requests per store."""

S3_CONNECT_TIMEOUT_S = 5.0
"""How long a connection attempt may take, in seconds."""

S3_READ_TIMEOUT_S = 30.0
"""How long a request may wait for the next bytes of a response, in seconds."""

S3_READ_ATTEMPTS = 3
"""Attempts (first try included) botocore makes for idempotent calls."""

PART_SIZE_BYTES = 8 << 20
"""Multipart part size, in bytes (S3's minimum is 5 MiB, except the last part). An upload
holds at most one part plus one caller chunk in memory."""

T = TypeVar("T")


class S3Store(ObjectStore):
    """Objects in one S3 bucket under an optional key prefix."""

    capabilities = Capabilities(conditional_delete=True, multipart=True)

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        connect_timeout_s: float = S3_CONNECT_TIMEOUT_S,
        read_timeout_s: float = S3_READ_TIMEOUT_S,
        part_size: int = PART_SIZE_BYTES,
        read_attempts: int = S3_READ_ATTEMPTS,
    ) -> None:
        self.bucket = bucket
        self._base = prefix.strip("/") + "/" if prefix.strip("/") else ""
        check_prefix(self._base)
        self._endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or (
            os.environ.get("AWS_ENDPOINT_URL")
        )
        where = self._endpoint_url or "s3.amazonaws.com"
        self.endpoint = f"{where.rstrip('/')}/{bucket}"
        self._part_size = part_size
        session = botocore.session.get_session()
        region = region or os.environ.get("AWS_REGION") or os.environ.get(
            "AWS_DEFAULT_REGION"
        ) or "us-east-1"

        def client(attempts: int) -> Any:
            config = Config(
                signature_version="s3v4",
                connect_timeout=connect_timeout_s,
                read_timeout=read_timeout_s,
                retries={"mode": "standard", "total_max_attempts": attempts},
                max_pool_connections=S3_THREADS,
                # Custom endpoints (moto, MinIO, Ceph) rarely resolve bucket subdomains.
                s3={"addressing_style": "path" if self._endpoint_url else "auto"},
            )
            return session.create_client(
                "s3", region_name=region, endpoint_url=self._endpoint_url,
                aws_access_key_id=access_key_id, aws_secret_access_key=secret_access_key,
                config=config,
            )

        self._once = client(1)
        self._retrying = client(read_attempts)
        self._stats = StatisticsCounter()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=S3_THREADS, thread_name_prefix="minidb-objstore-s3"
        )

    def _full(self, key: str) -> str:
        return self._base + check_key(key)

    async def _call(
        self, key: str | None, write: bool, fn: Callable[[], T], *, request: bool = True
    ) -> T:
        """``fn()`` in the store's threads, its errors translated; counted as a request
        unless it reads more of a body already streaming (one GET, however many chunks)."""
        if request:
            self._stats.requests += 1
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, fn)
        except Exception as exc:
            error = translate(exc, key=key, endpoint=self.endpoint, write=write)
            if isinstance(error, PreconditionFailed):
                self._stats.precondition_failures += 1
            elif isinstance(error, AmbiguousWrite):
                self._stats.ambiguous_writes += 1
            else:
                self._stats.errors += 1
            raise error from exc

    # -- reads -------------------------------------------------------------------------------

    async def get(self, key: str) -> Object:
        full = self._full(key)

        def run() -> tuple[bytes, str]:
            response = self._retrying.get_object(Bucket=self.bucket, Key=full)
            with contextlib.closing(response["Body"]) as body:
                return body.read(), response["ETag"]

        data, etag = await self._call(key, False, run)
        self._stats.bytes_read += len(data)
        return Object(data, etag)

    async def open_read(self, key: str) -> ObjectReader:
        full = self._full(key)
        response = await self._call(
            key, False, lambda: self._retrying.get_object(Bucket=self.bucket, Key=full)
        )
        return _S3Reader(self, key, full, response)

    async def list(
        self, prefix: str = "", start_after: str | None = None, limit: int = LIST_PAGE_MAX
    ) -> ListPage:
        check_prefix(prefix)
        check_list_limit(limit)
        args: dict[str, Any] = {
            "Bucket": self.bucket, "Prefix": self._base + prefix, "MaxKeys": limit
        }
        if start_after is not None:
            args["StartAfter"] = self._base + start_after
        response = await self._call(
            prefix, False, lambda: self._retrying.list_objects_v2(**args)
        )
        entries = tuple(
            ListEntry(item["Key"][len(self._base):], item["Size"], item["ETag"])
            for item in response.get("Contents", [])
        )
        more = bool(response.get("IsTruncated")) and bool(entries)
        return ListPage(entries, entries[-1].key if more else None)

    # -- writes ------------------------------------------------------------------------------

    async def _put(self, key: str, data: bytes, client: Any, **condition: str) -> str:
        full = self._full(key)
        response = await self._call(
            key, True,
            lambda: client.put_object(Bucket=self.bucket, Key=full, Body=data, **condition),
        )
        self._stats.bytes_written += len(data)
        return str(response["ETag"])

    async def put_if_absent(self, key: str, data: bytes) -> str:
        return await self._put(key, data, self._once, IfNoneMatch="*")

    async def compare_and_set(self, key: str, data: bytes, etag: str) -> str:
        return await self._put(key, data, self._once, IfMatch=etag)

    async def put(self, key: str, data: bytes) -> str:
        return await self._put(key, data, self._retrying)

    async def delete(self, key: str, etag: str | None = None) -> None:
        full = self._full(key)
        if etag is None:
            await self._call(
                key, True, lambda: self._retrying.delete_object(Bucket=self.bucket, Key=full)
            )
        else:
            await self._call(
                key, True,
                lambda: self._once.delete_object(Bucket=self.bucket, Key=full, IfMatch=etag),
            )

    async def upload(
        self, key: str, chunks: AsyncIterable[bytes], if_absent: bool = True
    ) -> str:
        full = self._full(key)
        buffer = bytearray()
        upload_id: str | None = None
        parts: builtins.list[dict[str, Any]] = []
        digests: builtins.list[bytes] = []
        try:
            async for chunk in chunks:
                buffer += chunk
                self._stats.note_buffer(len(buffer))
                while len(buffer) >= self._part_size:
                    if upload_id is None:
                        upload_id = await self._begin_multipart(key, full)
                    part = bytes(buffer[: self._part_size])
                    del buffer[: self._part_size]
                    digests.append(hashlib.md5(part, usedforsecurity=False).digest())
                    parts.append(await self._upload_part(key, full, upload_id, parts, part))
            if upload_id is None:
                data = bytes(buffer)
                if not if_absent:
                    return await self.put(key, data)
                etag = f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'
                return await settle_create(self, key, etag, lambda: self.put_if_absent(key, data))
            if buffer:
                digests.append(hashlib.md5(buffer, usedforsecurity=False).digest())
                parts.append(await self._upload_part(key, full, upload_id, parts, bytes(buffer)))
                buffer.clear()
            if not if_absent:
                return await self._complete_multipart(key, full, upload_id, parts, False)
            whole = hashlib.md5(b"".join(digests), usedforsecurity=False).hexdigest()
            etag = f'"{whole}-{len(digests)}"'
            uploaded = upload_id
            return await settle_create(
                self, key, etag,
                lambda: self._complete_multipart(key, full, uploaded, parts, True),
            )
        except BaseException:
            if upload_id is not None:
                await self._abort_multipart(full, upload_id)
            raise

    async def _again(self, step: Callable[[], Awaitable[T]]) -> T:
        """``step()``, an idempotent step of an upload, tried again after a transient or
        unanswered failure (``RETRY_TRIES`` in all): a part sent twice is stored once."""
        for tries in range(1, RETRY_TRIES + 1):
            try:
                return await step()
            except (TransientError, AmbiguousWrite):
                if tries == RETRY_TRIES:
                    raise
                await asyncio.sleep(retry_wait(tries))
        raise AssertionError("unreachable")

    async def _begin_multipart(self, key: str, full: str) -> str:
        # A begin whose answer was lost leaves an upload nobody completes: it costs storage
        # until the lifecycle rule that aborts incomplete uploads (docs/batch.md) ends it.
        response = await self._again(lambda: self._call(
            key, True,
            lambda: self._retrying.create_multipart_upload(Bucket=self.bucket, Key=full),
        ))
        return str(response["UploadId"])

    async def _upload_part(
        self, key: str, full: str, upload_id: str, parts: builtins.list[dict[str, Any]], data: bytes
    ) -> dict[str, Any]:
        number = len(parts) + 1
        response = await self._again(lambda: self._call(
            key, True,
            lambda: self._retrying.upload_part(
                Bucket=self.bucket, Key=full, UploadId=upload_id, PartNumber=number, Body=data
            ),
        ))
        self._stats.bytes_written += len(data)
        return {"PartNumber": number, "ETag": response["ETag"]}

    async def _complete_multipart(
        self, key: str, full: str, upload_id: str, parts: builtins.list[dict[str, Any]],
        if_absent: bool,
    ) -> str:
        condition = {"IfNoneMatch": "*"} if if_absent else {}
        client = self._once if if_absent else self._retrying
        try:
            response = await self._call(
                key, True,
                lambda: client.complete_multipart_upload(
                    Bucket=self.bucket, Key=full, UploadId=upload_id,
                    MultipartUpload={"Parts": parts}, **condition,
                ),
            )
        except ObjectStoreError as exc:
            if exc.code != "NoSuchUpload":
                raise
            # An earlier completion of this upload landed unseen (or a lifecycle rule ended
            # it): the stored ETag says which.
            raise AmbiguousWrite(str(exc), key=key, status=exc.status, code=exc.code,
                                 endpoint=self.endpoint) from exc
        return str(response["ETag"])

    async def _abort_multipart(self, full: str, upload_id: str) -> None:
        # Best effort: an unaborted upload only costs storage until a lifecycle rule ends it.
        with contextlib.suppress(ObjectStoreError):
            await self._call(
                full, True,
                lambda: self._retrying.abort_multipart_upload(
                    Bucket=self.bucket, Key=full, UploadId=upload_id
                ),
            )

    # -- presigned URLs ----------------------------------------------------------------------

    def presign_get(self, key: str, expires_s: int) -> str:
        return self._presign("get_object", key, expires_s)

    def presign_put(self, key: str, expires_s: int) -> str:
        return self._presign("put_object", key, expires_s)

    def _presign(self, operation: str, key: str, expires_s: int) -> str:
        return str(self._once.generate_presigned_url(
            operation, Params={"Bucket": self.bucket, "Key": self._full(key)},
            ExpiresIn=check_expires(expires_s),
        ))

    # -- the rest ----------------------------------------------------------------------------

    def statistics(self) -> StoreStatistics:
        return self._stats.snapshot()

    async def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._once.close()
        self._retrying.close()


class _S3Reader(ObjectReader):
    """A streamed GET that resumes where it stopped: a read that fails transiently (the
    connection dropped, the body cut short, a read timeout) reopens the object from the
    offset reached with a ranged GET ``If-Match`` the ETag the read began with, up to
    ``RETRY_TRIES`` times in a row; an object replaced meanwhile is ``PreconditionFailed``."""

    def __init__(self, store: S3Store, key: str, full: str, response: dict[str, Any]) -> None:
        self._store = store
        self._key = key
        self._full = full
        self._body: Any = response["Body"]
        self.etag = str(response["ETag"])
        self.size = int(response["ContentLength"])
        self._offset = 0

    async def read(self, n: int = -1) -> bytes:
        amount = None if n < 0 else n
        tries = 0
        while True:
            try:
                if self._body is None:
                    await self._reopen()
                data: bytes = await self._store._call(
                    self._key, False, functools.partial(self._body.read, amount), request=False
                )
                break
            except TransientError:
                tries += 1
                if tries >= RETRY_TRIES:
                    raise
                self._close_body()
                await asyncio.sleep(retry_wait(tries))
        self._offset += len(data)
        self._store._stats.bytes_read += len(data)
        return data

    async def _reopen(self) -> None:
        if self._offset >= self.size:
            self._body = _EmptyBody()  # nothing left to read (S3 refuses an empty range)
            return
        store = self._store
        response = await store._call(
            self._key, False,
            functools.partial(
                store._retrying.get_object, Bucket=store.bucket, Key=self._full,
                Range=f"bytes={self._offset}-", IfMatch=self.etag,
            ),
        )
        self._body = response["Body"]

    def _close_body(self) -> None:
        body, self._body = self._body, None
        if body is not None:
            with contextlib.suppress(Exception):
                body.close()

    async def aclose(self) -> None:
        self._close_body()


class _EmptyBody:
    def read(self, amount: int | None = None) -> bytes:
        return b""

    def close(self) -> None:
        pass
