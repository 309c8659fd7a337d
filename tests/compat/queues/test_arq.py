"""arq 0.26.3's own suite (redis-py 4.6 with hiredis) against minidb: see ``__init__``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.queues._check import check_suite, pytest_timeout_s

pytestmark = [pytest.mark.compat, pytest.mark.timeout(pytest_timeout_s("arq"))]


def test_arq_suite_passes_against_minidb(tmp_path: Path) -> None:
    check_suite("arq", tmp_path)
