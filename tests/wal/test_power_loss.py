"""Power loss at every operation of the server's write path, checked against a model of acks.

Each trial runs ``open_store`` and a ``StoreOwner`` committing SET/DEL groups over a
``CrashFS`` (tiny segments and checkpoints, so appends, group commits, segment rolls,
checkpoints and manifest switches all happen), cuts the power after operation ``k``, and opens
the directory again with the real code. What it must find, by keys and values only: the state
after every acknowledged group, plus possibly a prefix of the one group in flight (records are
replayed whole or not at all, in order). A second round on the crashed directory crashes again
at a random point, which also lands inside recovery (torn tail cut, stale files removed).
Odd seeds finish each checkpoint one group late (``LaterCheckpoints``), so appends and syncs
interleave with the snapshot and manifest switch as they do when a worker thread writes them.

``MINIDB_CRASH_SEEDS=N`` runs N seeds of every crash point instead of the default few (the
long run; its timeout grows with N). A failure names the seed and crash points that replay it.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import pathlib
import random
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import pytest

from minidb.errors import CorruptionError
from minidb.protocol import NIL, Delete, Get, Request, Set
from minidb.server._config import ServerConfig
from minidb.server._lifecycle import open_store
from minidb.store import UNBOUNDED_OUTPUT, Batch, StoreOwner, StoreState
from minidb.wal import DurableLog, _fs, open_log
from minidb.wal._format import (
    FILE_HEADER_SIZE,
    RECORD_HEADER_SIZE,
    crc32c,
    encode_end,
    encode_record,
)
from minidb.wal._ops import Op, Put
from minidb.wal._payload import encode_ops
from minidb.wal.testing import BEYOND_POWER_LOSS, POWER_LOSS, CrashFS, Damage, PowerLoss, using

from .conftest import replay_all

SEGMENT_BYTES = 300
"""Small enough that a segment rolls every few groups."""
CHECKPOINT_BYTES = 1200
"""Small enough that a round of groups checkpoints several times."""
GROUPS_PER_ROUND = 24
DEFAULT_SEEDS = 6
"""Seeds whose every crash point the default run tries (about 200 trials each)."""
BEYOND_SEEDS_DIVISOR = 4
"""The harsher damage model runs a quarter as many seeds: it only checks for wrong values."""
BEYOND_SEED_BASE = 100
SEEDS = max(1, int(os.environ.get("MINIDB_CRASH_SEEDS", DEFAULT_SEEDS)))
SECONDS_PER_SEED = 15
"""Timeout budget per seed of the sweep (about 2 s each on a quiet core), for long runs."""
KEYS = [(bucket, b"k%d" % i) for bucket in (b"a", b"b") for i in range(6)]

Key = tuple[bytes, bytes]
Group = list[list[Request]]  # batches of requests, committed together


class _Sink:
    def flush(self) -> None:
        pass

    def output_room(self) -> int:
        return UNBOUNDED_OUTPUT


SINK = _Sink()


@functools.cache
def workload(seed: int) -> list[Group]:
    """Deterministic groups of SET/DEL batches over a small key space (overwrites are common)."""
    rng = random.Random(seed)
    groups: list[Group] = []
    serial = 0
    for _ in range(GROUPS_PER_ROUND):
        group: Group = []
        for _ in range(rng.choice((1, 1, 2, 3))):
            batch: list[Request] = []
            for _ in range(rng.randint(1, 4)):
                bucket, key = rng.choice(KEYS)
                if rng.random() < 0.25:
                    batch.append(Delete(bucket, key))
                else:
                    serial += 1
                    pad = b"x" * rng.choice((0, 0, 16, 100, 600))
                    batch.append(Set(bucket, key, b"v%d.%d" % (seed, serial) + pad))
            group.append(batch)
        groups.append(group)
    return groups


def _applied(state: dict[Key, bytes], request: Request) -> dict[Key, bytes]:
    state = dict(state)
    if isinstance(request, Set):
        state[(request.bucket, request.key)] = request.value
    else:
        assert isinstance(request, Delete)
        state.pop((request.bucket, request.key), None)
    return state


@dataclass
class Model:
    """What the store may hold: every acknowledged write, and a prefix of the group in flight."""

    acked: dict[Key, bytes] = field(default_factory=dict)
    in_flight: list[Request] = field(default_factory=list)

    def candidates(self) -> Iterator[dict[Key, bytes]]:
        state = self.acked
        yield state
        for request in self.in_flight:
            state = _applied(state, request)
            yield state

    def acknowledge(self) -> None:
        for request in self.in_flight:
            self.acked = _applied(self.acked, request)
        self.in_flight = []

    def settle(self, observed: dict[Key, bytes]) -> None:
        """Check ``observed`` is a state the store may be in; it is the truth from now on."""
        for candidate in self.candidates():
            if candidate == observed:
                self.acked, self.in_flight = candidate, []
                return
        lost = {k: v for k, v in self.acked.items() if observed.get(k) != v}
        raise AssertionError(
            f"recovered state is no acked state plus a prefix of the group in flight:\n"
            f"  acked values missing or changed: {lost}\n"
            f"  recovered: {observed}\n  in flight: {self.in_flight}"
        )


def observe(state: StoreState) -> dict[Key, bytes]:
    """The store's keys and values, read through the protocol (not the record format)."""
    found = {}
    for bucket, key in KEYS:
        reply = state.apply(Get(bucket, key))
        if reply != NIL:
            assert reply.startswith(b"VALUE ") and reply.endswith(b"\n"), reply
            found[(bucket, key)] = reply[len(b"VALUE ") : -1]
    assert len(state) == len(found), "the store holds keys no request wrote"
    return found


class LaterCheckpoints:
    """The real log, but each ``finish_checkpoint`` runs after the next group's sync, as when
    the owner hands it to a worker thread and appends go on meanwhile (deterministically)."""

    def __init__(self, log: DurableLog) -> None:
        self.log = log
        self._pending: tuple[int, Iterable[bytes]] | None = None

    def append(self, record: bytes) -> None:
        self.log.append(record)

    def append_all(self, records: list[bytes]) -> None:
        self.log.append_all(records)

    def append_groups(self, groups: list[list[Op]]) -> None:
        self.log.append_groups(groups)

    def sync(self) -> None:
        self.log.sync()
        if self._pending is not None:
            base, records = self._pending
            self._pending = None
            self.log.finish_checkpoint(base, records)

    def wants_checkpoint(self) -> bool:
        return self._pending is None and self.log.wants_checkpoint()

    def checkpoint(self, records: Iterable[bytes]) -> None:
        self.log.checkpoint(records)

    def begin_checkpoint(self) -> int:
        return self.log.begin_checkpoint()

    def finish_checkpoint(self, base: int, records: Iterable[bytes]) -> None:
        self._pending = (base, records)

    def close(self) -> None:
        self.log.close()


def run_round(
    config: ServerConfig,
    fs: CrashFS,
    model: Model,
    groups: list[Group],
    outcome: Outcome,
    later_checkpoints: bool = False,
) -> None:
    """Open the store through ``fs``, check it, then commit ``groups`` until the power goes."""
    with using(fs):
        state, log = open_store(config)
        outcome.torn_tails += log.torn_tail is not None
        model.settle(observe(state))
        log.segment_bytes = SEGMENT_BYTES
        owner = StoreOwner(state, LaterCheckpoints(log) if later_checkpoints else log, mailbox=4096)
        for group in groups:
            batches = [Batch(requests, SINK, math.inf) for requests in group]
            model.in_flight = [r for requests in group for r in requests]
            try:
                owner.commit(batches)
            finally:
                # Released replies are acknowledged, even if a checkpoint after them crashed.
                if batches[0].replies is not None:
                    model.acknowledge()
            for batch in batches:
                assert batch.replies is not None
                assert all(r in (b"OK\n", NIL) for r in batch.replies), batch.replies


@dataclass
class Outcome:
    """What a sweep did: every round of a trial ends in a power loss."""

    trials: int = 0
    power_losses: int = 0
    mid_round: int = 0  # power losses that struck before the round's work was done
    torn_tails: int = 0  # opens that found and cut a torn tail
    refused: int = 0  # opens refused with CorruptionError where the damage model allows it

    def __str__(self) -> str:
        return (
            f"{self.trials} trials, {self.power_losses} power losses ({self.mid_round} "
            f"mid-round), {self.torn_tails} torn tails cut, {self.refused} refusals"
        )


def crash_trial(
    directory: pathlib.Path,
    seed: int,
    crash_points: list[int | None],
    damage: Damage = POWER_LOSS,
    fs_class: type[CrashFS] = CrashFS,
    outcome: Outcome | None = None,
) -> Outcome:
    """Run one round per crash point on a fresh directory, then open it for real and check.

    A refusal to start (``CorruptionError``) fails the trial unless ``damage`` goes beyond
    what a power loss can do; then it is counted in the returned ``Outcome``.
    """
    outcome = Outcome() if outcome is None else outcome
    outcome.trials += 1
    shutil.rmtree(directory, ignore_errors=True)
    config = ServerConfig(
        data_dir=directory, checkpoint_bytes=CHECKPOINT_BYTES, checkpoint_growth=0
    )
    model = Model()
    notes: list[str] = []
    try:
        for round_number, crash_after in enumerate(crash_points):
            fs = fs_class(
                directory,
                seed=f"{seed}/{round_number}/{crash_after}",
                crash_after=crash_after,
                damage=damage,
            )
            try:
                groups = workload(seed * 1000 + round_number)
                run_round(config, fs, model, groups, outcome, later_checkpoints=seed % 2 == 1)
            except PowerLoss:
                outcome.mid_round += 1
            fs.power_loss()
            outcome.power_losses += 1
            notes.append(f"round {round_number} ({fs.operations} ops): " + "; ".join(fs.report))
        assert _fs.active() is _fs.OS
        state, log = open_store(config)
        outcome.torn_tails += log.torn_tail is not None
        log.close()
        model.settle(observe(state))
    except CorruptionError:
        if damage is POWER_LOSS:
            raise _failure(seed, crash_points, notes) from None
        outcome.refused += 1
    except AssertionError as exc:
        raise _failure(seed, crash_points, notes, exc) from None
    return outcome


def _failure(
    seed: int, points: list[int | None], notes: list[str], exc: BaseException | None = None
) -> AssertionError:
    import traceback

    detail = "".join(traceback.format_exception(exc)) if exc else traceback.format_exc()
    return AssertionError(
        f"power loss broke the store: seed={seed} crash_points={points}\n"
        + "\n".join(notes) + "\n" + detail
    )


def operations_of_a_round(directory: pathlib.Path, seed: int) -> int:
    """How many operations a first round makes when the power stays on."""
    shutil.rmtree(directory, ignore_errors=True)
    fs = CrashFS(directory)
    config = ServerConfig(
        data_dir=directory, checkpoint_bytes=CHECKPOINT_BYTES, checkpoint_growth=0
    )
    run_round(config, fs, Model(), workload(seed * 1000), Outcome(), seed % 2 == 1)
    fs.power_loss()
    return fs.operations


def sweep(
    directory: pathlib.Path, seeds: range, damage: Damage, fs_class: type[CrashFS] = CrashFS
) -> Outcome:
    """Every crash point of the first round of each seed, each followed by a random second."""
    outcome = Outcome()
    for seed in seeds:
        total = operations_of_a_round(directory, seed)
        rng = random.Random(seed)
        for crash_after in range(total + 1):
            second = rng.randint(0, total)
            crash_trial(directory, seed, [crash_after, second], damage, fs_class, outcome)
    return outcome


@pytest.fixture
def fast_dir(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A data dir on tmpfs when there is one: the final open's real fsyncs then cost nothing."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        root = tempfile.mkdtemp(prefix="minidb-crash-", dir="/dev/shm")
        yield pathlib.Path(root) / "data"
        shutil.rmtree(root, ignore_errors=True)
    else:
        yield tmp_path / "data"


@pytest.fixture
def report(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> Callable[[str, Outcome], None]:
    """Quiet the store's per-open log lines (thousands) and print a sweep's totals."""
    caplog.set_level(logging.CRITICAL, logger="minidb")

    def show(what: str, outcome: Outcome) -> None:
        with capsys.disabled():
            print(f"\n{what}: {outcome}")

    return show


@pytest.mark.timeout(max(120, SEEDS * SECONDS_PER_SEED))
def test_power_loss_at_every_operation_keeps_every_acknowledged_write(
    fast_dir: pathlib.Path, report: Callable[[str, Outcome], None]
) -> None:
    """At every crash point of a few seeds the store opens with every acked write and no
    resurrected one."""
    outcome = sweep(fast_dir, range(SEEDS), POWER_LOSS)
    report("power loss", outcome)
    assert outcome.refused == 0 and outcome.torn_tails > 0


@pytest.mark.timeout(max(120, SEEDS * SECONDS_PER_SEED))
def test_damage_beyond_power_loss_is_refused_or_harmless(
    fast_dir: pathlib.Path, report: Callable[[str, Outcome], None]
) -> None:
    """With unsynced sectors reordered or garbage, the store refuses to start or opens with
    every acked write; it never serves a wrong value."""
    seeds = max(1, SEEDS // BEYOND_SEEDS_DIVISOR)
    outcome = sweep(fast_dir, range(BEYOND_SEED_BASE, BEYOND_SEED_BASE + seeds), BEYOND_POWER_LOSS)
    report("beyond power loss", outcome)


# -- what the sweep found, replayed ------------------------------------------------------------
# The seeds replay the sweep's original findings (they depend on the workload and on how many
# operations each step takes, so a format change may move them); the byte-level tests below
# pin the two disk states themselves.


@pytest.mark.parametrize(
    ("seed", "crash_points"),
    [
        (2, [30, 93]),  # a new segment's header: its size reached the disk, its bytes did not
        (17, [171, 30]),  # a record header torn at a sector boundary, zeros after it
    ],
)
def test_power_loss_found_by_the_sweep_opens(
    fast_dir: pathlib.Path, seed: int, crash_points: list[int | None]
) -> None:
    """The crash points where the sweep first found a refusal to start now open correctly."""
    assert crash_trial(fast_dir, seed, crash_points).refused == 0


_KV = encode_ops([Put(b"a", b"k", b"v")])
_AFTER = encode_ops([Put(b"a", b"after", b"crash")])


def _log_with_one_record(directory: pathlib.Path) -> pathlib.Path:
    log, replay = open_log(directory)
    assert list(replay) == []
    log.append(_KV)
    log.sync()
    log.close()
    (segment,) = sorted(directory.glob("wal-*.log"))
    return segment


def _reopen_and_write(directory: pathlib.Path) -> list[bytes]:
    log, replay = open_log(directory)
    records = [encode_ops(ops) for ops in replay]
    assert log.torn_tail is not None, "the zeros were not recognised as a torn tail"
    log.append(_AFTER)
    log.sync()
    log.close()
    return records


@pytest.mark.parametrize("written", range(1, RECORD_HEADER_SIZE))
def test_record_header_cut_by_zeros_is_a_torn_tail(
    tmp_path: pathlib.Path, written: int
) -> None:
    """A record whose header was cut by zeros (the file grew, the sector never came) is torn."""
    directory = tmp_path / "data"
    segment = _log_with_one_record(directory)
    record = encode_record(1, encode_ops([Put(b"a", b"k2", b"y" * 100)]))
    with open(segment, "ab") as f:
        f.write(record[:written] + bytes(len(record) - written))
    assert _reopen_and_write(directory) == [_KV]
    assert replay_all(directory)[1] == [_KV, _AFTER]


def test_zero_filled_newest_segment_is_a_torn_tail(tmp_path: pathlib.Path) -> None:
    """A new segment whose header never reached the disk but whose size did is rewritten."""
    directory = tmp_path / "data"
    segment = _log_with_one_record(directory)
    with open(segment, "ab") as f:
        f.write(encode_end(1, 1))  # the log closes a segment before it starts the next
    next_segment = segment.with_name("wal-0000000000000001.log")
    next_segment.write_bytes(bytes(FILE_HEADER_SIZE))
    assert _reopen_and_write(directory) == [_KV]
    assert replay_all(directory)[1] == [_KV, _AFTER]


def test_verified_header_with_unknown_type_followed_by_zeros_is_damage(
    tmp_path: pathlib.Path,
) -> None:
    """A header whose own checksum verifies but whose type the writer never produces is damage,
    whatever follows it (zeros included): only an unverifiable header can be a tear."""
    directory = tmp_path / "data"
    segment = _log_with_one_record(directory)
    length = 10
    head = struct.pack("<IB", length, 0x7F)
    header = head + struct.pack("<I", crc32c(head)) + struct.pack("<I", 0)
    assert len(header) == RECORD_HEADER_SIZE
    with open(segment, "ab") as f:
        f.write(header + bytes(64))
    with pytest.raises(CorruptionError, match="unknown record type 127"):
        replay_all(directory)


# -- the sweep can fail ------------------------------------------------------------------------


class _ForgetsDirectorySyncs(CrashFS):
    """A log that never fsyncs its directory (the bug ALICE found most often)."""

    def fsync_dir(self, directory: str) -> None:
        self._alive()


class _ForgetsDataSyncs(CrashFS):
    """A log whose group commit never reaches the disk."""

    def fdatasync(self, fd: int) -> None:
        self._alive()


@pytest.mark.parametrize("fs_class", [_ForgetsDirectorySyncs, _ForgetsDataSyncs])
def test_power_loss_sweep_catches_a_log_that_skips_a_sync(
    fast_dir: pathlib.Path, fs_class: type[CrashFS]
) -> None:
    """Take away the directory fsyncs, or the fdatasync of each group, and the sweep fails."""
    with pytest.raises(AssertionError, match="power loss broke the store"):
        sweep(fast_dir, range(1), POWER_LOSS, fs_class)
