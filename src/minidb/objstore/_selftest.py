"""``self_test``: refuse a store that does not enforce conditional writes.

Some S3-compatible servers and proxies accept ``If-None-Match`` / ``If-Match`` and ignore
them, which would let two workers own one task. Before trusting a store, the batch layer
runs these steps on a fresh probe key ``_probe/<uuid>``; each must end exactly as listed:

1. ``put_if_absent``                       -> an ETag
2. ``put_if_absent`` again                 -> ``PreconditionFailed``
3. ``compare_and_set`` with a stale ETag   -> ``PreconditionFailed``
4. ``compare_and_set`` with the real ETag  -> a new ETag
5. if ``capabilities.conditional_delete``: ``delete`` with a stale ETag -> ``PreconditionFailed``,
   then with the real one; else an unconditional ``delete``.

Anything else raises ``ConditionalWritesNotEnforced`` ("conditional writes not enforced by
<endpoint>"), naming the step and what happened. Other ``ObjectStoreError``\\ s (wrong
credentials, a missing bucket) propagate unchanged: they say nothing about conditions.

A step that fails transiently or without an answer (``TransientError``, ``AmbiguousWrite``: a
dropped connection, a 5xx) says nothing either, so it is tried again, up to ``RETRY_TRIES``
times with the store's retry waits (``_retry``): a worker started while its store is flaky
must not exit for it (issue 17: one dropped connection in here left a worker dead and its
queue unserved). Trying a step again never changes the verdict: a step that must be refused
is refused again by a store that enforces conditions and accepted again by one that does
not; a write that must succeed and meets a 412 after an unanswered try is looked up, and is
ours if the probe holds the bytes it wrote (each write's bytes are unique to the run); a
delete that finds nothing after an unanswered try had landed.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ._errors import (
    AmbiguousWrite,
    ConditionalWritesNotEnforced,
    NotFound,
    PreconditionFailed,
    TransientError,
)
from ._retry import RETRY_TRIES, retry_wait
from ._types import ObjectStore

PROBE_PREFIX = "_probe/"
STALE_ETAG = '"00000000000000000000000000000000"'
"""An ETag no object has (S3 ETags are MD5 or MD5-N; file ETags are sha256)."""

T = TypeVar("T")


async def self_test(store: ObjectStore) -> None:
    """Raise ``ConditionalWritesNotEnforced`` unless ``store`` enforces every condition."""
    run = uuid.uuid4().hex
    key = f"{PROBE_PREFIX}{run}"
    try:
        await _steps(store, key, run)
    finally:
        # Whatever happened, leave no probe behind (unconditional delete is idempotent); a
        # delete that keeps failing leaves one, which costs nothing.
        with contextlib.suppress(TransientError, AmbiguousWrite):
            await _again(lambda: store.delete(key))


async def _steps(store: ObjectStore, key: str, run: str) -> None:
    async def refused(step: str, call: Callable[[], Awaitable[object]]) -> None:
        try:
            result = await _again(call)
        except PreconditionFailed:
            return
        raise ConditionalWritesNotEnforced(
            store.endpoint, step=step, observed=f"succeeded ({result!r}) instead of 412"
        )

    first = f"probe 1 {run}".encode()
    etag = await _write(store, key, first, lambda: store.put_if_absent(key, first))
    await refused("create twice", lambda: store.put_if_absent(key, b"probe 2"))
    await refused("stale compare-and-set",
                  lambda: store.compare_and_set(key, b"probe 3", STALE_ETAG))
    fourth = f"probe 4 {run}".encode()
    try:
        etag = await _write(store, key, fourth, lambda: store.compare_and_set(key, fourth, etag))
    except PreconditionFailed:
        raise ConditionalWritesNotEnforced(
            store.endpoint, step="compare-and-set", observed="412 with the current ETag"
        ) from None
    if store.capabilities.conditional_delete:
        await refused("stale conditional delete", lambda: store.delete(key, STALE_ETAG))
        tries = _Tries()
        try:
            await _again(lambda: store.delete(key, etag), tries)
        except NotFound:
            if not tries.unanswered:
                raise  # (an unanswered try of this delete had landed: done)


class _Tries:
    """Whether a step has had a try whose answer did not come (so it may have landed)."""

    unanswered = False


async def _again(call: Callable[[], Awaitable[T]], tries: _Tries | None = None) -> T:
    """``call()``, tried again after a transient or unanswered failure."""
    for n in range(1, RETRY_TRIES + 1):
        try:
            return await call()
        except (TransientError, AmbiguousWrite):
            if n == RETRY_TRIES:
                raise
            if tries is not None:
                tries.unanswered = True
            await asyncio.sleep(retry_wait(n))
    raise AssertionError("unreachable")


async def _write(
    store: ObjectStore, key: str, data: bytes, call: Callable[[], Awaitable[str]]
) -> str:
    """A conditional write that must succeed, tried again like any step; a 412 after an
    unanswered try is ours if the probe now holds ``data`` (its ETag is then returned)."""
    tries = _Tries()
    try:
        return await _again(call, tries)
    except PreconditionFailed:
        if not tries.unanswered:
            raise
        current = await _again(lambda: store.get(key))
        if current.data != data:
            raise
        return current.etag
