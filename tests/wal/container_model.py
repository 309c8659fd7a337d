"""A model of hashes, lists, sets and sorted sets for the crash tests, independent of the store.

The power-loss sweep (``test_power_loss_containers``) and the kill -9 test of the server
(``tests/server/test_durability``) write the same kind of random container commands
(``container_commands``): HSET/HDEL, LPUSH/RPUSH/LPOP/LMOVE, SADD/SREM, ZADD/ZINCRBY/ZPOPMIN,
RENAME/COPY of containers and DEL, over a few keys of each type, each type's keys named by
their first letter so no command meets the wrong type. ``ContainerModel`` applies them as Redis
would, in plain Python (an empty container is no key; a RENAME of a missing key changes
nothing), and ``canon()`` gives the state in the one form both tests observe the store in:
key -> (type, contents), a list as a tuple, a set as a frozenset, a sorted set as member ->
score.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any

TYPES = {b"h": "hash", b"l": "list", b"s": "set", b"z": "zset"}
"""Key prefix -> the type every key of that prefix holds."""
KEYS_PER_TYPE = 3
KEYS = [prefix + b"%d" % i for prefix in TYPES for i in range(KEYS_PER_TYPE)]
Canon = dict[bytes, tuple[str, object]]


def _key(rng: random.Random, prefix: bytes) -> bytes:
    return prefix + b"%d" % rng.randrange(KEYS_PER_TYPE)


def container_commands(rng: random.Random, count: int, tag: bytes) -> list[list[bytes]]:
    """``count`` random container commands; ``tag`` makes the values written unique."""
    commands: list[list[bytes]] = []
    for serial in range(count):
        value = b"%s.%d" % (tag, serial)
        prefix = rng.choice(list(TYPES))
        key = _key(rng, prefix)
        roll = rng.random()
        if roll < 0.08:  # whole-key moves, within one type
            other = next(k for k in KEYS if k[:1] == prefix and k != key)
            verb = rng.choice((b"RENAME", b"COPY"))
            commands.append([verb, key, other] + ([b"REPLACE"] if verb == b"COPY" else []))
        elif roll < 0.11:
            commands.append([b"DEL", key])
        elif prefix == b"h":
            field_ = b"f%d" % rng.randrange(4)
            commands.append([b"HSET", key, field_, value] if roll < 0.7 else [b"HDEL", key, field_])
        elif prefix == b"l":
            verb = rng.choice((b"LPUSH", b"RPUSH", b"LPOP", b"LMOVE"))
            if verb == b"LMOVE":
                commands.append([b"LMOVE", key, _key(rng, b"l"), b"LEFT", b"RIGHT"])
            else:
                commands.append([verb, key] + ([value] if verb.endswith(b"PUSH") else []))
        elif prefix == b"s":
            member = b"m%d" % rng.randrange(6)
            commands.append([b"SADD" if roll < 0.7 else b"SREM", key, member])
        else:
            member = b"m%d" % rng.randrange(5)
            if roll < 0.5:
                commands.append([b"ZADD", key, b"%d" % rng.randrange(10), member])
            elif roll < 0.8:
                commands.append([b"ZINCRBY", key, b"%d" % rng.randint(-3, 3), member])
            else:
                commands.append([b"ZPOPMIN", key])
    return commands


@dataclass
class ContainerModel:
    """key -> (type, contents): a hash a dict, a list a list, a set a set, a zset a dict."""

    keys: dict[bytes, tuple[str, Any]] = field(default_factory=dict)

    def copy(self) -> ContainerModel:
        return ContainerModel(copy.deepcopy(self.keys))

    def _get(self, key: bytes, empty: Any) -> Any:
        return self.keys.setdefault(key, (TYPES[key[:1]], empty))[1]

    def _drop_if_empty(self, key: bytes) -> None:
        if key in self.keys and not self.keys[key][1]:
            del self.keys[key]

    def apply(self, argv: list[bytes]) -> None:
        """Change the model as Redis would run ``argv`` (one of ``container_commands``)."""
        verb, key, rest = argv[0], argv[1], argv[2:]
        if verb in (b"RENAME", b"COPY"):
            if key in self.keys:
                moved = self.keys.pop(key) if verb == b"RENAME" else copy.deepcopy(self.keys[key])
                self.keys[rest[0]] = moved
        elif verb == b"DEL":
            self.keys.pop(key, None)
        elif verb == b"HSET":
            self._get(key, {})[rest[0]] = rest[1]
        elif verb == b"LPUSH":
            self._get(key, []).insert(0, rest[0])
        elif verb == b"RPUSH":
            self._get(key, []).append(rest[0])
        elif verb == b"SADD":
            self._get(key, set()).add(rest[0])
        elif verb == b"ZADD":
            self._get(key, {})[rest[1]] = float(rest[0])
        elif verb == b"ZINCRBY":
            zset = self._get(key, {})
            zset[rest[1]] = zset.get(rest[1], 0.0) + float(rest[0])
        elif key not in self.keys:
            return  # HDEL, LPOP, LMOVE, SREM, ZPOPMIN of a missing key change nothing
        elif verb == b"HDEL":
            self.keys[key][1].pop(rest[0], None)
        elif verb == b"SREM":
            self.keys[key][1].discard(rest[0])
        elif verb in (b"LPOP", b"LMOVE"):
            element = self.keys[key][1].pop(0)
            self._drop_if_empty(key)
            if verb == b"LMOVE":
                self._get(rest[0], []).append(element)
        elif verb == b"ZPOPMIN":
            zset = self.keys[key][1]
            del zset[min(zset, key=lambda member: (zset[member], member))]
        else:
            raise AssertionError(f"not a command of the model: {argv!r}")
        self._drop_if_empty(key)

    def canon(self) -> Canon:
        return {key: (kind, _frozen(kind, contents)) for key, (kind, contents) in self.keys.items()}


def _frozen(kind: str, contents: Any) -> object:
    if kind == "list":
        return tuple(contents)
    if kind == "set":
        return frozenset(contents)
    return dict(contents)


def prefix_states(acked: ContainerModel, in_flight: list[list[bytes]]) -> list[Canon]:
    """The states a crash may leave: the acknowledged one, then after each command in flight."""
    model = acked.copy()
    states = [model.canon()]
    for argv in in_flight:
        model.apply(argv)
        states.append(model.canon())
    return states


def explain(acked: Canon, observed: Canon, in_flight: list[list[bytes]]) -> str:
    """What a failed check prints: the keys that differ from the acknowledged state."""
    differ = {
        key: (acked.get(key), observed.get(key))
        for key in set(acked) | set(observed)
        if acked.get(key) != observed.get(key)
    }
    return (
        "recovered state is no acked state plus a prefix of the commands in flight:\n"
        f"  keys that differ from the acked state (acked, recovered): {differ}\n"
        f"  in flight: {in_flight}"
    )
