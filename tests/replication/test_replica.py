"""``minidb serve --replica-of``: restore, follow shipped records, serve reads, refuse writes,
report lag, promote (both backends; the primary's objects are shipped by hand here, so every
byte and every moment is the test's)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.replication.conftest import Served
from tests.replication.handshipped import (
    BUCKET,
    T0_MS,
    Model,
    Shipped,
    ship_chunks,
    ship_snapshot,
    start_generation,
)
from tests.server.conftest import LineClient, ServeFactory, ServerProcess

redis = pytest.importorskip("redis", reason="redis-py is not installed (pip install redis)")

POLL_INTERVAL_S = 0.2
"""The replica's poll interval in these tests."""
CONVERGE_TIMEOUT_S = 20.0
"""Deadline for a replica to show what was shipped (a broken follower fails, never hangs)."""
LAG_BOUND_S = 10 * POLL_INTERVAL_S
"""What the lag may be once a chunk is listed: a few poll intervals (generous: 2 shared cores)."""


def replica(serve: ServeFactory, served: Served, data_dir: Path, *extra: str) -> ServerProcess:
    return serve(
        "--replica-of", served.url, "--poll-interval", str(POLL_INTERVAL_S),
        "--resp-port", "0", *served.args, *extra, data_dir=data_dir, env=served.env,
    )


def state_matches(client: LineClient, state: dict[bytes, bytes], keys: int) -> bool:
    """Whether every key the model ever used reads as the model says."""
    lines = [f"GET {BUCKET.decode()} k{i}" for i in range(keys)]
    replies = client.pipeline(lines)
    for i, reply in enumerate(replies):
        want = state.get(b"k%d" % i)
        if reply != ("NIL" if want is None else f"VALUE {want.decode()}"):
            return False
    return True


def wait_state(client: LineClient, state: dict[bytes, bytes], keys: int = 20) -> float:
    """Seconds until the replica serves exactly ``state``; fails at the deadline."""
    started = time.monotonic()
    while not state_matches(client, state, keys):
        if time.monotonic() - started > CONVERGE_TIMEOUT_S:
            pytest.fail("the replica did not converge to the shipped state in time")
        time.sleep(POLL_INTERVAL_S / 4)
    return time.monotonic() - started


def info_replication(server: ServerProcess) -> dict[str, object]:
    r = redis.Redis(port=server.resp_port, socket_timeout=5)
    try:
        return r.info("replication")  # type: ignore[no-any-return]
    finally:
        r.close()


def wait_follower_state(server: ServerProcess, state: str) -> None:
    """Wait until INFO replication shows the follower in ``state``; fail at the deadline."""
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    while info_replication(server)["minidb_replica_state"] != state:
        assert time.monotonic() < deadline, f"the follower never reached {state}"
        time.sleep(POLL_INTERVAL_S)


def test_replica_restores_follows_and_converges_key_by_key(
    serve: ServeFactory, served: Served, tmp_path: Path
) -> None:
    """A replica restores the shipped state, then applies each new chunk within a few poll
    intervals, key by key equal to the primary's, and says so in INFO replication."""
    model = Model.random(200, seed=3)
    gen = served.run(start_generation(served.store))
    shipped = Shipped(gen)
    served.run(ship_chunks(served.store, gen, model, 0, 59, 10, shipped))
    served.run(ship_snapshot(served.store, gen, model, 30, shipped))
    server = replica(serve, served, tmp_path / "replica")
    client = server.client()
    assert wait_state(client, model.state_after(59)) < CONVERGE_TIMEOUT_S
    lags = []
    for first in range(60, 200, 35):
        last = min(first + 34, 199)
        served.run(ship_chunks(served.store, gen, model, first, last, 7, shipped))
        lags.append(wait_state(client, model.state_after(last)))
    print(f"replica lag after a chunk is listed: max {max(lags):.3f} s, poll {POLL_INTERVAL_S} s")
    assert max(lags) < LAG_BOUND_S
    info = info_replication(server)
    assert info["role"] == "slave" and info["master_link_status"] == "up"
    assert info["slave_repl_offset"] == 200 and info["minidb_replica_lag_records"] == 0
    assert info["master_replid"] == gen


def test_replica_refuses_writes_on_both_protocols(
    serve: ServeFactory, served: Served, tmp_path: Path
) -> None:
    """Writes answer ERR read-only replica (line) and Redis's READONLY (RESP); reads work."""
    model = Model.random(10)
    gen = served.run(start_generation(served.store))
    served.run(ship_chunks(served.store, gen, model, 0, 9, 5, Shipped(gen)))
    server = replica(serve, served, tmp_path / "replica")
    client = server.client()
    wait_state(client, model.state_after(9))
    assert client.request("SET b k0 nope") == "ERR read-only replica"
    assert client.request("DEL b k0") == "ERR read-only replica"
    r = redis.Redis(port=server.resp_port, socket_timeout=5)
    try:
        readonly = "can't write against a read only replica"
        with pytest.raises(redis.exceptions.ReadOnlyError, match=readonly):
            r.set("x", "1")
        assert r.get("x") is None
    finally:
        r.close()
    assert state_matches(client, model.state_after(9), 20)


def test_replica_restart_resumes_from_its_own_log(
    serve: ServeFactory, served: Served, tmp_path: Path
) -> None:
    """A replica killed and started again on its directory resumes after the last record it
    logged, and follows what was shipped meanwhile."""
    model = Model.random(80, seed=5)
    gen = served.run(start_generation(served.store))
    shipped = Shipped(gen)
    served.run(ship_chunks(served.store, gen, model, 0, 39, 10, shipped))
    data = tmp_path / "replica"
    first = replica(serve, served, data)
    wait_state(first.client(), model.state_after(39))
    first.kill()
    served.run(ship_chunks(served.store, gen, model, 40, 79, 10, shipped))
    second = replica(serve, served, data)
    wait_state(second.client(), model.state_after(79))


def _primary_restarts_under_replica(
    serve: ServeFactory, served: Served, tmp_path: Path, seed: int, snapshot_at: int
) -> tuple[ServerProcess, Model, str]:
    """A replica that followed records 0-49 of a generation, then a new generation (the
    primary restarted) whose chain is a snapshot after record ``snapshot_at`` and the records
    after it up to 89: the replica, the model and the new generation."""
    model = Model.random(90, seed=seed)
    old = served.run(start_generation(served.store))
    served.run(ship_chunks(served.store, old, model, 0, 49, 10, Shipped(old)))
    server = replica(serve, served, tmp_path / "replica")
    wait_state(server.client(), model.state_after(49))
    new = served.run(start_generation(served.store, T0_MS + 100_000, parent=old, nonce=2))
    shipped = Shipped(new)
    served.run(ship_snapshot(served.store, new, model, snapshot_at, shipped))
    at = T0_MS + 100_000
    served.run(ship_chunks(served.store, new, model, snapshot_at, 89, 10, shipped, time_ms=at))
    return server, model, new


def test_replica_follows_a_new_generation_of_the_primary(
    serve: ServeFactory, served: Served, tmp_path: Path
) -> None:
    """When the primary restarts (a new generation whose initial chain starts at its snapshot,
    before the replica's position), the replica follows it without a gap or a repeat."""
    server, model, new = _primary_restarts_under_replica(serve, served, tmp_path, 9, 40)
    wait_state(server.client(), model.state_after(89))
    assert info_replication(server)["master_replid"] == new


def test_replica_refuses_a_damaged_chunk_and_keeps_serving(
    serve: ServeFactory, served: Served, tmp_path: Path
) -> None:
    """A damaged chunk stops the follower (refused, the reason logged naming the object); the
    replica keeps serving the state it had."""
    model = Model.random(40, seed=11)
    gen = served.run(start_generation(served.store))
    shipped = Shipped(gen)
    served.run(ship_chunks(served.store, gen, model, 0, 19, 10, shipped))
    server = replica(serve, served, tmp_path / "replica")
    client = server.client()
    wait_state(client, model.state_after(19))
    from minidb.replication._layout import chunk_for
    from tests.replication.handshipped import chunk_bytes

    data = bytearray(chunk_bytes(20, model.payloads[20:30]))
    data[30] ^= 0x01
    chunk = chunk_for(gen, 20, 29, T0_MS + 30_000, bytes(data))
    forged = chunk.__class__(chunk.generation, 20, 29, chunk.time_ms, chunk.size, chunk.crc ^ 1)
    served.run(served.store.put_if_absent(forged.key, bytes(data)))
    wait_follower_state(server, "refused")
    assert state_matches(client, model.state_after(19), 20)
    server.terminate()
    assert server.wait() == 0
    log = server.stderr()
    assert forged.key in log, log


def test_promoted_replica_takes_writes_after_the_shipped_records(
    serve: ServeFactory, served: Served, tmp_path: Path
) -> None:
    """SIGUSR1 (minidb promote) turns a replica into a primary: writes are taken and logged
    after the last shipped record, and survive a restart."""
    model = Model.random(30, seed=13)
    gen = served.run(start_generation(served.store))
    served.run(ship_chunks(served.store, gen, model, 0, 29, 10, Shipped(gen)))
    data = tmp_path / "replica"
    server = replica(serve, served, data)
    client = server.client()
    wait_state(client, model.state_after(29))
    os.kill(server.proc.pid, signal.SIGUSR1)
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    while (reply := client.request("SET b new 1")) != "OK":
        assert reply == "ERR read-only replica" and time.monotonic() < deadline, reply
        time.sleep(POLL_INTERVAL_S / 4)
    assert info_replication(server)["role"] == "master"
    server.terminate()
    assert server.wait() == 0
    again = serve(data_dir=data)
    expect = {**model.state_after(29)}
    assert again.client().request("GET b new") == "VALUE 1"
    assert state_matches(again.client(), expect, 20)


def test_replica_refuses_a_new_generation_starting_after_its_position(
    serve: ServeFactory, served: Served, tmp_path: Path
) -> None:
    """A new generation whose chain starts at a snapshot past the replica's position, with
    nothing shipped in between, is refused (restore afresh) rather than followed with a hole."""
    server, model, _ = _primary_restarts_under_replica(serve, served, tmp_path, 17, 70)
    wait_follower_state(server, "refused")
    assert state_matches(server.client(), model.state_after(49), 20)
