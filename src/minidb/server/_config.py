"""The server's settings: one frozen object, filled by the command line, with named defaults."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from minidb.errors import ConfigError

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
"""Requests the data owner's mailbox holds; a request that finds it full gets ``ERR busy``."""
DEFAULT_GRACE_S = 10.0
"""How long a graceful shutdown waits for in-flight work before dropping it."""
DEFAULT_CHECKPOINT_BYTES = 64 * 1024 * 1024
"""Log bytes written since the last checkpoint that trigger the next (the WAL's own default)."""
DEFAULT_COMMIT_DELAY_US = 0
"""Microseconds a writing group waits for more requests before its sync (Postgres's
commit_delay); 0: sync at once."""
MAX_COMMIT_DELAY_US = 100_000
"""Upper bound of ``--commit-delay``, as Postgres bounds commit_delay: a longer wait only adds
latency, since a group never holds more than the mailbox anyway."""
SYNC_PLACES = ("loop", "thread")
"""Where the owner's fdatasync may run (``--sync-in``, for benchmarks): see ``store._actor``."""
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
    grace: float = DEFAULT_GRACE_S
    metrics_port: int | None = None
    checkpoint_bytes: int = DEFAULT_CHECKPOINT_BYTES
    commit_delay_us: int = DEFAULT_COMMIT_DELAY_US
    sync_in: str = "loop"

    def __post_init__(self) -> None:
        for name in ("port", "metrics_port"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 65535:
                raise ConfigError(f"--{name.replace('_', '-')} must be 0-65535, not {value}")
        for name in ("idle_timeout", "request_timeout", "grace"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} must be a positive number of seconds")
        for name in ("max_connections", "mailbox", "checkpoint_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
        if not 0 <= self.commit_delay_us <= MAX_COMMIT_DELAY_US:
            raise ConfigError(f"--commit-delay must be 0-{MAX_COMMIT_DELAY_US} microseconds")
        if self.sync_in not in SYNC_PLACES:
            raise ConfigError(f"--sync-in must be one of {', '.join(SYNC_PLACES)}")
