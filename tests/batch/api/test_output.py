"""Output listings and their presigned URLs on both backends: download, tampering, expiry.

Expiry runs on settable clocks, not sleeps: the file store's presign clock (checked by this
server's ``/files`` route) and the fault proxy's SigV4 check (``strict_presign``) for S3.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
import pytest

from minidb.batch.api import ApiSettings
from minidb.objstore import FileStore, ObjectStore
from tests.objstore.conftest import S3Rig
from tests.objstore.faultproxy import FaultProxy

from .conftest import REPORT, ApiServer, in_state, is_problem

PRESIGN_S = 60


class WallClock:
    """A settable Unix clock in seconds."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["file", "s3"])
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ApiServer, WallClock]]:
    """An API with a 60 s presign and a way to move the presign checker's clock."""
    clock = WallClock()
    store: ObjectStore
    if request.param == "file":
        store = FileStore(str(tmp_path / "objects"), clock=clock)
    else:
        s3rig: S3Rig = request.getfixturevalue("s3rig")
        proxy: FaultProxy = request.getfixturevalue("proxy")
        proxy.strict_presign = True
        proxy.clock = clock
        store = s3rig.store(s3rig.server.new_bucket())
    server = ApiServer(store, ApiSettings(presign_s=PRESIGN_S)).start()
    try:
        yield server, clock
    finally:
        server.stop()
        asyncio.run(store.close())


def _listing(server: ApiServer) -> tuple[str, dict[str, object]]:
    with server.client("alice-token-0123456789") as alice:
        task_id = in_state(server, alice, "succeeded")
        response = alice.get(f"/tasks/{task_id}/output")
    assert response.status_code == 200, response.text
    return task_id, response.json()


def test_output_lists_files_with_urls_that_download(rig: tuple[ApiServer, WallClock]) -> None:
    """The listing names the attempt and each file with size, URL and expiry; the URL works
    without a token."""
    server, _clock = rig
    _task_id, listing = _listing(server)
    assert listing["attempt"] == 1
    (file,) = listing["files"]  # type: ignore[misc]
    assert (file["name"], file["size"]) == ("report.csv", len(REPORT))
    assert file["expires_at"].endswith("Z")
    response = httpx.get(file["url"], timeout=30)
    assert (response.status_code, response.content) == (200, REPORT)


def _tampered(url: str) -> list[str]:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    variants = []
    for name in query:
        if name.lower().endswith(("sig", "signature", "exp", "expires", "date")):
            changed = dict(query)
            # Flip the last digit, so the value stays well-formed (a date stays a date).
            value = changed[name]
            at = max(i for i, c in enumerate(value) if c.isdigit())
            changed[name] = value[:at] + ("1" if value[at] == "0" else "0") + value[at + 1:]
            variants.append(parts._replace(query=urlencode(changed)).geturl())
    other = parts.path.replace("report.csv", "other.csv")
    variants.append(parts._replace(path=other).geturl())
    return variants


def test_tampered_urls_are_403(rig: tuple[ApiServer, WallClock]) -> None:
    """Changing the signature, the expiry or the key of a presigned URL makes it 403."""
    server, _clock = rig
    _task_id, listing = _listing(server)
    url = listing["files"][0]["url"]  # type: ignore[index]
    variants = _tampered(url)
    assert len(variants) >= 3
    for variant in variants:
        response = httpx.get(variant, timeout=30)
        assert response.status_code == 403, (variant, response.text[:200])


def test_expired_urls_are_403(rig: tuple[ApiServer, WallClock]) -> None:
    """A presigned URL works until its expiry and is 403 after it."""
    server, clock = rig
    _task_id, listing = _listing(server)
    url = listing["files"][0]["url"]  # type: ignore[index]
    clock.now += PRESIGN_S - 5
    assert httpx.get(url, timeout=30).status_code == 200
    clock.now += 10
    response = httpx.get(url, timeout=30)
    assert response.status_code == 403
    if url.startswith(server.url):
        assert is_problem(response, 403)


def test_files_route_refuses_unsigned_requests(rig: tuple[ApiServer, WallClock]) -> None:
    """/files without a signature is 403 on a file: store and 404 on an S3 one."""
    server, _clock = rig
    response = httpx.get(f"{server.url}/files/secrets/api", timeout=30)
    assert response.status_code in (403, 404)
    assert response.headers["content-type"].startswith("application/problem+json")
