"""The JSON shapes of the API as pydantic models: what ``/openapi.json`` documents.

Responses are built from ``TaskRecord.api_view`` (the stored record without the lease id),
not from these models; the models describe them (and the schemathesis test checks every
answer against them). ``TaskCreate`` is the one request body; it is validated by hand in the
route (``_routes.create_task``) so that malformed JSON is 400 and a non-JSON body 415.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from minidb.batch._model import MAX_ATTEMPTS_LIMIT, MAX_TASK_NAME_CHARS

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
