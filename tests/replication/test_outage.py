"""Shipping to S3 (moto behind the fault proxy): an outage delays no write and loses nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from minidb.objstore import S3Store
from minidb.server import Server, ServerConfig
from tests.objstore.faultproxy import Action, FaultProxy, Rule
from tests.objstore.s3rig import ACCESS_KEY, REGION, SECRET_KEY

from .conftest import LineConn, run_server
from .shipped import State, shipped_state

SHIP_INTERVAL_S = 0.2
WRITE_LATENCY_BOUND_S = 0.5
"""No write may take longer than this during the outage (it would if shipping were on the
owner's path: each upload attempt takes at least a round trip, retries take seconds)."""
RECOVERY_DEADLINE_S = 15.0
"""How long after the store is back everything must be shipped (backoff is capped at 2 s)."""


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_REGION", REGION)


def _store(s3rig, bucket: str) -> S3Store:  # type: ignore[no-untyped-def]
    return s3rig.store(bucket, "db")  # type: ignore[no-any-return]


async def _converge(store: S3Store, model: State, deadline_s: float) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    state: State = {}
    while loop.time() < end:
        try:
            state, _ = await shipped_state(store)
        except Exception:
            state = {}
        if state == model:
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"store did not converge: {len(model)} keys written, {len(state)} shipped")


@pytest.mark.parametrize("fault", [Action.ERROR_BEFORE, Action.DROP_BEFORE])
def test_s3_outage_delays_no_write_and_loses_nothing(
    tmp_path: Path, s3rig, proxy: FaultProxy, s3_env: None, fault: Action,  # type: ignore[no-untyped-def]
) -> None:
    """While every request to the store fails (503 or a dropped connection), writes go on at
    full speed and the lag grows; once the store is back, the shipped state equals the model,
    including an upload whose first attempt landed but was answered with an error."""
    bucket = s3rig.server.new_bucket()
    config = ServerConfig(
        port=0, data_dir=tmp_path / "data", replicate_to=f"s3://{bucket}/db",
        s3_endpoint=proxy.endpoint, ship_interval=SHIP_INTERVAL_S, checkpoint_bytes=8192,
        checkpoint_growth=0,
    )

    async def body(server: Server) -> None:
        assert server.line_address is not None
        conn = await LineConn.open(server.line_address[1])
        loop = asyncio.get_running_loop()
        model: State = {}

        async def write(n: int, tag: str) -> float:
            worst = 0.0
            for i in range(n):
                started = loop.time()
                assert await conn.request(f"SET b {tag}{i} {'v' * 30}{i}") == "OK"
                worst = max(worst, loop.time() - started)
                model[(b"b", f"{tag}{i}".encode())] = f"{'v' * 30}{i}".encode()
            return worst

        # A chunk upload lands but is answered 500: the retry must find its own object and go
        # on, not stop or upload a second copy.
        ambiguous = proxy.add(Rule(Action.ERROR_AFTER, method="PUT", key="/wal/", status=500,
                                   nth=1))
        await write(50, "before")
        store = _store(s3rig, bucket)
        await _converge(store, model, RECOVERY_DEADLINE_S)
        assert ambiguous.fired == 1, "the ambiguous upload was not exercised"
        proxy.add(Rule(fault, key=".", status=503))
        worst = await write(300, "during")
        await asyncio.sleep(1.0)
        stats = server.statistics().replication
        assert stats is not None
        assert stats.failures > 0 and stats.lag_records > 0 and stats.lag_seconds > 0.5
        assert server.owner.statistics().checkpoints >= 1, "checkpoints went on meanwhile"
        assert worst < WRITE_LATENCY_BOUND_S, f"a write took {worst:.3f}s during the outage"
        proxy.clear()
        await _converge(store, model, RECOVERY_DEADLINE_S)
        await store.close()
        await conn.close()
        print(f"worst write latency during the outage: {worst * 1000:.1f} ms;"
              f" failures counted: {stats.failures}")

    run_server(config, body)
