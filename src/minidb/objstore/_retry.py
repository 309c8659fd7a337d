"""The store's own retries: the steps no caller can retry, because the caller no longer holds
what would be sent again.

Most failed requests are the caller's to retry (docs/objstore.md, "Errors"): botocore retries
idempotent S3 calls, and the batch queue re-reads and reconciles every conditional write by the
write id in its record. Two steps cannot be left to a caller:

- **the final create of ``upload``**: the caller's chunks are consumed, so only the store has
  the bytes (a part, or the whole small object) to send again. ``settle_create`` runs the
  conditional create until its outcome is known. After a failure that leaves the outcome open
  (``AmbiguousWrite``; or a ``TransientError``, which a proxy may have answered for a store
  that did apply the write) it lists the key and compares the stored ETag with the ETag the
  backend computed for the bytes it sent: equal means ours landed; absent means nothing did,
  and the create is sent again (safe: it is conditional, so it can never overwrite);
  anything else is another writer's object, ``PreconditionFailed``. A 412 on a try after the
  first is settled the same way (the earlier try may have landed).
- **the rest of a streamed read**: the caller has consumed the bytes before the failure, so the
  backend resumes from the offset reached (S3: a ranged GET ``If-Match`` the ETag the read
  started with, so a replaced object is never spliced into the old one).

Both wait between tries with ``retry_wait``: equal jitter (a wait in ``[c/2, c)``) with ``c``
doubling from ``RETRY_BASE_S`` up to ``RETRY_CAP_S``, for ``RETRY_TRIES`` tries in all; the
same numbers the batch queue uses for its reads. Waits go through ``asyncio.sleep``, so the
loop's clock (virtual in tests) governs them.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from ._errors import AmbiguousWrite, PreconditionFailed, TransientError
from ._keys import check_key
from ._types import ObjectStore

RETRY_TRIES = 5
"""Tries of one step (first included) before its last error is raised to the caller."""
RETRY_BASE_S = 0.05
"""First wait after a failed try, in seconds (the ceiling; the wait is drawn from half of it
up to it)."""
RETRY_CAP_S = 1.0
"""Longest wait between two tries, in seconds."""

_rng = random.Random()


def retry_wait(tries: int, rng: random.Random = _rng) -> float:
    """Seconds to wait after try number ``tries`` (1 = the first) failed."""
    ceiling = min(RETRY_CAP_S, RETRY_BASE_S * 2 ** (tries - 1))
    return rng.uniform(ceiling / 2, ceiling)


async def stored_etag(store: ObjectStore, key: str) -> str | None:
    """The ETag ``key`` has now, or None if there is no such object: one LIST of at most one
    key (the key itself sorts first under itself as a prefix)."""
    page = await store.list(prefix=key, limit=1)
    return next((entry.etag for entry in page.entries if entry.key == key), None)


async def settle_create(
    store: ObjectStore, key: str, expected_etag: str, create: Callable[[], Awaitable[str]]
) -> str:
    """``await create()`` (a conditional create of ``key`` with bytes whose ETag will be
    ``expected_etag``) until it is known to have landed; see the module docstring."""
    check_key(key)
    for tries in range(1, RETRY_TRIES + 1):
        try:
            return await create()
        except PreconditionFailed:
            if tries == 1:
                raise  # the key was taken before this upload wrote to it
            error: Exception | None = None
        except (AmbiguousWrite, TransientError) as exc:
            error = exc
        try:
            current: str | None = await stored_etag(store, key)
        except TransientError:
            current = _UNKNOWN
        if current == expected_etag:
            return expected_etag
        if current not in (None, _UNKNOWN):
            raise PreconditionFailed(
                f"object {key!r} exists and is not the one this upload wrote", key=key,
                status=412,
            ) from error
        if tries == RETRY_TRIES:
            raise error or TransientError(f"the create of {key!r} did not settle", key=key)
        await asyncio.sleep(retry_wait(tries))
    raise AssertionError("unreachable")


_UNKNOWN = "?"
"""What ``settle_create`` knows of a key whose listing failed too (no ETag is ``?``)."""
