"""``ApiService``: what the routes do to the queue and the store, apart from HTTP.

The routes (``_routes``) parse the request and shape the answer; this class owns the calls:
who may see a task (``visible``: another user's task is ``TaskNotFound``, exactly like a
missing one), the idempotent create, the signing secret, presigned output links and the store
deadline. Every transition still goes through ``TaskQueue`` (one compare-and-set computed by
``_machine`` from the record it replaces), so the API re-checks each state itself under the
same rules as the workers; what this class reads first only picks the status code.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from minidb.batch import _keys
from minidb.batch._errors import TaskNotFound
from minidb.batch._ids import TaskIdGenerator
from minidb.batch._model import MAX_ATTEMPTS_LIMIT, TaskRecord, format_time
from minidb.batch._queue import TaskPage, TaskQueue
from minidb.batch._tasktypes import TaskTypeRegistry
from minidb.batch.api import _idempotency as idem
from minidb.batch.api._attached import ServerLink
from minidb.batch.api._cursor import decode_cursor, encode_cursor
from minidb.batch.api._tokens import Principal, TokenTable
from minidb.objstore import (
    PRESIGN_MAX_EXPIRES_S,
    AmbiguousWrite,
    NotFound,
    ObjectStore,
    PreconditionFailed,
    TransientError,
)

DEFAULT_PRESIGN_S = 900
"""Lifetime of an output's presigned URL, in seconds."""
DEFAULT_MAX_INPUT_BYTES = 100 << 20
"""Largest input CSV ``PUT /tasks/{id}/input`` accepts, in bytes (413 above)."""
MAX_CREATE_BODY_BYTES = 64 << 10
"""Largest ``POST /tasks`` body, in bytes (params are at most 4 KiB of JSON anyway)."""
STORE_DEADLINE_S = 20.0
"""Longest a request waits on the store before answering 503, in seconds: under the 30 s
every client is promised, with room for the answer (a hung S3 read times out at 30 s)."""
IDEMPOTENT_WAIT_S = 5.0
"""How long a request that lost an Idempotency-Key race waits for the winner's task to
appear before creating it itself (the winner may have crashed), in seconds."""
SECRET_BYTES = 32
"""Length of the per-store API secret, in bytes."""


@dataclasses.dataclass(frozen=True)
class ApiSettings:
    """Tunables of one API; every size in bytes, every time in seconds."""

    presign_s: int = DEFAULT_PRESIGN_S
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES
    store_deadline_s: float = STORE_DEADLINE_S
    cursor_secret: bytes | None = None
    """Signs cursors; default: the store's ``secrets/api`` object (made on first use)."""
    server: ServerLink = dataclasses.field(default_factory=ServerLink)
    """The minidb server the store browser and the server's figures read (``_attached``)."""

    def __post_init__(self) -> None:
        if not 1 <= self.presign_s <= PRESIGN_MAX_EXPIRES_S:
            raise ValueError(f"presign_s must be in 1..{PRESIGN_MAX_EXPIRES_S}")
        if self.max_input_bytes < 1:
            raise ValueError("max_input_bytes must be positive")
        if self.store_deadline_s <= 0:
            raise ValueError("store_deadline_s must be positive")


@dataclasses.dataclass
class ApiStatistics:
    """Counters of one API since it started."""

    tasks_created: int = 0
    idempotent_replays: int = 0
    inputs_uploaded: int = 0
    input_bytes: int = 0
    store_unavailable: int = 0


class ApiService:
    """The API's operations on one store (see the module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        tokens: TokenTable,
        *,
        settings: ApiSettings | None = None,
        queue: TaskQueue | None = None,
        registry: TaskTypeRegistry | None = None,
        wall_s: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.tokens = tokens
        self.settings = settings or ApiSettings()
        self.queue = queue or TaskQueue(store)
        self.registry = registry or TaskTypeRegistry()
        self._wall_s = wall_s
        self._ids = TaskIdGenerator()
        self._secret = self.settings.cursor_secret
        self._secret_lock = asyncio.Lock()
        self.stats = ApiStatistics()

    def statistics(self) -> ApiStatistics:
        return dataclasses.replace(self.stats)

    @contextlib.asynccontextmanager
    async def deadline(self) -> AsyncIterator[None]:
        """Bound the store calls of one request (``TimeoutError`` → 503)."""
        try:
            async with asyncio.timeout(self.settings.store_deadline_s):
                yield
        except TimeoutError:
            self.stats.store_unavailable += 1
            raise

    async def _get_or_none(self, key: str) -> bytes | None:
        try:
            return (await self.queue.with_retries(lambda: self.store.get(key))).data
        except NotFound:
            return None

    # --- the signing secret -----------------------------------------------------------------

    async def secret(self) -> bytes:
        """The per-store secret: read ``secrets/api``, or create it (put-if-absent, so racing
        API processes agree on one)."""
        if self._secret is not None:
            return self._secret
        async with self._secret_lock:
            while self._secret is None:
                found = await self._get_or_none(_keys.API_SECRET_KEY)
                if found is not None:
                    self._secret = bytes.fromhex(found.decode("ascii"))
                    break
                fresh = secrets.token_bytes(SECRET_BYTES).hex().encode()
                with contextlib.suppress(PreconditionFailed, AmbiguousWrite):
                    await self.queue.with_retries(
                        functools.partial(self.store.put_if_absent, _keys.API_SECRET_KEY, fresh)
                    )
                # Loop: read back whichever secret won.
        return self._secret

    # --- access -----------------------------------------------------------------------------

    def authenticate(self, token: str) -> Principal | None:
        return self.tokens.lookup(token)

    async def visible(self, who: Principal, task_id: str) -> TaskRecord:
        """The task, if ``who`` may see it; otherwise ``TaskNotFound`` as if it did not exist."""
        record = await self.queue.get(task_id)
        if not who.operator and record.created_by != who.user:
            raise TaskNotFound(task_id)
        return record

    # --- create -----------------------------------------------------------------------------

    async def create(
        self, who: Principal, request: Mapping[str, Any], key: str | None
    ) -> tuple[TaskRecord, bool]:
        """Create the task ``request`` describes; ``(record, True)`` if this call made it,
        ``(record, False)`` if an earlier request with the same ``key`` did."""
        if key is None:
            record = await self.queue.create(who.user, **_create_args(request))
            self.stats.tasks_created += 1
            return record, True
        digest = idem.body_hash(request)
        storage_key = _keys.idempotency_key(who.user, idem.check_key(key))
        found = await self._read_key(storage_key)
        won = False
        if found is None:
            mine = idem.new_record(self._ids.new(self.queue.now_ms()), digest)
            try:
                await self.store.put_if_absent(storage_key, idem.encode_record(mine))
                won = True
            except (PreconditionFailed, AmbiguousWrite, TransientError) as exc:
                # Refused (another request won) or unanswered: the stored record decides.
                found = await self._read_key(storage_key)
                if found is None:
                    raise TransientError("idempotency record unreadable", key=storage_key) from exc
                won = found.nonce == mine.nonce
            if won:
                found = mine
        assert found is not None
        idem.check_same(found, digest)
        if won:
            record = await self.queue.create(
                who.user, **_create_args(request), task_id=found.task_id
            )
            self.stats.tasks_created += 1
            return record, True
        self.stats.idempotent_replays += 1
        return await self._replay(who, request, found.task_id), False

    async def _read_key(self, storage_key: str) -> idem.KeyRecord | None:
        raw = await self._get_or_none(storage_key)
        return None if raw is None else idem.decode_record(raw)

    async def _replay(self, who: Principal, request: Mapping[str, Any], task_id: str) -> TaskRecord:
        """The task an earlier request with the same key named: wait briefly for its creator,
        then create it (same id, same request) in its place if it never appeared."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + IDEMPOTENT_WAIT_S
        pause = 0.01
        while True:
            try:
                return await self.queue.get(task_id)
            except TaskNotFound:
                if loop.time() >= give_up:
                    break
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.25)
        return await self.queue.create(who.user, **_create_args(request), task_id=task_id)

    # --- lists ------------------------------------------------------------------------------

    async def list_tasks(
        self, who: Principal, limit: int, cursor: str | None, *, user: str | None = None
    ) -> TaskPage:
        """A page of the tasks ``who`` may see (only ``user``'s, when given: the route lets
        only an operator name another user); the cursors in and out are signed ones, bound
        to the caller and the filter, so a cursor of one listing is refused by another."""
        secret = await self.secret()
        scope = who.user if user is None else f"{who.user} listing {user}"
        after = None if cursor is None else decode_cursor(secret, scope, cursor)
        if user is not None:
            assert who.operator or user == who.user
            page = await self.queue.list_tasks(user, limit=limit, cursor=after)
        elif who.operator:
            page = await self.queue.list_all(limit=limit, cursor=after)
        else:
            page = await self.queue.list_tasks(who.user, limit=limit, cursor=after)
        signed = None if page.cursor is None else encode_cursor(secret, scope, page.cursor)
        return TaskPage(page.tasks, signed)

    # --- outputs ----------------------------------------------------------------------------

    def output_links(self, record: TaskRecord, base_url: str) -> dict[str, Any]:
        """The output listing with a presigned GET URL per file (``base_url`` completes the
        ``file:`` backend's URLs, which this server itself serves under ``/files/``)."""
        assert record.output is not None
        expires_s = self.settings.presign_s
        expires_at = format_time((int(self._wall_s()) + expires_s) * 1000)
        files = []
        for file in record.output.files:
            key = _keys.output_key(record.id, record.output.attempt, file.name)
            url = self.store.presign_get(key, expires_s)
            if url.startswith("/"):
                url = base_url.rstrip("/") + url
            files.append({"name": file.name, "size": file.size, "url": url,
                          "expires_at": expires_at})
        return {"attempt": record.output.attempt, "files": files}


def _create_args(request: Mapping[str, Any]) -> dict[str, Any]:
    max_attempts = int(request["max_attempts"])
    assert 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT
    return {
        "task_type": request["type"], "params": request["params"], "name": request["name"],
        "max_attempts": max_attempts,
    }
