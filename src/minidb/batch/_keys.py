"""The storage key layout of the batch layer: every key is built and parsed here, nowhere else.

::

    tasks/<inv(id)>/status.json          the task record, the truth (create If-None-Match:*,
                                         then only If-Match writes)
    inputs/<id>/input.csv                the uploaded input (If-None-Match:*)
    outputs/<id>/attempt-<n>/<file>      what attempt n wrote (If-None-Match:*; never rewritten)
    idem/<user>/<sha256(key)>            Idempotency-Key record (If-None-Match:*)
    users/<user>/<inv(id)>               per-user index, a tiny object made with the task
    queue/<due_ms:013d>_<id>_<nonce>     queue marker: a hint that the task may need a worker
    secrets/api                          the HTTP API's signing secret (If-None-Match:*, once)

``tasks/`` and ``users/`` use the inverted id so an ascending LIST is newest first; ``queue/``
uses the due time so an ascending LIST is earliest-due first and ``start_after`` / a key
comparison alone skips markers that are not due yet. Every enqueue creates a marker under a
key of its own (the due time and a fresh nonce): empty objects all share one ETag, so a
conditional delete could not tell an old marker from a new one of the same key; distinct keys
make deleting a stale marker unable to remove the marker a later enqueue created.

Parsers refuse anything that this module would not have built, so a key listed from the store
(or put there by someone else) is either one of ours or an ``InvalidTaskId``.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import NamedTuple

from minidb.batch._errors import InvalidTaskId
from minidb.batch._ids import invert, parse_inverted_id, parse_task_id

TASKS_PREFIX = "tasks/"
INPUTS_PREFIX = "inputs/"
OUTPUTS_PREFIX = "outputs/"
IDEM_PREFIX = "idem/"
USERS_PREFIX = "users/"
QUEUE_PREFIX = "queue/"
SECRETS_PREFIX = "secrets/"
API_SECRET_KEY = f"{SECRETS_PREFIX}api"
"""The API's per-store secret (cursor signing): created once, shared by every API process."""

STATUS_NAME = "status.json"
INPUT_NAME = "input.csv"

MAX_USER_CHARS = 64
"""A user (tenant) name is 1 to this many characters of ``[A-Za-z0-9_-]`` (no dots: no ``..``)."""
MAX_FILE_CHARS = 64
"""An output file name is 1 to this many of ``[A-Za-z0-9_.-]``, not starting with ``.``."""
MAX_ATTEMPT_NUMBER = 1000
"""Attempt numbers run 1..this; the record refuses to go further (see ``_machine``)."""
DUE_DIGITS = 13
"""Width of the due time in marker keys: Unix milliseconds up to the year 2286 sort as text."""
NONCE_CHARS = 16
"""A marker nonce is this many lowercase hex digits (64 random bits)."""
MAX_DUE_MS = 10**DUE_DIGITS - 1

_USER = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_USER_CHARS}}}", re.ASCII)
_FILE = re.compile(rf"[A-Za-z0-9_-][A-Za-z0-9_.-]{{0,{MAX_FILE_CHARS - 1}}}", re.ASCII)
_SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)
_NONCE = re.compile(rf"[0-9a-f]{{{NONCE_CHARS}}}", re.ASCII)
_ATTEMPT = re.compile(r"attempt-([1-9][0-9]{0,3})", re.ASCII)
_DUE = re.compile(rf"[0-9]{{{DUE_DIGITS}}}", re.ASCII)
_MAX_KEY_CHARS = 256
"""No key of ours is longer; a longer one is refused before any regex runs."""


def check_user(user: object) -> str:
    """Return ``user`` if it is a valid user name, else raise ``InvalidTaskId``."""
    if not isinstance(user, str) or len(user) > MAX_USER_CHARS or _USER.fullmatch(user) is None:
        raise InvalidTaskId(f"malformed user name {str(user)[:MAX_USER_CHARS + 1]!r}")
    return user


def check_file_name(name: object) -> str:
    """Return ``name`` if it is a valid output file name, else raise ``InvalidTaskId``."""
    if not isinstance(name, str) or len(name) > MAX_FILE_CHARS or _FILE.fullmatch(name) is None:
        raise InvalidTaskId(f"malformed output file name {str(name)[:MAX_FILE_CHARS + 1]!r}")
    return name


def _check_attempt(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_ATTEMPT_NUMBER:
        raise InvalidTaskId(f"attempt number {n!r} is outside 1..{MAX_ATTEMPT_NUMBER}")
    return n


# --- building -------------------------------------------------------------------------------


def status_key(task_id: str) -> str:
    """``tasks/<inv(id)>/status.json``."""
    return f"{TASKS_PREFIX}{invert(parse_task_id(task_id))}/{STATUS_NAME}"


def input_key(task_id: str) -> str:
    """``inputs/<id>/input.csv``."""
    return f"{INPUTS_PREFIX}{parse_task_id(task_id)}/{INPUT_NAME}"


def output_prefix(task_id: str, attempt: int) -> str:
    """``outputs/<id>/attempt-<n>/``: everything attempt ``n`` wrote."""
    return f"{OUTPUTS_PREFIX}{parse_task_id(task_id)}/attempt-{_check_attempt(attempt)}/"


def output_key(task_id: str, attempt: int, name: str) -> str:
    """``outputs/<id>/attempt-<n>/<file>``."""
    return output_prefix(task_id, attempt) + check_file_name(name)


def idempotency_key(user: str, key: str) -> str:
    """``idem/<user>/<sha256(key)>``: the client's key hashed, so any bytes make a safe key."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{IDEM_PREFIX}{check_user(user)}/{digest}"


def user_prefix(user: str) -> str:
    """``users/<user>/``: list it for one user's tasks, newest first."""
    return f"{USERS_PREFIX}{check_user(user)}/"


def user_index_key(user: str, task_id: str) -> str:
    """``users/<user>/<inv(id)>``."""
    return user_prefix(user) + invert(parse_task_id(task_id))


def new_nonce() -> str:
    """A fresh marker nonce."""
    return secrets.token_hex(NONCE_CHARS // 2)


def marker_key(due_ms: int, task_id: str, nonce: str) -> str:
    """``queue/<due_ms:013d>_<id>_<nonce>``."""
    if isinstance(due_ms, bool) or not isinstance(due_ms, int) or not 0 <= due_ms <= MAX_DUE_MS:
        raise InvalidTaskId(f"due time {due_ms!r} does not fit {DUE_DIGITS} digits")
    if not isinstance(nonce, str) or _NONCE.fullmatch(nonce) is None:
        raise InvalidTaskId(f"malformed marker nonce {str(nonce)[:40]!r}")
    return f"{QUEUE_PREFIX}{due_ms:0{DUE_DIGITS}d}_{parse_task_id(task_id)}_{nonce}"


def due_bound(now_ms: int) -> str:
    """The smallest marker key that is not due at ``now_ms``: markers sorting below it are due."""
    return f"{QUEUE_PREFIX}{min(max(now_ms, 0), MAX_DUE_MS - 1) + 1:0{DUE_DIGITS}d}"


# --- parsing --------------------------------------------------------------------------------


class Marker(NamedTuple):
    """A parsed queue marker key."""

    due_ms: int
    task_id: str
    nonce: str


class OutputKey(NamedTuple):
    """A parsed output key."""

    task_id: str
    attempt: int
    name: str


def _split(key: object, prefix: str, parts: int) -> list[str]:
    if not isinstance(key, str) or len(key) > _MAX_KEY_CHARS or not key.startswith(prefix):
        raise InvalidTaskId(f"not a {prefix!r} key: {str(key)[:80]!r}")
    pieces = key[len(prefix) :].split("/")
    if len(pieces) != parts:
        raise InvalidTaskId(f"malformed {prefix!r} key: {key[:80]!r}")
    return pieces


def parse_status_key(key: object) -> str:
    """The task id of a ``tasks/<inv(id)>/status.json`` key."""
    inverted, name = _split(key, TASKS_PREFIX, 2)
    if name != STATUS_NAME:
        raise InvalidTaskId(f"malformed status key: {str(key)[:80]!r}")
    return parse_inverted_id(inverted)


def parse_input_key(key: object) -> str:
    """The task id of an ``inputs/<id>/input.csv`` key."""
    task_id, name = _split(key, INPUTS_PREFIX, 2)
    if name != INPUT_NAME:
        raise InvalidTaskId(f"malformed input key: {str(key)[:80]!r}")
    return parse_task_id(task_id)


def parse_output_key(key: object) -> OutputKey:
    """The task id, attempt and file name of an ``outputs/<id>/attempt-<n>/<file>`` key."""
    task_id, attempt, name = _split(key, OUTPUTS_PREFIX, 3)
    match = _ATTEMPT.fullmatch(attempt)
    if match is None:
        raise InvalidTaskId(f"malformed output key: {str(key)[:80]!r}")
    return OutputKey(parse_task_id(task_id), _check_attempt(int(match[1])), check_file_name(name))


def parse_idempotency_key(key: object) -> tuple[str, str]:
    """The user and the hex digest of an ``idem/<user>/<sha256>`` key."""
    user, digest = _split(key, IDEM_PREFIX, 2)
    if _SHA256.fullmatch(digest) is None:
        raise InvalidTaskId(f"malformed idempotency key: {str(key)[:80]!r}")
    return check_user(user), digest


def parse_user_index_key(key: object) -> tuple[str, str]:
    """The user and the task id of a ``users/<user>/<inv(id)>`` key."""
    user, inverted = _split(key, USERS_PREFIX, 2)
    return check_user(user), parse_inverted_id(inverted)


def parse_marker_key(key: object) -> Marker:
    """The due time, task id and nonce of a ``queue/<due>_<id>_<nonce>`` key."""
    (name,) = _split(key, QUEUE_PREFIX, 1)
    pieces = name.split("_")
    if len(pieces) != 3 or _DUE.fullmatch(pieces[0]) is None:
        raise InvalidTaskId(f"malformed marker key: {str(key)[:80]!r}")
    due, task_id, nonce = pieces
    if _NONCE.fullmatch(nonce) is None:
        raise InvalidTaskId(f"malformed marker key: {str(key)[:80]!r}")
    return Marker(int(due), parse_task_id(task_id), nonce)
