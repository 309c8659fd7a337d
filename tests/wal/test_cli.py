"""``minidb wal check`` and ``minidb wal dump`` as a user runs them (subprocess, exit status)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

from minidb.wal import Flush, Put, decode_ops, encode_ops
from minidb.wal._format import RECORD_HEADER_SIZE
from minidb.wal._payload import describe

from .conftest import RECORDS, flip, rec, record_offsets, segments, write_log


def _minidb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "minidb", *args], capture_output=True, text=True, timeout=30
    )


def test_cli_wal_check_reports_each_file_and_exits_0(five_records: pathlib.Path) -> None:
    """A healthy directory: one line per file with size and ok_up_to, exit status 0."""
    out = _minidb("wal", "check", "--data-dir", str(five_records))
    assert out.returncode == 0, out.stderr
    segment = segments(five_records)[0]
    size = segment.stat().st_size
    line = next(x for x in out.stdout.splitlines() if x.startswith(segment.name))
    assert f"size={size} " in line and f"ok_up_to={size} " in line and line.endswith("ok")
    assert any(x.startswith("MANIFEST") for x in out.stdout.splitlines())
    assert out.stdout.splitlines()[-1].endswith("ok, 5 records")


def test_cli_wal_check_names_file_and_offset_of_corruption(five_records: pathlib.Path) -> None:
    """Mid-file damage: exit status 1, and stderr names the file and the byte offset."""
    middle = record_offsets(RECORDS)[2]
    segment = segments(five_records)[0]
    flip(segment, middle + 12)
    out = _minidb("wal", "check", "--data-dir", str(five_records))
    assert out.returncode == 1
    assert segment.name in out.stderr and f"offset {middle}" in out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith(segment.name))
    assert f"ok_up_to={middle} " in line and "CORRUPT" in line


def test_cli_wal_check_accepts_a_torn_tail(five_records: pathlib.Path) -> None:
    """A torn tail is reported with its offset but is not an error: opening would cut it."""
    segment = segments(five_records)[0]
    last = record_offsets(RECORDS)[-1]
    with open(segment, "r+b") as f:
        f.truncate(last + 4)
    out = _minidb("wal", "check", "--data-dir", str(five_records))
    assert out.returncode == 0, out.stderr
    assert f"torn tail at offset {last}" in out.stdout
    assert segment.stat().st_size == last + 4  # check never modifies anything


def test_cli_wal_check_refuses_a_missing_dir(tmp_path: pathlib.Path) -> None:
    """A directory that does not exist is an error, not an empty store."""
    out = _minidb("wal", "check", "--data-dir", str(tmp_path / "nope"))
    assert out.returncode == 1 and "no such directory" in out.stderr


def test_cli_wal_dump_prints_records_like_a_transcript(data_dir: pathlib.Path) -> None:
    """Dump prints each record's operations, escaped, snapshot first, files marked."""
    group = encode_ops([Put(b"b", b"k", b"a\r\n\x00\\;\"", 1700000000000), Flush(None)])
    write_log(data_dir, [rec(b"SET users alice hello world"), rec(b"DEL users bob"), group])
    out = _minidb("wal", "dump", "--data-dir", str(data_dir))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "# wal-0000000000000000.log",
        "PUT users alice hello\\x20world",
        "DEL users bob",
        "PUT b k a\\x0d\\x0a\\x00\\\\\\x3b\\x22 PXAT 1700000000000 ; FLUSHALL",
    ]
    numbered = _minidb("wal", "dump", "--numbers", "--data-dir", str(data_dir))
    assert numbered.stdout.splitlines()[1:3] == [
        "0 PUT users alice hello\\x20world", "1 DEL users bob",
    ]


def test_cli_wal_dump_exits_1_on_corruption(five_records: pathlib.Path) -> None:
    """Dump prints the good records before the damage, then fails naming the file and offset."""
    middle = record_offsets(RECORDS)[2]
    flip(segments(five_records)[0], middle + 12)
    out = _minidb("wal", "dump", "--data-dir", str(five_records))
    assert out.returncode == 1
    assert out.stdout.splitlines()[1:] == [describe(decode_ops(r)) for r in RECORDS[:2]]
    assert f"offset {middle}" in out.stderr


def test_cli_wal_check_names_a_corrupt_snapshot(data_dir: pathlib.Path) -> None:
    """After a checkpoint, damage in the snapshot is reported against the snapshot file."""
    from minidb.wal import open_log

    log, _ = open_log(data_dir)
    log.append(rec(b"SET b k 1"))
    log.sync()
    log.checkpoint([rec(b"SET b k 1"), rec(b"SET b j 2")])
    log.close()
    (snapshot,) = data_dir.glob("snapshot-*.snap")
    second = 20 + RECORD_HEADER_SIZE + len(rec(b"SET b k 1"))
    flip(snapshot, second + RECORD_HEADER_SIZE + 2)
    out = _minidb("wal", "check", "--data-dir", str(data_dir))
    assert out.returncode == 1
    assert f"{snapshot.name}: offset {second}: " in out.stderr
    assert any(x.startswith("wal-") and "not checked" in x for x in out.stdout.splitlines())
