"""RFC 9457 problem details: the one place an error becomes an HTTP answer.

Every error the API sends is ``application/problem+json``::

    {"type": "about:blank", "title": "Not Found", "status": 404, "detail": "no task ..."}

plus ``code`` (a stable token such as ``not_found``, ``conflict``) for clients that branch on
it. ``install`` replaces FastAPI's own bodies (``HTTPException``, request validation, unknown
routes, 405) and translates the batch and object-store errors, so a route raises what it means
and this module decides the status:

==========================================  ======  ========================================
``ApiProblem``                              its own
``TaskNotFound``, ``InvalidTaskId``         404     also another user's task (never told apart)
``IllegalTransition``                       409     the task's state forbids it
``TaskTypeError``                           422     unknown type, bad params
``InvalidCursor``, ``InvalidIdempotencyKey``  400
``IdempotencyMismatch``                     422
``Contended``, any ``ObjectStoreError``     503     with ``Retry-After``: the store is the
                                                    trouble, trying later can succeed
``BadStoreRequest``                         400     its own code (``invalid_bucket`` ...)
``NotAttached``                             503     ``not_attached``: no ``--minidb-resp``
``ServerUnavailable``                       503     ``server_unavailable``, ``Retry-After``
``RespError`` (the server refused)          409     ``READONLY`` (a replica): ``read_only``
                                            503     busy, read-only store, not logged, AUTH
                                            422     anything else: ``server_refused``
request validation                          422     (400 for the query string, a bad limit)
==========================================  ======  ========================================

Theory: 5xx other than 503 means a bug; the schemathesis test treats any as a failure.
"""

from __future__ import annotations

import http
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from minidb.batch._errors import (
    Contended,
    IllegalTransition,
    InvalidTaskId,
    TaskNotFound,
    TaskTypeError,
)
from minidb.batch.api._attached import NotAttached, ServerUnavailable
from minidb.batch.api._cursor import InvalidCursor
from minidb.batch.api._idempotency import IdempotencyMismatch, InvalidIdempotencyKey
from minidb.batch.api._keyview import BadStoreRequest
from minidb.client import RespError
from minidb.errors import MinidbError
from minidb.objstore import ObjectStoreError, PresignError

log = logging.getLogger("minidb.batch.api")

PROBLEM_JSON = "application/problem+json"
RETRY_AFTER_S = 1
"""``Retry-After`` of a 503, in seconds: the store retries already ran; try again soon."""


class ApiProblem(MinidbError):
    """An error with its HTTP status; ``code`` is the stable token, ``headers`` extra ones."""

    def __init__(
        self, status: int, detail: str, *, code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.code = code or _default_code(status)
        self.headers = dict(headers or {})


DEFAULT_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
    415: "unsupported_media_type", 422: "unprocessable", 500: "internal",
    503: "unavailable",
}
"""``code`` of a problem that names none: fixed here, because the reason phrases behind the
``title`` change between Python versions (413 and 422 were renamed in 3.13)."""


def _default_code(status: int) -> str:
    return DEFAULT_CODES.get(status) or f"http_{status}"


def problem(
    status: int, detail: str, *, code: str | None = None,
    headers: Mapping[str, str] | None = None, extra: Mapping[str, Any] | None = None,
) -> Response:
    """The problem+json response."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": http.HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "code": code or _default_code(status),
    }
    if extra:
        body.update(extra)
    return JSONResponse(body, status_code=status, headers=dict(headers or {}),
                        media_type=PROBLEM_JSON)


def unauthorized(detail: str = "a valid bearer token is required") -> ApiProblem:
    return ApiProblem(401, detail, code="unauthorized", headers={"WWW-Authenticate": "Bearer"})


def translate(exc: Exception) -> ApiProblem | None:
    """The problem an exception stands for, or None for a bug (answered 500 by the caller)."""
    if isinstance(exc, ApiProblem):
        return exc
    if isinstance(exc, TaskNotFound | InvalidTaskId):
        return ApiProblem(404, "no such task", code="not_found")
    if isinstance(exc, IllegalTransition):
        return ApiProblem(409, str(exc), code="conflict")
    if isinstance(exc, TaskTypeError):
        return ApiProblem(422, str(exc), code="invalid_task")
    if isinstance(exc, InvalidCursor):
        return ApiProblem(400, str(exc), code="invalid_cursor")
    if isinstance(exc, InvalidIdempotencyKey):
        return ApiProblem(400, str(exc), code="invalid_idempotency_key")
    if isinstance(exc, IdempotencyMismatch):
        return ApiProblem(422, str(exc), code="idempotency_key_reused")
    if isinstance(exc, BadStoreRequest):
        return ApiProblem(400, exc.detail, code=exc.code)
    if isinstance(exc, NotAttached):
        return ApiProblem(503, str(exc), code="not_attached")
    if isinstance(exc, ServerUnavailable):
        return ApiProblem(503, str(exc), code="server_unavailable",
                          headers={"Retry-After": str(RETRY_AFTER_S)})
    if isinstance(exc, RespError):
        return _refused(exc)
    if isinstance(exc, PresignError):
        return ApiProblem(403, "the URL is invalid or has expired", code="forbidden")
    if isinstance(exc, Contended | ObjectStoreError | TimeoutError):
        return ApiProblem(
            503, "the task store is unavailable; try again", code="store_unavailable",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    return None


_SERVER_TROUBLE = ("ERR busy", "ERR read-only", "ERR not logged", "ERR store unavailable",
                   "NOAUTH", "WRONGPASS")
"""Error replies that say the server cannot serve now (or refused the API's password), not
that the request was wrong."""


def _refused(exc: RespError) -> ApiProblem:
    """The problem of an error reply of the attached server."""
    detail = f"the minidb server refused: {exc.reason}"[:300]
    if exc.code == "READONLY":
        return ApiProblem(409, detail, code="read_only")
    if exc.reason.startswith(_SERVER_TROUBLE):
        return ApiProblem(503, detail, code="server_unavailable",
                          headers={"Retry-After": str(RETRY_AFTER_S)})
    return ApiProblem(422, detail, code="server_refused")


def _validation_status(exc: RequestValidationError) -> int:
    # The query string (a limit out of range) is a bad request; a body that parsed as JSON
    # but has the wrong shape is unprocessable.
    locations = {str(error.get("loc", ("",))[0]) for error in exc.errors()}
    return 400 if locations & {"query", "path", "header"} else 422


def _validation_detail(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


_PROBLEM_CONTENT = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}


def document(schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document as the API answers: every 4xx/5xx is ``Problem`` in
    problem+json (FastAPI declares its own 422 body and plain JSON); changed in place."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            for status, response in responses.items():
                if status[0] in "45":
                    response["content"] = _PROBLEM_CONTENT
                    if status == "422":
                        response["description"] = "Unprocessable Content"
    components = schema.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    return schema


def install(app: FastAPI) -> None:
    """Make every error of ``app`` a problem+json answer (and document it so)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    async def on_http(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers or {})
        detail = exc.detail if isinstance(exc.detail, str) else http.HTTPStatus(
            exc.status_code).phrase
        return problem(exc.status_code, detail, headers=headers)

    async def on_validation(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return problem(_validation_status(exc), _validation_detail(exc), code="invalid_request")

    async def on_error(request: Request, exc: Exception) -> Response:
        found = translate(exc)
        if found is None:
            log.exception("unexpected error in %s %s", request.method, request.url.path)
            return problem(500, "internal error", code="internal")
        if found.status == 503:
            log.warning("%s in %s %s: %s", found.code.replace("_", " "), request.method,
                        request.url.path, type(exc).__name__)
        return problem(found.status, found.detail, code=found.code, headers=found.headers)

    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(MinidbError, on_error)
    app.add_exception_handler(TimeoutError, on_error)
    app.add_exception_handler(Exception, on_error)
