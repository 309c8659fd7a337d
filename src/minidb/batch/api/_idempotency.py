"""``Idempotency-Key`` of ``POST /tasks``: the key rules and the stored record (pure).

The record lives at ``idem/<user>/<sha256(key)>`` (``_keys.idempotency_key``) and is created
with put-if-absent, so of any number of racing requests with one key, in any number of API
processes, exactly one creates it and answers 201; the others read it and answer 200 with the
task it names (422 if their body differs). It names the task id *before* the task exists
(the winner creates the task next), so a winner that crashes in between leaves a key whose
task the next request with that key creates (``TaskQueue.create(task_id=...)`` is idempotent).

``body_hash`` is over the request as understood (canonical JSON of type, params, name and
max_attempts after defaults), so ``{"a":1, "b":2}`` and ``{"b":2,"a":1}`` are the same body.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
from collections.abc import Mapping
from typing import Any

from minidb.batch._errors import BatchError, InvalidTaskId
from minidb.batch._ids import parse_task_id

MAX_KEY_CHARS = 255
"""An ``Idempotency-Key`` is 1 to this many visible ASCII characters (Stripe's limit)."""
MAX_RECORD_BYTES = 1024
"""A stored key record larger than this is refused as not ours."""
NONCE_BYTES = 16
"""Random bytes telling our create of the record from another's (after an ambiguous write)."""


class InvalidIdempotencyKey(BatchError):
    """The header is empty, too long, or not visible ASCII: answer 400."""


class IdempotencyMismatch(BatchError):
    """The key was used before with a different body: answer 422."""


@dataclasses.dataclass(frozen=True, slots=True)
class KeyRecord:
    """What a used key remembers: the task it made and the hash of the body that made it."""

    task_id: str
    body_sha256: str
    nonce: str


def check_key(key: str) -> str:
    """``key`` if it is an acceptable ``Idempotency-Key``, else ``InvalidIdempotencyKey``."""
    if not 1 <= len(key) <= MAX_KEY_CHARS or not all("!" <= c <= "~" or c == " " for c in key):
        raise InvalidIdempotencyKey(
            f"Idempotency-Key must be 1-{MAX_KEY_CHARS} visible ASCII characters"
        )
    return key


def body_hash(request: Mapping[str, Any]) -> str:
    """The SHA-256 (hex) of the canonical JSON of a normalised create request."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def new_record(task_id: str, body_sha256: str) -> KeyRecord:
    return KeyRecord(parse_task_id(task_id), body_sha256, secrets.token_hex(NONCE_BYTES))


def encode_record(record: KeyRecord) -> bytes:
    return json.dumps(dataclasses.asdict(record), sort_keys=True).encode("ascii")


def decode_record(raw: bytes) -> KeyRecord:
    """The record stored under a key (``InvalidIdempotencyKey`` if it is not one of ours)."""
    try:
        if len(raw) > MAX_RECORD_BYTES:
            raise ValueError("too large")
        data = json.loads(raw)
        record = KeyRecord(
            parse_task_id(data["task_id"]), str(data["body_sha256"]), str(data["nonce"])
        )
    except (ValueError, KeyError, TypeError, InvalidTaskId):
        raise InvalidIdempotencyKey("the stored idempotency record is unreadable") from None
    return record


def check_same(record: KeyRecord, body_sha256: str) -> KeyRecord:
    """``record`` if it was made by the same body, else ``IdempotencyMismatch``."""
    if record.body_sha256 != body_sha256:
        raise IdempotencyMismatch("Idempotency-Key was already used with a different body")
    return record
