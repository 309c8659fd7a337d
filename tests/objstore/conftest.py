"""Fixtures of the object-store tests: the S3 rig and a store per backend.

``s3rig`` (session): the serialised moto server and a ``FaultProxy`` in front of it, started
once. ``proxy``: that proxy, cleared before each test. ``store``: parametrised over ``file``
(a ``FileStore`` on a temp dir) and ``s3`` (an ``S3Store`` on a fresh bucket, talking to moto
through the proxy, with a short read timeout so DELAY faults end quickly).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from minidb.objstore import FileStore, ObjectStore, S3Store

from .faultproxy import FaultProxy
from .s3rig import ACCESS_KEY, REGION, SECRET_KEY, MotoServer

S3_TEST_READ_TIMEOUT_S = 3.0
"""Read timeout of test S3 stores, in seconds: a DELAY fault must outlast it, and the
serialised moto on a busy 2-core machine (tests run two at a time) must not."""

S3_TEST_PART_SIZE = 5 << 20
"""Smallest part size S3 (and moto) accept, in bytes: keeps multipart tests small."""


@dataclasses.dataclass
class S3Rig:
    server: MotoServer
    proxy: FaultProxy

    def store(self, bucket: str, prefix: str = "pfx", **options: object) -> S3Store:
        settings: dict[str, object] = dict(
            endpoint_url=self.proxy.endpoint, region=REGION, access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY, read_timeout_s=S3_TEST_READ_TIMEOUT_S,
            part_size=S3_TEST_PART_SIZE,
        )
        settings.update(options)
        return S3Store(bucket, prefix, **settings)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def s3rig() -> Iterator[S3Rig]:
    server = MotoServer().start()
    proxy = FaultProxy(server.endpoint, secrets={ACCESS_KEY: SECRET_KEY}).start()
    try:
        yield S3Rig(server, proxy)
    finally:
        proxy.stop()
        server.stop()


@pytest.fixture
def proxy(s3rig: S3Rig) -> Iterator[FaultProxy]:
    s3rig.proxy.clear()
    yield s3rig.proxy
    s3rig.proxy.clear()


def _close(store: ObjectStore) -> None:
    asyncio.run(store.close())


@pytest.fixture
def s3_store(s3rig: S3Rig, proxy: FaultProxy) -> Iterator[S3Store]:
    store = s3rig.store(s3rig.server.new_bucket())
    yield store
    _close(store)


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[FileStore]:
    store = FileStore(str(tmp_path / "objects"))
    yield store
    _close(store)


@pytest.fixture(params=["file", "s3"])
def store(request: pytest.FixtureRequest) -> ObjectStore:
    fixture = "file_store" if request.param == "file" else "s3_store"
    result: ObjectStore = request.getfixturevalue(fixture)
    return result
