"""The one place where botocore's exceptions become ``ObjectStoreError``\\ s.

The mapping (docs/objstore.md, "Errors"):

- 404 / ``NoSuchKey`` -> ``NotFound``; 412 -> ``PreconditionFailed``;
- 503 (``SlowDown``, ``ServiceUnavailable``) -> ``TransientError``: S3 throttles by refusing
  the request, so nothing was applied;
- for a write, 409 ``ConditionalRequestConflict``, any other 5xx, a read timeout or a
  connection lost after the request went out -> ``AmbiguousWrite``; for a read ->
  ``TransientError``;
- a connection that was never made (refused, connect timeout) -> ``TransientError`` even for a
  write: no byte of the request reached the store;
- anything else (400, 403, a missing bucket, a client-side error) -> ``ObjectStoreError``.
"""

from __future__ import annotations

from botocore import exceptions as boto

from ._errors import (
    AmbiguousWrite,
    NotFound,
    ObjectStoreError,
    PreconditionFailed,
    TransientError,
)

THROTTLE_STATUS = 503
"""S3's "slow down" status: the request was refused before it was processed."""


def translate(
    exc: BaseException, *, key: str | None, endpoint: str, write: bool
) -> ObjectStoreError:
    """The ``ObjectStoreError`` for a botocore failure of one request on ``key``."""
    if isinstance(exc, boto.ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = f"{endpoint}: {code} ({status}) on {key!r}: {error.get('Message', '')}"
        if status == 412 or code == "PreconditionFailed":
            return PreconditionFailed(message, status=412, code=code, key=key, endpoint=endpoint)
        if code == "NoSuchKey" or (status == 404 and code in ("404", "NotFound")):
            return NotFound(message, status=404, code=code, key=key, endpoint=endpoint)
        if status == THROTTLE_STATUS:
            return TransientError(message, status=status, code=code, key=key, endpoint=endpoint)
        if write and (status == 409 or (status is not None and status >= 500)):
            return AmbiguousWrite(message, status=status, code=code, key=key, endpoint=endpoint)
        if status is not None and status >= 500:
            return TransientError(message, status=status, code=code, key=key, endpoint=endpoint)
        return ObjectStoreError(message, status=status, code=code, key=key, endpoint=endpoint)
    name = type(exc).__name__
    message = f"{endpoint}: {name} on {key!r}: {exc}"
    if isinstance(exc, boto.ConnectTimeoutError | boto.EndpointConnectionError):
        return TransientError(message, code=name, key=key, endpoint=endpoint)
    if isinstance(
        exc, boto.HTTPClientError | boto.ResponseStreamingError | boto.IncompleteReadError
    ):
        if write:
            return AmbiguousWrite(message, code=name, key=key, endpoint=endpoint)
        return TransientError(message, code=name, key=key, endpoint=endpoint)
    return ObjectStoreError(message, code=name, key=key, endpoint=endpoint)
