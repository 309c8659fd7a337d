"""Generations and fencing: two servers on one prefix never both ship."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from minidb.objstore import FileStore
from minidb.replication import (
    CURRENT_KEY,
    Fenced,
    GenerationConflict,
    _generation,
    read_current,
)
from minidb.server import Server, ServerConfig

from .conftest import LineConn, Target, run_server
from .shipped import shipped_state

FENCE_DEADLINE_S = 5.0
"""How long the first server may take to notice it was fenced (one round after a write)."""


def _config(tmp_path: Path, data: str, target: Target | None = None, **kw: object) -> ServerConfig:
    where: dict[str, object] = (
        {"replicate_to": target.url, **target.settings} if target is not None
        else {"replicate_to": f"file:{tmp_path / 'objects'}"}
    )
    return ServerConfig(
        port=0, data_dir=tmp_path / data, ship_interval=0.1, **where, **kw,  # type: ignore[arg-type]
    )


def _ms() -> int:
    return 1_800_000_000_000


def test_claim_refuses_another_directorys_prefix_and_takeover_fences_it(tmp_path: Path) -> None:
    """The second directory is refused naming the owner; with takeover it wins and the first
    one's fence check fails; the same directory again needs no takeover."""

    async def main() -> None:
        store = FileStore(str(tmp_path / "objects"))
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        a = await _generation.claim(store, str(tmp_path / "a"), takeover=False, wall_ms=_ms,
                                    url="u")
        with pytest.raises(GenerationConflict) as refused:
            await _generation.claim(store, str(tmp_path / "b"), takeover=False, wall_ms=_ms,
                                    url="u")
        assert refused.value.owner == a.generation
        await _generation.check(store, a.generation)
        b = await _generation.claim(store, str(tmp_path / "b"), takeover=True, wall_ms=_ms,
                                    url="u")
        assert (b.parent, b.takeover) == (a.generation, True)
        with pytest.raises(Fenced) as fenced:
            await _generation.check(store, a.generation)
        assert fenced.value.by == b.generation
        again = await _generation.claim(store, str(tmp_path / "b"), takeover=False, wall_ms=_ms,
                                        url="u")
        assert again.parent == b.generation and not again.takeover
        found = await read_current(store)
        assert found is not None and found[0].rev == 3
        await store.close()

    asyncio.run(main())


def test_claim_that_loses_the_pointer_race_starts_over(tmp_path: Path) -> None:
    """A claim whose compare-and-set finds the pointer moved re-reads it and, now seeing
    another owner, refuses instead of shipping beside it."""

    async def main() -> None:
        store = FileStore(str(tmp_path / "objects"))
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        await _generation.claim(store, str(tmp_path / "a"), takeover=False, wall_ms=_ms, url="u")
        real_put = store.put_if_absent
        raced = False

        async def put_then_race(key: str, data: bytes) -> str:
            nonlocal raced
            etag = await real_put(key, data)
            if key.startswith("generations/") and not raced:
                raced = True  # another directory claims in between: the pointer moves
                await _generation.claim(store, str(tmp_path / "b"), takeover=True, wall_ms=_ms,
                                        url="u")
            return etag

        store.put_if_absent = put_then_race  # type: ignore[method-assign]
        with pytest.raises(GenerationConflict):
            await _generation.claim(store, str(tmp_path / "a"), takeover=False, wall_ms=_ms,
                                    url="u")
        store.put_if_absent = real_put  # type: ignore[method-assign]
        listing = await store.list("generations/")
        assert len(listing.entries) == 2, "the loser's record was removed again"
        await store.close()

    asyncio.run(main())


def test_second_server_refuses_to_start_on_a_shipped_prefix(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``minidb serve`` on another data dir exits 1 with a message naming the owner."""
    import subprocess
    import sys

    first = serve("--replicate-to", f"file:{tmp_path / 'objects'}", data_dir=tmp_path / "a")
    first.client().request("SET b k v")
    proc = subprocess.run(
        [sys.executable, "-m", "minidb", "serve", "--port", "0", "--data-dir",
         str(tmp_path / "b"), "--replicate-to", f"file:{tmp_path / 'objects'}"],
        capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 1
    assert "refusing to start: replication:" in proc.stderr
    assert "is shipped to by generation" in proc.stderr and "--takeover" in proc.stderr


def test_takeover_fences_the_first_server_which_keeps_serving(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, target: Target
) -> None:
    """After a takeover the first server's next round fails the fence check: it logs
    replication_fenced, stops shipping, and still answers writes; the store holds the second
    server's writes, not the first one's later ones (both backends)."""
    caplog.set_level(logging.INFO, logger="minidb.replication")

    async def body(first: Server) -> None:
        assert first.line_address is not None
        conn = await LineConn.open(first.line_address[1])
        assert await conn.request("SET b before 1") == "OK"

        async def second_body(second: Server) -> None:
            assert second.line_address is not None
            conn2 = await LineConn.open(second.line_address[1])
            assert await conn2.request("SET b second 2") == "OK"
            assert await conn.request("SET b zombie 3") == "OK"  # the first still serves
            loop = asyncio.get_running_loop()
            deadline = loop.time() + FENCE_DEADLINE_S
            while not first.statistics().replication.fenced:  # type: ignore[union-attr]
                assert loop.time() < deadline, "the first server was never fenced"
                await asyncio.sleep(0.02)
            assert await conn.request("SET b after 4") == "OK"
            await asyncio.sleep(0.3)  # a second interval: it has stopped shipping for good
            await conn2.close()

        await run_inner(_config(tmp_path, "b", target, takeover=True), second_body)
        await conn.close()

    run_server(_config(tmp_path, "a", target), body)
    fenced = [r for r in caplog.records if r.getMessage() == "replication_fenced"]
    assert fenced, "no replication_fenced log line"

    async def check() -> None:
        store = target.open()
        state, _ = await shipped_state(store)
        assert (b"b", b"second") in state and (b"b", b"zombie") not in state
        assert (b"b", b"after") not in state
        assert (await store.get(CURRENT_KEY)).data
        await store.close()

    asyncio.run(check())


async def run_inner(config: ServerConfig, body) -> None:  # type: ignore[no-untyped-def]
    """A second server inside the first one's loop (the same process, its own data dir)."""
    server = Server(config)
    await server.start()
    serving = asyncio.create_task(server.serve())
    try:
        await body(server)
    finally:
        server.request_shutdown()
        await serving
