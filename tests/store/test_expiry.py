"""The owner's timers, on the paused clock: expiry (keys expire on time with no scan, reads
never see an expired key, a replay after a restart expires the same keys) and the fsync
policies (everysec syncs in the background within a second, no never does)."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

from minidb.protocol import Expire, Get, Persist, Request, Set, Ttl
from minidb.runtime.testing import advance, run_paused
from minidb.server import ServerConfig
from minidb.server._lifecycle import open_store
from minidb.store import UNBOUNDED_OUTPUT, Batch, MemoryLog, StoreOwner, StoreState
from minidb.wal import Remove, decode_ops

BASE_MS = 1_700_000_000_000
"""The wall-clock ms at loop time 0 in these tests."""


class Sink:
    """A connection that ignores flushes (the tests poll the replies)."""

    def flush(self) -> None:
        pass

    def output_room(self) -> int:
        return UNBOUNDED_OUTPUT


def _owner(log: MemoryLog, skew_ms: list[int] | None = None) -> StoreOwner:
    """An owner whose wall clock is the loop clock (plus ``skew_ms[0]``) from ``BASE_MS``."""
    loop = asyncio.get_running_loop()
    skew = skew_ms if skew_ms is not None else [0]
    return StoreOwner(
        StoreState(), log, mailbox=100,
        clock=lambda: BASE_MS + round(loop.time() * 1000) + skew[0],
    )


async def _send(owner: StoreOwner, *requests: Request) -> list[bytes]:
    batch = Batch(list(requests), Sink(), deadline=0.0)
    owner.mailbox.put_nowait(batch)
    async with asyncio.timeout(5):
        while batch.replies is None:
            await asyncio.sleep(0)
    return batch.replies


def test_expiry_timer_removes_keys_on_time_without_a_scan() -> None:
    """A key with EXPIRE 2 is there at 1.999 s and gone at 2 s, removed by the owner's timer
    (logged as a Remove record), having examined only the key that expired."""

    async def main() -> None:
        log = MemoryLog()
        owner = _owner(log)
        task = asyncio.create_task(owner.run())
        for i in range(100):
            await _send(owner, Set(b"b", b"k%d" % i, b"v"))
        assert await _send(owner, Expire(b"b", b"k7", 2)) == [b"OK\n"]
        assert await _send(owner, Ttl(b"b", b"k7"), Ttl(b"b", b"k8")) == [
            b"VALUE 2\n", b"VALUE -1\n",
        ]
        ks = owner.state.keyspace
        await advance(1.999)
        assert len(ks) == 100
        await advance(0.001)
        assert len(ks) == 99
        stats = ks.statistics()
        assert (stats.expired_by_timer, stats.expiry_examined, stats.expired_lazily) == (1, 1, 0)
        assert decode_ops(log.synced[-1]) == [Remove(b"b", b"k7")]
        assert owner.statistics().expiry_groups == 1
        owner.close()
        async with asyncio.timeout(5):
            await task

    run_paused(main())


def test_expiry_timer_follows_persist_and_a_shorter_expire() -> None:
    """PERSIST takes a key off the timer, and a shorter EXPIRE moves the timer earlier."""

    async def main() -> None:
        owner = _owner(MemoryLog())
        task = asyncio.create_task(owner.run())
        await _send(owner, Set(b"b", b"p", b"1"), Set(b"b", b"s", b"2"))
        await _send(owner, Expire(b"b", b"p", 5), Expire(b"b", b"s", 50))
        assert await _send(owner, Persist(b"b", b"p"), Persist(b"b", b"p")) == [
            b"OK\n", b"NIL\n",
        ]
        await _send(owner, Expire(b"b", b"s", 3))
        await advance(3)
        assert await _send(owner, Get(b"b", b"s"), Get(b"b", b"p")) == [b"NIL\n", b"VALUE 1\n"]
        assert owner.state.keyspace.statistics().expired_by_timer == 1
        await advance(60)
        assert len(owner.state.keyspace) == 1
        owner.close()
        async with asyncio.timeout(5):
            await task

    run_paused(main())


def test_expiry_read_before_the_timer_never_returns_an_expired_key() -> None:
    """When the wall clock runs ahead of the timer, a GET past the deadline answers NIL."""

    async def main() -> None:
        skew = [0]
        owner = _owner(MemoryLog(), skew_ms=skew)
        task = asyncio.create_task(owner.run())
        await _send(owner, Set(b"b", b"k", b"v"), Expire(b"b", b"k", 10))
        skew[0] = 10_000  # the wall clock stepped forward; the loop timer has not fired
        assert await _send(owner, Get(b"b", b"k")) == [b"NIL\n"]
        assert owner.state.keyspace.statistics().expired_lazily == 1
        owner.close()
        async with asyncio.timeout(5):
            await task

    run_paused(main())


def test_expiry_replay_after_restart_expires_the_same_keys(tmp_path: Path) -> None:
    """A deadline still ahead at restart is kept (with its time); one that passed while the
    server was down is gone at start and never served."""
    config = ServerConfig(data_dir=tmp_path)
    state, log = open_store(config, now_ms=BASE_MS)
    owner = StoreOwner(state, log, mailbox=10, clock=lambda: BASE_MS)
    batch = Batch(
        [Set(b"b", b"short", b"1"), Set(b"b", b"long", b"2"), Set(b"b", b"plain", b"3"),
         Expire(b"b", b"short", 1), Expire(b"b", b"long", 100)],
        Sink(), deadline=0.0,
    )
    owner.commit([batch])
    log.close()

    before, log = open_store(config, now_ms=BASE_MS + 999)
    assert before.apply(Ttl(b"b", b"short"), BASE_MS + 999) == b"VALUE 0\n"
    log.close()
    after, log = open_store(config, now_ms=BASE_MS + 1000)
    assert len(after) == 2
    assert after.apply(Get(b"b", b"short"), BASE_MS + 1000) == b"NIL\n"
    assert after.keyspace.lookup(b"b", b"long", BASE_MS + 1000, None) == (b"2", BASE_MS + 100_000)
    assert after.keyspace.statistics().keys_with_expiry == 1
    log.close()


def test_fsync_everysec_replies_once_written_and_syncs_within_a_second() -> None:
    """With fsync="everysec" a write is answered once written, unsynced; the background task
    fdatasyncs it within a second, off the owner's path."""

    async def main() -> None:
        log = MemoryLog()
        loop = asyncio.get_running_loop()
        owner = StoreOwner(StoreState(), log, mailbox=100, fsync="everysec")
        task = asyncio.create_task(owner.run())
        started = loop.time()
        assert await _send(owner, Set(b"b", b"k", b"v")) == [b"OK\n"]
        assert len(log.written) == 1 and log.synced == [] and log.syncs == 0
        async with asyncio.timeout(5):
            while not owner.statistics().syncs:
                await asyncio.sleep(0.001)
        assert loop.time() - started <= 1.0 + 0.001  # the interval, plus one polling step
        assert log.syncs == 1 and owner.statistics().syncs == 1
        await advance(5)
        assert log.syncs == 1  # nothing new written: no sync
        owner.close()
        async with asyncio.timeout(5):
            await task

    run_paused(main())


def test_fsync_everysec_failed_datasync_turns_the_store_read_only() -> None:
    """A failed background fdatasync is fail-stop: later writes are refused read-only."""

    async def main() -> None:
        log = MemoryLog()
        owner = StoreOwner(StoreState(), log, mailbox=100, fsync="everysec")
        task = asyncio.create_task(owner.run())
        await _send(owner, Set(b"b", b"k", b"v"))
        log.fail_sync = errno.EIO
        await advance(1.5)
        assert owner.read_only == "Input/output error"
        assert await _send(owner, Set(b"b", b"k", b"w"), Get(b"b", b"k")) == [
            b"ERR read-only: Input/output error\n", b"VALUE v\n",
        ]
        owner.close()
        async with asyncio.timeout(5):
            await task

    run_paused(main())


def test_fsync_no_never_syncs_while_serving() -> None:
    """With fsync="no" writes are written and answered, and never fdatasynced by the owner."""

    async def main() -> None:
        log = MemoryLog()
        owner = StoreOwner(StoreState(), log, mailbox=100, fsync="no")
        task = asyncio.create_task(owner.run())
        for i in range(5):
            await _send(owner, Set(b"b", b"k%d" % i, b"v"))
        await advance(60)
        assert len(log.written) == 5 and log.syncs == 0
        owner.close()
        async with asyncio.timeout(5):
            await task

    run_paused(main())
