"""RQ 2.12.0's own suite (forked work horses, rq worker subprocesses) against minidb.

See ``tests/compat/queues/__init__``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.queues._check import check_suite, pytest_timeout_s

pytestmark = [pytest.mark.compat, pytest.mark.timeout(pytest_timeout_s("rq"))]


def test_rq_suite_passes_against_minidb(tmp_path: Path) -> None:
    check_suite("rq", tmp_path)
