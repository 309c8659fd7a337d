"""Key rules shared by every backend (pure).

One rule set for all backends, so that code that runs on ``file:`` runs on ``s3:``: the
``file:`` backend needs the strict form (a key becomes a path under the root) and S3 accepts
all of it. The rules: a non-empty ``str`` of at most ``MAX_KEY_BYTES`` UTF-8 bytes; no NUL,
backslash or other ASCII control character; no leading ``/``; no empty, ``.`` or ``..``
segment; the first segment must not start with ``RESERVED_PREFIX``.
"""

from __future__ import annotations

from ._errors import InvalidKey

MAX_KEY_BYTES = 1024
"""S3's limit on a key's UTF-8 length, in bytes (prefix included)."""

RESERVED_PREFIX = ".minidb"
"""First-segment prefix kept for the file backend's own files (temps, locks, secret)."""

_FORBIDDEN = frozenset(chr(c) for c in range(0x20)) | {"\\", "\x7f"}


def check_key(key: object) -> str:
    """Return ``key`` if it obeys the rules, else raise ``InvalidKey`` saying which one."""
    if not isinstance(key, str):
        raise InvalidKey(f"key must be a str, not {type(key).__name__}")
    _check_text(key, key)
    if not key:
        raise InvalidKey("key is empty", key=key)
    if key.startswith("/"):
        raise InvalidKey("key must not start with '/'", key=key)
    segments = key.split("/")
    for segment in segments:
        if segment in ("", ".", ".."):
            raise InvalidKey(f"key has an empty, '.' or '..' segment: {key!r}", key=key)
    if segments[0].startswith(RESERVED_PREFIX):
        raise InvalidKey(f"keys starting with {RESERVED_PREFIX!r} are reserved", key=key)
    return key


def check_prefix(prefix: object) -> str:
    """Return a listing prefix if it could prefix a valid key (it may be empty or end in '/')."""
    if not isinstance(prefix, str):
        raise InvalidKey(f"prefix must be a str, not {type(prefix).__name__}")
    _check_text(prefix, prefix)
    if prefix.startswith("/"):
        raise InvalidKey("prefix must not start with '/'", key=prefix)
    for segment in prefix.split("/")[:-1]:
        if segment in ("", ".", ".."):
            raise InvalidKey(f"prefix has an empty, '.' or '..' segment: {prefix!r}", key=prefix)
    return prefix


def _check_text(text: str, key: str) -> None:
    if len(text.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise InvalidKey(f"key is longer than {MAX_KEY_BYTES} UTF-8 bytes", key=key)
    bad = _FORBIDDEN.intersection(text)
    if bad:
        raise InvalidKey(f"key contains forbidden characters {sorted(bad)!r}", key=key)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidKey("key is not valid UTF-8 (lone surrogate)", key=key) from None

