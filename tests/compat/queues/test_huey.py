"""huey 3.5.4's own suite (its Redis storage tests included) against minidb: see ``__init__``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.queues._check import check_suite, pytest_timeout_s

pytestmark = [pytest.mark.compat, pytest.mark.timeout(pytest_timeout_s("huey"))]


def test_huey_suite_passes_against_minidb(tmp_path: Path) -> None:
    check_suite("huey", tmp_path)
