"""Page cursors of ``GET /tasks``: opaque, HMAC-signed, bound to the user (pure).

A cursor is ``v1.<task id>.<tag>``: the id of the last task of the page (the next page starts
strictly after it) and ``tag`` = the first ``TAG_BYTES`` of HMAC-SHA256(secret, ``"cursor v1"``,
user, id), base64url. The id alone would be a fine position, but signing it means a client
cannot page from a position it never saw, and binding the user means a cursor minted for one
user is refused for another (it would otherwise reveal nothing, but a refusal is clearer and
costs nothing). The secret comes from ``secrets/api`` in the store (``_app``), so every API
process on one store accepts the others' cursors, also after a restart.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from minidb.batch._errors import BatchError, InvalidTaskId
from minidb.batch._ids import parse_task_id

VERSION = "v1"
TAG_BYTES = 16
"""Bytes of the HMAC kept in a cursor (128 bits: unforgeable, short in a URL)."""
MAX_CURSOR_CHARS = 128
"""A longer cursor is refused before it is split or decoded."""


class InvalidCursor(BatchError):
    """A cursor that is malformed, tampered with or minted for another user: answer 400."""


def _tag(secret: bytes, user: str, task_id: str) -> str:
    message = f"cursor {VERSION}\n{user}\n{task_id}".encode()
    digest = hmac.new(secret, message, hashlib.sha256).digest()[:TAG_BYTES]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def encode_cursor(secret: bytes, user: str, task_id: str) -> str:
    """The cursor of the page after ``task_id`` for ``user``."""
    return f"{VERSION}.{parse_task_id(task_id)}.{_tag(secret, user, task_id)}"


def decode_cursor(secret: bytes, user: str, cursor: str) -> str:
    """The task id a cursor of ``user`` names, or ``InvalidCursor``."""
    if len(cursor) > MAX_CURSOR_CHARS:
        raise InvalidCursor("malformed cursor")
    parts = cursor.split(".")
    if len(parts) != 3 or parts[0] != VERSION:
        raise InvalidCursor("malformed cursor")
    _version, task_id, tag = parts
    try:
        parse_task_id(task_id)
        base64.urlsafe_b64decode(tag + "=" * (-len(tag) % 4))
    except (InvalidTaskId, binascii.Error, ValueError):
        raise InvalidCursor("malformed cursor") from None
    expected = _tag(secret, user, task_id).encode()
    if not hmac.compare_digest(expected, tag.encode("utf-8", "replace")):
        raise InvalidCursor("cursor was not issued to this user or was altered")
    return task_id
