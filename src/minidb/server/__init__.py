"""minidb.server: the networked shell around the store.

``Server`` binds the listeners, runs the data owner, serves connections (``LineConnection``,
an asyncio Protocol that batches every read to the owner and writes once per batch), exposes
metrics, shuts down gracefully and exits non-zero if the data owner dies.

``Server`` and friends are imported on first use, so that ``minidb --help`` (which imports
``minidb.server._cli``, and with it this package) stays fast and does not read
``MINIDB_FAILPOINTS`` before the ``serve`` handler can report a bad one as a usage error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minidb.server._config import ServerConfig

if TYPE_CHECKING:
    from minidb.server._lifecycle import Server, ServerStatistics, open_store

_LAZY = {"Server", "ServerStatistics", "open_store"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from minidb.server import _lifecycle

        return getattr(_lifecycle, name)
    raise AttributeError(f"module 'minidb.server' has no attribute {name!r}")


__all__ = ["Server", "ServerConfig", "ServerStatistics", "open_store"]
