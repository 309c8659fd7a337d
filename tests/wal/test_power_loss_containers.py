"""Power loss at every operation of the write path, with hashes, lists, sets and sorted sets.

``test_power_loss`` cuts the power under SET/DEL groups of the line protocol; this sweep does
the same under container commands run by the command engine as a RESP connection's are (an
``Executor`` over ``store.execute``): HSET/HDEL, LPUSH/RPUSH/LPOP/LMOVE, SADD/SREM,
ZADD/ZINCRBY/ZPOPMIN, RENAME/COPY and DEL (``container_model``). Tiny segments and checkpoints
make containers go through element records, whole-container records and checkpoint snapshots
(odd seeds finish each checkpoint one group late, so containers change while their snapshot is
pending: the copy-on-write path). After each crash the directory is opened with the real code
and the keyspace, read as key -> (type, contents), must be the model's state after every
acknowledged command plus a prefix of the group in flight (each command is one record,
replayed whole or not at all).

``MINIDB_CRASH_SEEDS=N`` runs N seeds instead of the default two.
"""

from __future__ import annotations

import logging
import math
import os
import pathlib
import random
import shutil

import pytest

from minidb.errors import CorruptionError
from minidb.server._config import ServerConfig
from minidb.server._lifecycle import open_store
from minidb.store import COMMANDS, Batch, StoreOwner, StoreState
from minidb.wal import _fs
from minidb.wal._ops import (
    KIND_HASH,
    KIND_LIST,
    KIND_SET,
    KIND_ZSET,
    PutContainer,
    decode_score,
)
from minidb.wal.testing import POWER_LOSS, CrashFS, PowerLoss, using
from tests.store.test_actor import ArgvExecutor

from .container_model import (
    TYPES,
    Canon,
    ContainerModel,
    container_commands,
    explain,
    prefix_states,
)
from .test_power_loss import (
    SECONDS_PER_SEED,
    SEGMENT_BYTES,
    SINK,
    LaterCheckpoints,
    Outcome,
    _ForgetsDataSyncs,
    fast_dir,
)

CHECKPOINT_BYTES = 500
"""Small enough that a round checkpoints its containers three times or so."""
CONTAINER_SEEDS = max(1, int(os.environ.get("MINIDB_CRASH_SEEDS", 2)))
"""Seeds whose every crash point the run tries (two by default: some 200 trials)."""
GROUPS_PER_ROUND = 20
KIND_NAMES = {KIND_HASH: "hash", KIND_SET: "set", KIND_LIST: "list", KIND_ZSET: "zset"}
"""The log's container kind -> its type."""
Group = list[list[list[bytes]]]  # batches of commands, committed together


class ContainerExecutor(ArgvExecutor):
    """The owner tests' executor over the command engine, with every write the table flags."""

    def is_write(self, request: list[bytes]) -> bool:
        return "write" in COMMANDS[request[0].lower()].flags


def workload(seed: int) -> list[Group]:
    """Deterministic groups of batches of container commands over a few keys of each type."""
    rng = random.Random(seed)
    commands = iter(container_commands(rng, GROUPS_PER_ROUND * 8, b"v%d" % seed))
    return [
        [[next(commands) for _ in range(rng.randint(1, 3))] for _ in range(rng.choice((1, 1, 2)))]
        for _ in range(GROUPS_PER_ROUND)
    ]


def observe(state: StoreState) -> Canon:
    """The keyspace as key -> (type, contents), read from its canonical items."""
    found: Canon = {}
    for item in state.keyspace.items():
        assert type(item) is PutContainer, f"the store holds a string no command wrote: {item}"
        kind, elements = KIND_NAMES[item.kind], item.elements
        if kind == "hash":
            found[item.key] = (kind, dict(zip(elements[::2], elements[1::2], strict=True)))
        elif kind == "list":
            found[item.key] = (kind, tuple(elements))
        elif kind == "set":
            found[item.key] = (kind, frozenset(elements))
        else:
            scores = map(decode_score, elements[1::2])
            found[item.key] = (kind, dict(zip(elements[::2], scores, strict=True)))
        assert TYPES[item.key[:1]] == kind, item
    return found


class Acks:
    """The model of what the store may hold: the acked state and the commands in flight."""

    def __init__(self) -> None:
        self.acked = ContainerModel()
        self.in_flight: list[list[bytes]] = []

    def acknowledge(self) -> None:
        for argv in self.in_flight:
            self.acked.apply(argv)
        self.in_flight = []

    def settle(self, observed: Canon) -> None:
        """Check ``observed`` is a state the store may be in; it is the truth from now on."""
        states = prefix_states(self.acked, self.in_flight)
        if observed not in states:
            raise AssertionError(explain(states[0], observed, self.in_flight))
        for argv in self.in_flight[: states.index(observed)]:
            self.acked.apply(argv)
        self.in_flight = []


def run_round(config: ServerConfig, fs: CrashFS, acks: Acks, groups: list[Group],
              outcome: Outcome, later_checkpoints: bool) -> None:  # fmt: skip
    """Open the store through ``fs``, check it, then commit ``groups`` until the power goes."""
    with using(fs):
        state, log = open_store(config)
        outcome.torn_tails += log.torn_tail is not None
        acks.settle(observe(state))
        log.segment_bytes = SEGMENT_BYTES
        owner = StoreOwner(state, LaterCheckpoints(log) if later_checkpoints else log, mailbox=4096)
        executor = ContainerExecutor()
        for group in groups:
            batches = [Batch(argvs, SINK, math.inf, executor=executor) for argvs in group]
            acks.in_flight = [argv for argvs in group for argv in argvs]
            try:
                owner.commit(batches)
            finally:
                if batches[0].replies is not None:  # released replies are acknowledged
                    acks.acknowledge()
            for batch in batches:
                assert batch.replies is not None
                assert not any(r.startswith(b"-") for r in batch.replies), batch.replies


def _config(directory: pathlib.Path) -> ServerConfig:
    return ServerConfig(data_dir=directory, checkpoint_bytes=CHECKPOINT_BYTES, checkpoint_growth=0)


def crash_trial(directory: pathlib.Path, seed: int, crash_points: list[int],
                outcome: Outcome) -> None:  # fmt: skip
    """One round per crash point on a fresh directory, then a real open, checked."""
    outcome.trials += 1
    shutil.rmtree(directory, ignore_errors=True)
    acks = Acks()
    try:
        for round_number, crash_after in enumerate(crash_points):
            fs = CrashFS(directory, seed=f"{seed}/{round_number}/{crash_after}",
                         crash_after=crash_after, damage=POWER_LOSS)  # fmt: skip
            try:
                run_round(_config(directory), fs, acks, workload(seed * 1000 + round_number),
                          outcome, later_checkpoints=seed % 2 == 1)  # fmt: skip
            except PowerLoss:
                outcome.mid_round += 1
            fs.power_loss()
            outcome.power_losses += 1
        assert _fs.active() is _fs.OS
        state, log = open_store(_config(directory))
        outcome.torn_tails += log.torn_tail is not None
        log.close()
        acks.settle(observe(state))
    except (AssertionError, CorruptionError) as exc:
        raise AssertionError(
            f"power loss broke the containers: seed={seed} crash_points={crash_points}: {exc}"
        ) from exc


def operations_of_a_round(directory: pathlib.Path, seed: int) -> int:
    """How many operations a first round makes when the power stays on."""
    shutil.rmtree(directory, ignore_errors=True)
    fs = CrashFS(directory)
    run_round(_config(directory), fs, Acks(), workload(seed * 1000), Outcome(), seed % 2 == 1)
    fs.power_loss()
    return fs.operations


data_dir = fast_dir
"""A data dir on tmpfs when there is one (``test_power_loss``'s fixture)."""


def test_container_workload_covers_every_command() -> None:
    """The workload of the default seeds writes every command the model knows."""
    verbs = {argv[0] for seed in range(2) for group in workload(seed * 1000)
             for argvs in group for argv in argvs}  # fmt: skip
    assert verbs == {b"HSET", b"HDEL", b"LPUSH", b"RPUSH", b"LPOP", b"LMOVE", b"SADD", b"SREM",
                     b"ZADD", b"ZINCRBY", b"ZPOPMIN", b"RENAME", b"COPY", b"DEL"}  # fmt: skip


@pytest.mark.timeout(max(120, CONTAINER_SEEDS * SECONDS_PER_SEED))
def test_power_loss_with_containers_keeps_every_acknowledged_write(
    data_dir: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """At every crash point of a round of container commands (and a random second crash), the
    store opens with every acked command's effect and a prefix of the group in flight."""
    caplog.set_level(logging.CRITICAL, logger="minidb")
    outcome = Outcome()
    for seed in range(CONTAINER_SEEDS):
        total = operations_of_a_round(data_dir, seed)
        rng = random.Random(seed)
        for crash_after in range(total + 1):
            crash_trial(data_dir, seed, [crash_after, rng.randint(0, total)], outcome)
    print(f"\ncontainers under power loss: {outcome}")
    assert outcome.power_losses == 2 * outcome.trials and outcome.mid_round > 0


def test_power_loss_with_containers_catches_a_log_that_skips_syncs(
    data_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Take away the fdatasync of each group and the container sweep finds lost writes."""
    caplog.set_level(logging.CRITICAL, logger="minidb")
    monkeypatch.setitem(globals(), "CrashFS", _ForgetsDataSyncs)
    total = operations_of_a_round(data_dir, 0)
    with pytest.raises(AssertionError, match="power loss broke the containers"):
        for crash_after in range(total + 1):
            crash_trial(data_dir, 0, [crash_after], Outcome())
