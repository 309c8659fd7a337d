"""``minidb restore`` from the command line: a summary and exit 0, or a refusal naming the
object and exit 1; ``minidb serve`` then opens the result as usual."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from minidb.objstore import FileStore
from tests.replication.handshipped import Model, ship_model
from tests.server.conftest import ServeFactory

CLI_TIMEOUT_S = 60.0
"""Deadline of one ``minidb restore`` run."""


def restore_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "minidb", "restore", *args],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
    )


def shipped_dir(
    tmp_path: Path, model: Model, snapshot_at: tuple[int, ...] = (20,)
) -> tuple[Path, list[str]]:
    directory = tmp_path / "objects"

    async def ship() -> list[str]:
        store = FileStore(str(directory))
        try:
            shipped = await ship_model(store, model, per_chunk=10, snapshot_at=snapshot_at)
        finally:
            await store.close()
        return [key for key, *_ in shipped.chunks]

    return directory, asyncio.run(ship())


def test_restore_cli_rebuilds_a_directory_serve_opens(
    tmp_path: Path, serve: ServeFactory
) -> None:
    """A restore to --at-seq prints what it restored, and the server serves exactly that."""
    model = Model.random(40, seed=2)
    objects, _ = shipped_dir(tmp_path, model)
    data = tmp_path / "data"
    done = restore_cli("--from", f"file:{objects}", "--data-dir", str(data), "--at-seq", "33")
    assert done.returncode == 0, done.stderr
    assert "records 20..33" in done.stdout and "then 14 log records" in done.stdout
    client = serve(data_dir=data).client()
    for key, value in model.state_after(33).items():
        assert client.request(f"GET b {key.decode()}") == f"VALUE {value.decode()}"


def test_restore_cli_refuses_a_gap_naming_the_objects(tmp_path: Path) -> None:
    """A missing chunk: exit 1, one line naming the objects on either side of the gap."""
    objects, keys = shipped_dir(tmp_path, Model.random(40), snapshot_at=())
    (objects / keys[2]).unlink()
    done = restore_cli("--from", f"file:{objects}", "--data-dir", str(tmp_path / "data"))
    assert done.returncode == 1
    assert done.stderr.startswith("minidb restore: error: refusing to restore: ")
    assert keys[1] in done.stderr and keys[3] in done.stderr
    assert done.stderr.count("\n") == 1


def test_restore_cli_refuses_a_directory_holding_a_store(tmp_path: Path) -> None:
    """Restoring into a directory that already holds a store: exit 1, nothing touched."""
    objects, _ = shipped_dir(tmp_path, Model.random(20))
    data = tmp_path / "data"
    assert restore_cli("--from", f"file:{objects}", "--data-dir", str(data)).returncode == 0
    before = sorted(p.name for p in data.iterdir())
    done = restore_cli("--from", f"file:{objects}", "--data-dir", str(data))
    assert done.returncode == 1 and "not empty" in done.stderr
    assert sorted(p.name for p in data.iterdir()) == before


def test_restore_cli_usage_errors_exit_2(tmp_path: Path) -> None:
    """A time without an offset, or both points at once, is a usage error."""
    objects = f"file:{tmp_path}"
    data = str(tmp_path / "data")
    done = restore_cli("--from", objects, "--data-dir", data, "--at", "2026-12-01T12:00:00")
    assert done.returncode == 2 and "UTC offset" in done.stderr
    done = restore_cli("--from", objects, "--data-dir", data, "--at", "x", "--at-seq", "1")
    assert done.returncode == 2
