"""minidb.server: the networked shell around the store.

``Server`` binds the listeners, runs the data owner, serves connections (``Connection``, an
asyncio Protocol with bounded requests in flight and bounded output, which batches requests to
the owner and writes once per owner group; ``LineConnection`` is its line-protocol form),
exposes metrics, shuts down gracefully and exits non-zero if the data owner dies.

``Server`` and friends are imported on first use, so that ``minidb --help`` (which imports
``minidb.server._cli``, and with it this package) stays fast: it need not load the store, the
write-ahead log and prometheus-client just to build the parser.
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
