"""Generations and fencing: claiming a prefix at start, and noticing a takeover later.

Owns the claim protocol of docs/replication.md ("Generations and fencing") and the data
directory's ``REPLICATION`` file (the generation this directory last shipped as). The pointer
``current`` is the only mutable object in the layout; it is created with If-None-Match and
replaced only by compare-and-set, so a claim is safe with S3's conditional writes alone.

Theory of operation. ``claim`` reads ``current`` and the local file; a pointer naming another
directory's generation is refused (``GenerationConflict``) unless ``takeover``. The new
generation's record is created first (If-None-Match: a drawn id is unique), then the pointer is
moved to it from the ETag just read: a ``PreconditionFailed`` means someone else moved it in
between, so the record is deleted again and the whole decision is taken afresh. An
``AmbiguousWrite`` is settled by reading the pointer back (its ``write_id`` is ours or not).
``check`` is the shipper's fence: one GET of ``current`` before each upload round.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import secrets
import socket
from collections.abc import Callable

from minidb.objstore import AmbiguousWrite, NotFound, ObjectStore, PreconditionFailed
from minidb.replication._errors import Fenced, GenerationConflict, ReplicationError
from minidb.replication._layout import (
    CURRENT_KEY,
    CurrentPointer,
    GenerationRecord,
    generation_id,
)

logger = logging.getLogger("minidb.replication")

LOCAL_FILE = "REPLICATION"
"""The data directory's record of the generation it last shipped as (JSON, written atomically)."""

CLAIM_ATTEMPTS = 5
"""Times a claim starts over after losing a race for the pointer before it gives up."""


@dataclasses.dataclass(frozen=True, slots=True)
class Claim:
    """A won claim: ``generation`` is current, ``parent`` the one it replaced (or ``None``)."""

    generation: str
    parent: str | None
    started_at_ms: int
    takeover: bool


def read_local(data_dir: str) -> str | None:
    """The generation the data directory last shipped as, or ``None``."""
    try:
        with open(os.path.join(data_dir, LOCAL_FILE), "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ReplicationError(f"cannot read {LOCAL_FILE} in {data_dir}: {exc}") from exc
    value = doc.get("generation") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


def write_local(data_dir: str, generation: str, url: str) -> None:
    """Record ``generation`` as this directory's (temp file, fsync, rename, fsync dir)."""
    path = os.path.join(data_dir, LOCAL_FILE)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(json.dumps({"generation": generation, "url": url}).encode())
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def read_current(store: ObjectStore) -> tuple[CurrentPointer, str] | None:
    """The pointer and its ETag, or ``None`` if the prefix has none yet."""
    try:
        obj = await store.get(CURRENT_KEY)
    except NotFound:
        return None
    return CurrentPointer.from_json(obj.data), obj.etag


async def claim(
    store: ObjectStore,
    data_dir: str,
    *,
    takeover: bool,
    wall_ms: Callable[[], int],
    url: str,
) -> Claim:
    """Make a new generation the prefix's current one, or raise ``GenerationConflict``."""
    mine = read_local(data_dir)
    for _ in range(CLAIM_ATTEMPTS):
        found = await read_current(store)
        owner = found[0].generation if found else None
        if owner is not None and owner != mine and not takeover:
            raise GenerationConflict(
                f"{store.endpoint} is shipped to by generation {owner}, not by this data"
                f" directory; start with --takeover to fence that server and take over",
                generation=None, owner=owner,
            )
        started = wall_ms()
        record = GenerationRecord(
            generation_id(started, secrets.randbits(32)), owner, started,
            socket.gethostname(), os.getpid(), takeover=owner is not None and owner != mine,
        )
        try:
            await store.put_if_absent(record.key, record.to_json())
        except PreconditionFailed:
            continue  # the id was drawn before: draw again
        pointer = CurrentPointer(
            record.generation, (found[0].rev + 1) if found else 1, started, secrets.token_hex(8)
        )
        if await _move_pointer(store, pointer, found[1] if found else None):
            write_local(data_dir, record.generation, url)
            return Claim(record.generation, owner, started, record.takeover)
        with contextlib.suppress(Exception):  # a stray record is harmless, only untidy
            await store.delete(record.key)
    raise ReplicationError(f"could not claim {store.endpoint}: the pointer kept moving")


async def _move_pointer(store: ObjectStore, pointer: CurrentPointer, etag: str | None) -> bool:
    try:
        if etag is None:
            await store.put_if_absent(CURRENT_KEY, pointer.to_json())
        else:
            await store.compare_and_set(CURRENT_KEY, pointer.to_json(), etag)
        return True
    except PreconditionFailed:
        return False
    except AmbiguousWrite:
        found = await read_current(store)
        return found is not None and found[0].write_id == pointer.write_id


async def check(store: ObjectStore, generation: str) -> None:
    """Raise ``Fenced`` unless ``generation`` is still the prefix's current one."""
    found = await read_current(store)
    owner = found[0].generation if found else None
    if owner != generation:
        raise Fenced(
            f"generation {generation} was taken over by {owner}: shipping stops",
            generation=generation, by=owner,
        )
