"""The routes of the control API: parse the request, call ``ApiService``, shape the answer.

Paths, status codes and JSON shapes are the contract of docs/batch-api.md. A route raises
what went wrong (``ApiProblem`` or a batch / store error) and ``_problem`` picks the answer.
Task ids in paths are plain strings in the schema and checked by ``parse_task_id`` before
any key is built, so ``..``, encoded slashes, NUL or a 5000-character id are a 404 that
touched nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from starlette.responses import JSONResponse, Response, StreamingResponse

from minidb.batch._errors import TaskTypeError
from minidb.batch._ids import parse_task_id
from minidb.batch._keys import MAX_USER_CHARS
from minidb.batch._model import TERMINAL
from minidb.batch._queue import LIST_LIMIT_MAX
from minidb.batch.api._cursor import MAX_CURSOR_CHARS
from minidb.batch.api._problem import ApiProblem, unauthorized
from minidb.batch.api._schemas import (
    Health,
    Me,
    OutputListing,
    Problem,
    Task,
    TaskCreate,
    TaskList,
)
from minidb.batch.api._service import MAX_CREATE_BODY_BYTES, ApiService
from minidb.batch.api._tokens import Principal
from minidb.objstore import FileStore, NotFound, PreconditionFailed

router = APIRouter()
USER_PATTERN = rf"^[A-Za-z0-9_-]{{1,{MAX_USER_CHARS}}}$"
"""A user name in a query (the tokens file's rule, ``_keys.check_user``)."""
bearer = HTTPBearer(auto_error=False, description="a token of the --tokens file")


def _problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error answers of a route (``_problem.document`` makes them problem+json)."""
    return {status: {"model": Problem} for status in (401, 503, *statuses)}


def service(request: Request) -> ApiService:
    svc: ApiService = request.app.state.service
    return svc


def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The caller named by ``Authorization: Bearer TOKEN`` (401 without a valid one)."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise unauthorized()
    who = service(request).authenticate(credentials.credentials)
    if who is None:
        raise unauthorized("the bearer token is not valid")
    request.state.user = who.user  # for the access log: the user, never the token
    return who


Svc = Annotated[ApiService, Depends(service)]
Who = Annotated[Principal, Depends(principal)]


def _task(record: Any, status: int, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(record.api_view(), status_code=status, headers=headers)


def _task_id(value: str) -> str:
    parse_task_id(value)  # InvalidTaskId -> 404
    return value


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiProblem(413, f"the body is larger than {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiProblem(413, f"the body is larger than {limit} bytes")
    return bytes(body)


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/")
                                          and media.endswith("+json"))


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing duplicate names (which one would count is up to the parser)."""
    data = dict(pairs)
    if len(data) != len(pairs):
        raise ValueError("duplicate name in a JSON object")
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Python's json would accept NaN and Infinity


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body: 415 if it is not JSON, 413 over ``limit`` bytes, 400 if it
    does not parse (duplicate names, NaN and Infinity included)."""
    if not _is_json(request.headers.get("content-type")):
        raise ApiProblem(415, "the body must be application/json", code="unsupported_media_type")
    raw = await _read_body(request, limit)
    try:
        return json.loads(raw, object_pairs_hook=_strict_object, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError):
        raise ApiProblem(400, "the body is not valid JSON", code="malformed_json") from None


_CREATE_BODY = {
    "required": True,
    "content": {"application/json": {"schema": TaskCreate.model_json_schema()}},
}


@router.post(
    "/tasks", status_code=201, response_model=Task, summary="Create a task",
    responses={200: {"model": Task, "description": "the task an earlier request with this "
                     "Idempotency-Key created"}, **_problems(400, 413, 415, 422)},
    openapi_extra={"requestBody": _CREATE_BODY},
)
async def create_task(
    request: Request, svc: Svc, who: Who,
    idempotency_key: Annotated[str | None, Header(max_length=255)] = None,
) -> Response:
    data = await read_json(request, MAX_CREATE_BODY_BYTES)
    try:
        body = TaskCreate.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise ApiProblem(422, f"{where}: {first.get('msg')}", code="invalid_task") from None
    params = svc.registry.validate(body.type, body.params)
    normalised = {"type": body.type, "params": params, "name": body.name,
                  "max_attempts": body.max_attempts}
    async with svc.deadline():
        record, created = await svc.create(who, normalised, idempotency_key)
    return _task(record, 201 if created else 200, {"Location": f"/tasks/{record.id}"})


@router.put(
    "/tasks/{task_id}/input", status_code=204, summary="Upload the input CSV",
    responses=_problems(404, 409, 413),
    openapi_extra={"requestBody": {"content": {"text/csv": {"schema": {
        "type": "string", "format": "binary"}}}}},
)
async def put_input(task_id: str, request: Request, svc: Svc, who: Who) -> Response:
    limit = svc.settings.max_input_bytes
    declared = request.headers.get("content-length")
    async with svc.deadline():
        record = await svc.visible(who, _task_id(task_id))
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiProblem(413, f"the input is larger than {limit} bytes")
    if record.state != "created":
        raise ApiProblem(409, f"the task is {record.state}: input can only be added before "
                         "submit", code="conflict")
    received = 0

    async def limited() -> AsyncIterator[bytes]:
        # Each chunk goes straight to the store (a temp file, an S3 part): the input is
        # never whole in memory, and the limit cuts an over-long body short.
        nonlocal received
        async for chunk in request.stream():
            received += len(chunk)
            if received > limit:
                raise ApiProblem(413, f"the input is larger than {limit} bytes")
            if chunk:
                yield chunk

    try:
        await svc.queue.put_input(record.id, limited())
    except PreconditionFailed:
        raise ApiProblem(409, "the input was already uploaded", code="conflict") from None
    svc.stats.inputs_uploaded += 1
    svc.stats.input_bytes += received
    return Response(status_code=204)


@router.post(
    "/tasks/{task_id}/submit", status_code=202, response_model=Task, summary="Queue the task",
    responses={200: {"model": Task, "description": "already queued or running"},
               **_problems(404, 409, 422)},
)
async def submit_task(task_id: str, svc: Svc, who: Who) -> Response:
    async with svc.deadline():
        record = await svc.visible(who, _task_id(task_id))
        if record.state in TERMINAL:
            raise ApiProblem(409, f"the task is {record.state}", code="conflict")
        if record.state == "running":
            return _task(record, 200)
        if record.state == "queued":
            return _task(await svc.queue.submit(record.id), 200)
        try:
            needs_input = svc.registry.get(record.type).needs_input
        except TaskTypeError:
            needs_input = False  # a type this process does not know: its workers decide
        if needs_input and not await svc.queue.has_input(record.id):
            raise ApiProblem(422, "upload the input before submitting", code="input_missing")
        return _task(await svc.queue.submit(record.id), 202)


@router.get(
    "/tasks", response_model=TaskList, summary="List tasks, newest first",
    responses=_problems(400, 403),
)
async def list_tasks(
    svc: Svc, who: Who,
    limit: Annotated[int, Query(ge=1, le=LIST_LIMIT_MAX)] = 20,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
    user: Annotated[str | None, Query(
        pattern=USER_PATTERN, description="only this user's tasks (operators; a user may "
        "name only itself)")] = None,
) -> Response:
    if user is not None and user != who.user and not who.operator:
        raise ApiProblem(403, "only operators list another user's tasks", code="forbidden")
    async with svc.deadline():
        page = await svc.list_tasks(who, limit, cursor, user=user)
    return JSONResponse({"tasks": [t.api_view() for t in page.tasks],
                         "next_cursor": page.cursor})


@router.get("/tasks/{task_id}", response_model=Task, summary="One task",
            responses=_problems(404))
async def get_task(task_id: str, svc: Svc, who: Who) -> Response:
    async with svc.deadline():
        return _task(await svc.visible(who, _task_id(task_id)), 200)


@router.post("/tasks/{task_id}/retry", status_code=202, response_model=Task,
             summary="Run a failed or cancelled task again", responses=_problems(404, 409))
async def retry_task(task_id: str, svc: Svc, who: Who) -> Response:
    async with svc.deadline():
        record = await svc.visible(who, _task_id(task_id))
        return _task(await svc.queue.retry(record.id), 202)


@router.post(
    "/tasks/{task_id}/cancel", response_model=Task, summary="Cancel the task",
    responses={202: {"model": Task, "description": "running: the worker stops it"},
               **_problems(404, 409)},
)
async def cancel_task(task_id: str, svc: Svc, who: Who) -> Response:
    async with svc.deadline():
        record = await svc.visible(who, _task_id(task_id))
        if record.state in ("succeeded", "failed"):
            raise ApiProblem(409, f"the task is {record.state}", code="conflict")
        done = await svc.queue.cancel(record.id)
        return _task(done, 202 if done.state == "running" else 200)


@router.get("/tasks/{task_id}/output", response_model=OutputListing,
            summary="The output files, with presigned URLs", responses=_problems(404, 409))
async def get_output(task_id: str, request: Request, svc: Svc, who: Who) -> Response:
    async with svc.deadline():
        record = await svc.visible(who, _task_id(task_id))
    if record.output is None:
        raise ApiProblem(409, f"the task is {record.state} and has no output yet",
                         code="no_output")
    return JSONResponse(svc.output_links(record, str(request.base_url)))


@router.get("/me", response_model=Me, summary="Who the token names", responses=_problems())
async def me(who: Who) -> Response:
    return JSONResponse({"user": who.user, "role": who.role})


@router.get("/healthz", response_model=Health, summary="Liveness (no token needed)")
async def healthz() -> Response:
    return JSONResponse({"status": "ok"})


@router.get(
    "/files/{key:path}", summary="A presigned file: URL (file: backend only)",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/octet-stream": {
        "schema": {"type": "string", "format": "binary"}}}},
        403: {"model": Problem}, 404: {"model": Problem}},
)
async def get_file(key: str, request: Request, svc: Svc) -> Response:
    store = svc.store
    if not isinstance(store, FileStore):
        raise ApiProblem(404, "presigned file URLs are served only for a file: store")
    raw_path = request.scope.get("raw_path") or request.url.path.encode()
    path = raw_path.decode("ascii", "replace")
    allowed = store.verify_presigned("GET", path, request.url.query)  # PresignError -> 403
    try:
        reader = await store.open_read(allowed)
    except NotFound:
        raise ApiProblem(404, "no such file") from None

    async def body() -> AsyncIterator[bytes]:
        async with reader:
            async for chunk in reader:
                yield chunk

    return StreamingResponse(body(), media_type="application/octet-stream",
                             headers={"Content-Length": str(reader.size)})
