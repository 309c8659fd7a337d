"""``DurableLog``: fresh stores, group commit counters, checkpoints, fail-stop, a real full disk."""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from minidb import _failpoints
from minidb.errors import WalError
from minidb.wal import DurableLog, Put, decode_ops, encode_ops, open_log
from minidb.wal import _durable as durable_module
from minidb.wal._format import RECORD_HEADER_SIZE
from minidb.wal.testing import CrashFS, using

from .conftest import RECORDS, rec, replay_all, segments, write_log


def _failpoints_set(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    monkeypatch.setattr(_failpoints, "ACTIVE", _failpoints.parse(spec))


def test_open_log_creates_a_missing_dir_as_a_fresh_store(data_dir: pathlib.Path) -> None:
    """A data dir that does not exist is created, with a manifest and a first segment."""
    log, replay = open_log(data_dir)
    assert list(replay) == []
    log.close()
    assert sorted(os.listdir(data_dir)) == ["LOCK", "MANIFEST", "wal-0000000000000000.log"]


def test_open_log_treats_a_dir_of_foreign_files_as_fresh(data_dir: pathlib.Path) -> None:
    """Files that are not minidb's (a mount point's lost+found) do not make a store."""
    (data_dir / "lost+found").mkdir(parents=True)
    log, replay = open_log(data_dir)
    assert list(replay) == []
    log.close()


def test_open_log_replays_what_was_synced(data_dir: pathlib.Path) -> None:
    """Records synced before close come back, in order, on the next open."""
    write_log(data_dir, RECORDS)
    log, got = replay_all(data_dir)
    log.close()
    assert got == RECORDS
    assert log.statistics().replayed == len(RECORDS)


def test_durable_log_append_counts_appends_and_syncs_separately(data_dir: pathlib.Path) -> None:
    """Sixteen appends and one sync are sixteen appends and one sync (group commit)."""
    log, _ = replay_all(data_dir)
    for i in range(16):
        log.append(rec(f"SET b k{i} v".encode()))
    log.sync()
    log.sync()  # nothing pending: no fsync, not counted
    stats = log.statistics()
    log.close()
    assert (stats.appends, stats.syncs) == (16, 1)
    framed = [RECORD_HEADER_SIZE + len(rec(f"SET b k{i} v".encode())) for i in range(16)]
    assert stats.bytes == sum(framed)


def test_durable_log_close_drops_unsynced_records(data_dir: pathlib.Path) -> None:
    """A record that was appended but never synced was never acknowledged and is not kept."""
    log, _ = replay_all(data_dir)
    log.append(rec(b"SET b synced 1"))
    log.sync()
    log.append(rec(b"SET b unsynced 2"))
    log.close()
    assert replay_all(data_dir)[1] == [rec(b"SET b synced 1")]


def test_durable_log_refuses_appends_before_replay_finishes(five_records: pathlib.Path) -> None:
    """The log is appendable only after its replay has been consumed."""
    log, replay = open_log(five_records)
    next(replay)
    with pytest.raises(WalError, match="replaying"):
        log.append(rec(b"SET b k v"))
    log.close()


def test_durable_log_refuses_a_second_opener(data_dir: pathlib.Path) -> None:
    """Two logs on one directory would interleave records; the second open is refused."""
    log, _ = replay_all(data_dir)
    with pytest.raises(WalError, match="in use") as info:
        open_log(data_dir)
    assert str(data_dir) in str(info.value) and info.value.path == str(data_dir)
    log.close()
    replay_all(data_dir)[0].close()


@pytest.mark.parametrize(
    "spec, name",
    [("wal.create=error(ENOSPC)", "wal-0000000000000000.log"),
     ("wal.create=error(ENOSPC, 1)", "MANIFEST")],
)
def test_durable_log_creation_error_names_the_file(
    data_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch, spec: str, name: str
) -> None:
    """A disk error while creating a fresh data dir says which file could not be written."""
    _failpoints_set(monkeypatch, spec)
    with pytest.raises(WalError) as info:
        open_log(data_dir)
    assert info.value.path == str(data_dir / name)
    assert str(data_dir / name) in str(info.value) and "No space left" in str(info.value)
    monkeypatch.setattr(_failpoints, "ACTIVE", {})
    log, got = replay_all(data_dir)  # the half-created directory is created again
    log.close()
    assert got == []


def test_durable_log_rolls_segments_and_replays_across_them(data_dir: pathlib.Path) -> None:
    """Past ``segment_bytes`` a new segment starts; replay reads them all in order."""
    records = [rec(f"SET b k{i} {'x' * 40}".encode()) for i in range(50)]
    write_log(data_dir, records, segment_bytes=300)
    assert len(segments(data_dir)) > 5
    assert replay_all(data_dir)[1] == records


def test_durable_log_writes_zeros_ahead_and_leaves_none_in_closed_segments(
    data_dir: pathlib.Path,
) -> None:
    """The open segment holds zeros after its records (so a sync overwrites space the file
    already has); a sealed segment ends at its END and a cleanly closed one at its last
    record."""
    from minidb.wal._writer import ZERO_AHEAD_BYTES

    log, replay = open_log(data_dir)
    assert list(replay) == []
    log.append(RECORDS[0])
    log.sync()
    size = log.position().segment_size
    written = segments(data_dir)[0].read_bytes()
    assert len(written) == size + ZERO_AHEAD_BYTES and not written[size:].strip(b"\0")
    base = log.begin_checkpoint()  # rolls: segment 0 is sealed
    log.append(RECORDS[1])
    log.sync()
    sealed, open_ = segments(data_dir)
    assert sealed.stat().st_size < 4096 and not sealed.read_bytes().endswith(b"\0" * 64)
    assert open_.stat().st_size > ZERO_AHEAD_BYTES
    log.finish_checkpoint(base, [RECORDS[0]])
    open_size = log.position().segment_size
    log.close()
    assert segments(data_dir)[-1].stat().st_size == open_size


def test_durable_log_after_a_crash_cuts_the_zeros_ahead_as_a_torn_tail(
    data_dir: pathlib.Path,
) -> None:
    """A crash leaves the zeros after the last record; the next open reads them as the torn
    tail they look like, cuts them, keeps every synced record, and goes on writing."""
    fs = CrashFS(data_dir)
    with using(fs):
        log, replay = open_log(data_dir)
        assert list(replay) == []
        for record in RECORDS[:3]:
            log.append(record)
            log.sync()
        fs.power_loss()
    assert len(segments(data_dir)[0].read_bytes()) > log.position().segment_size
    log, got = replay_all(data_dir)
    assert got == RECORDS[:3]
    assert log.torn_tail is not None  # the zeros, cut and reported as what they are
    assert "zeros after the last record" in str(log.torn_tail.problem)
    log.append(RECORDS[3])
    log.sync()
    log.close()
    assert replay_all(data_dir)[1] == RECORDS[:4]


def test_durable_log_wants_checkpoint_after_checkpoint_bytes(data_dir: pathlib.Path) -> None:
    """``wants_checkpoint`` turns true once that much log was written, false after one."""
    log, _ = open_log(data_dir, checkpoint_bytes=500)
    assert not log.wants_checkpoint()
    while not log.wants_checkpoint():
        log.append(rec(b"SET b k " + b"v" * 50))
        log.sync()
    assert log.statistics().log_bytes >= 500
    log.checkpoint([rec(b"SET b k " + b"v" * 50)])
    assert not log.wants_checkpoint()
    log.close()


def test_durable_log_waits_for_history_as_large_as_the_last_snapshot(
    data_dir: pathlib.Path,
) -> None:
    """Past ``checkpoint_bytes``, the next checkpoint also waits until the log since the last
    one is as large as that snapshot (growth 1), also after a reopen; growth 0 does not wait."""
    big_snapshot = [rec(f"SET b k{i} {'v' * 50}".encode()) for i in range(100)]
    log, _ = open_log(data_dir, checkpoint_bytes=500)
    log.append(rec(b"SET b k " + b"v" * 50))
    log.sync()
    log.checkpoint(big_snapshot)
    snapshot_bytes = os.path.getsize(data_dir / "snapshot-0000000000000001.snap")
    assert snapshot_bytes > 5_000
    written = 0
    while not log.wants_checkpoint():
        log.append(rec(b"SET b k " + b"v" * 50))
        log.sync()
        written = log.statistics().log_bytes
        assert written < 2 * snapshot_bytes, "the trigger follows the snapshot"
    assert written >= snapshot_bytes
    log.close()
    reopened, replay = open_log(data_dir, checkpoint_bytes=500)
    for _ in replay:
        pass
    assert reopened.statistics().log_bytes >= snapshot_bytes  # the history is still there
    assert reopened.wants_checkpoint()
    reopened.close()
    fixed, replay = open_log(data_dir, checkpoint_bytes=500, checkpoint_growth=0)
    for _ in replay:
        pass
    fixed.checkpoint(big_snapshot)
    for _ in range(12):  # about 800 bytes: past checkpoint_bytes, far below the snapshot
        fixed.append(rec(b"SET b k " + b"v" * 50))
        fixed.sync()
    assert fixed.wants_checkpoint()
    fixed.close()


def test_durable_log_reopened_remembers_the_snapshot_size(data_dir: pathlib.Path) -> None:
    """A reopened log with a large snapshot and a little history does not want a checkpoint
    (the size comes from the snapshot file, not from this process's memory)."""
    log, _ = open_log(data_dir, checkpoint_bytes=500)
    log.checkpoint([rec(f"SET b k{i} {'v' * 50}".encode()) for i in range(100)])
    log.close()
    reopened, replay = open_log(data_dir, checkpoint_bytes=500)
    for _ in replay:
        pass
    for _ in range(12):
        reopened.append(rec(b"SET b k " + b"v" * 50))
        reopened.sync()
    assert reopened.statistics().log_bytes >= 500
    assert not reopened.wants_checkpoint()
    reopened.close()


def test_durable_log_replays_checkpoint_then_later_writes(data_dir: pathlib.Path) -> None:
    """After a checkpoint and more writes, replay is the snapshot and then the newer records."""
    log, _ = open_log(data_dir, segment_bytes=200)
    for record in RECORDS:
        log.append(record)
    log.sync()
    snapshot = [rec(b"SET users u0 value 0"), rec(b"SET users u1 value 1")]
    log.checkpoint(snapshot)
    log.append(rec(b"DEL users u0"))
    log.append(rec(b"SET users u9 nine"))
    log.sync()
    log.close()
    names = sorted(os.listdir(data_dir))
    assert [n for n in names if n.startswith("snapshot-")] == ["snapshot-0000000000000005.snap"]
    assert [n for n in names if n.startswith("wal-")] == ["wal-0000000000000005.log"]
    assert replay_all(data_dir)[1] == [*snapshot, rec(b"DEL users u0"), rec(b"SET users u9 nine")]


def test_durable_log_second_checkpoint_removes_the_first(data_dir: pathlib.Path) -> None:
    """Each checkpoint deletes the segments and the snapshot it supersedes."""
    log, _ = open_log(data_dir)
    for round_ in range(3):
        log.append(rec(f"SET b k {round_}".encode()))
        log.sync()
        log.checkpoint([rec(f"SET b k {round_}".encode())])
    log.checkpoint([rec(b"SET b k 2")])  # nothing new since: same position, replaced in place
    log.close()
    names = sorted(n for n in os.listdir(data_dir) if n != "LOCK")
    assert names == ["MANIFEST", "snapshot-0000000000000003.snap", "wal-0000000000000003.log"]
    assert replay_all(data_dir)[1] == [rec(b"SET b k 2")]


def test_durable_log_restart_cost_follows_live_data_not_history(data_dir: pathlib.Path) -> None:
    """5,000 writes to 100 keys with checkpoints replay a few hundred records, not 5,000."""
    log, _ = open_log(data_dir, checkpoint_bytes=4 * 1024)
    state: dict[str, str] = {}
    for i in range(5_000):
        key, value = f"k{i % 100}", f"v{i}"
        log.append(rec(f"SET b {key} {value}".encode()))
        state[key] = value
        if i % 100 == 99:
            log.sync()
            if log.wants_checkpoint():
                log.checkpoint(rec(f"SET b {k} {v}".encode()) for k, v in state.items())
    log.sync()
    log.close()
    log, got = replay_all(data_dir)
    log.close()
    assert len(got) < 100 + 4 * 1024 // 9 + 100
    replayed: dict[str, str] = {}
    for payload in got:
        (op,) = decode_ops(payload)
        assert isinstance(op, Put)
        replayed[op.key.decode()] = op.value.decode()
    assert replayed == state


def test_durable_log_crash_before_manifest_switch_keeps_the_old_chain(
    data_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint that dies before the manifest rename leaves a directory that replays whole."""
    write_log(data_dir, RECORDS)
    log, _ = replay_all(data_dir)
    log.append(rec(b"SET users late 1"))
    log.sync()
    real = durable_module.write_atomically

    def fail_on_manifest(directory: str, name: str, chunks: Iterator[bytes]) -> int:
        if name == "MANIFEST":
            raise OSError(errno.EIO, "injected")
        return real(directory, name, chunks)

    monkeypatch.setattr(durable_module, "write_atomically", fail_on_manifest)
    with pytest.raises(OSError):
        log.checkpoint([rec(b"SET users only 1")])
    log.close()
    monkeypatch.undo()
    log, got = replay_all(data_dir)
    log.close()
    assert got == [*RECORDS, rec(b"SET users late 1")]
    assert not list(data_dir.glob("snapshot-*"))  # the unreferenced snapshot was removed


def test_durable_log_fails_stop_after_a_sync_error(
    data_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an fsync error the log refuses every write, even when the disk would work again."""
    log, _ = replay_all(data_dir)
    log.append(rec(b"SET b acked 1"))
    log.sync()
    _failpoints_set(monkeypatch, "wal.sync=error(ENOSPC)")
    log.append(rec(b"SET b refused 2"))
    with pytest.raises(OSError) as info:
        log.sync()
    assert info.value.errno == errno.ENOSPC
    monkeypatch.setattr(_failpoints, "ACTIVE", {})  # the disk "recovers": still refused
    with pytest.raises(WalError, match="disk error"):
        log.append(rec(b"SET b later 3"))
    with pytest.raises(WalError):
        log.sync()
    with pytest.raises(WalError):
        log.checkpoint([])
    assert log.statistics().failed and log.failure is not None
    log.close()
    # The failed batch was written but not synced: it is cut off, so it does not come back.
    assert replay_all(data_dir)[1] == [rec(b"SET b acked 1")]


def test_durable_log_fails_stop_after_an_append_error(
    data_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wal.append=error(EIO, 2)`` fails the third append and everything after it."""
    log, _ = replay_all(data_dir)
    _failpoints_set(monkeypatch, "wal.append=error(EIO, 2)")
    log.append(rec(b"SET b one 1"))
    log.append(rec(b"SET b two 2"))
    with pytest.raises(OSError) as info:
        log.append(rec(b"SET b three 3"))
    assert info.value.errno == errno.EIO
    with pytest.raises(WalError):
        log.sync()
    log.close()
    assert replay_all(data_dir)[1] == []


@contextlib.contextmanager
def _small_tmpfs(path: pathlib.Path, size: str) -> Iterator[pathlib.Path]:
    path.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a tmpfs: {exc}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], capture_output=True, timeout=10)


@pytest.mark.skipif(shutil.which("mount") is None, reason="no mount command")
def test_durable_log_fails_stop_on_a_really_full_disk(tmp_path: pathlib.Path) -> None:
    """On a 1 MiB tmpfs the log fills up, fails stop, and replays every acknowledged record."""
    with _small_tmpfs(tmp_path / "mnt", "1m") as mount:
        data_dir = mount / "data"
        log, _ = open_log(data_dir)
        acked: list[bytes] = []
        error: OSError | None = None
        for i in range(10_000):
            batch = [rec(f"SET b k{i}-{j} {'v' * 4000}".encode()) for j in range(4)]
            for record in batch:
                log.append(record)
            try:
                log.sync()
            except OSError as exc:
                error = exc
                break
            acked += batch
        assert error is not None and error.errno == errno.ENOSPC
        with pytest.raises(WalError):
            log.append(rec(b"SET b after full"))
        log.close()
        # Restart on the still-full disk: the partial batch is a torn tail, cut off.
        log, got = replay_all(data_dir)
        log.close()
        assert got[: len(acked)] == acked
        assert len(got) - len(acked) < 4
        assert isinstance(log, DurableLog)


def test_durable_log_write_sealed_in_a_thread_while_appending(data_dir: pathlib.Path) -> None:
    """A sealed batch written by a worker thread does not disturb appends made meanwhile."""
    import concurrent.futures

    log, _ = open_log(data_dir, segment_bytes=256)
    expected: list[bytes] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        in_flight: concurrent.futures.Future[None] | None = None
        for round_ in range(40):
            batch = [rec(f"SET b k{round_}-{j} v".encode()) for j in range(5)]
            for record in batch:
                log.append(record)
            expected += batch
            if in_flight is not None:
                in_flight.result(timeout=10)
            sealed = log.seal()
            assert sealed is not None and sealed.count == 5
            in_flight = pool.submit(log.write_sealed, sealed)
        assert in_flight is not None
        in_flight.result(timeout=10)
    assert log.statistics().syncs == 40
    log.close()
    assert len(segments(data_dir)) > 1
    assert replay_all(data_dir)[1] == expected


def test_durable_log_split_checkpoint_keeps_writes_made_during_it(data_dir: pathlib.Path) -> None:
    """Records appended between begin and finish of a checkpoint replay after the snapshot."""
    log, _ = open_log(data_dir, checkpoint_bytes=100)
    for record in RECORDS:
        log.append(record)
    log.sync()
    assert log.wants_checkpoint()
    base = log.begin_checkpoint()
    assert not log.wants_checkpoint()  # one checkpoint at a time
    log.append(rec(b"SET users during 1"))
    log.sync()
    log.finish_checkpoint(base, [rec(b"SET users all 5")])
    log.close()
    assert replay_all(data_dir)[1] == [rec(b"SET users all 5"), rec(b"SET users during 1")]


_WRITER_SCRIPT = """
import sys
from minidb.wal import encode_put, open_log

log, replay = open_log(sys.argv[1])
assert not list(replay)
i = 0
while True:
    for _ in range(1 + i % 7):  # batches of varying size, one sync each
        log.append(encode_put(b"b", b"k%d" % i, b"v%d" % i))
        i += 1
    log.sync()
    print(i, flush=True)  # every record below i is acknowledged
"""


def test_durable_log_keeps_every_acknowledged_record_across_kill_9(
    data_dir: pathlib.Path,
) -> None:
    """A writer killed with SIGKILL mid-stream loses nothing it acknowledged, invents nothing."""
    import signal
    import sys

    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER_SCRIPT, str(data_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    acked = 0
    try:
        assert child.stdout is not None
        while acked < 2000:
            line = child.stdout.readline()
            assert line, "the writer died before it was killed"
            acked = int(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        if child.stdout is not None:
            child.stdout.close()
    log, got = replay_all(data_dir)
    log.close()
    assert len(got) >= acked
    assert got == [rec(f"SET b k{i} v{i}".encode()) for i in range(len(got))]


def test_durable_log_write_pending_writes_without_a_sync(data_dir: pathlib.Path) -> None:
    """write_pending puts the records in the file but counts no sync; datasync then syncs
    once, and again only after more was written."""
    log, _ = replay_all(data_dir)
    size = os.path.getsize(segments(data_dir)[-1])
    log.append(rec(b"SET b k 1"))
    log.write_pending()
    assert os.path.getsize(segments(data_dir)[-1]) > size
    assert log.statistics().syncs == 0
    assert log.datasync() is True
    assert log.datasync() is False
    log.append(rec(b"SET b k 2"))
    log.write_pending()
    assert log.datasync() is True
    stats = log.statistics()
    log.close()
    assert (stats.appends, stats.syncs) == (2, 2)
    assert replay_all(data_dir)[1] == [rec(b"SET b k 1"), rec(b"SET b k 2")]


def test_durable_log_written_records_survive_a_process_kill(data_dir: pathlib.Path) -> None:
    """Records written with write_pending and never synced survive kill -9 (page cache)."""
    script = (
        "import os, signal, sys\n"
        "from minidb.wal import open_log, encode_ops, Put\n"
        "log, replay = open_log(sys.argv[1])\n"
        "list(replay)\n"
        "log.append(encode_ops([Put(b'b', b'k', b'written')]))\n"
        "log.write_pending()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(["src", os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(data_dir)], env=env, timeout=60, check=False
    )
    assert proc.returncode == -signal.SIGKILL
    assert replay_all(data_dir)[1] == [encode_ops([Put(b"b", b"k", b"written")])]


def test_durable_log_datasync_makes_written_records_survive_power_loss(
    data_dir: pathlib.Path,
) -> None:
    """After datasync, every record write_pending wrote survives a power loss."""
    replay_all(data_dir)[0].close()
    fs = CrashFS(data_dir, seed=7)
    with using(fs):
        log, _ = replay_all(data_dir)
        for i in range(3):
            log.append(rec(f"SET b k{i} v".encode()))
            log.write_pending()
        log.datasync()
        fs.power_loss()
    assert replay_all(data_dir)[1] == [rec(f"SET b k{i} v".encode()) for i in range(3)]


def test_durable_log_failed_datasync_is_fail_stop(
    data_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A datasync that fails fails the log: later appends are refused."""
    log, _ = replay_all(data_dir)
    log.append(rec(b"SET b k 1"))
    log.write_pending()
    _failpoints_set(monkeypatch, "wal.sync=error(EIO)")
    with pytest.raises(OSError):
        log.datasync()
    assert log.failure is not None
    with pytest.raises(WalError):
        log.append(rec(b"SET b k 2"))
    log.close()


def test_durable_log_close_syncs_written_records(data_dir: pathlib.Path) -> None:
    """A clean close fdatasyncs what write_pending wrote (fsync=no is synced at shutdown)."""
    log, _ = replay_all(data_dir)
    log.append(rec(b"SET b k 1"))
    log.write_pending()
    log.close()
    assert log.statistics().syncs == 1


def test_append_all_is_append_of_each_record_in_order(data_dir: pathlib.Path) -> None:
    """``append_all`` numbers, frames and replays its records exactly as ``append`` of each."""
    payloads = [encode_ops([Put(b"b", b"k%d" % i, b"v%d" % i, None)]) for i in range(5)]
    log, replay = open_log(data_dir)
    assert list(replay) == []
    log.append(payloads[0])
    log.append_all(payloads[1:4])
    log.append_all([])
    log.append(payloads[4])
    log.sync()
    assert log.statistics().appends == 5
    log.close()
    log, replayed = replay_all(data_dir)
    log.close()
    assert replayed == payloads
