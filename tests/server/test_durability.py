"""``minidb serve`` on its write-ahead log, as a black box: kill -9, restart, look at what is left.

Every test talks to a real server process over 127.0.0.1 and restarts it on the same data dir.
Group-commit figures come from the server's own ``/metrics`` counters.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from minidb.errors import ConfigError
from minidb.protocol import _resp
from minidb.server import ServerConfig
from minidb.store import _plainrun
from tests.server.conftest import IO_TIMEOUT_S, LineClient, ServeFactory, ServerProcess
from tests.wal.container_model import KEYS as CONTAINER_KEYS
from tests.wal.container_model import (
    Canon,
    ContainerModel,
    container_commands,
    explain,
    prefix_states,
)

redis = pytest.importorskip("redis", reason="redis-py is not installed (pip install redis)")

SEGMENT_0 = "wal-0000000000000000.log"
"""The first segment of a fresh data dir."""
START_TIMEOUT_S = 20.0
"""Deadline for a server that is expected to refuse to start."""
JEPSEN_CLIENTS = 12
"""Concurrent writers in the Jepsen-style test."""
JEPSEN_ROUNDS = 2
"""Kill -9 / restart generations in the Jepsen-style test."""


def metrics(server: ServerProcess) -> dict[str, float]:
    """The server's Prometheus samples by name (labels included in the name)."""
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=IO_TIMEOUT_S) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def syncs(server: ServerProcess) -> tuple[float, float]:
    """(appends, syncs) of the server's log so far."""
    m = metrics(server)
    return m["minidb_wal_appends_total"], m["minidb_wal_syncs_total"]


def scan_all(conn: LineClient, bucket: str) -> list[str]:
    """Every key of ``bucket``, by SCAN pages."""
    keys, cursor = [], "0"
    while True:
        reply = conn.request(f"SCAN {bucket} {cursor} 500").split(" ")
        assert reply[0] == "KEYS", reply
        cursor, page = reply[1], reply[2:]
        keys.extend(page)
        if cursor == "0":
            return keys


def check_model(conn: LineClient, model: dict[str, str | None]) -> None:
    """Every key of ``model`` (bucket ``users``) has its value, or is absent for None."""
    for key, value in model.items():
        expected = "NIL" if value is None else f"VALUE {value}"
        assert conn.request(f"GET users {key}") == expected, key


@pytest.mark.parametrize("sync_in", ["loop", "thread"])
def test_durability_acknowledged_writes_survive_kill_9_generations(
    serve: ServeFactory, tmp_path: Path, sync_in: str
) -> None:
    """SET, overwrite and DEL acknowledged before kill -9 are all there after each restart."""
    data = tmp_path / "gen"
    model: dict[str, str | None] = {}
    rng = random.Random(5)
    for generation in range(4):
        server = serve("--sync-in", sync_in, data_dir=data)
        conn = server.client()
        check_model(conn, model)
        for i in range(30):
            key = f"k{rng.randrange(12)}"
            if rng.random() < 0.3:
                reply = conn.request(f"DEL users {key}")
                assert reply == ("OK" if model.get(key) is not None else "NIL")
                model[key] = None
            else:
                value = f"g{generation} i{i} {'x' * rng.randrange(40)}"
                assert conn.request(f"SET users {key} {value}") == "OK"
                model[key] = value
        # A pipelined tail: acknowledged together, by one group's sync.
        assert conn.pipeline([f"SET users p{generation} {i}" for i in range(8)]) == ["OK"] * 8
        model[f"p{generation}"] = "7"
        server.kill()
    check_model(serve(data_dir=data).client(), model)


@dataclass
class Writer:
    """What one Jepsen client sent and what it was told, across rounds."""

    cid: int
    sent: set[str] = field(default_factory=set)  # keys whose SET was sent (maybe never applied)
    acked: dict[str, str] = field(default_factory=dict)  # key -> value acknowledged OK
    counter_acked: int = 0  # highest counter value acknowledged (or read back after a restart)
    counter_sent: int = 0  # highest counter value sent
    errors: list[str] = field(default_factory=list)

    def run(self, port: int, round_: int, stop: threading.Event) -> None:
        try:
            conn = LineClient(port)
        except OSError:
            return
        try:
            j = 0
            while not stop.is_set():
                key = f"r{round_}-c{self.cid}-{j}"
                self.sent.add(key)
                reply = conn.request(f"SET jepsen {key} v{j}")
                if reply != "OK":
                    self.errors.append(reply)
                    return
                self.acked[key] = f"v{j}"
                self.counter_sent = self.counter_acked + 1
                reply = conn.request(f"SET counters c{self.cid} {self.counter_sent}")
                if reply != "OK":
                    self.errors.append(reply)
                    return
                self.counter_acked = self.counter_sent
                j += 1
        except OSError:
            return  # the server was killed under us: whatever is in flight is unacknowledged
        finally:
            conn.close()


def test_durability_jepsen_kill_9_mid_load_loses_and_invents_nothing(
    serve: ServeFactory, tmp_path: Path
) -> None:
    """Concurrent writers, kill -9 at a random moment: acked writes stay, nothing is invented,
    counters never go backwards (the seed is in every failure message)."""
    seed = int(os.environ.get("MINIDB_TEST_SEED", time.time_ns() % 2**32))
    rng = random.Random(seed)
    data = tmp_path / "jepsen"
    writers = [Writer(cid) for cid in range(JEPSEN_CLIENTS)]
    for round_ in range(JEPSEN_ROUNDS):
        server = serve(data_dir=data)
        stop = threading.Event()
        threads = [
            threading.Thread(target=w.run, args=(server.port, round_, stop), daemon=True)
            for w in writers
        ]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.2, 0.8))  # the random moment of the crash
        server.kill()
        stop.set()
        for t in threads:
            t.join(timeout=IO_TIMEOUT_S * 2)
            assert not t.is_alive(), f"writer stuck (seed {seed})"
        assert sum(len(w.acked) for w in writers) > 0, f"no write acknowledged (seed {seed})"
        checker = serve(data_dir=data)
        conn = checker.client()
        present = set(scan_all(conn, "jepsen"))
        for w in writers:
            assert not w.errors, f"writer {w.cid} got {w.errors} (seed {seed})"
            lost = [k for k in w.acked if k not in present]
            assert not lost, f"acknowledged keys lost: {lost[:5]} (seed {seed})"
            for key, acked in list(w.acked.items())[-20:]:
                assert conn.request(f"GET jepsen {key}") == f"VALUE {acked}", f"seed {seed}"
            reply = conn.request(f"GET counters c{w.cid}")
            counter = 0 if reply == "NIL" else int(reply.removeprefix("VALUE "))
            # Never behind what was acknowledged; ahead by at most the one write in flight.
            assert w.counter_acked <= counter <= w.counter_sent, (
                f"counter c{w.cid}={counter}, acked {w.counter_acked}, sent {w.counter_sent} "
                f"(seed {seed})"
            )
            w.counter_acked = w.counter_sent = counter  # a read is an acknowledgement too
        invented = present - set().union(*(w.sent for w in writers))
        assert not invented, f"keys never sent appeared: {sorted(invented)[:5]} (seed {seed})"
        checker.kill()


def test_durability_concurrent_writes_share_syncs_sequential_do_not(serve: ServeFactory) -> None:
    """16 concurrent writes cost at most 4 syncs, 7 sequential ones at least 7, GETs none."""
    server = serve("--metrics-port", "0")
    conns = [server.client() for _ in range(16)]
    for conn in conns:  # every connection accepted and served before the burst
        assert conn.request("GET users nobody") == "NIL"
    appends, synced = syncs(server)
    assert (appends, synced) == (0, 0)
    # Stopping the process makes the 16 writes truly concurrent: all are in the kernel's
    # socket buffers when it resumes, whatever the machine's scheduling.
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        for i, conn in enumerate(conns):
            conn.send(f"SET users c{i} v\n".encode())
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert [conn.read_line() for conn in conns] == [b"OK"] * 16
    appends, synced = syncs(server)
    assert appends == 16 and 1 <= synced <= 4, (appends, synced)

    for i in range(7):
        assert conns[0].request(f"SET users s{i} v") == "OK"
    appends2, synced2 = syncs(server)
    assert appends2 - appends == 7 and synced2 - synced >= 7

    for i in range(7):
        assert conns[1].request(f"GET users s{i}") == "VALUE v"
    assert conns[2].pipeline([f"GET users c{i}" for i in range(16)]) == ["VALUE v"] * 16
    assert conns[3].request("DEL users missing") == "NIL"  # changes nothing: not logged
    assert syncs(server) == (appends2, synced2)


def test_durability_commit_delay_gathers_sequential_senders(serve: ServeFactory) -> None:
    """With --commit-delay, writes arriving during the wait join the same sync."""
    server = serve("--metrics-port", "0", "--commit-delay", "100000")
    conns = [server.client() for _ in range(8)]
    for conn in conns:
        assert conn.request("GET users nobody") == "NIL"
    for i, conn in enumerate(conns):  # one after another, well inside the 100 ms delay
        conn.send(f"SET users d{i} v\n".encode())
    assert [conn.read_line() for conn in conns] == [b"OK"] * 8
    appends, synced = syncs(server)
    assert appends == 8 and synced <= 2, (appends, synced)


def test_durability_replay_after_checkpoint_and_more_writes(
    serve: ServeFactory, tmp_path: Path
) -> None:
    """Writes before a checkpoint come from the snapshot, later ones from the log."""
    data = tmp_path / "ckpt"
    server = serve("--metrics-port", "0", "--checkpoint-bytes", "4096", data_dir=data)
    conn = server.client()
    model: dict[str, str | None] = {}
    for i in range(200):
        key = f"k{i % 50}"
        assert conn.request(f"SET users {key} before{i}") == "OK"
        model[key] = f"before{i}"
    assert metrics(server)["minidb_wal_checkpoints_total"] >= 1
    assert list(data.glob("snapshot-*.snap"))
    checkpoints = metrics(server)["minidb_wal_checkpoints_total"]
    for i in range(10):
        assert conn.request(f"DEL users k{i}") == "OK"
        model[f"k{i}"] = None
        assert conn.request(f"SET users new{i} after") == "OK"
        model[f"new{i}"] = "after"
    assert metrics(server)["minidb_wal_checkpoints_total"] == checkpoints  # still in the log
    server.kill()
    restarted = serve("--metrics-port", "0", data_dir=data)
    check_model(restarted.client(), model)
    replayed = metrics(restarted)["minidb_wal_replayed_records"]
    assert replayed < 200, replayed  # snapshot + tail, not the history


def _bulk_set(port: int, writes: int, keys: int, chunk: int = 4000) -> None:
    """``writes`` SETs over ``keys`` keys on one connection, ``chunk`` pipelined at a time."""
    conn = LineClient(port, timeout=30)
    try:
        for start in range(0, writes, chunk):
            lines = b"".join(
                b"SET bulk k%d %d\n" % (i % keys, i) for i in range(start, start + chunk)
            )
            conn.send(lines)
            for _ in range(chunk):
                assert conn.read_line() == b"OK"
    finally:
        conn.close()


def _restart(serve: ServeFactory, data: Path, *args: str) -> tuple[float, float, ServerProcess]:
    started = time.monotonic()
    server = serve("--metrics-port", "0", *args, data_dir=data)
    elapsed = time.monotonic() - started
    return elapsed, metrics(server)["minidb_wal_replayed_records"], server


@pytest.mark.timeout(600)  # a million writes over the wire: minutes on a loaded machine
def test_durability_restart_after_1m_writes_replays_like_after_10k(
    serve: ServeFactory, tmp_path: Path
) -> None:
    """Checkpoints keep restart proportional to the live data: 1M writes to 10k keys replay
    about as many records, and take about as long, as 10k writes."""
    keys, checkpoint = 10_000, "262144"
    small, big = tmp_path / "small", tmp_path / "big"
    server = serve("--checkpoint-bytes", checkpoint, data_dir=small)
    _bulk_set(server.port, keys, keys)
    server.kill()
    server = serve("--checkpoint-bytes", checkpoint, "--mailbox", "100000", data_dir=big)
    _bulk_set(server.port, 1_000_000, keys)
    server.kill()
    small_s, small_replayed, small_restarted = _restart(
        serve, small, "--checkpoint-bytes", checkpoint
    )
    big_s, big_replayed, restarted = _restart(serve, big, "--checkpoint-bytes", checkpoint)
    for server in (small_restarted, restarted):
        assert metrics(server)["minidb_keys"] == keys
    # Each is a snapshot (10k keys packed into a few records) plus at most about one
    # --checkpoint-bytes (or one snapshot's size) of log: ~9k records of ~28 B, 1M writes or
    # 10k; the history of 1M writes would be 1M records.
    assert small_replayed <= 12_000, small_replayed
    assert big_replayed <= 12_000, big_replayed
    assert big_s <= 5 * small_s + 2.0, (big_s, small_s)  # generous: a shared machine
    conn = restarted.client()
    assert conn.request("GET bulk k9999") == "VALUE 999999"
    assert conn.request("GET bulk k0") == "VALUE 990000"


@pytest.mark.parametrize("sync_in", ["loop", "thread"])
def test_durability_disk_error_is_fail_stop_end_to_end(
    serve: ServeFactory, tmp_path: Path, sync_in: str
) -> None:
    """A failing fsync: its batch gets ERR not logged, later writes ERR read-only, reads work;
    a restart without the fault has every acknowledged write and none of the refused ones."""
    data = tmp_path / "enospc"
    server = serve(
        "--metrics-port", "0", "--sync-in", sync_in, data_dir=data,
        env={"MINIDB_FAILPOINTS": "wal.sync=error(ENOSPC, 3)"},
    )
    conn = server.client()
    assert conn.request("SET users a 1") == "OK"
    assert conn.request("SET users b 1") == "OK"
    assert conn.request("SET users a 2") == "OK"
    not_logged = "ERR not logged: No space left on device"
    # One read, one group: both writes refused, the read answered from the rolled-back state.
    assert conn.pipeline(["SET users c 1", "GET users c", "SET users a 3"]) == [
        not_logged, "NIL", not_logged,
    ]
    assert conn.request("SET users d 1").startswith("ERR read-only: ")
    assert conn.request("DEL users a").startswith("ERR read-only: ")
    assert conn.request("GET users a") == "VALUE 2"
    assert server.client().request("GET users b") == "VALUE 1"
    samples = metrics(server)
    assert samples["minidb_read_only"] == 1
    assert samples['minidb_requests_total{outcome="not_logged",verb="SET"}'] == 2
    server.terminate()
    assert server.wait() == 0
    restarted = serve(data_dir=data).client()
    check_model(restarted, {"a": "2", "b": "1", "c": None, "d": None})
    assert restarted.request("SET users e 1") == "OK"  # writable again after the restart


def _write_and_kill(serve: ServeFactory, data: Path, count: int) -> None:
    server = serve(data_dir=data)
    conn = server.client()
    for i in range(count):
        assert conn.request(f"SET users k{i} value{i}") == "OK"
    server.kill()


def _records_end(segment: bytes) -> int:
    """Where the records of a killed server's open segment end: the zeros written ahead of
    them follow (a last record ending in zero bytes ends a little later; these tests only cut
    or damage the records before it)."""
    return len(segment.rstrip(b"\0"))


def test_durability_corrupt_segment_refuses_to_start(serve: ServeFactory, tmp_path: Path) -> None:
    """A bad checksum mid-segment: exit 1, one stderr line naming file and offset, no port."""
    data = tmp_path / "corrupt"
    _write_and_kill(serve, data, 20)
    segment = data / SEGMENT_0
    raw = bytearray(segment.read_bytes())
    raw[_records_end(raw) // 2] ^= 0xFF
    segment.write_bytes(bytes(raw))
    out = subprocess.run(
        [sys.executable, "-m", "minidb", "serve", "--port", "0", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=START_TIMEOUT_S,
    )
    assert out.returncode == 1, out.stderr
    assert "listening" not in out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert SEGMENT_0 in lines[0] and "offset" in lines[0], lines[0]


def test_durability_torn_tail_is_cut_logged_and_log_continues(
    serve: ServeFactory, tmp_path: Path
) -> None:
    """A half-written last record is cut off and logged with file and offset; the rest stays."""
    data = tmp_path / "torn"
    _write_and_kill(serve, data, 5)
    segment = data / SEGMENT_0
    os.truncate(segment, _records_end(segment.read_bytes()) - 3)
    server = serve(data_dir=data)
    conn = server.client()
    check_model(conn, {f"k{i}": f"value{i}" for i in range(4)} | {"k4": None})
    assert conn.request("SET users k5 after") == "OK"
    server.terminate()
    assert server.wait() == 0
    log = server.stderr()
    torn = [line for line in log.splitlines() if "event=wal_torn_tail_cut" in line]
    assert torn and f"file={SEGMENT_0}" in torn[0] and "offset=" in torn[0], log
    check_model(serve(data_dir=data).client(), {"k3": "value3", "k4": None, "k5": "after"})


# -- exact replay and refusals of the log's format version 2 ----------------------------------

LINE_VALUES = st.lists(
    st.text(
        alphabet=st.sampled_from(["\r", " ", "a", "\t", "\x00", "é", "€", "\\", ";"])
        | st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"),
        max_size=40,
    ).map(lambda s: s.encode("utf-8")),
    min_size=1,
    max_size=40,
)


def _set_all(conn: LineClient, values: list[bytes]) -> None:
    # CRLF: the parser strips exactly the terminator's CR, so the value is ``value`` exactly.
    conn.send(b"".join(b"SET exact k%d %b\r\n" % (i, v) for i, v in enumerate(values)))
    assert [conn.read_line() for _ in values] == [b"OK"] * len(values)


def _get_all(conn: LineClient, count: int) -> list[bytes]:
    conn.send(b"".join(b"GET exact k%d\n" % i for i in range(count)))
    return [conn.read_line() for _ in range(count)]


@settings(
    max_examples=3, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@example(values=[b"abc\r", b"\r\r", b" lead and trail ", b""])
@given(values=LINE_VALUES)
def test_durability_replay_returns_exactly_the_acknowledged_bytes(
    serve: ServeFactory, tmp_path: Path, values: list[bytes]
) -> None:
    """Any value the line protocol acknowledges comes back byte for byte after a kill -9
    (replay from the log) and after a clean shutdown (replay from the snapshot)."""
    data = Path(tempfile.mkdtemp(dir=tmp_path))
    expected = [b"VALUE " + v for v in values]
    server = serve(data_dir=data)
    conn = server.client()
    _set_all(conn, values)
    assert _get_all(conn, len(values)) == expected
    server.kill()
    assert not list(data.glob("snapshot-*.snap"))
    server = serve(data_dir=data)
    assert _get_all(server.client(), len(values)) == expected, "replayed from the log"
    server.terminate()
    assert server.wait() == 0
    assert list(data.glob("snapshot-*.snap")), "a clean shutdown writes a checkpoint"
    server = serve(data_dir=data)
    assert _get_all(server.client(), len(values)) == expected, "replayed from the snapshot"
    server.kill()


def test_durability_flipped_length_bit_refuses_check_and_serve(
    serve: ServeFactory, tmp_path: Path
) -> None:
    """Three acknowledged SETs, byte 21 of the first segment XORed with 0x80 (the first
    record's length): ``wal check`` exits 1 and ``serve`` refuses, both naming file and offset,
    instead of calling it a torn tail and dropping all three keys."""
    data = tmp_path / "flip"
    _write_and_kill(serve, data, 3)
    segment = data / SEGMENT_0
    raw = bytearray(segment.read_bytes())
    raw[21] ^= 0x80
    segment.write_bytes(bytes(raw))
    check = subprocess.run(
        [sys.executable, "-m", "minidb", "wal", "check", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=START_TIMEOUT_S,
    )
    assert check.returncode == 1, check.stdout
    assert f"{SEGMENT_0}: offset 20:" in check.stderr, check.stderr
    out = subprocess.run(
        [sys.executable, "-m", "minidb", "serve", "--port", "0", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=START_TIMEOUT_S,
    )
    assert out.returncode == 1 and "listening" not in out.stdout
    assert f"{SEGMENT_0}: offset 20:" in out.stderr and "byte offset 20" in out.stderr, out.stderr
    assert segment.read_bytes() == bytes(raw)  # nothing was cut


def test_durability_v1_data_dir_serves_the_same_values_and_continues(
    serve: ServeFactory, tmp_path: Path
) -> None:
    """A data dir written in format version 1 serves its values exactly (a trailing CR kept),
    takes new writes, and serves all of them after a kill -9 and a clean restart."""
    from tests.wal.test_compat import write_v1_dir

    data = tmp_path / "v1"
    write_v1_dir(data, {0: [b"SET users a abc\r", b"SET users b x y ", b"DEL users b"]})
    server = serve(data_dir=data)
    conn = server.client()
    assert conn.request("GET users a") == "VALUE abc\r"
    assert conn.request("GET users b") == "NIL"
    assert conn.request("SET users c new") == "OK"
    server.kill()
    server = serve(data_dir=data)
    check_model(server.client(), {"a": "abc\r", "b": None, "c": "new"})
    server.terminate()
    assert server.wait() == 0
    check_model(serve(data_dir=data).client(), {"a": "abc\r", "b": None, "c": "new"})


def test_durability_lock_refusal_names_the_data_dir(serve: ServeFactory, tmp_path: Path) -> None:
    """A second server on a data dir in use refuses to start, naming the directory."""
    data = tmp_path / "locked"
    serve(data_dir=data)
    out = subprocess.run(
        [sys.executable, "-m", "minidb", "serve", "--port", "0", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=START_TIMEOUT_S,
    )
    assert out.returncode == 1
    assert f"data dir {data} is in use by another process" in out.stderr, out.stderr


def test_durability_enospc_creating_a_fresh_data_dir_names_the_file(tmp_path: Path) -> None:
    """ENOSPC while a fresh data dir is created: exit 1, naming the file not written."""
    data = tmp_path / "full"
    out = subprocess.run(
        [sys.executable, "-m", "minidb", "serve", "--port", "0", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=START_TIMEOUT_S,
        env={**os.environ, "MINIDB_FAILPOINTS": "wal.create=error(ENOSPC, 1)"},
    )
    assert out.returncode == 1 and "listening" not in out.stdout
    assert str(data / "MANIFEST") in out.stderr and "No space left" in out.stderr, out.stderr


@pytest.mark.parametrize("policy", ["everysec", "no"])
def test_durability_written_not_synced_writes_survive_kill_9(
    serve: ServeFactory, tmp_path: Path, policy: str
) -> None:
    """With --fsync everysec or no, an acknowledged write is in the page cache: kill -9 loses
    nothing, and (with no) the server made no fdatasync for it."""
    data = tmp_path / f"data-{policy}"
    server = serve("--fsync", policy, "--metrics-port", "0", data_dir=data)
    conn = server.client()
    for i in range(20):
        assert conn.request(f"SET users k{i} v{i}") == "OK"
    if policy == "no":
        assert syncs(server) == (20, 0)
    server.kill()
    conn = serve(data_dir=data).client()
    assert [conn.request(f"GET users k{i}") for i in range(20)] == [
        f"VALUE v{i}" for i in range(20)
    ]


def test_durability_expiry_is_replayed_after_kill_9(serve: ServeFactory, tmp_path: Path) -> None:
    """EXPIRE, TTL and PERSIST over the wire, and a kill -9 keeps each key's expiry."""
    data = tmp_path / "data-expiry"
    server = serve(data_dir=data)
    conn = server.client()
    assert conn.request("SET users timed v") == "OK"
    assert conn.request("SET users kept v") == "OK"
    assert conn.request("EXPIRE users timed 1000") == "OK"
    assert conn.request("EXPIRE users kept 1000") == "OK"
    assert conn.request("PERSIST users kept") == "OK"
    assert conn.request("EXPIRE users missing 5") == "NIL"
    assert conn.request("TTL users timed") == "VALUE 1000"
    assert conn.request("EXPIRE users timed 99999999999") == "ERR invalid seconds 99999999999"
    set_at = time.monotonic()
    server.kill()
    conn = serve(data_dir=data).client()
    ttl = conn.request("TTL users timed")
    # The deadline is absolute: the restart's own time (seconds on a loaded machine) counts.
    elapsed = time.monotonic() - set_at
    assert ttl.startswith("VALUE "), ttl
    assert 1000 - math.ceil(elapsed) - 1 <= int(ttl.split()[1]) <= 1000, (ttl, elapsed)
    assert conn.request("TTL users kept") == "VALUE -1"
    assert conn.request("TTL users missing") == "NIL"


@pytest.mark.parametrize("growth", [-0.5, 100.5, math.nan, math.inf])
def test_durability_checkpoint_growth_out_of_range_is_refused(growth: float) -> None:
    """--checkpoint-growth outside 0-100 (or not a number) is a ConfigError naming the flag."""
    with pytest.raises(ConfigError, match="--checkpoint-growth must be 0-100"):
        ServerConfig(checkpoint_growth=growth)


def test_durability_bulk_frame_under_a_failed_sync_is_none_of_it(
    serve: ServeFactory, tmp_path: Path
) -> None:
    """A frame whose sync fails gets one ERR not logged and none of its rows is applied, now
    or after a restart; a frame before it, acknowledged, is all there."""
    data = tmp_path / "bulk-eio"
    server = serve(
        "--metrics-port", "0", data_dir=data, env={"MINIDB_FAILPOINTS": "wal.sync=error(EIO, 1)"}
    )
    conn = server.client()
    conn.send(b"BULK 2\nSET users a 1\nSET users b 1\n")
    assert conn.read_line() == b"OK 2"
    conn.send(b"BULK 3\nSET users a 2\nDEL users b\nSET users c 1\nGET users a\n")
    assert conn.read_line() == b"ERR not logged: Input/output error"
    assert conn.read_line() == b"VALUE 1"
    samples = metrics(server)
    assert samples['minidb_requests_total{outcome="not_logged",verb="BULK"}'] == 1
    server.terminate()
    assert server.wait() == 0
    restarted = serve(data_dir=data).client()
    check_model(restarted, {"a": "1", "b": "1", "c": None})


# -- containers under kill -9 ----------------------------------------------------------------

CONTAINER_GENERATIONS = 3
"""Kill -9 / restart generations of the container test."""
CONTAINER_ACKED_BEFORE_KILL = 80
"""Commands acknowledged in a generation before its kill (more are in flight by then)."""


def observe_containers(r: redis.Redis) -> Canon:
    """The server's keyspace as key -> (type, contents), read over RESP."""
    found: Canon = {}
    for key in CONTAINER_KEYS:
        kind = r.type(key).decode()
        if kind == "hash":
            found[key] = (kind, r.hgetall(key))
        elif kind == "list":
            found[key] = (kind, tuple(r.lrange(key, 0, -1)))
        elif kind == "set":
            found[key] = (kind, frozenset(r.smembers(key)))
        elif kind == "zset":
            found[key] = (kind, dict(r.zrange(key, 0, -1, withscores=True)))
        else:
            assert kind == "none", (key, kind)
    assert r.dbsize() == len(found), "the server holds keys no command wrote"
    return found


@contextlib.contextmanager
def _until_killed(r: redis.Redis, enough: threading.Event) -> Iterator[None]:
    """A writer's connection, until the server is killed under it (what is in flight then may
    or may not have been applied); ``enough`` is set on the way out, whatever happened."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError):
        pass
    finally:
        enough.set()
        r.close()


@dataclass
class ContainerWriter:
    """Sends pipelines of container commands until the server dies; what was acknowledged."""

    commands: list[list[bytes]]
    acked: int = 0
    in_flight: list[list[bytes]] = field(default_factory=list)
    enough: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    def run(self, port: int, rng: random.Random) -> None:
        r = redis.Redis(port=port, socket_timeout=IO_TIMEOUT_S)
        with _until_killed(r, self.enough):
            while self.acked < len(self.commands):
                self.in_flight = self.commands[self.acked : self.acked + rng.randint(1, 4)]
                pipe = r.pipeline(transaction=False)
                for argv in self.in_flight:
                    pipe.execute_command(*argv)
                replies = pipe.execute(raise_on_error=False)
                self.errors += [str(reply) for reply in replies  # RENAME of a missing key
                                if isinstance(reply, redis.ResponseError)
                                and "no such key" not in str(reply)]  # fmt: skip
                self.acked += len(self.in_flight)
                self.in_flight = []
                if self.acked >= CONTAINER_ACKED_BEFORE_KILL:
                    self.enough.set()


def test_durability_containers_survive_kill_9_mid_load(
    serve: ServeFactory, tmp_path: Path
) -> None:
    """Hashes, lists, sets and sorted sets written over RESP (HSET/HDEL, pushes, pops, LMOVE,
    SADD/SREM, ZADD/ZINCRBY/ZPOPMIN, RENAME/COPY) while the server is killed -9 mid-load, with
    checkpoints among the writes: after each restart the keyspace is every acknowledged
    command's effect plus a prefix of the pipeline in flight."""
    data = tmp_path / "containers"
    acked = ContainerModel()
    in_flight: list[list[bytes]] = []  # the pipeline the last kill cut
    rng = random.Random(19)
    for generation in range(CONTAINER_GENERATIONS + 1):
        server = serve("--resp-port", "0", "--checkpoint-bytes", "1024",
                       "--checkpoint-growth", "0", data_dir=data)  # fmt: skip
        assert server.resp_port is not None
        r = redis.Redis(port=server.resp_port, socket_timeout=IO_TIMEOUT_S)
        observed = observe_containers(r)
        r.close()
        states = prefix_states(acked, in_flight)
        assert observed in states, explain(states[0], observed, in_flight)
        for argv in in_flight[: states.index(observed)]:
            acked.apply(argv)
        if generation == CONTAINER_GENERATIONS:
            break
        commands = container_commands(rng, 5000, b"g%d" % generation)
        writer = ContainerWriter(commands)
        thread = threading.Thread(target=writer.run, args=(server.resp_port, rng), daemon=True)
        thread.start()
        assert writer.enough.wait(timeout=60), "the writer made no progress"
        server.kill()
        thread.join(timeout=IO_TIMEOUT_S * 2)
        assert not thread.is_alive() and not writer.errors, writer.errors
        assert writer.acked < len(commands), "the kill came after the last command"
        for argv in commands[: writer.acked]:
            acked.apply(argv)
        in_flight = writer.in_flight


EXPRESS_LANE = _plainrun.ACCELERATED and _resp._scan_raw is not None
"""The server (started with this process's environment) has the express lane."""
PLAIN_WRITERS = 8
PLAIN_ACKED_BEFORE_KILL = 300
"""Pipelines acknowledged (all writers together) before the kill."""


@dataclass
class PlainWriter:
    """Pipelines of plain SETs over RESP (the express lane's loop turn's group, issue 18),
    each ending with the writer's counter, until the server dies."""

    cid: int
    acked_total: list[int]  # shared by the writers: pipelines acknowledged
    enough: threading.Event
    sent: set[bytes] = field(default_factory=set)
    acked: dict[bytes, bytes] = field(default_factory=dict)
    counter_acked: int = 0
    counter_sent: int = 0
    errors: list[str] = field(default_factory=list)

    def run(self, port: int, generation: int, seed: int) -> None:
        rng = random.Random(seed)
        r = redis.Redis(port=port, socket_timeout=IO_TIMEOUT_S)
        j = 0
        with _until_killed(r, self.enough):
            while True:
                pipe = r.pipeline(transaction=False)
                batch = {}
                for _ in range(rng.randint(1, 8)):
                    key, value = b"g%d-c%d-%d" % (generation, self.cid, j), b"v%d" % j
                    j += 1
                    self.sent.add(key)
                    batch[key] = value
                    pipe.set(key, value)
                self.counter_sent = self.counter_acked + 1
                pipe.set(b"counter-c%d" % self.cid, self.counter_sent)
                replies = pipe.execute(raise_on_error=False)
                if replies != [True] * len(replies):
                    self.errors.append(repr(replies))
                    return
                self.acked.update(batch)
                self.counter_acked = self.counter_sent
                self.acked_total.append(1)
                if len(self.acked_total) >= PLAIN_ACKED_BEFORE_KILL:
                    self.enough.set()


@pytest.mark.parametrize("fsync", ["always", "no"])
def test_durability_plain_resp_writes_survive_kill_9_mid_load(
    serve: ServeFactory, tmp_path: Path, fsync: str
) -> None:
    """Plain SETs over RESP, pipelined at random depths by concurrent clients, run in the
    loop turn's group; kill -9 mid-load: every acknowledged SET is there after the restart
    (``no`` too: a reply leaves after the turn's write to the OS), nothing is invented, and
    no counter goes backwards or ahead of what was sent."""
    data = tmp_path / "plain"
    seed = int(os.environ.get("MINIDB_TEST_SEED", time.time_ns() % 2**32))
    writers: list[PlainWriter] = []
    for generation in range(2):
        server = serve("--resp-port", "0", "--metrics-port", "0", "--fsync", fsync,
                       data_dir=data)  # fmt: skip
        assert server.resp_port is not None
        acked_total: list[int] = []
        enough = threading.Event()
        fresh = [PlainWriter(cid, acked_total, enough) for cid in range(PLAIN_WRITERS)]
        for writer, old in zip(fresh, writers or fresh, strict=True):
            writer.counter_acked = writer.counter_sent = old.counter_acked
        threads = [
            threading.Thread(target=w.run, args=(server.resp_port, generation, seed + w.cid),
                             daemon=True)
            for w in fresh
        ]  # fmt: skip
        for t in threads:
            t.start()
        assert enough.wait(timeout=60), f"the writers made no progress (seed {seed})"
        inline = metrics(server)["minidb_inline_requests_total"]
        server.kill()
        for t in threads:
            t.join(timeout=IO_TIMEOUT_S * 2)
            assert not t.is_alive(), f"writer stuck (seed {seed})"
        # (Without the C twins there is no express lane: the writes went to the owner.)
        assert inline > 0 or not EXPRESS_LANE, "no write ran in the loop turn's group"
        checker = serve("--resp-port", "0", data_dir=data)
        assert checker.resp_port is not None
        r = redis.Redis(port=checker.resp_port, socket_timeout=IO_TIMEOUT_S)
        present = {key for key in r.scan_iter(match=b"g%d-*" % generation, count=1000)}
        for w in fresh:
            assert not w.errors, f"writer {w.cid} got {w.errors} (seed {seed})"
            lost = [k for k in w.acked if k not in present]
            assert not lost, f"acknowledged keys lost: {lost[:5]} (seed {seed})"
            for key, value in list(w.acked.items())[-20:]:
                assert r.get(key) == value, f"seed {seed}"
            counter = int(r.get(b"counter-c%d" % w.cid) or 0)
            assert w.counter_acked <= counter <= w.counter_sent, (
                f"counter c{w.cid}={counter}, acked {w.counter_acked}, sent {w.counter_sent} "
                f"(seed {seed})"
            )
            w.counter_acked = counter  # a read is an acknowledgement too
        invented = present - set().union(*(w.sent for w in fresh))
        assert not invented, f"keys never sent appeared: {sorted(invented)[:5]} (seed {seed})"
        r.close()
        checker.kill()
        writers = fresh
