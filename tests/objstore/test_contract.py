"""The contract every ObjectStore backend keeps, run against ``file:`` and ``s3:`` (via the proxy).

Backend-specific behaviour (S3 faults, file paths) lives in test_s3_faults.py and
test_file.py; everything here must hold on both.
"""

from __future__ import annotations

import asyncio
import os
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from minidb.objstore import (
    FileStore,
    InvalidKey,
    NotFound,
    ObjectStore,
    PreconditionFailed,
    PresignError,
    S3Store,
    self_test,
)
from minidb.objstore._types import READ_CHUNK_BYTES

from .faultproxy import FaultProxy

pytestmark = pytest.mark.minidb_loop

RACE_DEADLINE_S = 60.0
"""Upper bound on one race test, in seconds (moto handles ~75 writes/s here)."""


async def _chunks(total: int, chunk: int) -> AsyncIterator[bytes]:
    sent = 0
    while sent < total:
        n = min(chunk, total - sent)
        yield bytes([sent // chunk % 251]) * n
        sent += n


def _expected(total: int, chunk: int) -> bytes:
    return b"".join(bytes([i // chunk % 251]) * min(chunk, total - i) for i in
                    range(0, total, chunk))


# -- single operations ------------------------------------------------------------------------


async def test_get_missing_raises_not_found(store: ObjectStore) -> None:
    """A GET of an absent key is NotFound carrying the key."""
    with pytest.raises(NotFound) as caught:
        await store.get("nope")
    assert caught.value.key == "nope"


async def test_put_if_absent_then_get_returns_bytes_and_same_etag(store: ObjectStore) -> None:
    """put_if_absent returns the ETag that a later get reports, with the bytes written."""
    etag = await store.put_if_absent("t/1/status.json", b'{"a":1}')
    obj = await store.get("t/1/status.json")
    assert (obj.data, obj.etag) == (b'{"a":1}', etag)
    assert etag.startswith('"') and etag.endswith('"')


async def test_put_if_absent_on_existing_key_fails_and_keeps_object(store: ObjectStore) -> None:
    """A second create is PreconditionFailed and the first object stays unchanged."""
    etag = await store.put_if_absent("k", b"first")
    with pytest.raises(PreconditionFailed) as caught:
        await store.put_if_absent("k", b"second")
    assert caught.value.status == 412
    assert await store.get("k") == type(await store.get("k"))(b"first", etag)


async def test_compare_and_set_with_current_etag_replaces(store: ObjectStore) -> None:
    """CAS with the current ETag writes the new bytes and returns their ETag."""
    etag = await store.put_if_absent("k", b"v1")
    new = await store.compare_and_set("k", b"v2", etag)
    assert new != etag
    obj = await store.get("k")
    assert (obj.data, obj.etag) == (b"v2", new)


async def test_compare_and_set_with_stale_etag_fails(store: ObjectStore) -> None:
    """CAS with an ETag the object no longer has is PreconditionFailed and changes nothing."""
    old = await store.put_if_absent("k", b"v1")
    current = await store.compare_and_set("k", b"v2", old)
    with pytest.raises(PreconditionFailed):
        await store.compare_and_set("k", b"v3", old)
    assert (await store.get("k")).etag == current


async def test_compare_and_set_on_missing_key_is_not_found(store: ObjectStore) -> None:
    """CAS on an absent key is NotFound, and does not create it."""
    with pytest.raises(NotFound):
        await store.compare_and_set("absent", b"x", '"0123"')
    with pytest.raises(NotFound):
        await store.get("absent")


async def test_put_overwrites_unconditionally(store: ObjectStore) -> None:
    """put creates or replaces whatever is there."""
    await store.put("k", b"one")
    etag = await store.put("k", b"two")
    assert await store.get("k") == type(await store.get("k"))(b"two", etag)


async def test_delete_with_etag_is_conditional(store: ObjectStore) -> None:
    """delete(etag=stale) is refused and keeps the object; delete(etag=current) removes it."""
    assert store.capabilities.conditional_delete
    old = await store.put_if_absent("k", b"v1")
    current = await store.compare_and_set("k", b"v2", old)
    with pytest.raises(PreconditionFailed):
        await store.delete("k", old)
    assert (await store.get("k")).data == b"v2"
    await store.delete("k", current)
    with pytest.raises(NotFound):
        await store.get("k")


async def test_delete_missing_key(store: ObjectStore) -> None:
    """An unconditional delete of an absent key succeeds; a conditional one is NotFound."""
    await store.delete("absent")
    with pytest.raises(NotFound):
        await store.delete("absent", '"0123"')


async def test_invalid_keys_refused_by_every_backend(store: ObjectStore) -> None:
    """The key rules are the same on every backend, so nothing backend-specific leaks up."""
    for key in ["", "../x", "/abs", "a\\b", "a\x00b", "a//b", "a/", "./a", ".minidb-x/y",
                "x" * 1025]:
        with pytest.raises(InvalidKey):
            await store.put(key, b"x")
        with pytest.raises(InvalidKey):
            await store.get(key)
    assert (await store.list()).entries == ()


# -- listing -----------------------------------------------------------------------------------


async def test_list_pages_in_utf8_order_with_start_after(store: ObjectStore) -> None:
    """Pages of 2 with start_after visit every key once, ascending by UTF-8 bytes."""
    keys = ["a/b", "a-b", "a/c/d", "b", "é", "z", "aa", "a0"]
    etags = {key: await store.put(key, key.encode() * 3) for key in keys}
    seen = []
    start_after = None
    while True:
        page = await store.list("", start_after=start_after, limit=2)
        assert len(page.entries) <= 2
        seen.extend(page.entries)
        if page.next_start_after is None:
            break
        start_after = page.next_start_after
    assert [e.key for e in seen] == sorted(keys, key=lambda k: k.encode())
    for entry in seen:
        assert (entry.size, entry.etag) == (len(entry.key.encode()) * 3, etags[entry.key])


async def test_list_prefix_and_start_after_filter(store: ObjectStore) -> None:
    """A prefix restricts the listing; start_after excludes the named key itself."""
    for key in ["q/1", "q/2", "q/3", "qq", "r/1"]:
        await store.put(key, b"")
    page = await store.list("q/")
    assert [e.key for e in page.entries] == ["q/1", "q/2", "q/3"]
    assert page.next_start_after is None
    page = await store.list("q/", start_after="q/1")
    assert [e.key for e in page.entries] == ["q/2", "q/3"]
    page = await store.list("q")
    assert [e.key for e in page.entries] == ["q/1", "q/2", "q/3", "qq"]


async def test_list_every_follows_the_pages(store: ObjectStore) -> None:
    """``list_every`` returns what paging by hand returns: every key under the prefix after
    ``start_after``, ascending, whatever the page size."""
    for key in ["p/1", "p/2", "p/3", "p/4", "p/5", "px"]:
        await store.put(key, b"")
    every = await store.list_every("p/", page_size=2)
    assert [e.key for e in every] == ["p/1", "p/2", "p/3", "p/4", "p/5"]
    after = await store.list_every("p/", start_after="p/2", page_size=2)
    assert [e.key for e in after] == ["p/3", "p/4", "p/5"]
    assert [e.key for e in await store.list_every("none/")] == []


# -- races -------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [16, 4 << 20], ids=["small", "4MiB"])
async def test_racing_creators_exactly_one_wins(store: ObjectStore, size: int) -> None:
    """Of many concurrent creates of one key exactly one succeeds, and its bytes stay."""
    creators = 8

    async def create(i: int) -> tuple[int, str] | None:
        try:
            return i, await store.put_if_absent("race", bytes([i]) * size)
        except PreconditionFailed:
            return None

    async with asyncio.timeout(RACE_DEADLINE_S):
        results = await asyncio.gather(*(create(i) for i in range(creators)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1, winners
    i, etag = winners[0]
    obj = await store.get("race")
    assert (obj.data, obj.etag) == (bytes([i]) * size, etag)


@pytest.mark.parametrize("size", [16, 4 << 20], ids=["small", "4MiB"])
async def test_racing_compare_and_set_exactly_one_wins(store: ObjectStore, size: int) -> None:
    """Of many concurrent CAS calls with the same ETag exactly one succeeds."""
    etag = await store.put_if_absent("race", b"start")
    writers = 8

    async def cas(i: int) -> int | None:
        try:
            await store.compare_and_set("race", bytes([i]) * size, etag)
            return i
        except PreconditionFailed:
            return None

    async with asyncio.timeout(RACE_DEADLINE_S):
        results = await asyncio.gather(*(cas(i) for i in range(writers)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1, winners
    assert (await store.get("race")).data == bytes([winners[0]]) * size


async def test_aba_identical_bytes_reproduce_the_etag(store: ObjectStore) -> None:
    """Rewriting identical bytes gives back the old ETag on both backends, so a stale CAS wins.

    Both ETags are content hashes (S3: MD5, file: sha256); callers that must notice an
    A -> B -> A change put a revision in the bytes (the batch layer's ``rev``/``write_id``).
    """
    stale = await store.put_if_absent("aba", b"A")
    middle = await store.compare_and_set("aba", b"B", stale)
    again = await store.compare_and_set("aba", b"A", middle)
    assert again == stale
    await store.compare_and_set("aba", b"stale writer", stale)  # succeeds: ABA
    assert (await store.get("aba")).data == b"stale writer"


# -- streaming ---------------------------------------------------------------------------------


async def test_open_read_streams_a_large_object_in_bounded_chunks(store: ObjectStore) -> None:
    """A 3 MiB object comes back through async iteration in chunks of at most READ_CHUNK_BYTES."""
    total = 3 << 20
    data = os.urandom(total)
    etag = await store.put("big", data)
    before = store.statistics().requests
    reader = await store.open_read("big")
    async with reader:
        assert (reader.etag, reader.size) == (etag, total)
        chunks = [chunk async for chunk in reader]
    assert all(len(c) <= READ_CHUNK_BYTES for c in chunks)
    assert b"".join(chunks) == data
    # Counted as S3 bills it: one GET, however many chunks its body came in.
    assert len(chunks) >= 3
    assert store.statistics().requests - before == 1


async def test_open_read_missing_is_not_found(store: ObjectStore) -> None:
    """open_read of an absent key raises NotFound before any iteration."""
    with pytest.raises(NotFound):
        await store.open_read("absent")


async def test_upload_larger_than_a_part_holds_bounded_memory(store: ObjectStore) -> None:
    """An 11 MiB upload from 256 KiB chunks never buffers more than one part plus one chunk."""
    total, chunk = 11 << 20, 256 << 10
    etag = await store.upload("out/attempt-1/result.csv", _chunks(total, chunk))
    obj = await store.get("out/attempt-1/result.csv")
    assert obj.etag == etag
    assert obj.data == _expected(total, chunk)
    bound = chunk + (store._part_size if isinstance(store, S3Store) else 0)
    peak = store.statistics().peak_upload_buffer_bytes
    assert 0 < peak <= bound, (peak, bound)


async def test_upload_if_absent_refuses_an_existing_key(store: ObjectStore) -> None:
    """upload(if_absent=True) onto an existing key is PreconditionFailed (multipart too)."""
    await store.put("out", b"already")
    with pytest.raises(PreconditionFailed):
        await store.upload("out", _chunks(11 << 20, 1 << 20))
    assert (await store.get("out")).data == b"already"
    etag = await store.upload("out", _chunks(100, 10), if_absent=False)
    assert (await store.get("out")).etag == etag


# -- presigned URLs ----------------------------------------------------------------------------


def _s3_fetch(url: str, method: str = "GET", body: bytes | None = None) -> tuple[int, bytes]:
    # An explicit type: urllib's default (form-urlencoded) makes moto's Flask eat the body.
    headers = {"Content-Type": "application/octet-stream"} if body is not None else {}
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _tamper_key(url: str) -> str:
    parts = urlsplit(url)
    return url.replace(parts.path, parts.path[:-1] + "X", 1)


def _tamper_signature(url: str) -> str:
    return url[:-4] + ("0000" if not url.endswith("0000") else "1111")


async def _presigned_status(
    store: ObjectStore, proxy: FaultProxy, url: str, method: str, body: bytes | None,
    later_s: float = 0.0,
) -> tuple[int, bytes]:
    """What a client using ``url`` would get, ``later_s`` seconds from now."""
    if isinstance(store, FileStore):
        parts = urlsplit(url)
        try:
            key = store.verify_presigned(method, parts.path, parts.query,
                                         now=time.time() + later_s)
        except PresignError as refusal:
            return refusal.status or 403, refusal.reason.encode()
        if method == "PUT":
            assert body is not None
            await store.put(key, body)
            return 200, b""
        return 200, (await store.get(key)).data
    proxy.strict_presign = True
    proxy.clock = lambda: time.time() + later_s
    return await asyncio.to_thread(_s3_fetch, url, method, body)


async def test_presigned_get_genuine_expired_tampered(
    store: ObjectStore, proxy: FaultProxy
) -> None:
    """A presigned GET works until it expires; a changed key or signature is refused (403)."""
    await store.put("reports/out.csv", b"a,b\n1,2\n")
    await store.put("reports/out.csX", b"other")
    url = store.presign_get("reports/out.csv", 60)
    assert await _presigned_status(store, proxy, url, "GET", None) == (200, b"a,b\n1,2\n")
    status, body = await _presigned_status(store, proxy, url, "GET", None, later_s=120)
    assert status == 403 and b"expired" in body.lower()
    for forged in (_tamper_key(url), _tamper_signature(url)):
        status, body = await _presigned_status(store, proxy, forged, "GET", None)
        assert status == 403 and b"signature" in body.lower(), body
    status, _ = await _presigned_status(store, proxy, url, "PUT", b"x")
    assert status == 403  # the method is part of what is signed


async def test_presigned_put_genuine_expired_tampered(
    store: ObjectStore, proxy: FaultProxy
) -> None:
    """A presigned PUT stores the body; expired or tampered PUT URLs are refused (403)."""
    url = store.presign_put("inputs/1/input.csv", 60)
    status, _ = await _presigned_status(store, proxy, url, "PUT", b"x,y\n")
    assert status == 200
    assert (await store.get("inputs/1/input.csv")).data == b"x,y\n"
    status, _ = await _presigned_status(store, proxy, url, "PUT", b"late", later_s=61)
    assert status == 403
    status, _ = await _presigned_status(store, proxy, _tamper_key(url), "PUT", b"forged")
    assert status == 403
    assert (await store.get("inputs/1/input.csv")).data == b"x,y\n"


async def test_presign_lifetime_is_bounded(store: ObjectStore) -> None:
    """Lifetimes outside 1 s .. 7 days are refused before any URL is made."""
    for expires in (0, 604_801):
        with pytest.raises(ValueError):
            store.presign_get("k", expires)


# -- self-test and statistics ------------------------------------------------------------------


async def test_self_test_passes_and_leaves_no_probe(store: ObjectStore) -> None:
    """A store that enforces conditions passes the self-test, which cleans up after itself."""
    await self_test(store)
    assert (await store.list("_probe/")).entries == ()


async def test_statistics_count_requests_and_outcomes(store: ObjectStore) -> None:
    """statistics() counts requests, precondition failures and bytes."""
    before = store.statistics()
    await store.put_if_absent("k", b"12345")
    with pytest.raises(PreconditionFailed):
        await store.put_if_absent("k", b"x")
    await store.get("k")
    after = store.statistics()
    assert after.requests > before.requests
    assert after.precondition_failures == before.precondition_failures + 1
    assert after.bytes_written - before.bytes_written == 5
    assert after.bytes_read - before.bytes_read == 5
