"""The shipper on a live server (``file:`` store): what is acknowledged is shipped in time,
checkpoints wait for it, a restart continues, and nothing is ever overwritten."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from minidb.objstore import FileStore, ObjectStore
from minidb.replication import LOCAL_FILE, Catalog, list_catalog
from minidb.server import Server, ServerConfig

from .conftest import LineConn, Target, run_server
from .shipped import State, shipped_state

SHIP_INTERVAL_S = 0.2
"""Ship interval of these tests, in seconds: short, so deadlines stay short."""
SHIP_DEADLINE_S = SHIP_INTERVAL_S + 2.0
"""How long a test waits for a write to appear in the store: one interval plus a generous
allowance for one upload on a busy machine (the bound that fails the test, not the typical)."""


def _config(tmp_path: Path, **kw: object) -> ServerConfig:
    settings: dict[str, object] = dict(
        port=0, data_dir=tmp_path / "data", replicate_to=f"file:{tmp_path / 'objects'}",
        ship_interval=SHIP_INTERVAL_S,
    )
    settings.update(kw)
    return ServerConfig(**settings)  # type: ignore[arg-type]


async def _wait_shipped(store: ObjectStore, model: State, deadline_s: float) -> float:
    """Seconds until the store's newest state equals ``model``; fails after ``deadline_s``."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    state: State = {}
    while loop.time() - start < deadline_s:
        try:
            state, _ = await shipped_state(store)
        except Exception:  # nothing shipped yet
            state = {}
        if state == model:
            return loop.time() - start
        await asyncio.sleep(0.02)
    missing = {k for k in model if state.get(k) != model[k]}
    pytest.fail(f"not shipped within {deadline_s}s: {len(missing)} keys differ, e.g. "
                f"{sorted(missing)[:3]}")


def test_shipper_ships_every_acknowledged_write_within_an_interval(
    tmp_path: Path, target: Target
) -> None:
    """Each burst of acknowledged writes is in the store, checksums verified, within one ship
    interval plus one upload, on both backends."""

    async def body(server: Server) -> list[float]:
        assert server.line_address is not None
        conn = await LineConn.open(server.line_address[1])
        store = target.open()
        model: State = {}
        waits = []
        for burst in range(4):
            for i in range(50):
                key, value = f"k{burst}-{i}", f"v{burst}-{i}"
                assert await conn.request(f"SET b {key} {value}") == "OK"
                model[(b"b", key.encode())] = value.encode()
            assert await conn.request(f"DEL b k{burst}-0") in ("OK", "1")
            del model[(b"b", f"k{burst}-0".encode())]
            waits.append(await _wait_shipped(store, model, SHIP_DEADLINE_S))
        await conn.close()
        await store.close()
        return waits

    waits = run_server(_config(tmp_path, replicate_to=target.url, **target.settings), body)
    print(f"{target.backend} ship latency per burst (s): {[round(w, 3) for w in waits]}")


def test_checkpoints_keep_unshipped_files_until_shipped(tmp_path: Path) -> None:
    """With shipping on, checkpoints still happen, the newest one's snapshot is shipped, and
    every record survives in the store's chain although the segments that held them were
    deleted locally. (A round ships the newest snapshot only: checkpoints that fall within one
    ship interval, as they do on a fast machine, leave one snapshot between them.)"""

    async def body(server: Server) -> None:
        assert server.line_address is not None
        conn = await LineConn.open(server.line_address[1])
        store = FileStore(str(tmp_path / "objects"))
        model: State = {}
        for i in range(400):
            assert await conn.request(f"SET b key{i} {'x' * 40}{i}") == "OK"
            model[(b"b", f"key{i}".encode())] = f"{'x' * 40}{i}".encode()
        await _wait_shipped(store, model, SHIP_DEADLINE_S)
        assert server.owner.statistics().checkpoints >= 2
        newest = server.owner.log.position().snapshot_base  # type: ignore[attr-defined]
        assert newest is not None
        # The newest state may be complete from chunks before the last checkpoint's snapshot
        # lands (it ships in the next round): wait for it, within the same deadline.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SHIP_DEADLINE_S
        while True:
            catalog = await list_catalog(store)
            (gen,) = catalog.generations.values()
            bases = [snapshot.base for snapshot in gen.snapshots]
            if newest in bases or loop.time() > deadline:
                break
            await asyncio.sleep(0.02)
        assert newest in bases, f"the newest checkpoint's snapshot ({newest}) is shipped: {bases}"
        # The chunks cover the log from 0 without a hole: nothing was deleted unshipped.
        expected = 0
        for chunk in gen.chunks:
            assert chunk.first == expected, chunk.key
            expected = chunk.last + 1
        assert expected == 400
        await conn.close()
        await store.close()

    run_server(_config(tmp_path, checkpoint_bytes=4096, checkpoint_growth=0), body)


def test_restart_continues_without_takeover_and_ships_a_complete_chain(tmp_path: Path) -> None:
    """A restart on the same data directory is the prefix's owner again (no --takeover), under
    a new generation that continues the old one, and its newest state is complete."""

    async def write(server: Server, start: int) -> None:
        assert server.line_address is not None
        conn = await LineConn.open(server.line_address[1])
        for i in range(start, start + 30):
            assert await conn.request(f"SET b k{i} v{i}") == "OK"
        await conn.close()

    run_server(_config(tmp_path), lambda s: write(s, 0))
    first = (tmp_path / "data" / LOCAL_FILE).read_text()
    run_server(_config(tmp_path), lambda s: write(s, 30))
    assert (tmp_path / "data" / LOCAL_FILE).read_text() != first

    async def check() -> None:
        store = FileStore(str(tmp_path / "objects"))
        state, plan = await shipped_state(store)
        assert state == {(b"b", f"k{i}".encode()): f"v{i}".encode() for i in range(60)}
        catalog: Catalog = await list_catalog(store)
        assert len(catalog.generations) == 2
        assert catalog.generations[plan.generation].parent is not None
        await store.close()

    asyncio.run(check())


def test_shipped_objects_are_created_never_overwritten(tmp_path: Path) -> None:
    """Every object the shipper writes is a create (If-None-Match); only ``current`` is ever
    replaced, and only by compare-and-set."""
    calls: list[tuple[str, str]] = []
    real = {name: getattr(FileStore, name) for name in ("put", "put_if_absent",
                                                        "compare_and_set", "upload")}

    def spy(name: str):  # type: ignore[no-untyped-def]
        async def method(self: FileStore, key: str, *args: object, **kw: object) -> object:
            calls.append((name, key))
            return await real[name](self, key, *args, **kw)
        return method

    mp = pytest.MonkeyPatch()
    for name in real:
        mp.setattr(FileStore, name, spy(name))
    try:
        async def body(server: Server) -> None:
            assert server.line_address is not None
            conn = await LineConn.open(server.line_address[1])
            for i in range(300):
                assert await conn.request(f"SET b k{i} {'y' * 30}") == "OK"
            await conn.close()

        run_server(_config(tmp_path, checkpoint_bytes=4096, checkpoint_growth=0), body)
        run_server(_config(tmp_path), lambda s: asyncio.sleep(0))
    finally:
        mp.undo()
    assert not [c for c in calls if c[0] == "put"], "an unconditional PUT was sent"
    assert {key for name, key in calls if name == "compare_and_set"} <= {"current"}
    created = [key for name, key in calls if name in ("put_if_absent", "upload")]
    assert len(created) == len(set(created)), "a key was created twice"
    assert any(key.endswith(".snap") for key in created)
    assert os.path.exists(tmp_path / "objects" / "current")
