"""What only the ``file:`` backend has to get right: paths, temp files, locks across processes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from minidb.objstore import FileStore, InvalidKey, NotFound, PreconditionFailed
from minidb.objstore._filecore import HEADER_BYTES, TMP_DIR

PROCESS_DEADLINE_S = 60.0
"""How long the multi-process race may take, in seconds."""


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.minidb_loop
@pytest.mark.parametrize(
    "key", ["../x", "../../etc/passwd", "/abs", "/tmp/x", "a\\b", "..\\x", "a\x00b", "a//b",
            "a/../../x", "a/./b", ""],
)
async def test_traversal_keys_refused_and_nothing_touched(tmp_path: Path, key: str) -> None:
    """Keys that could leave the root are InvalidKey for every operation; no file appears."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    store = FileStore(str(root))
    before = _tree(tmp_path)
    try:
        for call in (store.put(key, b"x"), store.put_if_absent(key, b"x"), store.get(key),
                     store.compare_and_set(key, b"x", '"0"'), store.delete(key),
                     store.open_read(key)):
            with pytest.raises(InvalidKey):
                await call
        with pytest.raises(InvalidKey):
            store.presign_get(key, 60)
    finally:
        await store.close()
    assert _tree(tmp_path) == before
    assert _tree(outside) == []


@pytest.mark.minidb_loop
async def test_symlink_pointing_outside_is_refused(tmp_path: Path) -> None:
    """A symlink inside the root (as a directory or as the object) never leads outside it."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"do not read")
    store = FileStore(str(root))
    os.symlink(outside, root / "link")
    os.symlink(outside / "secret", root / "obj")
    try:
        for key in ("link/new", "link/secret", "obj"):
            with pytest.raises(InvalidKey):
                await store.put(key, b"x")
            with pytest.raises(InvalidKey):
                await store.get(key)
            with pytest.raises(InvalidKey):
                await store.delete(key)
        assert (await store.list()).entries == ()
        assert (await store.list("link/")).entries == ()
    finally:
        await store.close()
    assert _tree(outside) == ["secret"]
    assert (outside / "secret").read_bytes() == b"do not read"


@pytest.mark.minidb_loop
async def test_temp_files_and_own_files_are_invisible(file_store: FileStore) -> None:
    """Temp files, lock files and the presign secret never show up in a listing."""
    await file_store.put("a", b"1")
    file_store.presign_get("a", 60)
    (Path(file_store.root) / TMP_DIR / "leftover.tmp").write_bytes(b"junk from a crash")
    assert [e.key for e in (await file_store.list()).entries] == ["a"]


@pytest.mark.minidb_loop
async def test_presign_secret_file_is_private_and_stable(tmp_path: Path) -> None:
    """The generated secret is mode 0600 and reused, so URLs survive a reopen."""
    store = FileStore(str(tmp_path))
    url = store.presign_get("k", 60)
    await store.close()
    secret = tmp_path / ".minidb-presign-key"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    reopened = FileStore(str(tmp_path))
    path, _, query = url.partition("?")
    assert reopened.verify_presigned("GET", path, query) == "k"
    await reopened.close()


@pytest.mark.minidb_loop
async def test_object_file_layout_and_etag_is_sha256(file_store: FileStore) -> None:
    """An object file is the header then the bytes; the ETag is the quoted sha256 of the bytes."""
    import hashlib

    etag = await file_store.put("x/y", b"payload")
    raw = (Path(file_store.root) / "x" / "y").read_bytes()
    assert raw[HEADER_BYTES:] == b"payload"
    assert etag == f'"{hashlib.sha256(b"payload").hexdigest()}"'
    assert (await file_store.list()).entries[0].size == len(b"payload")


@pytest.mark.minidb_loop
async def test_key_that_is_also_a_prefix_is_refused(file_store: FileStore) -> None:
    """A file backend cannot hold both ``a`` and ``a/b``; the second write is InvalidKey."""
    await file_store.put("a", b"1")
    with pytest.raises(InvalidKey):
        await file_store.put("a/b", b"2")
    await file_store.put("c/d", b"3")
    with pytest.raises(InvalidKey):
        await file_store.put("c", b"4")
    with pytest.raises(NotFound):
        await file_store.get("c")


_RACER = textwrap.dedent(
    """
    import asyncio, sys
    from minidb.objstore import FileStore, PreconditionFailed

    async def main(root, etag, me, mode):
        store = FileStore(root)
        try:
            if mode == "cas":
                await store.compare_and_set("race", me.encode() * 1000, etag)
            else:
                await store.put_if_absent("fresh", me.encode() * 1000)
            print("won")
        except PreconditionFailed:
            print("lost")
        finally:
            await store.close()

    asyncio.run(main(*sys.argv[1:]))
    """
)


@pytest.mark.parametrize("mode", ["cas", "create"])
def test_racing_processes_exactly_one_wins(tmp_path: Path, mode: str) -> None:
    """Several processes racing CAS (or create) on one key in one directory: exactly one wins."""
    import asyncio

    async def seed() -> str:
        store = FileStore(str(tmp_path))
        try:
            return await store.put_if_absent("race", b"start")
        finally:
            await store.close()

    etag = asyncio.run(seed())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    racers = [
        subprocess.Popen([sys.executable, "-c", _RACER, str(tmp_path), etag, str(i), mode],
                         stdout=subprocess.PIPE, text=True, env=env)
        for i in range(6)
    ]
    outcomes = [p.communicate(timeout=PROCESS_DEADLINE_S)[0].strip() for p in racers]
    assert sorted(outcomes) == ["lost"] * 5 + ["won"], outcomes


@pytest.mark.minidb_loop
async def test_failed_create_leaves_no_temp_file(file_store: FileStore) -> None:
    """A create that loses (412) removes its temp file, so crashes aside nothing accumulates."""
    await file_store.put_if_absent("k", b"1")
    with pytest.raises(PreconditionFailed):
        await file_store.put_if_absent("k", b"2")
    assert list((Path(file_store.root) / TMP_DIR).iterdir()) == []
