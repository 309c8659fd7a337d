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
        for name in ("max_connections", "mailbox"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
