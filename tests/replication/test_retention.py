"""Retention: exactly the objects no restore point inside the window needs are deleted."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from minidb.errors import ConfigError
from minidb.objstore import FileStore
from minidb.replication import (
    GenerationKey,
    RestoreError,
    RetentionPolicy,
    chunk_for,
    expired_keys,
    generation_id,
    generation_started_ms,
    list_catalog,
    plan_restore,
    snapshot_for,
)
from minidb.server import Server, ServerConfig

from .conftest import LineConn, run_server
from .shipped import shipped_state
from .test_layout import Entry

G1 = generation_id(1_700_000_000_000, 1)
G2 = generation_id(1_700_000_500_000, 2)
T1, T2 = generation_started_ms(G1), generation_started_ms(G2)


def _objects() -> list:  # type: ignore[type-arg]
    """Two generations: G1 with snapshots at 10 and 20, G2 (its child) with one at 30."""
    def c(g: str, a: int, b: int, t: int):  # type: ignore[no-untyped-def]
        return chunk_for(g, a, b, t, f"{g}{a}".encode())

    def s(g: str, base: int, t: int):  # type: ignore[no-untyped-def]
        return snapshot_for(g, base, t, f"{g}{base}".encode())

    return [
        GenerationKey(G1, None), c(G1, 0, 9, T1 + 100), s(G1, 10, T1 + 110),
        c(G1, 10, 19, T1 + 200), s(G1, 20, T1 + 210), c(G1, 20, 29, T1 + 300),
        GenerationKey(G2, G1), s(G2, 30, T2), c(G2, 30, 39, T2 + 100),
    ]


def _catalog(objects: list):  # type: ignore[no-untyped-def,type-arg]
    from minidb.replication import Catalog

    return Catalog.from_listing(
        [Entry(o.key, 0 if isinstance(o, GenerationKey) else o.size) for o in objects]
    )


def test_retain_parses_windows_and_counts() -> None:
    """``24h``/``30m``/``7d``/``90s`` are windows, a bare number a snapshot count."""
    assert RetentionPolicy.parse("24h").window_ms == 86_400_000
    assert RetentionPolicy.parse("90s").window_ms == 90_000
    assert RetentionPolicy.parse("3").snapshots == 3
    for bad in ("0", "1w", "-5", "h", ""):
        with pytest.raises(ConfigError):
            RetentionPolicy.parse(bad)


def test_window_deletes_only_what_precedes_the_oldest_points_snapshot() -> None:
    """A window whose edge lies after G1's snapshot 20 deletes snapshot 10 and the chunks
    before 20, nothing else; every point inside the window still plans."""
    objects = _objects()
    catalog = _catalog(objects)
    now = T1 + 250 + 1000
    doomed = expired_keys(catalog, G2, now, RetentionPolicy(window_ms=1000))
    by_key = {o.key: o for o in objects}
    assert sorted((type(by_key[k]).__name__, getattr(by_key[k], "first", getattr(by_key[k],
                   "base", None))) for k in doomed) == [
        ("ChunkObject", 0), ("ChunkObject", 10), ("SnapshotObject", 10)]
    kept = _catalog([o for o in objects if o.key not in doomed])
    for t in (T1 + 250, T1 + 300, T2, T2 + 100):
        assert plan_restore(kept, G2, at_time_ms=t) == plan_restore(catalog, G2, at_time_ms=t)


def test_window_past_a_takeover_deletes_the_parent_generation() -> None:
    """Once the window starts inside the child generation, the parent's objects go, the
    generation records stay."""
    objects = _objects()
    doomed = expired_keys(_catalog(objects), G2, T2 + 50 + 1000,
                          RetentionPolicy(window_ms=1000))
    assert doomed == sorted(o.key for o in objects
                            if not isinstance(o, GenerationKey) and o.generation == G1)


def test_snapshot_count_keeps_the_newest_n_snapshots_and_what_follows() -> None:
    """``--retain 2`` keeps snapshots 20 and 30 and everything after 20."""
    objects = _objects()
    doomed = set(expired_keys(_catalog(objects), G2, T2 + 10_000,
                              RetentionPolicy(snapshots=2)))
    kept = [o for o in objects if o.key not in doomed and not isinstance(o, GenerationKey)]
    assert {(o.generation, getattr(o, "base", None), getattr(o, "first", None))
            for o in kept} == {(G1, 20, None), (G1, None, 20), (G2, 30, None), (G2, None, 30)}


def test_retention_deletes_nothing_when_the_oldest_point_is_not_restorable() -> None:
    """A window reaching back before anything restorable keeps everything."""
    objects = _objects()
    assert expired_keys(_catalog(objects), G2, T1 + 50, RetentionPolicy(window_ms=10)) == []
    assert expired_keys(_catalog(objects), G2, T2, RetentionPolicy(snapshots=9)) == []
    with pytest.raises(RestoreError):
        plan_restore(_catalog(objects), G2, at_time_ms=T1 - 1)


def test_server_with_retain_count_sweeps_old_snapshots(tmp_path: Path) -> None:
    """A server with ``--retain 1`` and frequent checkpoints ends with one shipped snapshot
    (plus the chunks after it) and its newest state still restores completely."""

    async def body(server: Server) -> None:
        assert server.line_address is not None
        conn = await LineConn.open(server.line_address[1])
        for i in range(300):
            assert await conn.request(f"SET b k{i} {'z' * 40}") == "OK"
        await conn.close()

    config = ServerConfig(port=0, data_dir=tmp_path / "data", checkpoint_bytes=4096,
                          checkpoint_growth=0,
                          replicate_to=f"file:{tmp_path / 'objects'}", ship_interval=0.1,
                          retain="1")
    run_server(config, body)

    async def check() -> None:
        store = FileStore(str(tmp_path / "objects"))
        catalog = await list_catalog(store)
        (gen,) = catalog.generations.values()
        assert len(gen.snapshots) == 1
        assert all(c.last >= gen.snapshots[0].base for c in gen.chunks)
        state, _ = await shipped_state(store)
        assert len(state) == 300
        await store.close()

    asyncio.run(check())
