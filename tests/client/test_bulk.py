"""BulkWriter against a real ``minidb serve`` subprocess and against stand-in servers on real
sockets (for replies a real server never sends: busy on demand, garbage, endless lines)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

import minidb.runtime
from minidb.client import Backoff, BulkFailure, BulkWriter, Client
from minidb.errors import BusyError, ProtocolError, StoreError, UnavailableError
from minidb.wal import open_log

DEADLINE_S = 30.0
"""No test body may take longer than this; a hang fails with a message instead."""
FAST_BUSY = Backoff(attempts=3, base=0.001, cap=0.001)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def run(body: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(DEADLINE_S):
            await body()

    minidb.runtime.run(bounded())


@asynccontextmanager
async def stand_in(handler: Handler) -> AsyncIterator[int]:
    """A TCP server on 127.0.0.1 port 0 running ``handler`` per connection; yields its port."""
    connections: list[tuple[asyncio.StreamWriter, asyncio.Task[Any]]] = []

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connections.append((writer, task))
        # Ended by the cancel below: returning (not raising) keeps asyncio's stream callback quiet.
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            await handler(reader, writer)

    server = await asyncio.start_server(tracked, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for writer, task in connections:  # Server.close_clients is 3.13+
            writer.transport.abort()
            task.cancel()
        await asyncio.gather(*(task for _, task in connections), return_exceptions=True)
        await server.wait_closed()


async def read_frame(reader: asyncio.StreamReader) -> list[bytes]:
    """The row lines of the next ``BULK <n>`` frame (without their LF); [] at EOF."""
    header = await reader.readline()
    if not header:
        return []
    assert header.startswith(b"BULK "), header
    return [(await reader.readline()).rstrip(b"\n") for _ in range(int(header[5:]))]


async def answer_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer every frame ``OK <n>`` (a fast stand-in for memory tests)."""
    while rows := await read_frame(reader):
        writer.write(b"OK %d\n" % len(rows))
        await writer.drain()
    writer.close()


def rows(count: int) -> Iterator[tuple[bytes, bytes, bytes]]:
    value = b"v" * 100
    for i in range(count):
        yield b"b%d" % (i % 10), b"key-%08d-padding" % i, value


def test_bulk_writer_lands_100k_sets(serve: Any) -> None:
    """100k SETs through one writer are all answered OK and all readable afterwards."""
    server = serve()

    async def body() -> None:
        async with await BulkWriter.connect("127.0.0.1", server.port) as writer:
            for number, (bucket, key, value) in enumerate(rows(100_000)):
                await writer.set(bucket, key, value + b"%d" % number, tag=number)
            await writer.flush()
            stats = writer.statistics()
        assert (stats.sent, stats.ok, stats.errors, stats.outstanding) == (100_000, 100_000, 0, 0)
        async with await Client.connect("127.0.0.1", server.port) as db:
            assert await db.get("b7", "key-00012347-padding") == "v" * 100 + "12347"
            assert await db.get("b0", "key-00099990-padding") == "v" * 100 + "99990"
            assert len([k async for k in db.scan("b3", page=1000)]) == 10_000

    run(body)


def test_bulk_writer_frames_are_one_log_record_each(serve: Any) -> None:
    """Rows go as ``BULK`` frames of ``frame_rows``: the server logs each frame as one record
    holding all its rows (read back from its log after a kill)."""
    server = serve()

    async def body() -> None:
        async with await BulkWriter.connect("127.0.0.1", server.port, frame_rows=100) as w:
            for number, (bucket, key, value) in enumerate(rows(1000)):
                await w.set(bucket, key, value, tag=number)
            await w.delete(b"b0", b"key-00000000-padding")
            await w.flush()
            stats = w.statistics()
        assert (stats.ok, stats.frames, stats.sent) == (1001, 11, 1001)

    run(body)
    server.kill()
    log, replay = open_log(server.data_dir)
    try:
        sizes = [len(ops) for ops in replay]
    finally:
        log.close()
    assert sizes == [100] * 10 + [1]


def test_bulk_writer_reports_bad_rows_with_their_tags_and_carries_on(serve: Any) -> None:
    """A row the server refuses is reported with its tag; the rows around it still land."""
    server = serve()

    async def body() -> None:
        async with await BulkWriter.connect("127.0.0.1", server.port, window=16) as writer:
            for line in range(1, 201):
                value = b"\xff\xfe" if line % 50 == 0 else b"fine %d" % line
                await writer.set(b"b", b"k%d" % line, value, tag=line)
            await writer.delete(b"b", b"never-there", tag="del")
            await writer.flush()
            assert writer.failures == [BulkFailure(n, "invalid utf-8") for n in (50, 100, 150, 200)]
            assert writer.statistics().ok == 197
        async with await Client.connect("127.0.0.1", server.port) as db:
            assert await db.get("b", "k199") == "fine 199"
            assert await db.get("b", "k50") is None

    run(body)


def test_bulk_writer_refuses_requests_the_protocol_cannot_carry() -> None:
    """Bad names, long values and line breaks raise before anything is sent."""

    async def body() -> None:
        async with stand_in(answer_ok) as port, await BulkWriter.connect("127.0.0.1", port) as w:
            for bucket, key, value in [
                (b"bad name", b"k", b"v"),
                (b"b", b"", b"v"),
                (b"b", b"k", b"x" * 4097),
                (b"b", b"k", b"one\nSET b k two"),
                (b"b", b"k", b"cr\r"),
            ]:
                with pytest.raises(ProtocolError):
                    await w.set(bucket, key, value)
            await w.set(b"b", b"k", b"x" * 4096)
            await w.flush()
            assert w.statistics().sent == 1

    run(body)


def test_bulk_writer_set_many_sends_in_order_and_stops_at_a_row_it_cannot_carry() -> None:
    """``set_many`` sends its rows in order, records invalid UTF-8 as a failure with its tag,
    and raises ``ProtocolError`` at the first row the protocol cannot carry, leaving the rows
    before it queued and sending none after it."""
    received: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while rows := await read_frame(reader):
            received.extend(rows)
            writer.write(b"OK %d\n" % len(rows))

    async def body() -> None:
        async with stand_in(record) as port, await BulkWriter.connect("127.0.0.1", port) as w:
            rows = [(n, b"b", b"k%d" % n, b"v%d" % n) for n in range(3000)]
            await w.set_many([*rows[:10], (10, b"b", b"k10", b"\xff"), *rows[11:]])
            with pytest.raises(ProtocolError):
                await w.set_many([(5000, b"b", b"x", b"ok"), (5001, b"b", b"y", b"a\nb"),
                                  (5002, b"b", b"z", b"never")])
            await w.flush()
            assert w.failures == [BulkFailure(10, "invalid utf-8")]

    run(body)
    expected = [b"SET b k%d v%d" % (n, n) for n in range(3000) if n != 10]
    assert received == [*expected, b"SET b x ok"]


def test_bulk_writer_retries_busy_then_succeeds() -> None:
    """``ERR busy`` is resent (the whole frame) after a backoff until the server takes it."""
    refusals: dict[tuple[bytes, ...], int] = {}
    applied: list[bytes] = []

    async def busy_twice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while rows := await read_frame(reader):
            frame = tuple(rows)
            refusals[frame] = refusals.get(frame, 0) + 1
            if refusals[frame] <= 2:
                writer.write(b"ERR busy\n")
            else:
                applied.extend(rows)
                writer.write(b"OK %d\n" % len(rows))
        writer.close()

    async def body() -> None:
        async with stand_in(busy_twice) as port:
            writer = await BulkWriter.connect(
                "127.0.0.1", port, window=8, frame_rows=4, busy_backoff=FAST_BUSY
            )
            async with writer:
                for i in range(20):
                    await writer.set(b"b", b"k%d" % i, b"v")
                await writer.flush()
                stats = writer.statistics()
        assert (stats.ok, stats.busy_retries, stats.sent, stats.errors) == (20, 10, 60, 0)
        assert stats.frames == 15
        assert sorted(applied) == sorted(b"SET b k%d v" % i for i in range(20))

    run(body)


def test_bulk_writer_gives_up_on_endless_busy() -> None:
    """A request still refused busy after the last attempt raises ``BusyError``."""

    async def always_busy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await read_frame(reader):
            writer.write(b"ERR busy\n")
        writer.close()

    async def body() -> None:
        async with stand_in(always_busy) as port:
            writer = await BulkWriter.connect("127.0.0.1", port, busy_backoff=FAST_BUSY)
            async with writer:
                await writer.set(b"b", b"k", b"v", tag=7)
                with pytest.raises(BusyError, match="tag 7"):
                    await writer.flush()

    run(body)


def test_bulk_writer_real_busy_is_retried_then_raised(serve: Any) -> None:
    """A server whose owner stalls past --request-timeout answers ERR busy; it is retried, and
    ``BusyError`` is raised when the attempts run out."""
    server = serve("--request-timeout", "0.05", env={"MINIDB_FAILPOINTS": "store.apply=delay(0.3)"})

    async def body() -> None:
        async with await BulkWriter.connect(
            "127.0.0.1", server.port, busy_backoff=FAST_BUSY
        ) as writer:
            await writer.set(b"b", b"k", b"v", tag="row 1")
            with pytest.raises(BusyError, match="row 1"):
                await writer.flush()
            assert writer.statistics().busy_retries == FAST_BUSY.attempts - 1

    run(body)


@pytest.mark.parametrize(
    ("reply", "error"),
    [(b"ERR store unavailable\n", UnavailableError), (b"ERR read-only: disk\n", StoreError),
     (b"ERR not logged: ENOSPC\n", StoreError)],
)
def test_bulk_writer_stops_on_store_failures(reply: bytes, error: type[Exception]) -> None:
    """An unavailable or read-only store ends the stream with a retryable exception."""

    async def failing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await read_frame(reader):
            writer.write(reply)
        writer.close()

    async def body() -> None:
        async with stand_in(failing) as port, await BulkWriter.connect("127.0.0.1", port) as w:
            await w.set(b"b", b"k", b"v")
            with pytest.raises(error):
                await w.flush()
            with pytest.raises(error):
                await w.set(b"b", b"k2", b"v")

    run(body)


def test_bulk_writer_raises_promptly_when_the_server_dies(serve: Any) -> None:
    """Killing the server mid-stream makes the next ``set``/``flush`` raise within seconds."""
    server = serve()

    async def body() -> None:
        async with await BulkWriter.connect("127.0.0.1", server.port) as writer:
            with pytest.raises(UnavailableError):
                async with asyncio.timeout(10):
                    for bucket, key, value in rows(10_000_000):
                        await writer.set(bucket, key, value)
                        if writer.statistics().ok >= 2000 and server.proc.poll() is None:
                            server.proc.kill()
                    await writer.flush()
            # The error came from the kill, not from something else: the server was killed
            # (poll() right after kill() may not see the exit yet; wait, bounded).
            assert server.proc.wait(timeout=10) == -signal.SIGKILL

    run(body)


@pytest.mark.parametrize("where", ["set", "flush"])
def test_bulk_writer_cancelled_closes_and_leaves_no_task(where: str) -> None:
    """Cancelling a waiting ``set`` or ``flush`` closes the connection; no task survives."""

    async def never_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(1 << 16):
            pass
        writer.close()

    async def body() -> None:
        async with stand_in(never_answers) as port:
            writer = await BulkWriter.connect("127.0.0.1", port, window=4)
            for i in range(4):
                await writer.set(b"b", b"k%d" % i, b"v")
            waiting = writer.set(b"b", b"k4", b"v") if where == "set" else writer.flush()
            task = asyncio.ensure_future(waiting)
            while writer.statistics().bytes_sent == 0:  # the window filled: it was written
                await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            with pytest.raises(UnavailableError, match="cancelled"):
                await writer.set(b"b", b"k5", b"v")
            await writer.close()
            # The stand-in's own handler task may still be ending; the writer's must be gone.
            left = [t for t in asyncio.all_tasks() if t.get_name().startswith("minidb-bulk")]
            assert left == []

    run(body)


@pytest.mark.slow
def test_bulk_writer_memory_is_bounded_by_the_window() -> None:
    """Over a 400k-row generator the writer's allocations stay under 4 MB at peak."""
    traced_rows = 200_000  # tracing costs ~4x; a leak of 200k rows would be ~40 MB
    total_rows = 400_000  # the window fills and drains many times before tracing starts

    async def body() -> None:
        async with stand_in(answer_ok) as port:
            try:
                async with await BulkWriter.connect("127.0.0.1", port) as writer:
                    for number, (bucket, key, value) in enumerate(rows(total_rows)):
                        if number == total_rows - traced_rows:
                            tracemalloc.start()
                        await writer.set(bucket, key, value, tag=number)
                    await writer.flush()
                    _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        assert writer.statistics().ok == total_rows
        assert peak < 4 * 1024 * 1024, peak

    run(body)


@pytest.mark.parametrize(
    "reply",
    [b"HELLO\n", b"VALUE 1\n", b"x" * 100_000, b"OK 1\nOK 1\n", b"OK 2\n", b"OK\n",
     b"ERR row 2: invalid name\n", b"ERR row x\n", b"ERR something\n"],
    ids=["garbage", "wrong-reply", "endless-line", "unsolicited", "wrong-count", "plain-ok",
         "row-out-of-range", "row-unparsed", "frame-error"],
)
def test_bulk_writer_hostile_replies_raise_protocol_error(reply: bytes) -> None:
    """Replies no minidb server sends raise ``ProtocolError`` instead of hanging."""

    async def hostile(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_frame(reader)
        writer.write(reply)
        await writer.drain()
        await reader.read()  # hold the connection open: the writer must not wait for EOF

    async def body() -> None:
        async with stand_in(hostile) as port, await BulkWriter.connect("127.0.0.1", port) as w:
            await w.set(b"b", b"k", b"v")
            with pytest.raises(ProtocolError):
                await w.flush()

    run(body)


def test_bulk_writer_row_refused_in_a_frame_resends_the_others() -> None:
    """``ERR row <i>: <reason>`` records row i with its tag and sends the frame's other rows
    again as a new frame, until every good row is applied."""
    applied: list[bytes] = []

    async def refuses_bad_keys(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while rows := await read_frame(reader):
            bad = next((i for i, row in enumerate(rows, 1) if b"bad" in row), None)
            if bad is None:
                applied.extend(rows)
                writer.write(b"OK %d\n" % len(rows))
            else:
                writer.write(b"ERR row %d: invalid name bad\n" % bad)
        writer.close()

    async def body() -> None:
        async with (
            stand_in(refuses_bad_keys) as port,
            await BulkWriter.connect("127.0.0.1", port, frame_rows=8) as writer,
        ):
            for i in range(20):
                key = b"bad%d" % i if i in (3, 5, 17) else b"k%d" % i
                await writer.set(b"b", key, b"v", tag=i)
            await writer.flush()
            stats = writer.statistics()
        assert sorted(f.tag for f in writer.failures) == [3, 5, 17]  # in reply order
        assert {f.reason for f in writer.failures} == {"invalid name bad"}
        assert sorted(applied) == sorted(
            b"SET b k%d v" % i for i in range(20) if i not in (3, 5, 17)
        )
        assert (stats.ok, stats.errors, stats.outstanding) == (17, 3, 0)
        assert stats.frames == 3 + 3  # one resend per bad row

    run(body)
