"""The server's settings: one frozen object, filled by the command line, with named defaults."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from minidb import store as _store
from minidb.errors import ConfigError
from minidb.replication import DEFAULT_SHIP_INTERVAL_S as _SHIP_INTERVAL_S
from minidb.replication import RetentionPolicy
from minidb.store.scripting import DEFAULT_TIME_LIMIT_MS as _LUA_TIME_LIMIT_MS

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7878
DEFAULT_DATA_DIR = "./minidb-data"
DEFAULT_IDLE_TIMEOUT_S = 30.0
"""A connection that completes no request for this long is closed."""
DEFAULT_REQUEST_TIMEOUT_S = 2.0
"""A request not answered by the data owner within this long is answered ``ERR busy``."""
DEFAULT_MAX_CONNECTIONS = 1024
"""Connections served at once; beyond it the server stops accepting (the kernel queues)."""
DEFAULT_MAILBOX = 4096
"""Requests the data owner's mailbox holds; a connection that finds it full stops reading and
queues for room (quiet connections first), see ``store._mailbox``."""
DEFAULT_MAX_IN_FLIGHT = 128
"""Requests one connection may have sent to the data owner and not yet had written back; beyond
it the connection takes no more (it stops reading: backpressure, not an error). Enough for any
client's pipeline to keep the owner busy (redis-benchmark -P 16 needs 16)."""
DEFAULT_OUTPUT_SOFT_LIMIT = 1024 * 1024
"""Bytes of replies a connection's transport may hold unsent before the connection takes no
more requests (the transport's high-water mark; the low-water mark is a quarter of it)."""
DEFAULT_OUTPUT_HARD_LIMIT = 32 * 1024 * 1024
"""The ceiling of the replies one connection can make the server hold (Redis's
client-output-buffer-limit hard limit): the owner builds replies for a connection only while
its unsent output is under the soft limit, and a RESP reply longer than this less the soft
limit is answered ``ERR reply too large``; a connection found over it is dropped. 32 MiB
leaves room for one reply of the longest value (``--max-value-bytes``, 16 MiB) over the soft
limit."""
REPLY_FRAMING_BYTES = 64
"""What a RESP bulk reply adds to its value (header and CRLF), with room to spare: the hard
limit must leave ``--max-value-bytes`` plus this over the soft limit, so every stored value
can be read back."""
OUTPUT_LOW_WATER_FRACTION = 4
"""The transport resumes taking requests once its output falls to soft limit / this."""
DEFAULT_GRACE_S = 10.0
"""How long a graceful shutdown waits for in-flight work before dropping it."""
DEFAULT_CHECKPOINT_BYTES = 64 * 1024 * 1024
"""Log bytes written since the last checkpoint that trigger the next (the WAL's own default)."""
DEFAULT_CHECKPOINT_GROWTH = 1.0
"""...and not before the log since it is this many times the last snapshot's size (the WAL's
own default, Redis's auto-aof-rewrite-percentage 100): the rewriting stays proportional to the
data, not to its square."""
MAX_CHECKPOINT_GROWTH = 100.0
DEFAULT_COMMIT_DELAY_US = 0
"""Microseconds a writing group waits for more requests before its sync (Postgres's
commit_delay); 0: sync at once."""
MAX_COMMIT_DELAY_US = 100_000
"""Upper bound of ``--commit-delay``, as Postgres bounds commit_delay: a longer wait only adds
latency, since a group never holds more than the mailbox anyway."""
SYNC_PLACES = ("loop", "thread")
"""Where the owner's fdatasync may run (``--sync-in``, for benchmarks): see ``store._actor``."""
FSYNC_POLICIES = _store.FSYNC_POLICIES
"""``--fsync`` choices, Redis's ``appendfsync``: see README, Durability."""
DEFAULT_MAX_VALUE_BYTES = _store.DEFAULT_MAX_VALUE_BYTES
"""``--max-value-bytes``: the longest value a Redis-protocol command may store (16 MiB)."""
DEFAULT_LUA_TIME_LIMIT_MS = _LUA_TIME_LIMIT_MS
"""``--lua-time-limit``: milliseconds a Lua script may run before it is stopped and its
writes rolled back (Redis's ``lua-time-limit``, 5 s; see ``store.scripting``)."""
DEFAULT_REPLICA_POLL_INTERVAL_S = 1.0
"""Seconds between a replica's polls of the shipped log (the shipper's default interval)."""
DEFAULT_SHIP_INTERVAL_S = _SHIP_INTERVAL_S
"""``--ship-interval`` default, in seconds (see ``minidb.replication``)."""
LISTEN_BACKLOG = 1024
"""Connections the kernel queues while we are not accepting (clamped by net.core.somaxconn)."""


@dataclass(frozen=True)
class ServerConfig:
    """Everything ``minidb serve`` can be told."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    data_dir: Path = Path(DEFAULT_DATA_DIR)
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    mailbox: int = DEFAULT_MAILBOX
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    output_soft_limit: int = DEFAULT_OUTPUT_SOFT_LIMIT
    output_hard_limit: int = DEFAULT_OUTPUT_HARD_LIMIT
    grace: float = DEFAULT_GRACE_S
    metrics_port: int | None = None
    checkpoint_bytes: int = DEFAULT_CHECKPOINT_BYTES
    checkpoint_growth: float = DEFAULT_CHECKPOINT_GROWTH
    commit_delay_us: int = DEFAULT_COMMIT_DELAY_US
    sync_in: str = "loop"
    resp_port: int | None = None
    """The RESP (Redis protocol) listener's port; None: no RESP listener, 0: any free port."""
    password: bytes | None = field(default=None, repr=False)
    """``--requirepass`` / ``MINIDB_PASSWORD``: both protocols authenticate first (RESP with
    AUTH or HELLO AUTH, the line protocol with ``AUTH <password>``); None: no password."""
    fsync: str = "always"
    """When acknowledged writes are fdatasynced: ``always``, ``everysec`` or ``no`` (see
    README, Durability)."""
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    """The longest value a Redis-protocol command may store, in bytes (the line protocol keeps
    its own 4096)."""
    replicate_to: str | None = None
    """``--replicate-to``: ship the WAL to this object store (``s3://BUCKET/PREFIX`` or
    ``file:DIR``); None: no shipping. See docs/replication.md."""
    ship_interval: float = DEFAULT_SHIP_INTERVAL_S
    """``--ship-interval``: longest wait, in seconds, of a written record before its upload."""
    retain: str | None = None
    """``--retain``: a window (``24h``) or a count of snapshots (``7``); None: delete nothing."""
    takeover: bool = False
    """``--takeover``: claim a prefix another server ships to, fencing it."""
    s3_endpoint: str | None = None
    """``--s3-endpoint``: an S3-compatible endpoint URL for ``s3://`` URLs (``--replicate-to``,
    ``--replica-of``)."""

    replica_of: str | None = None
    """``--replica-of URL``: serve as a read-only replica of the log shipped there (restored
    first if the data dir holds no store); None: a primary."""
    replica_poll_interval: float = DEFAULT_REPLICA_POLL_INTERVAL_S
    """``--poll-interval``: seconds between a replica's polls of the shipped log."""
    lua_time_limit: int = DEFAULT_LUA_TIME_LIMIT_MS
    """``--lua-time-limit``: milliseconds a script may run (EVAL) before it is stopped with an
    error and its changes are rolled back."""

    def __post_init__(self) -> None:
        for name in ("port", "metrics_port", "resp_port"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 65535:
                raise ConfigError(f"--{name.replace('_', '-')} must be 0-65535, not {value}")
        for name in ("idle_timeout", "request_timeout", "grace", "replica_poll_interval"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} must be a positive number of seconds")
        for name in (
            "max_connections", "mailbox", "checkpoint_bytes", "max_in_flight",
            "output_soft_limit",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
        if not (0 <= self.checkpoint_growth <= MAX_CHECKPOINT_GROWTH):
            raise ConfigError(f"--checkpoint-growth must be 0-{MAX_CHECKPOINT_GROWTH:g}")
        if self.output_hard_limit < self.output_soft_limit:
            raise ConfigError("--output-hard-limit must be at least --output-soft-limit")
        least = self.output_soft_limit + self.max_value_bytes + REPLY_FRAMING_BYTES
        if self.resp_port is not None and self.output_hard_limit < least:
            raise ConfigError(
                "--output-hard-limit must leave room for a reply of the longest value over"
                f" the soft limit: at least --output-soft-limit + --max-value-bytes +"
                f" {REPLY_FRAMING_BYTES} = {least}"
            )
        if not 0 <= self.commit_delay_us <= MAX_COMMIT_DELAY_US:
            raise ConfigError(f"--commit-delay must be 0-{MAX_COMMIT_DELAY_US} microseconds")
        if self.password is not None and not self.password:
            raise ConfigError("--requirepass must not be empty")
        if self.sync_in not in SYNC_PLACES:
            raise ConfigError(f"--sync-in must be one of {', '.join(SYNC_PLACES)}")
        if self.fsync not in FSYNC_POLICIES:
            raise ConfigError(f"--fsync must be one of {', '.join(FSYNC_POLICIES)}")
        if self.lua_time_limit < 1:
            raise ConfigError("--lua-time-limit must be at least 1 millisecond")
        if self.max_value_bytes < 1:
            raise ConfigError("--max-value-bytes must be at least 1")
        if not (self.ship_interval > 0 and math.isfinite(self.ship_interval)):
            raise ConfigError("--ship-interval must be a positive number of seconds")
        if self.retain is not None:
            RetentionPolicy.parse(self.retain)
        if self.replicate_to is None and (self.retain is not None or self.takeover):
            raise ConfigError("--retain and --takeover need --replicate-to")

    @property
    def max_reply_bytes(self) -> int:
        """The longest RESP reply the server builds (see ``DEFAULT_OUTPUT_HARD_LIMIT``)."""
        return self.output_hard_limit - self.output_soft_limit
