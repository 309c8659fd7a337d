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
<endpoint>"), naming the step and what happened. Other ``ObjectStoreError``\\ s (the store is
down, credentials are wrong) propagate unchanged: they say nothing about conditions.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable

from ._errors import ConditionalWritesNotEnforced, PreconditionFailed
from ._types import ObjectStore

PROBE_PREFIX = "_probe/"
STALE_ETAG = '"00000000000000000000000000000000"'
"""An ETag no object has (S3 ETags are MD5 or MD5-N; file ETags are sha256)."""


async def self_test(store: ObjectStore) -> None:
    """Raise ``ConditionalWritesNotEnforced`` unless ``store`` enforces every condition."""
    key = f"{PROBE_PREFIX}{uuid.uuid4().hex}"

    async def refused(step: str, call: Awaitable[object]) -> None:
        try:
            result = await call
        except PreconditionFailed:
            return
        raise ConditionalWritesNotEnforced(
            store.endpoint, step=step, observed=f"succeeded ({result!r}) instead of 412"
        )

    etag = await store.put_if_absent(key, b"probe 1")
    try:
        await refused("create twice", store.put_if_absent(key, b"probe 2"))
        await refused("stale compare-and-set", store.compare_and_set(key, b"probe 3", STALE_ETAG))
        try:
            etag = await store.compare_and_set(key, b"probe 4", etag)
        except PreconditionFailed:
            raise ConditionalWritesNotEnforced(
                store.endpoint, step="compare-and-set", observed="412 with the current ETag"
            ) from None
        if store.capabilities.conditional_delete:
            await refused("stale conditional delete", store.delete(key, STALE_ETAG))
            await store.delete(key, etag)
    finally:
        # Whatever happened, leave no probe behind (unconditional delete is idempotent).
        await store.delete(key)
