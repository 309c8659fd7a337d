"""Points a suite that hard-codes Redis's default address at the server under test.

RQ's and huey's suites connect to ``localhost:6379`` (``Redis()`` with no arguments, and
``redis://127.0.0.1:6379/<db>`` handed to the ``rq`` CLI and its worker subprocesses) and have
no setting to move it. This module is on ``PYTHONPATH`` of every process such a suite starts
(Python imports ``sitecustomize`` at startup, so forked work horses and ``rqworker``
subprocesses get it too): with ``MINIDB_COMPAT_REDIRECT_PORT`` set, a redis-py connection to
port 6379 on the loopback goes to that port instead. Nothing else is changed; without the
variable this module does nothing.
"""

from __future__ import annotations

import os

_LOOPBACK = {"localhost", "127.0.0.1", "::1"}
_DEFAULT_PORT = 6379


def _redirect(connection_class: type) -> None:
    original = connection_class.__init__

    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        if self.host in _LOOPBACK and int(self.port) == _DEFAULT_PORT:
            self.port = _target

    connection_class.__init__ = __init__


_port = os.environ.get("MINIDB_COMPAT_REDIRECT_PORT")
if _port:
    _target = int(_port)
    try:
        import redis.connection
    except ImportError:  # a process without redis-py (pip, a helper script): nothing to move
        pass
    else:
        _redirect(redis.connection.Connection)
        try:
            import redis.asyncio.connection
        except ImportError:
            pass
        else:
            _redirect(redis.asyncio.connection.Connection)
