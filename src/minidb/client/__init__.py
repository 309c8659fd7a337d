"""minidb.client: an async client for the line protocol, a sync wrapper, and retry backoff.

::

    async with await Client.connect("127.0.0.1", 7878, backoff=Backoff(attempts=5)) as db:
        await db.set("users", "alice", "hello")
        assert await db.get("users", "alice") == "hello"
"""

from minidb.client._backoff import Backoff
from minidb.client._client import Client, SyncClient, raise_for_error, retry

__all__ = ["Backoff", "Client", "SyncClient", "raise_for_error", "retry"]
