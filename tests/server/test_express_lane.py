"""The express lane through a real ``RespConnection``, held to the pure path.

The same pipelined bytes, split at random places, go through ``data_received`` of two
connections: one with the C twins (the express lane's one C call, inline reads, the C run on
the owner) and one with the Python reference (no C scan, so no express lane, and the Python
run). The owner runs by hand between reads at random points and is idle or busy at random
(idle: inline reads are allowed). Everything written to the client, the keyspace at the end and
the log must be equal byte for byte.

The C ``data_received`` (``server.resp._cconnection``) is held the same way to the Python
method it replaces, each with the rest of the C twins (so both take the express lane), down to
how many requests were served inline.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minidb.protocol import _resp, encode_command
from minidb.server.resp import _connection as connection_module
from minidb.server.resp import _executor as executor_module
from minidb.store import MemoryLog, StoreOwner, StoreState, _plainrun, run_plain_python
from minidb.wal import Put
from tests.server._connection_twins import python_connection_methods
from tests.server.test_connection import RecordingLoop
from tests.server.test_pubsub_hold import _connection
from tests.store.test_plainrun_twin import _CONNECTION_EXTRAS, NOW_MS, _command

pytestmark = pytest.mark.accelerator  # tests/sanitizers/run.py runs these under ASan and UBSan
needs_c = pytest.mark.skipif(
    not _plainrun.ACCELERATED or _resp._scan_raw is None, reason="C twins not built"
)
needs_c_method = pytest.mark.skipif(
    connection_module._cconnection is None, reason="the C data_received is not built"
)
_READS = st.tuples(
    st.sampled_from([b"GET", b"EXISTS", b"TTL", b"MGET"]), st.sampled_from([b"a", b"b", b"n"])
).map(list)
"""Plain reads of ordinary keys, so that many reads are served inline."""
_MOSTLY = st.sampled_from([True, True, True, False])
"""The owner run after a read / idle: mostly, so that the express lane has its chances."""
MAX_OWNER_TURNS = 1000
"""A bound on the owner turns that drain what is left (a broken build fails, never hangs)."""


def _drive(
    accelerated: bool, pieces: list[bytes], owner_after: list[bool], idle_at: list[bool],
    c_data_received: bool = True,
) -> tuple[tuple[object, ...], int, tuple[object, ...]]:
    """Feed ``pieces`` to one connection (the owner run after a piece or not, idle or not, per
    piece, each list taken round); (what it wrote, the keyspace, the log, the session's
    statistics and last command), how many requests were served inline, and the
    connection's own counts (whether it made runs, requests taken, in flight) and the owner's
    statistics. Not ``accelerated``: no C at all; else ``c_data_received`` says which
    connection methods (``data_received``, ``turn_answered``, ``output_room``)."""
    if accelerated and c_data_received:
        return _drive_with(accelerated, pieces, owner_after, idle_at)
    with python_connection_methods():
        return _drive_with(accelerated, pieces, owner_after, idle_at)


def _drive_with(
    accelerated: bool, pieces: list[bytes], owner_after: list[bool], idle_at: list[bool]
) -> tuple[tuple[object, ...], int, tuple[object, ...]]:
    """``_drive`` with the connection methods as they are installed."""
    scan, run_plain = _resp._scan_raw, executor_module.run_plain
    take_whole = _resp.RespDecoder.take_whole
    if not accelerated:
        _resp._scan_raw = None
        _resp.RespDecoder.take_whole = _resp.RespDecoder.take_whole_py  # type: ignore[method-assign]
        executor_module.run_plain = run_plain_python
    loop = RecordingLoop()
    try:
        log = MemoryLog()
        owner = StoreOwner(StoreState(), log, mailbox=100, clock=lambda: NOW_MS)
        owner._loop, owner._running = loop, True  # as run() sets them: the loop turn's group
        owner._update_turns()  # may take runs (commit ends it)
        conn, transport, _ = _connection(loop, owner)
        for at, piece in enumerate(pieces):
            turns = 0
            while not transport.reading and turns < MAX_OWNER_TURNS:
                owner.commit(owner.mailbox.take(100))  # paused: the owner answers first
                turns += 1
            owner.waiting = idle_at[at % len(idle_at)]  # idle: waiting for work
            conn.data_received(piece)
            if owner_after[at % len(owner_after)]:
                owner.commit(owner.mailbox.take(100))
        for _ in range(MAX_OWNER_TURNS):
            owner.end_turn()
            if not owner.mailbox.queued:
                break
            owner.commit(owner.mailbox.take(100))
        assert not owner.mailbox.queued, "the owner did not drain the connection's requests"
        ks = owner.state.keyspace
        session = conn.session  # the express lane counts its commands as the session would
        seen = (
            b"".join(transport.writes), sorted(ks.items()), list(log.appended),
            session.statistics(), session.last_command,
        )
        counts = (conn.requests_decoder.runs, conn.requests, conn._in_flight, owner.statistics())
        return seen, owner.statistics().inline_requests, counts
    finally:
        _resp._scan_raw, executor_module.run_plain = scan, run_plain
        _resp.RespDecoder.take_whole = take_whole  # type: ignore[method-assign]
        loop.close()


def _pieces(commands: list[list[bytes]], cuts: list[int], between: set[int], seed: int) -> list[
    bytes
]:
    """The commands' wire form, cut after the commands numbered in ``between``, at the byte
    offsets ``cuts`` and at one random place."""
    frames = [encode_command(c) for c in commands]
    wire = b"".join(frames)
    ends = list(itertools.accumulate(len(frame) for frame in frames))
    rng = random.Random(seed)
    bounds = {ends[i - 1] for i in between if i <= len(ends)} | {c for c in cuts if c < len(wire)}
    bounds.add(rng.randrange(len(wire) + 1))
    points = [0, *sorted(bounds), len(wire)]
    return [wire[a:b] for a, b in itertools.pairwise(points) if b > a]


_scenarios = given(
    st.lists(st.one_of(_command(), _READS, _CONNECTION_EXTRAS), max_size=24),
    st.lists(st.integers(1, 600), max_size=3, unique=True),
    st.sets(st.integers(1, 24), max_size=12),
    st.lists(_MOSTLY, min_size=1, max_size=4),
    st.lists(_MOSTLY, min_size=1, max_size=4),
    st.integers(0, 1000),
)
"""Commands, the reads they come in (cut mostly between commands, what a client waiting for
replies sends, where the express lane works, and at a few random bytes), when the owner runs
and whether it is idle, per read."""


@needs_c
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@_scenarios
def test_express_lane_equals_the_pure_path(
    commands: list[list[bytes]], cuts: list[int], between: set[int], owner_after: list[bool],
    idle_at: list[bool], seed: int,
) -> None:
    pieces = _pieces(commands, cuts, between, seed)
    c, _, _ = _drive(True, pieces, owner_after, idle_at)
    python, inline, _ = _drive(False, pieces, owner_after, idle_at)
    assert c == python
    assert inline == 0  # the reference has no express lane


@needs_c
@needs_c_method
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@_scenarios
def test_c_data_received_equals_the_python_method(
    commands: list[list[bytes]], cuts: list[int], between: set[int], owner_after: list[bool],
    idle_at: list[bool], seed: int,
) -> None:
    """Both take the express lane (the C scan and run are there for both): the same bytes
    written, keyspace, log, statistics, and the same requests served inline."""
    pieces = _pieces(commands, cuts, between, seed)
    assert _drive(True, pieces, owner_after, idle_at) == _drive(
        True, pieces, owner_after, idle_at, c_data_received=False
    )


@needs_c
def test_express_lane_serves_gets_inline_and_runs_a_set_in_the_turn() -> None:
    """-P 1's shapes: a read of GETs while the owner is idle is answered in the callback; so
    is a SET at the head of a read, in the loop turn's group (answered after its log)."""
    wire = [encode_command([b"SET", b"k", b"v"]), encode_command([b"GET", b"k"]) * 2]
    (out, items, log, statistics, last), inline, _ = _drive(True, wire, [True], [True])
    assert out == b"+OK\r\n$1\r\nv\r\n$1\r\nv\r\n" and len(log) == 1 and inline == 3
    assert items == [Put(b"0", b"k", b"v", None)]
    assert (statistics.commands, statistics.forwarded, last) == (3, 3, "get")
