"""What RESP sessions ask of their server: ``ServerEnv``, the ``SessionEnv`` of a running server.

``INFO`` and ``CLIENT LIST`` show live figures; the session only knows the ``SessionEnv``
protocol, and this module maps the server's statistics onto it: keys and expires per bucket
from the keyspace, memory from ``/proc/self/status`` (``resource`` where there is no /proc),
connections, commands and errors from the hub and the RESP command counts, persistence from the
WAL (bytes since the last checkpoint, checkpoints, read-only). This is the one place that reads
the wall clock for the RESP path (``TIME``, client ages), since the loop's clock is monotonic.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from minidb.server.resp._info import BucketStats, CommandStats, InfoSnapshot, ReplicaInfo

if TYPE_CHECKING:
    from minidb.replication._follower import FollowerStatistics
    from minidb.server._lifecycle import Server
    from minidb.server.resp._executor import CommandCounts
    from minidb.server.resp._session import RespSession

_PROC_STATUS = "/proc/self/status"


def memory_bytes() -> tuple[int, int]:
    """(resident now, resident peak) of this process in bytes."""
    try:
        with open(_PROC_STATUS, "rb") as status:
            fields = dict(
                line.split(b":", 1) for line in status.read().splitlines() if b":" in line
            )
        rss = int(fields[b"VmRSS"].split()[0]) * 1024
        peak = int(fields[b"VmHWM"].split()[0]) * 1024
        return rss, peak
    except (OSError, KeyError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        return peak, peak


class ServerEnv:
    """The ``SessionEnv`` of one server: its statistics as ``INFO`` shows them."""

    def __init__(self, server: Server, counts: CommandCounts) -> None:
        self._server = server
        self._counts = counts
        self._started = time.monotonic()

    unix_time = staticmethod(time.time)
    """Seconds since the epoch: the C function itself, since a connection asks once per read."""

    def sessions(self) -> Iterator[RespSession]:
        from minidb.server.resp._connection import RespConnection

        for conn in self._server.connections():
            if isinstance(conn, RespConnection):
                yield conn.session

    def snapshot(self) -> InfoSnapshot:
        server = self._server
        stats = server.statistics()
        counts = self._counts
        owner, wal = stats.owner, stats.wal
        rss, peak = memory_bytes()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        commands = tuple(
            CommandStats(name, calls, 0, counts.rejected.get(name, 0), counts.failed.get(name, 0))
            for name, calls in sorted(counts.calls.items())
        )
        refused = sum(stats.refused.values())
        return InfoSnapshot(
            uptime_s=time.monotonic() - self._started,
            unix_time_us=int(time.time() * 1_000_000),
            connected_clients=stats.connections,
            used_memory=rss,
            used_memory_peak=peak,
            used_memory_rss=rss,
            total_connections_received=stats.accepted,
            total_commands_processed=sum(counts.calls.values()) + stats.store.gets
            + stats.store.sets + stats.store.dels + stats.store.scans,
            expired_keys=server.expired_keys(),
            total_error_replies=sum(counts.errors.values()) + refused,
            changes_since_last_checkpoint=wal.log_bytes if wal is not None else 0,
            checkpoints=owner.checkpoints,
            wal_bytes=wal.bytes if wal is not None else 0,
            read_only=owner.read_only is not None,
            used_cpu_sys=usage.ru_stime,
            used_cpu_user=usage.ru_utime,
            buckets=tuple(
                BucketStats(name, keys, expires) for name, keys, expires in server.buckets()
            ),
            commands=commands,
            errors=tuple(sorted(counts.errors.items())),
            replica=_replica_info(stats.replica),
        )


def _replica_info(stats: FollowerStatistics | None) -> ReplicaInfo | None:
    if stats is None:
        return None
    contact = stats.last_contact_s
    return ReplicaInfo(
        source=stats.source, link_up=stats.state.value == "following",
        last_io_s=-1 if contact is None else int(contact), applied_seq=stats.applied_seq,
        shipped_seq=stats.shipped_seq, lag_records=stats.lag_records,
        lag_seconds=stats.lag_seconds, generation=stats.generation or "",
        state=stats.state.value,
    )


__all__ = ["ServerEnv", "memory_bytes"]
