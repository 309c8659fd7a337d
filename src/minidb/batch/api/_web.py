"""The web page's shell: ``GET /`` and ``GET /static/{name}``, without a token.

The page's files live in the package ``minidb.batch.web`` (``index.html``, ``app.js``,
``style.css``) and are read with ``importlib.resources``, so they ship in the wheel. The shell
holds no data: everything it shows comes from authenticated API calls. While that package is
absent a placeholder page says so, rather than a 404 at ``/``.
"""

from __future__ import annotations

import importlib.resources
import mimetypes
import re
from importlib.resources.abc import Traversable

from fastapi import APIRouter
from starlette.responses import HTMLResponse, Response

from minidb.batch.api._problem import ApiProblem

WEB_PACKAGE = "minidb.batch.web"
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}", re.ASCII)
"""A static file name: no slash, no leading dot, so nothing outside the package is named."""

PLACEHOLDER = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>minidb batch</title></head>
<body><h1>minidb batch</h1><p>The web page is not installed; the API is at
<a href="/docs">/docs</a> (<code>/openapi.json</code>).</p></body></html>
"""

router = APIRouter(include_in_schema=False)


def _web_root() -> Traversable | None:
    try:
        return importlib.resources.files(WEB_PACKAGE)
    except ModuleNotFoundError:
        return None


def _read(name: str) -> bytes | None:
    root = _web_root()
    if root is None or _NAME.fullmatch(name) is None:
        return None
    entry = root / name
    return entry.read_bytes() if entry.is_file() else None


@router.get("/")
async def index() -> Response:
    page = _read("index.html")
    return HTMLResponse(PLACEHOLDER if page is None else page.decode("utf-8"))


@router.get("/static/{name}")
async def static(name: str) -> Response:
    data = _read(name)
    if data is None:
        raise ApiProblem(404, "no such file")
    media = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if media.startswith("text/") or media in ("application/javascript", "text/javascript"):
        media += "; charset=utf-8"
    return Response(data, media_type=media, headers={"Cache-Control": "no-cache"})
