"""``kill -9`` of a shipping primary under load: every write acknowledged more than one ship
interval (plus one upload) before the kill is in the store; the loss window is measured."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from minidb.objstore import FileStore, ObjectStore
from tests.objstore.s3rig import ACCESS_KEY, REGION, SECRET_KEY
from tests.server.conftest import ServeFactory

from .shipped import shipped_state

SHIP_INTERVAL_S = 0.5
UPLOAD_ALLOWANCE_S = 0.5
"""Time allowed for the one upload in flight at the kill, on a busy shared machine."""
LOAD_S = 2.5
"""How long the writes run before the kill."""


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_kill_9_loses_at_most_the_last_ship_interval(
    serve: ServeFactory, tmp_path: Path, backend: str, request: pytest.FixtureRequest,
) -> None:
    """Writes acknowledged earlier than ship interval + one upload before ``kill -9`` are all
    shipped; the test prints the measured loss window (RPO)."""
    if backend == "file":
        url, env, extra = f"file:{tmp_path / 'objects'}", {}, []

        def open_store() -> ObjectStore:
            return FileStore(str(tmp_path / "objects"))
    else:
        rig = request.getfixturevalue("s3rig")
        request.getfixturevalue("proxy")
        bucket = rig.server.new_bucket()
        url = f"s3://{bucket}/db"
        env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
               "AWS_REGION": REGION}
        extra = ["--s3-endpoint", rig.proxy.endpoint]

        def open_store() -> ObjectStore:
            return rig.store(bucket, "db")  # type: ignore[no-any-return]

    server = serve("--replicate-to", url, "--ship-interval", str(SHIP_INTERVAL_S),
                   "--checkpoint-bytes", "65536", *extra, env=env)
    client = server.client()
    acked: list[tuple[str, float]] = []
    end = time.monotonic() + LOAD_S
    i = 0
    while time.monotonic() < end:
        assert client.request(f"SET b k{i} value-{i}") == "OK"
        acked.append((f"k{i}", time.monotonic()))
        i += 1
    killed_at = time.monotonic()
    server.kill()

    async def shipped() -> set[str]:
        store = open_store()
        try:
            state, _ = await shipped_state(store)
        finally:
            await store.close()
        return {key.decode() for (_, key) in state}

    present = asyncio.run(shipped())
    missing = [(key, at) for key, at in acked if key not in present]
    window = killed_at - missing[0][1] if missing else 0.0
    print(f"\n{backend}: {len(acked)} writes acknowledged in {LOAD_S}s, {len(missing)} not"
          f" shipped at kill -9; loss window (RPO) {window:.3f}s"
          f" (ship interval {SHIP_INTERVAL_S}s)")
    assert window <= SHIP_INTERVAL_S + UPLOAD_ALLOWANCE_S, (
        f"a write acknowledged {window:.3f}s before the kill was lost"
    )
    # Only a suffix may be missing: a write is never shipped before an earlier one.
    assert all(key not in present for key, _ in missing)
    first_missing = len(acked) - len(missing)
    assert [k for k, _ in acked[first_missing:]] == [k for k, _ in missing]
