"""A pytest plugin loaded into redis-py's suite: which commands each test sent to the server.

Run as ``-p _commandlog`` with this folder on ``PYTHONPATH`` (a top-level name: redis-py's
own ``tests`` package shadows ours inside its tree) and ``MINIDB_COMMANDLOG=<file>``. Around
each test it resets the server's statistics (``CONFIG RESETSTAT``) and reads
``INFO commandstats`` after the teardown, so every connection the test opened is counted. Only
a real ``redis-server`` is run with it (by ``select``); one JSON line per test:
``{"nodeid": ..., "commands": [...]}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
import redis

_OWN_COMMANDS = frozenset({"config|resetstat"})
"""What the plugin itself sends inside the window (INFO is counted only after it answers)."""

_clients: dict[str, redis.Redis] = {}


def _client(config: pytest.Config) -> redis.Redis:
    """One connection for the whole run, so its handshake falls in no test's window."""
    url = config.getoption("--redis-url")
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, protocol=2)
    return _clients[url]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    path = os.environ.get("MINIDB_COMMANDLOG")
    if not path:
        yield
        return
    _client(item.config).config_resetstat()
    yield
    stats = _client(item.config).info("commandstats")
    # Keys are "cmdstat_hset" or "cmdstat_client|setinfo" as redis-py parses them: "cmdstat_...".
    commands = sorted({key.removeprefix("cmdstat_") for key in stats} - _OWN_COMMANDS)
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps({"nodeid": item.nodeid, "commands": commands}) + "\n")
