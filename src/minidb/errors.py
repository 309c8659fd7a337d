"""The one error hierarchy of minidb.

::

    MinidbError
    ├── ConfigError          bad options or configuration (the CLI exits 2)
    ├── ProtocolError        a request that does not parse; carries the wire reason
    ├── StoreError
    │   ├── BusyError        temporary: the mailbox is full or the request waited too long
    │   └── UnavailableError permanent: the data owner is gone
    └── WalError             the log could not be written, synced or read; carries path and offset
        └── CorruptionError  a record or file failed its checks at a known offset

Errors carry structured fields so that callers never parse messages. Foreign exceptions
(OSError from the disk, ConnectionError from sockets) are translated at one boundary per
subsystem, never deep inside the pure cores.
"""

from __future__ import annotations


class MinidbError(Exception):
    """Base of every error minidb raises on purpose."""


class ConfigError(MinidbError):
    """An option or configuration value is invalid."""


class ProtocolError(MinidbError):
    """A request could not be parsed; ``reason`` is what goes on the wire after ``ERR``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StoreError(MinidbError):
    """The store could not take a request."""


class BusyError(StoreError):
    """Temporary overload: retry later (``ERR busy``)."""


class UnavailableError(StoreError):
    """The data owner is gone for good (``ERR store unavailable``)."""


class WalError(MinidbError):
    """The write-ahead log failed; ``path`` and ``offset`` say where, when known."""

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset


class CorruptionError(WalError):
    """A file of the data dir failed a structural or checksum check."""
