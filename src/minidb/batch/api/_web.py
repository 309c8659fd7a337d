"""The web page's shell: ``GET /``, ``GET /static/{name}`` and ``GET /static/vendor/{name}``,
without a token.

The page's files live in the package ``minidb.batch.web`` (``index.html``, its ES modules,
``style.css``) and the third-party files it vendors in its ``vendor/`` folder (the uPlot chart
library and its licence); both are read with ``importlib.resources``, so they ship in the
wheel. The shell holds no data: everything it shows comes from authenticated API calls. While
that package is absent a placeholder page says so, rather than a 404 at ``/``.
"""

from __future__ import annotations

import importlib.resources
import mimetypes
import re
from importlib.resources.abc import Traversable
from pathlib import PurePosixPath

from fastapi import APIRouter
from starlette.responses import HTMLResponse, Response

from minidb.batch.api._problem import ApiProblem

WEB_PACKAGE = "minidb.batch.web"
VENDOR_FOLDER = "vendor"
"""The folder of ``WEB_PACKAGE`` that holds vendored files (served under ``/static/vendor/``)."""
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}", re.ASCII)
"""A static file name: no slash, no leading dot, so nothing outside the package is named."""
STATIC_SUFFIXES = frozenset({".html", ".js", ".mjs", ".css", ".svg", ".png", ".ico", ".json",
                             ".map", ".txt", ".woff2"})
"""What the page's package may serve: its assets, never its ``__init__.py`` or bytecode."""

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


def _read(name: str, folder: str | None = None) -> bytes | None:
    root = _web_root()
    if root is None or _NAME.fullmatch(name) is None:
        return None
    if PurePosixPath(name).suffix not in STATIC_SUFFIXES:
        return None
    entry = (root if folder is None else root / folder) / name
    return entry.read_bytes() if entry.is_file() else None


def _asset(name: str, data: bytes | None) -> Response:
    if data is None:
        raise ApiProblem(404, "no such file")
    media = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if media.startswith("text/") or media in ("application/javascript", "text/javascript"):
        media += "; charset=utf-8"
    return Response(data, media_type=media, headers={"Cache-Control": "no-cache"})


@router.get("/")
async def index() -> Response:
    page = _read("index.html")
    return HTMLResponse(PLACEHOLDER if page is None else page.decode("utf-8"))


@router.get("/static/{name}")
async def static(name: str) -> Response:
    return _asset(name, _read(name))


@router.get("/static/vendor/{name}")
async def vendored(name: str) -> Response:
    return _asset(name, _read(name, VENDOR_FOLDER))
