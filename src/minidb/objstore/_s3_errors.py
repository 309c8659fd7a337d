"""The one place where botocore's exceptions become ``ObjectStoreError``\\ s.

The mapping (docs/objstore.md, "Errors", has it as a table):

- 404 / ``NoSuchKey`` -> ``NotFound``; 412 -> ``PreconditionFailed``;
- refused before it was processed -> ``TransientError``, for any request: 503 (``SlowDown``,
  ``ServiceUnavailable``), 429 and the throttling codes S3-compatible stores use, 400
  ``RequestTimeout`` (the store gave up waiting for the request's bytes), and a connection
  that was never made (refused, connect timeout, a proxy that would not connect): no byte of
  the request reached the store;
- the request went out and no answer came back, or an answer saying the server failed:
  a dropped or reset connection, a read timeout, a body cut short, a 5xx other than 501 and
  505 (500 InternalError, 502 and 504 from a gateway). For a
  read that is a ``TransientError``; for a write an ``AmbiguousWrite`` (it may have been
  applied), and so is a 409 ``ConditionalRequestConflict`` (a concurrent conditional write);
- anything else (400, 403, a missing bucket, a TLS or credentials error, a client-side error)
  -> ``ObjectStoreError``: retrying the same request cannot help.
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

REFUSED_STATUSES = frozenset({429, 503})
"""Statuses by which a store refuses a request before processing it (throttling)."""
REFUSED_CODES = frozenset({
    "SlowDown", "ServiceUnavailable", "Throttling", "ThrottlingException", "TooManyRequests",
    "RequestLimitExceeded", "RequestThrottled", "RequestTimeout",
})
"""S3 error codes of a request refused before it was processed, whatever the status."""
NOT_SERVER_FAILURES = frozenset({501, 505})
"""5xx statuses that refuse the request as such (not implemented, HTTP version): permanent.
Every other 5xx (500 InternalError, 502, 504 from a gateway) says the server failed while
handling the request."""

_NOT_CONNECTED = (boto.ConnectTimeoutError, boto.EndpointConnectionError,
                  boto.ProxyConnectionError)
"""No connection was made, so nothing was sent (botocore's ``SSLError`` is a
``ConnectionError`` too, but a certificate that fails does not heal by itself: left out)."""
_NO_ANSWER = (boto.HTTPClientError, boto.ResponseStreamingError, boto.IncompleteReadError,
              ConnectionError, TimeoutError)
"""Sent, but the answer was lost: dropped or reset (``ConnectionClosedError`` and the rest of
``HTTPClientError``), a read timeout, a body cut short; the builtins for what urllib3 lets
through unwrapped."""


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
        kind: type[ObjectStoreError] = ObjectStoreError
        server_failed = status is not None and status >= 500 and status not in NOT_SERVER_FAILURES
        if status in REFUSED_STATUSES or code in REFUSED_CODES:
            kind = TransientError
        elif write and (status == 409 or server_failed):
            kind = AmbiguousWrite
        elif server_failed:
            kind = TransientError
        return kind(message, status=status, code=code, key=key, endpoint=endpoint)
    name = type(exc).__name__
    message = f"{endpoint}: {name} on {key!r}: {exc}"
    if isinstance(exc, _NOT_CONNECTED):
        return TransientError(message, code=name, key=key, endpoint=endpoint)
    if isinstance(exc, _NO_ANSWER):
        if write:
            return AmbiguousWrite(message, code=name, key=key, endpoint=endpoint)
        return TransientError(message, code=name, key=key, endpoint=endpoint)
    return ObjectStoreError(message, code=name, key=key, endpoint=endpoint)
