"""minidb.client: an async client for the line protocol, a sync wrapper, retry backoff, a
bulk writer for loads, and a small RESP client (``RespClient``) for what only RESP carries.

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
from minidb.client._resp import RespClient, RespError

__all__ = [
    "Backoff",
    "BulkFailure",
    "BulkStatistics",
    "BulkWriter",
    "Client",
    "RespClient",
    "RespError",
    "SyncClient",
    "raise_for_error",
    "retry",
]
