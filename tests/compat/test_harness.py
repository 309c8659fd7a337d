"""The compat harness itself: sdists come unpacked with their tests."""

from __future__ import annotations

import pytest

from tests.compat._sdist import fetch_sdist

pytestmark = pytest.mark.compat


def test_redis_py_sdist_carries_its_tests() -> None:
    tree = fetch_sdist("redis", "8.1.0")
    assert (tree / "tests" / "conftest.py").is_file(), sorted(p.name for p in tree.iterdir())
