"""The web page's shell: served from its package without a token, nothing outside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from minidb.batch.api import _web
from minidb.objstore import FileStore

from .conftest import ApiServer, is_problem


@pytest.fixture
def page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[httpx.Client]:
    """The API serving the stand-in page package instead of minidb.batch.web."""
    monkeypatch.setattr(_web, "WEB_PACKAGE", "tests.batch.api.webpage")
    server = ApiServer(FileStore(str(tmp_path / "objects"))).start()
    try:
        with server.client() as client:
            yield client
    finally:
        server.stop()


def test_index_and_static_files_load_without_a_token(page: httpx.Client) -> None:
    """GET / is the package's index.html and /static/app.js its script, with no token."""
    index = page.get("/")
    assert index.status_code == 200 and "stand-in page" in index.text
    assert index.headers["content-type"].startswith("text/html")
    script = page.get("/static/app.js")
    assert script.status_code == 200 and script.text.startswith("console.log")
    assert "javascript" in script.headers["content-type"]


@pytest.mark.parametrize("name", ["missing.css", "__init__.py", ".hidden", "..%2F__init__.py",
                                  "%2e%2e", "a%00b", "x" * 300])
def test_static_names_outside_the_page_are_404(page: httpx.Client, name: str) -> None:
    """Unknown, hidden, Python, traversing or oversized names are 404 problems."""
    response = page.get(f"/static/{name}")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    if response.content:
        assert is_problem(response, 404)


@pytest.fixture
def real_page(tmp_path: Path) -> Iterator[httpx.Client]:
    """The API serving the real page package, minidb.batch.web."""
    server = ApiServer(FileStore(str(tmp_path / "objects"))).start()
    try:
        with server.client() as client:
            yield client
    finally:
        server.stop()


def test_vendored_chart_library_is_served_with_its_licence(real_page: httpx.Client) -> None:
    """uPlot's script and style come from /static/vendor/ (what index.html loads), its licence
    ships beside them, and the page's modules are all there."""
    index = real_page.get("/").text
    for path in ("/static/vendor/uPlot.iife.min.js", "/static/vendor/uPlot.min.css",
                 "/static/app.js", "/static/style.css"):
        assert f'"{path}"' in index
        answer = real_page.get(path)
        assert answer.status_code == 200, path
    assert "uPlot" in real_page.get("/static/vendor/uPlot.iife.min.js").text[:200]
    licence = real_page.get("/static/vendor/uPlot.LICENSE.txt")
    assert licence.status_code == 200 and "MIT License" in licence.text
    for module in ("api.js", "dom.js", "batch.js", "store.js", "server.js"):
        assert real_page.get(f"/static/{module}").status_code == 200, module


@pytest.mark.parametrize("name", ["missing.js", "..%2Fapp.js", "%2e%2e", "__init__.py",
                                  ".hidden.js"])
def test_vendor_names_outside_the_folder_are_404(real_page: httpx.Client, name: str) -> None:
    """The vendor route serves that folder's assets only."""
    assert real_page.get(f"/static/vendor/{name}").status_code == 404
    assert real_page.get("/static/vendor/").status_code == 404
