"""kombu 5.7.0's Redis integration tests (Celery's transport) against minidb: see ``__init__``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.queues._check import check_suite, pytest_timeout_s

pytestmark = [pytest.mark.compat, pytest.mark.timeout(pytest_timeout_s("kombu"))]


def test_kombu_suite_passes_against_minidb(tmp_path: Path) -> None:
    check_suite("kombu", tmp_path)
