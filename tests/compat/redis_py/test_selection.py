"""The selection rule of redis-py's tests (``selection``) and the checked-in lists it wrote.

Pure: no server, no sdist, so these run in the default suite (not marked ``compat``).
"""

from __future__ import annotations

from pathlib import Path

from tests.compat.redis_py.selection import (
    GROUPS,
    PROTOCOLS,
    Selected,
    allowed,
    group_of,
    read_selected,
    write_selected,
)
from tests.compat.redis_py.test_redis_py_suite import read_pending

COMMANDS = "tests/test_commands.py::TestRedisCommands::"
REDIS_GROUPS = {
    "hset": "hash", "zadd": "sorted-set", "sadd": "set", "rpush": "list", "get": "string",
    "expire": "generic", "function": "scripting", "client": "connection", "config": "server",
    "subscribe": "pubsub", "lcs": "string",
}  # fmt: skip


def test_group_of_a_container_test_is_by_name_and_by_the_commands_it_sent() -> None:
    """test_h* sending a hash command is a hash test; one sending none is not; a test named
    otherwise that sends a container command tests generic key commands on it."""
    assert group_of(COMMANDS + "test_hset", {"hash"}) == "hashes"
    assert group_of(COMMANDS + "test_zadd", {"sorted-set"}) == "zsets"
    assert group_of(COMMANDS + "test_bzpopmin", {"sorted-set"}) == "zsets"
    assert group_of(COMMANDS + "test_blpop", {"list"}) == "lists"
    assert group_of(COMMANDS + "test_rpushx", {"list"}) == "lists"
    assert group_of(COMMANDS + "test_sadd", {"set"}) == "sets"
    assert group_of(COMMANDS + "test_set_nx", {"string"}) is None
    assert group_of(COMMANDS + "test_type", {"generic", "list", "string"}) == "keys"
    assert group_of(COMMANDS + "test_hello", {"connection"}) is None


def test_group_of_the_pubsub_scripting_and_lock_files_is_the_file() -> None:
    assert group_of("tests/test_pubsub.py::TestPubSub::test_x", set()) == "pubsub"
    assert group_of("tests/test_scripting.py::TestScripting::test_x", set()) == "scripting"
    assert group_of("tests/test_lock.py::TestLock::test_x", {"string"}) == "lock"


def test_allowed_commands_are_this_issues() -> None:
    """The issue's groups (CLIENT SETINFO, sent on connect, and CLIENT KILL among them), the
    suite's fixtures' server commands; not functions, CONFIG, LCS."""
    for command in ("hset", "zadd", "get", "expire", "subscribe", "client|setinfo", "flushdb",
                    "client|kill"):  # fmt: skip
        assert allowed(command, REDIS_GROUPS), command
    for command in ("function|load", "config|set", "lcs", "nosuchcommand"):
        assert not allowed(command, REDIS_GROUPS), command


def test_selected_round_trips(tmp_path: Path) -> None:
    entries = [Selected("hashes", (2, 3), COMMANDS + "test_hset"),
               Selected("pubsub", (3,), "tests/test_pubsub.py::TestPubSub::test_x")]
    write_selected(entries, tmp_path / "selected.txt")
    assert read_selected(tmp_path / "selected.txt") == entries


def test_checked_in_selection_covers_every_group_on_both_protocols() -> None:
    """Every group has tests on RESP2 and RESP3, no test twice, and each pending test is a
    selected one (a typo would silently run nothing) with its reason."""
    entries = read_selected()
    for group in GROUPS:
        for protocol in PROTOCOLS:
            assert any(e.group == group and protocol in e.protocols for e in entries), group
    nodeids = [e.nodeid for e in entries]
    assert len(nodeids) == len(set(nodeids))
    assert set(read_pending()) <= set(nodeids)
    assert all(reason.strip() for reason in read_pending().values())
