"""``CrashFS``: what it keeps at a power loss follows the durability rules it claims."""

from __future__ import annotations

import os
import pathlib

import pytest

from minidb.wal import _fs
from minidb.wal.testing import BEYOND_POWER_LOSS, SECTOR_BYTES, CrashFS, PowerLoss, using

SEEDS = range(40)
FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND


def _files(directory: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _crash(directory: pathlib.Path, seed: int, steps: str) -> dict[str, bytes]:
    """Run ``steps`` (one letter per operation, see below) on a fresh file, lose power."""
    for p in directory.iterdir():
        p.unlink()
    fs = CrashFS(directory, seed=seed)
    path = str(directory / "f")
    fd = fs.open(path, FLAGS, 0o644)
    for step in steps:
        if step == "w":  # write 700 bytes (more than a sector)
            fs.write_all(fd, b"abcdefg" * 100)
        elif step == "s":
            fs.fdatasync(fd)
        elif step == "d":
            fs.fsync_dir(str(directory))
        elif step == "t":
            fs.ftruncate(fd, 100)
    fs.power_loss()
    return _files(directory)


def test_crashfs_keeps_synced_data_and_a_prefix_or_zeros_of_the_rest(
    tmp_path: pathlib.Path,
) -> None:
    """Synced bytes always survive; unsynced ones survive as a prefix, then maybe zeros."""
    written = b"abcdefg" * 200
    shapes = set()
    for seed in SEEDS:
        content = _crash(tmp_path, seed, "wsdw")["f"]
        assert content[:700] == written[:700]
        tail = content[700:]
        kept = len(tail.rstrip(b"\0"))  # the data has no zero bytes of its own
        assert tail[:kept] == written[700 : 700 + kept]
        assert tail[kept:] == bytes(len(tail) - kept)
        shapes.add("zeros" if kept < len(tail) else "prefix")
    assert shapes == {"zeros", "prefix"}


def test_crashfs_zeros_start_at_a_sector_boundary_or_the_synced_end(
    tmp_path: pathlib.Path,
) -> None:
    """A zero-filled tail begins where a sector was not written, never mid-sector."""
    for seed in SEEDS:
        content = _crash(tmp_path, seed, "wsdw")["f"]
        data = content.rstrip(b"\0")
        if len(data) < len(content):
            assert len(data) == 700 or len(data) % SECTOR_BYTES == 0, len(data)


def test_crashfs_loses_a_create_only_if_the_directory_was_not_synced(
    tmp_path: pathlib.Path,
) -> None:
    """A new file whose directory was fsynced survives; one whose was not may vanish."""
    assert all("f" in _crash(tmp_path, seed, "wsd") for seed in SEEDS)
    outcomes = {"f" in _crash(tmp_path, seed, "ws") for seed in SEEDS}
    assert outcomes == {True, False}


def test_crashfs_unsynced_truncation_may_be_undone(tmp_path: pathlib.Path) -> None:
    """An ftruncate is durable once the file is synced; before, the old size may come back."""
    assert {len(_crash(tmp_path, seed, "wsdts")["f"]) for seed in SEEDS} == {100}
    assert {len(_crash(tmp_path, seed, "wsdt")["f"]) for seed in SEEDS} == {100, 700}


def test_crashfs_unsynced_rename_and_unlink_are_each_kept_or_lost(tmp_path: pathlib.Path) -> None:
    """A rename or unlink the directory was not fsynced after is applied or not, per operation."""
    seen = set()
    for seed in SEEDS:
        for p in tmp_path.iterdir():
            p.unlink()
        (tmp_path / "old").write_bytes(b"old")
        (tmp_path / "gone").write_bytes(b"gone")
        fs = CrashFS(tmp_path, seed=seed)
        fd = fs.open(str(tmp_path / "new.tmp"), FLAGS, 0o644)
        fs.write_all(fd, b"new")
        fs.fsync(fd)
        fs.close(fd)
        fs.fsync_dir(str(tmp_path))
        fs.rename(str(tmp_path / "new.tmp"), str(tmp_path / "old"))
        fs.unlink(str(tmp_path / "gone"))
        fs.power_loss()
        files = _files(tmp_path)
        assert files.get("old") in (b"old", b"new")
        assert (files["old"] == b"new") == ("new.tmp" not in files)
        seen.add((files["old"], "gone" in files))
    assert seen == {(b"old", True), (b"old", False), (b"new", True), (b"new", False)}


def test_crashfs_crash_after_counts_operations_and_then_refuses_all(
    tmp_path: pathlib.Path,
) -> None:
    """With ``crash_after=2`` the third changing operation loses power; every later one too."""
    fs = CrashFS(tmp_path, crash_after=2)
    fd = fs.open(str(tmp_path / "f"), FLAGS, 0o644)
    fs.write_all(fd, b"x")
    with pytest.raises(PowerLoss):
        fs.fdatasync(fd)
    assert fs.crashed and fs.operations == 2
    with pytest.raises(PowerLoss):
        fs.write_all(fd, b"y")
    fs.close(fd)  # a no-op: the descriptors died with the power
    assert fs.report  # the create was not durable: kept or lost, and said which


def test_crashfs_beyond_power_loss_may_leave_data_after_a_hole(tmp_path: pathlib.Path) -> None:
    """The harsher model can persist a later sector while an earlier one stayed zero."""
    holes = 0
    for seed in SEEDS:
        for p in tmp_path.iterdir():
            p.unlink()
        fs = CrashFS(tmp_path, seed=seed, damage=BEYOND_POWER_LOSS)
        fd = fs.open(str(tmp_path / "f"), FLAGS, 0o644)
        fs.fsync_dir(str(tmp_path))
        fs.write_all(fd, b"z" * 4 * SECTOR_BYTES)
        fs.power_loss()
        content = (tmp_path / "f").read_bytes()
        holes += b"\0" in content.rstrip(b"\0")
    assert holes > 0


def test_using_installs_and_restores_the_file_system(tmp_path: pathlib.Path) -> None:
    """``using`` routes the WAL's calls through the given file system inside the block only."""
    fs = CrashFS(tmp_path)
    with using(fs):
        assert _fs.active() is fs
    assert _fs.active() is _fs.OS
