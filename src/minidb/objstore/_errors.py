"""The errors of object storage, rooted at ``MinidbError``.

::

    ObjectStoreError        key, status, code, endpoint
    ├── NotFound            the key does not exist
    ├── PreconditionFailed  the condition was false; the write did not happen
    ├── AmbiguousWrite      the write may or may not have happened: re-read to find out
    ├── TransientError      temporary, nothing applied: retry later
    ├── InvalidKey          the key breaks the key rules; nothing was sent or touched
    ├── PresignError        a presigned URL was refused (expired, bad signature)
    └── ConditionalWritesNotEnforced   the store failed the self-test

Each backend translates its foreign exceptions into these in exactly one place.
"""

from __future__ import annotations

from minidb.errors import MinidbError


class ObjectStoreError(MinidbError):
    """An object-storage operation failed.

    ``status`` is the HTTP status (or the status the file backend's error corresponds to),
    ``code`` the S3 error code when there is one, ``endpoint`` the store it came from.
    """

    retryable = False
    """Whether trying the same request again later can succeed without re-reading first."""

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        status: int | None = None,
        code: str | None = None,
        endpoint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.key = key
        self.status = status
        self.code = code
        self.endpoint = endpoint


class NotFound(ObjectStoreError):
    """The key does not exist (404 NoSuchKey)."""


class PreconditionFailed(ObjectStoreError):
    """The write's condition was false (412); the store is unchanged."""


class AmbiguousWrite(ObjectStoreError):
    """The outcome of a write is unknown: the caller reconciles by re-reading the object."""


class TransientError(ObjectStoreError):
    """A temporary failure that applied nothing (503 SlowDown, a failed read): retry later."""

    retryable = True


class InvalidKey(ObjectStoreError):
    """The key is not acceptable to every backend (see docs/objstore.md, "Keys")."""


class PresignError(ObjectStoreError):
    """A presigned URL was refused; ``reason`` is ``expired``, ``signature`` or ``malformed``."""

    def __init__(self, message: str, *, reason: str, key: str | None = None) -> None:
        super().__init__(message, key=key, status=403, code="AccessDenied")
        self.reason = reason


class ConditionalWritesNotEnforced(ObjectStoreError):
    """The store accepted a write its condition should have refused (or refused a valid one).

    The message is exactly ``conditional writes not enforced by <endpoint>``; ``step`` names
    the self-test step and ``observed`` what happened instead.
    """

    def __init__(self, endpoint: str, *, step: str, observed: str) -> None:
        super().__init__(f"conditional writes not enforced by {endpoint}", endpoint=endpoint)
        self.step = step
        self.observed = observed
