"""A real primary shipping (``--replicate-to``), a real replica following it, ``kill -9`` of the
primary, then ``restore`` on a fresh directory, to the newest point, a sequence number and a
time; and promoting the replica (both backends)."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import pytest

from minidb.replication._restore import current_pointer, restore
from minidb.wal import Put, Remove, open_log
from tests.replication.conftest import Served
from tests.server.conftest import LineClient, ServeFactory, ServerProcess

SHIP_INTERVAL_S = 0.3
"""The primary's ship interval and the replica's poll interval in these tests (seconds)."""
UPLOAD_ALLOWANCE_S = 0.7
"""Time allowed for the one upload in flight at the kill, on a busy shared machine."""
LAG_BOUND_S = 6 * SHIP_INTERVAL_S + 1.0
"""How long the replica may take to show a write: a few ship intervals (plus a loaded machine)."""
DEADLINE_S = 30.0
"""Deadline of any one wait or store call here."""
WRITES = 400


def restored_state(data_dir: Path) -> dict[bytes, bytes]:
    log, replay = open_log(data_dir)
    state: dict[bytes, bytes] = {}
    for ops in replay:
        for op in ops:
            if isinstance(op, Put):
                state[op.key] = op.value
            elif isinstance(op, Remove):
                state.pop(op.key, None)
    log.close()
    return state


def wait_value(client: LineClient, key: str, want: str) -> float:
    started = time.monotonic()
    while client.request(f"GET b {key}") != want:
        if time.monotonic() - started > DEADLINE_S:
            pytest.fail(f"the replica never showed {key} = {want}")
        time.sleep(0.02)
    return time.monotonic() - started


def primary(serve: ServeFactory, served: Served, data: Path, *extra: str) -> ServerProcess:
    return serve(
        "--replicate-to", served.url, "--ship-interval", str(SHIP_INTERVAL_S),
        "--checkpoint-bytes", "32768", *served.args, *extra, data_dir=data, env=served.env,
    )


def test_replica_converges_and_restore_after_kill_9_loses_at_most_one_interval(
    serve: ServeFactory, served: Served, tmp_path: Path
) -> None:
    """Under writes the replica equals the primary key by key within a few ship intervals;
    after ``kill -9`` of the primary a restore holds every write acknowledged more than one
    ship interval (plus an upload) before the kill, and restores to a sequence number and to
    a time give exactly the state of that moment."""
    main = primary(serve, served, tmp_path / "primary")
    writer = main.client()
    # Record 0 must exist before the replica restores: it follows from there.
    assert writer.request("SET b k0 v0") == "OK"
    acked: list[tuple[str, str, float, float]] = [("k0", "v0", time.time(), time.monotonic())]
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            served.run(current_pointer(served.store))
            break
        except Exception:
            assert time.monotonic() < deadline, "the primary never shipped"
            time.sleep(0.05)
    time.sleep(2 * SHIP_INTERVAL_S)
    replica = serve(
        "--replica-of", served.url, "--poll-interval", str(SHIP_INTERVAL_S), *served.args,
        data_dir=tmp_path / "replica", env=served.env,
    )
    reader = replica.client()
    lags = []
    for i in range(1, WRITES):
        key, value = f"k{i % 50}", f"v{i}"
        assert writer.request(f"SET b {key} {value}") == "OK"
        acked.append((key, value, time.time(), time.monotonic()))
        if i % 100 == 0:
            lags.append(wait_value(reader, key, f"VALUE {value}"))
    lags.append(wait_value(reader, acked[-1][0], f"VALUE {acked[-1][1]}"))
    model: dict[str, str] = {}
    for key, value, _, _ in acked:
        model[key] = value
    for key, value in model.items():  # key by key, primary and replica
        assert reader.request(f"GET b {key}") == writer.request(f"GET b {key}") == f"VALUE {value}"
    print(f"\nreplica lag behind acknowledged writes: max {max(lags):.3f} s"
          f" (ship and poll interval {SHIP_INTERVAL_S} s)")
    assert max(lags) < LAG_BOUND_S

    # More writes, then kill -9 with some of them not shipped yet.
    end = time.monotonic() + 4 * SHIP_INTERVAL_S
    i = WRITES
    while time.monotonic() < end:
        assert writer.request(f"SET b x{i} v{i}") == "OK"
        acked.append((f"x{i}", f"v{i}", time.time(), time.monotonic()))
        i += 1
    killed_at = time.monotonic()
    main.kill()

    newest = tmp_path / "restored"
    result = served.run(restore(served.store, newest))
    state = restored_state(newest)
    # The log is one SET per record, in the order acknowledged: the restore is a prefix.
    kept = result.plan.last_seq + 1
    assert kept <= len(acked)
    prefix: dict[bytes, bytes] = {}
    for key, value, _, _ in acked[:kept]:
        prefix[key.encode()] = value.encode()
    assert state == prefix
    window = killed_at - acked[kept][3] if kept < len(acked) else 0.0
    print(f"restore after kill -9: {kept} of {len(acked)} acknowledged writes; loss window"
          f" (RPO) {window:.3f} s (ship interval {SHIP_INTERVAL_S} s)")
    assert window <= SHIP_INTERVAL_S + UPLOAD_ALLOWANCE_S

    # Point in time: by sequence number exactly; by time, the newest chunk boundary.
    seq = kept // 2
    served.run(restore(served.store, tmp_path / "at-seq", at_seq=seq))
    expect: dict[bytes, bytes] = {}
    for key, value, _, _ in acked[: seq + 1]:
        expect[key.encode()] = value.encode()
    assert restored_state(tmp_path / "at-seq") == expect
    at_ms = int(acked[seq][2] * 1000)
    timed = served.run(restore(served.store, tmp_path / "at-time", at_time_ms=at_ms))
    n = timed.plan.last_seq + 1
    expect = {}
    for key, value, _, _ in acked[:n]:
        expect[key.encode()] = value.encode()
    assert restored_state(tmp_path / "at-time") == expect
    assert all(at <= at_ms / 1000 + 0.002 for _, _, at, _ in acked[:n])  # nothing after
    lost = at_ms / 1000 - acked[n][2] if n < len(acked) and n <= seq else 0.0
    assert lost <= SHIP_INTERVAL_S + UPLOAD_ALLOWANCE_S, lost
    when = datetime.datetime.fromtimestamp(at_ms / 1000, datetime.UTC).isoformat()
    print(f"restore --at {when}: {n} writes (the write at that moment is number {seq + 1})")


def test_promoted_replica_ships_under_a_new_generation_and_fences_the_old_primary(
    serve: ServeFactory, served: Served, tmp_path: Path
) -> None:
    """``minidb promote`` turns the replica into a primary that takes writes and ships them
    under a new generation to the same prefix; the old primary is fenced."""
    main = primary(serve, served, tmp_path / "primary")
    writer = main.client()
    for i in range(20):
        assert writer.request(f"SET b k{i} v{i}") == "OK"
    time.sleep(3 * SHIP_INTERVAL_S)
    old = served.run(current_pointer(served.store)).generation
    replica = serve(
        "--replica-of", served.url, "--poll-interval", str(SHIP_INTERVAL_S),
        "--ship-interval", str(SHIP_INTERVAL_S), *served.args,
        data_dir=tmp_path / "replica", env=served.env,
    )
    reader = replica.client()
    wait_value(reader, "k19", "VALUE v19")
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "minidb", "promote", "--pid", str(replica.proc.pid)],
        capture_output=True, text=True, timeout=DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + DEADLINE_S
    while (reply := reader.request("SET b after promote")) != "OK":
        assert reply == "ERR read-only replica" and time.monotonic() < deadline, reply
        time.sleep(0.05)
    new = served.run(current_pointer(served.store)).generation
    assert new != old
    # The old primary is fenced at its next upload; the new one's writes are shipped.
    assert writer.request("SET b stale 1") == "OK"
    time.sleep(4 * SHIP_INTERVAL_S)
    result = served.run(restore(served.store, tmp_path / "restored"))
    assert result.plan.generation == new
    state = restored_state(tmp_path / "restored")
    assert state[b"after"] == b"promote" and b"stale" not in state
    assert state[b"k19"] == b"v19"
    main.terminate()
    main.wait()
    assert "replication_fenced" in main.stderr()
