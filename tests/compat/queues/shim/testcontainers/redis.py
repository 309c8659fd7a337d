"""arq's conftest starts ``RedisContainer('redis:latest')`` and asks it for host and port;
this stand-in answers with the server the harness started (``MINIDB_COMPAT_HOST`` and
``MINIDB_COMPAT_PORT``), so arq's suite runs unchanged against minidb or redis-server."""

from __future__ import annotations

import os
from typing import Any


class RedisContainer:
    port_to_expose = 6379

    def __init__(self, image: str = "redis:latest", **_: Any) -> None:
        self.image = image

    def __enter__(self) -> RedisContainer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def get_container_host_ip(self) -> str:
        return os.environ["MINIDB_COMPAT_HOST"]

    def get_exposed_port(self, port: int) -> int:
        return int(os.environ["MINIDB_COMPAT_PORT"])
