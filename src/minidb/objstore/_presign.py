"""Expiring, HMAC-signed URLs for the ``file:`` backend (pure: no clock, no I/O).

A URL ``<base>/files/<quoted key>?exp=<unix seconds>&sig=<hex>`` lets its bearer use one
method on one key until ``exp``. ``sig`` is HMAC-SHA256 over ``"<METHOD>\\n<path>\\n<exp>"``
where ``path`` is the URL's path exactly as sent (``/files/`` plus the percent-quoted key), so
changing the method, the key or the expiry invalidates it. The server that serves these URLs
(the batch HTTP server) calls ``verify_presigned`` with the request's method, path, query and
its clock's ``now``; the comparison is constant-time (``hmac.compare_digest``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from urllib.parse import parse_qs, quote, unquote

from ._errors import PresignError
from ._keys import check_key

FILES_PATH = "/files/"
"""Path prefix of presigned file URLs."""

SECRET_BYTES = 32
"""Length of a generated presign secret, in bytes."""

PRESIGN_METHODS = frozenset({"GET", "PUT"})


def key_path(key: str) -> str:
    """The URL path that names ``key`` (``/`` kept, everything else percent-quoted)."""
    return FILES_PATH + quote(key, safe="/")


def _signature(secret: bytes, method: str, path: str, exp: int) -> str:
    message = f"{method}\n{path}\n{exp}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def sign(secret: bytes, method: str, key: str, expires_at: int, base_url: str = "") -> str:
    """The presigned URL for ``method`` on ``key``, valid until the unix time ``expires_at``."""
    if method not in PRESIGN_METHODS:
        raise ValueError(f"method must be one of {sorted(PRESIGN_METHODS)}, not {method!r}")
    path = key_path(check_key(key))
    sig = _signature(secret, method, path, expires_at)
    return f"{base_url.rstrip('/')}{path}?exp={expires_at}&sig={sig}"


def verify_presigned(
    secret: bytes, method: str, path: str, query: str | Mapping[str, str], now: float
) -> str:
    """The key a presigned request may use, or ``PresignError`` (403) if it may not.

    ``query`` is the raw query string or its parsed mapping; ``now`` is unix seconds.
    """
    if isinstance(query, str):
        params = {name: values[0] for name, values in parse_qs(query).items()}
    else:
        params = dict(query)
    exp_text, sig = params.get("exp"), params.get("sig")
    if not path.startswith(FILES_PATH) or exp_text is None or sig is None:
        raise PresignError("not a presigned file URL", reason="malformed")
    try:
        exp = int(exp_text)
    except ValueError:
        raise PresignError("presigned URL has a malformed expiry", reason="malformed") from None
    # Check the signature before the expiry so a forged URL never learns whether it expired.
    expected = _signature(secret, method.upper(), path, exp)
    if not hmac.compare_digest(expected.encode(), sig.encode()):
        raise PresignError("presigned URL signature does not match", reason="signature")
    key = unquote(path[len(FILES_PATH):])
    if now >= exp:
        raise PresignError("Request has expired", reason="expired", key=key)
    return check_key(key)
