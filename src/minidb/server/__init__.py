"""minidb.server: the networked shell around the store.

``Server`` binds the listeners, runs the data owner, serves connections (``LineConnection``,
an asyncio Protocol that batches every read to the owner and writes once per batch), exposes
metrics, shuts down gracefully and exits non-zero if the data owner dies.
"""

from minidb.server._config import ServerConfig
from minidb.server._lifecycle import Server, ServerStatistics, open_store

__all__ = ["Server", "ServerConfig", "ServerStatistics", "open_store"]
