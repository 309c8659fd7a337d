"""Fixtures of the replication tests: the object stores of both backends (the S3 rig behind the
fault proxy, and ``file:``), reused from the object-store tests."""

from __future__ import annotations

from tests.objstore.conftest import file_store, proxy, s3_store, s3rig, store  # noqa: F401
from tests.server.conftest import serve  # noqa: F401
