"""Shared test configuration."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    # Declared here, at the top, so `pytest --compat` works from any folder (an option of a
    # deeper conftest is known only when that folder is named on the command line).
    parser.addoption(
        "--compat", action="store_true", default=False,
        help="also run the client libraries' own test suites against minidb (tests/compat)",
    )
