"""minidb.client: an async client for the line protocol, a sync wrapper, retry backoff, and a
bulk writer for loads.

::

    async with await Client.connect("127.0.0.1", 7878, backoff=Backoff(attempts=5)) as db:
        await db.set("users", "alice", "hello")
        assert await db.get("users", "alice") == "hello"

    async with await BulkWriter.connect("127.0.0.1", 7878) as writer:
        await writer.set(b"users", b"bob", b"hi", tag=1)
        await writer.flush()
"""

from minidb.client._backoff import Backoff
from minidb.client._bulk import BulkFailure, BulkStatistics, BulkWriter
from minidb.client._client import Client, SyncClient, raise_for_error, retry

__all__ = [
    "Backoff",
    "BulkFailure",
    "BulkStatistics",
    "BulkWriter",
    "Client",
    "SyncClient",
    "raise_for_error",
    "retry",
]
