"""The real client libraries' own test suites, run against minidb (the ``compat`` tests).

They fetch each library's sdist from PyPI (cached, see ``_sdist``) and run its suite in a
subprocess, so they need the network once and take minutes: the default ``pytest`` leaves them
out, and ``pytest --compat tests/compat`` (or ``MINIDB_COMPAT=1``) runs them (the option is
declared in ``tests/conftest.py``).
"""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--compat") or os.environ.get("MINIDB_COMPAT") == "1":
        return
    skip = pytest.mark.skip(reason="a client library's own suite: run with --compat")
    for item in items:
        # The marker itself: ``item.keywords`` would also match the ``compat`` folder's name and
        # skip the pure tests kept beside the suites.
        if item.get_closest_marker("compat") is not None:
            item.add_marker(skip)
