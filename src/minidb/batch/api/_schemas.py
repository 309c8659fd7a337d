"""The JSON shapes of the API as pydantic models: what ``/openapi.json`` documents.

Responses are built from ``TaskRecord.api_view`` (the stored record without the lease id),
not from these models; the models describe them (and the schemathesis test checks every
answer against them). ``TaskCreate`` and ``TtlChange`` are the JSON request bodies; they are
validated by hand in their routes (``_routes.create_task``, ``_store_routes.set_ttl``) so that
malformed JSON is 400 and a non-JSON body 415. The models after ``Me`` are those of the
attached server: the store browser and the server's figures.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from minidb.batch._model import MAX_ATTEMPTS_LIMIT, MAX_TASK_NAME_CHARS
from minidb.batch.api._keyview import MAX_TTL_SECONDS

State = Literal["created", "queued", "running", "succeeded", "failed", "cancelled"]


class TaskCreate(BaseModel):
    """``POST /tasks``: ``type`` and its ``params``; ``created_by`` comes from the token."""

    model_config = ConfigDict(extra="forbid", strict=True)

    type: str = Field(min_length=1, max_length=64)
    params: dict[str, Any] = Field(default_factory=dict)
    name: str = Field(default="", max_length=MAX_TASK_NAME_CHARS)
    max_attempts: int = Field(default=3, ge=1, le=MAX_ATTEMPTS_LIMIT)


class AttemptView(BaseModel):
    n: int
    worker: str
    started_at: str
    ended_at: str | None
    outcome: Literal["succeeded", "failed", "lease_expired", "released", "cancelled"] | None


class ProgressView(BaseModel):
    rows_done: int
    rows_ok: int
    rows_failed: int
    bytes_done: int
    bytes_total: int | None


class ErrorView(BaseModel):
    code: str
    message: str


class OutputFileView(BaseModel):
    name: str
    size: int


class OutputView(BaseModel):
    attempt: int
    files: list[OutputFileView]


class LeaseView(BaseModel):
    """The live lease, without its id (the fencing token stays with the worker)."""

    worker: str
    expires_at: str


class Task(BaseModel):
    """A task's status record (docs/batch.md, "status.json") without the lease id."""

    schema_version: int
    id: str
    type: str
    name: str
    params: dict[str, Any]
    state: State
    cancel_requested: bool
    attempt: int
    budget_from: int
    max_attempts: int
    attempts: list[AttemptView]
    progress: ProgressView
    result: dict[str, Any] | None
    error: ErrorView | None
    output: OutputView | None
    created_by: str
    created_at: str
    updated_at: str
    not_before: str | None
    lease: LeaseView | None
    queue_marker: str | None
    rev: int
    write_id: str
    recent_write_ids: list[str]


class TaskList(BaseModel):
    """``GET /tasks``: newest first; ``next_cursor`` fetches the next page (null: last)."""

    tasks: list[Task]
    next_cursor: str | None


class OutputLink(BaseModel):
    """One output file and a presigned URL that fetches it until ``expires_at``."""

    name: str
    size: int
    url: str
    expires_at: str


class OutputListing(BaseModel):
    """``GET /tasks/{id}/output``: the files of the attempt that succeeded."""

    attempt: int
    files: list[OutputLink]


class Problem(BaseModel):
    """RFC 9457 problem details (``application/problem+json``)."""

    type: str
    title: str
    status: int
    detail: str
    code: str


class Health(BaseModel):
    status: Literal["ok"]


class Me(BaseModel):
    """``GET /me``: who the token names."""

    user: str
    role: Literal["user", "operator"]


# --- the attached server: the store browser and the server's figures --------------------------

KeyEncoding = Literal["utf-8", "hex"]


class Bucket(BaseModel):
    """One bucket (a database) of ``INFO keyspace``; ``expires`` counts its keys with a TTL."""

    name: str
    keys: int
    expires: int


class BucketList(BaseModel):
    """``GET /store/buckets``: every bucket with keys, numbers first, then names."""

    buckets: list[Bucket]
    truncated: bool


class KeyItem(BaseModel):
    """One key of a listing: its text (or hex, see ``encoding``), type, size in bytes (null
    for a type without one) and milliseconds to live (null: no expiry)."""

    key: str
    encoding: KeyEncoding
    type: str
    size: int | None
    ttl_ms: int | None


class KeyPage(BaseModel):
    """``GET /store/keys``: one page of a ``SCAN``; ``cursor`` "0" means the scan is done."""

    bucket: str
    pattern: str
    keys: list[KeyItem]
    cursor: str


class ValueView(BaseModel):
    """A value's first bytes as text, or as hex when it is not text; ``length`` is the whole
    value's, ``truncated`` says the rest is only in the download."""

    encoding: Literal["text", "hex"]
    data: str
    length: int
    truncated: bool


class KeyDetail(BaseModel):
    """``GET /store/key`` (and the answer of a change): the key and a preview of its value."""

    bucket: str
    key: str
    encoding: KeyEncoding
    type: str
    size: int | None
    ttl_ms: int | None
    value: ValueView | None


class TtlChange(BaseModel):
    """``PUT /store/ttl``: seconds to live from now, or null to remove the expiry."""

    model_config = ConfigDict(extra="forbid", strict=True)

    seconds: int | None = Field(ge=1, le=MAX_TTL_SECONDS)


class Replication(BaseModel):
    """Log shipping (``shipping``: records written, not yet shipped) or following
    (``replica``: records shipped, not yet applied)."""

    role: Literal["shipping", "replica"]
    lag_seconds: float
    lag_records: int


class StatsSources(BaseModel):
    info: bool
    metrics: bool


class ServerStats(BaseModel):
    """``GET /server/stats``: one reading of the attached server (counters are totals since
    it started; the page turns them into rates)."""

    unix_ms: int
    uptime_s: int
    commands_total: int
    commands: dict[str, int]
    connections: int
    memory_bytes: int
    keys: int
    wal_appends: int | None
    wal_syncs: int | None
    replication: Replication | None
    probe_ms: list[float]
    sources: StatsSources
