"""``ApiClient``: a small synchronous client of the batch control API (docs/batch-api.md).

It is what the scripts CLI (``minidb batch submit/ls/show/cancel/retry/output``) talks through:
one method per endpoint, the task JSON returned as the API sent it (a dict), and every failure
raised as one ``ApiError`` carrying the HTTP status and the RFC 9457 ``title``/``detail`` of the
problem document, or ``status`` None when the API could not be reached at all. That is the one
place where httpx's exceptions are translated.

Synchronous because its callers are one-shot commands: a blocking client over httpx's
connection pool is simpler than a loop, and the CLI's waiting is a poll every fraction of a
second. Uploads are streamed from the open file (``PUT /tasks/{id}/input`` takes the body as it
comes), downloads are streamed to disk; neither holds a file in memory.

Presigned output URLs are fetched without the bearer token: they carry their own signature, and
an S3 URL must not get our ``Authorization`` header (S3 refuses a request authenticated twice,
and the token must never leave for another host).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Final, cast
from urllib.parse import quote, urljoin

import httpx

from minidb.batch._errors import BatchError

URL_ENV: Final = "MINIDB_BATCH_URL"
"""Where the CLI finds the API's base URL when ``--url`` is not given."""
TOKEN_ENV: Final = "MINIDB_BATCH_TOKEN"
"""Where the CLI finds the bearer token when ``--token`` is not given."""
DEFAULT_URL: Final = "http://127.0.0.1:8080"
"""The API's address under ``minidb up`` with its default ports."""
REQUEST_TIMEOUT_S: Final = 30.0
"""One request (connect, each read, each write) may take this long; the API answers 503 within
30 s when its store is down, so this never cuts a real answer short."""
UPLOAD_CHUNK_BYTES: Final = 256 * 1024
"""Bytes read from the input file per chunk of the streamed upload."""
DOWNLOAD_CHUNK_BYTES: Final = 256 * 1024
"""Bytes written to disk per chunk of a streamed download."""


class ApiError(BatchError):
    """The API refused a request (``status`` set) or could not be reached (``status`` None)."""

    def __init__(
        self, message: str, *, status: int | None = None, title: str | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.detail = detail


def _problem(response: httpx.Response) -> ApiError:
    """The ``ApiError`` of a non-2xx response, from its problem+json body when it has one."""
    title: str | None = None
    detail: str | None = None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        title = body.get("title") if isinstance(body.get("title"), str) else None
        detail = body.get("detail") if isinstance(body.get("detail"), str) else None
    reason = detail or title or response.reason_phrase or "error"
    return ApiError(
        f"{response.request.method} {response.request.url.path}: {response.status_code} {reason}",
        status=response.status_code, title=title, detail=detail,
    )


def _chunks(file: IO[bytes]) -> Iterator[bytes]:
    while chunk := file.read(UPLOAD_CHUNK_BYTES):
        yield chunk


class ApiClient:
    """One API (``base_url``) as one user (``token``); use as a context manager or ``close()``."""

    def __init__(
        self, base_url: str, token: str, *, timeout: float = REQUEST_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self._http = httpx.Client(
            base_url=self.base_url, timeout=timeout, transport=transport,
            headers={"Authorization": f"Bearer {token}"},
        )
        # Downloads of presigned URLs: no token, possibly another host.
        self._plain = httpx.Client(timeout=timeout, transport=transport)

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()
        self._plain.close()

    # --- the one request path -----------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(f"{method} {self.base_url}{path}: {exc or type(exc).__name__}") from exc
        if response.is_error:
            raise _problem(response)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self._request(method, path, **kwargs)
        try:
            body = response.json()
        except ValueError as exc:
            raise ApiError(f"{method} {path}: the answer is not JSON",
                           status=response.status_code) from exc
        if not isinstance(body, dict):
            raise ApiError(f"{method} {path}: the answer is not a JSON object",
                           status=response.status_code)
        return cast(dict[str, Any], body)

    @staticmethod
    def _task_path(task_id: str, suffix: str = "") -> str:
        # quote with safe="": an id can never add a path segment, whatever the user typed.
        return f"tasks/{quote(task_id, safe='')}{suffix}"

    # --- endpoints ------------------------------------------------------------------------------

    def create(
        self, task_type: str, params: dict[str, Any] | None = None, *, name: str | None = None,
        max_attempts: int | None = None, idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """``POST /tasks``: a new task in ``created`` (or the one this key already made)."""
        body: dict[str, Any] = {"type": task_type}
        if params is not None:
            body["params"] = params
        if name is not None:
            body["name"] = name
        if max_attempts is not None:
            body["max_attempts"] = max_attempts
        headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
        return self._json("POST", "tasks", json=body, headers=headers)

    def put_input(self, task_id: str, file: IO[bytes]) -> None:
        """``PUT /tasks/{id}/input``: stream ``file`` (open in binary mode) as the input."""
        headers = {"Content-Type": "text/csv"}
        try:
            size = os.fstat(file.fileno()).st_size - file.tell()
        except (OSError, ValueError, AttributeError):
            size = None
        if size is not None:
            # A known length lets the API refuse an oversized input (413) before any upload.
            headers["Content-Length"] = str(size)
        self._request("PUT", self._task_path(task_id, "/input"), content=_chunks(file),
                      headers=headers)

    def submit(self, task_id: str) -> dict[str, Any]:
        """``POST /tasks/{id}/submit``: queue it."""
        return self._json("POST", self._task_path(task_id, "/submit"))

    def get(self, task_id: str) -> dict[str, Any]:
        """``GET /tasks/{id}``."""
        return self._json("GET", self._task_path(task_id))

    def list(self, *, limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        """``GET /tasks``: ``{"tasks": [...newest first], "next_cursor": str | None}``."""
        query: dict[str, str | int] = {}
        if limit is not None:
            query["limit"] = limit
        if cursor is not None:
            query["cursor"] = cursor
        return self._json("GET", "tasks", params=query)

    def cancel(self, task_id: str) -> dict[str, Any]:
        """``POST /tasks/{id}/cancel``."""
        return self._json("POST", self._task_path(task_id, "/cancel"))

    def retry(self, task_id: str) -> dict[str, Any]:
        """``POST /tasks/{id}/retry``."""
        return self._json("POST", self._task_path(task_id, "/retry"))

    def output(self, task_id: str) -> dict[str, Any]:
        """``GET /tasks/{id}/output``: ``{"attempt", "files": [{"name","size","url",...}]}``."""
        return self._json("GET", self._task_path(task_id, "/output"))

    def absolute(self, url: str) -> str:
        """A file URL as given by ``output`` made absolute (the API may answer a path)."""
        return urljoin(self.base_url, url)

    def download(self, url: str, dest: Path) -> int:
        """Stream the file at ``url`` (presigned; no token sent) to ``dest``; its size in bytes.

        Written to ``dest`` + ``.part`` and renamed, so an interrupted download never leaves a
        file that looks complete.
        """
        part = dest.with_name(dest.name + ".part")
        size = 0
        try:
            with self._plain.stream("GET", self.absolute(url)) as response:
                if response.is_error:
                    response.read()
                    raise _problem(response)
                with part.open("wb") as out:
                    for chunk in response.iter_bytes(DOWNLOAD_CHUNK_BYTES):
                        out.write(chunk)
                        size += len(chunk)
            part.replace(dest)
        except httpx.HTTPError as exc:
            raise ApiError(f"GET {dest.name}: {exc or type(exc).__name__}") from exc
        finally:
            part.unlink(missing_ok=True)
        return size
