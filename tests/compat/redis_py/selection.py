"""Which of redis-py's tests minidb is held to: regenerates ``selected.txt`` from a redis-server.

``python -m tests.compat.redis_py.selection`` runs the candidate files of redis-py's suite against
a throwaway ``redis-server`` on RESP2 and on RESP3, logging the commands each test sends
(``_commandlog``), and keeps a test for a protocol when

- it passed on ``redis-server`` with that protocol,
- every command it sent is one of this issue's (``ALLOWED_GROUPS`` by Redis's own command
  groups, less ``EXCLUDED``, plus ``SERVER_COMMANDS``), and
- it falls in a group (``group_of``): the container tests of ``test_commands.py`` (and of
  ``test_asyncio/test_commands.py``, the same through the asyncio client) by name
  (hashes ``test_h*``, lists ``test_l*``/``test_r*push*``/``test_*pop*``, sets ``test_s*``,
  sorted sets ``test_z*``/``test_bz*``) when they send a command of that type, other
  ``test_commands.py`` tests that send a container command as ``keys`` (generic key commands
  on these types), and every test of ``test_pubsub.py``, ``test_scripting.py``, ``test_lock.py``.

Each line of ``selected.txt``: ``<group> <protocols> <node id>``, e.g.
``hashes 2,3 tests/test_commands.py::TestRedisCommands::test_hset``.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.compat._servers import redis_server
from tests.compat.redis_py._run import run_suite

CANDIDATE_FILES = (
    "tests/test_commands.py", "tests/test_asyncio/test_commands.py", "tests/test_pubsub.py",
    "tests/test_scripting.py", "tests/test_lock.py",
)  # fmt: skip
WHOLE_FILE_GROUPS = {
    "tests/test_pubsub.py": "pubsub", "tests/test_scripting.py": "scripting",
    "tests/test_lock.py": "lock",
}  # fmt: skip
CONTAINER_GROUPS = {"hash": "hashes", "list": "lists", "set": "sets", "sorted-set": "zsets"}
"""Redis's command group of a container type -> our test group."""
ALLOWED_GROUPS = frozenset(
    {"hash", "list", "set", "sorted-set", "pubsub", "scripting", "string", "generic",
     "connection", "transactions"}
)  # fmt: skip
EXCLUDED = frozenset(
    {"function", "fcall", "fcall_ro", "sort", "sort_ro", "dump", "restore", "migrate", "move",
     "wait", "waitaof", "lcs"}
)  # fmt: skip
"""Commands (or ``command|subcommand``) of the allowed groups that are not this issue's
(functions, SORT, DUMP, ...; LCS is a string command minidb's string engine never had). CLIENT
KILL, once left out as connection administration, is served since issue 19's job queues needed
it: test_pubsub.py's TestPubSubConnectionKilled is selected again."""
SERVER_COMMANDS = frozenset({"flushdb", "flushall", "dbsize", "info", "time"})
"""The server commands the suite's fixtures use (flush after each test, the version)."""
GROUPS = ("hashes", "lists", "sets", "zsets", "keys", "pubsub", "scripting", "lock")
PROTOCOLS = (2, 3)
RUN_TIMEOUT_S = 900.0
SELECTED = Path(__file__).with_name("selected.txt")

_NAME_RULES = (
    ("hashes", re.compile(r"test_h")),
    ("zsets", re.compile(r"test_(z|bz)")),
    ("lists", re.compile(r"test_(l|r\w*push|\w*pop)")),
    ("sets", re.compile(r"test_s")),
)


@dataclass(frozen=True)
class Selected:
    group: str
    protocols: tuple[int, ...]
    nodeid: str


def group_of(nodeid: str, redis_groups: set[str]) -> str | None:
    """The test group of a test that sent commands of ``redis_groups`` (Redis's groups)."""
    path = nodeid.split("::")[0]
    if path in WHOLE_FILE_GROUPS:
        return WHOLE_FILE_GROUPS[path]
    name = nodeid.rsplit("::", 1)[-1]
    containers = {CONTAINER_GROUPS[g] for g in redis_groups if g in CONTAINER_GROUPS}
    for group, rule in _NAME_RULES:
        if rule.match(name) and group in containers:
            return group
    return "keys" if containers else None


def allowed(command: str, group_by_command: dict[str, str]) -> bool:
    top = command.partition("|")[0]
    if top in EXCLUDED or command in EXCLUDED:
        return False
    return top in SERVER_COMMANDS or group_by_command.get(top) in ALLOWED_GROUPS


def read_selected(path: Path = SELECTED) -> list[Selected]:
    entries = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            group, protocols, nodeid = line.split()
            entries.append(Selected(group, tuple(int(p) for p in protocols.split(",")), nodeid))
    return entries


def _command_groups(port: int) -> dict[str, str]:
    """Redis's group of each command (``COMMAND DOCS``), e.g. ``hset`` -> ``hash``."""
    with redis.Redis(port=port, protocol=3, decode_responses=True) as client:
        docs = client.execute_command("COMMAND DOCS")
    return {name.lower(): str(doc.get("group", "")) for name, doc in docs.items()}


def select() -> list[Selected]:
    passed: dict[str, list[int]] = defaultdict(list)
    commands: dict[str, set[str]] = defaultdict(set)
    with redis_server() as port:
        group_by_command = _command_groups(port)
        for protocol in PROTOCOLS:
            with tempfile.TemporaryDirectory() as scratch:
                log = Path(scratch) / "commands.jsonl"
                result = run_suite(port, protocol, CANDIDATE_FILES, timeout_s=RUN_TIMEOUT_S,
                                   command_log=log)
                for line in log.read_text().splitlines():
                    entry = json.loads(line)
                    commands[entry["nodeid"]].update(entry["commands"])
            for nodeid in result.with_outcome("passed"):
                passed[nodeid].append(protocol)
    chosen = []
    for nodeid, protocols in sorted(passed.items()):
        used = commands[nodeid]
        if not all(allowed(command, group_by_command) for command in used):
            continue
        groups = {group_by_command.get(c.partition("|")[0], "") for c in used}
        group = group_of(nodeid, groups)
        if group is not None:
            chosen.append(Selected(group, tuple(protocols), nodeid))
    return sorted(chosen, key=lambda s: (GROUPS.index(s.group), s.nodeid))


def write_selected(entries: list[Selected], path: Path = SELECTED) -> None:
    header = [
        "# redis-py's tests minidb is held to: <group> <protocols> <node id>.",
        "# Generated by `python -m tests.compat.redis_py.selection` (its docstring: the rule).",
    ]
    lines = [f"{s.group} {','.join(map(str, s.protocols))} {s.nodeid}" for s in entries]
    path.write_text("\n".join(header + lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=SELECTED)
    args = parser.parse_args()
    entries = select()
    write_selected(entries, args.output)
    counts = {group: sum(s.group == group for s in entries) for group in GROUPS}
    print(f"{len(entries)} tests selected into {args.output}: {counts}")


if __name__ == "__main__":
    main()
