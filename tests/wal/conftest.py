"""Helpers shared by the WAL tests: a log with known records, and byte surgery on its files."""

from __future__ import annotations

import os
import pathlib

import pytest

from minidb.wal import DurableLog, decode_ops, encode_ops, open_log
from minidb.wal._format import FILE_HEADER_SIZE, LEGACY_VERSION, RECORD_HEADER_SIZE


def rec(request: bytes) -> bytes:
    """The version-2 payload of a write written as a line-protocol request, e.g. ``SET b k v``."""
    return encode_ops(decode_ops(request, LEGACY_VERSION))


RECORDS = [rec(f"SET users u{i} value {i}".encode()) for i in range(5)]


def write_log(
    data_dir: pathlib.Path, records: list[bytes], *, segment_bytes: int = 1 << 24
) -> None:
    """Create a log in ``data_dir`` holding ``records``, each synced on its own."""
    log, replay = open_log(data_dir, segment_bytes=segment_bytes)
    assert list(replay) == []
    for record in records:
        log.append(record)
        log.sync()
    log.close()


def replay_all(data_dir: pathlib.Path) -> tuple[DurableLog, list[bytes]]:
    """Open the log and replay it completely; each record's operations encoded again (the
    encoding is canonical, so this is the payload that was appended)."""
    log, replay = open_log(data_dir)
    return log, [encode_ops(ops) for ops in replay]


def segments(data_dir: pathlib.Path) -> list[pathlib.Path]:
    """The directory's segment files in log order."""
    return sorted(data_dir.glob("wal-*.log"))


def record_offsets(records: list[bytes]) -> list[int]:
    """Where each record of a single segment holding ``records`` starts."""
    offsets, pos = [], FILE_HEADER_SIZE
    for record in records:
        offsets.append(pos)
        pos += RECORD_HEADER_SIZE + len(record)
    return offsets


def patch(path: pathlib.Path, offset: int, data: bytes) -> None:
    """Overwrite ``data`` at ``offset`` of ``path``."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def flip(path: pathlib.Path, offset: int) -> None:
    """Invert one byte of ``path``."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def flip_bit(path: pathlib.Path, offset: int, mask: int) -> None:
    """XOR one byte of ``path`` with ``mask``."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ mask]))


@pytest.fixture
def data_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    """A data directory path that does not exist yet."""
    return tmp_path / "data"


@pytest.fixture
def five_records(data_dir: pathlib.Path) -> pathlib.Path:
    """A data directory whose one segment holds ``RECORDS``."""
    write_log(data_dir, RECORDS)
    assert len(segments(data_dir)) == 1
    return data_dir


def size(path: pathlib.Path) -> int:
    return os.path.getsize(path)
