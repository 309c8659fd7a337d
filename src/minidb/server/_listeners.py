"""Listening sockets and the accept loop with admission control.

The server accepts connections itself (``loop.sock_accept``) instead of letting
``create_server`` accept everything, so that at ``--max-connections`` it can simply stop
calling accept: the next clients wait in the kernel's backlog, connected but unserved, instead
of being accepted and parked (which would cost a file descriptor and a buffer each and hide the
overload from the client). Every await of the loop is a cancellation point, and cancelling the
accept task is how shutdown stops accepting.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from minidb.server._config import LISTEN_BACKLOG
from minidb.server._connection import Hub
from minidb.server._logging import event

logger = logging.getLogger("minidb.server")


def bind_listener(host: str, port: int) -> socket.socket:
    """A non-blocking listening TCP socket on ``host:port`` (port 0: any free port)."""
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = info[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def address_of(sock: socket.socket) -> tuple[str, int]:
    host, port = sock.getsockname()[:2]
    return str(host), int(port)


async def accept_loop(
    sock: socket.socket, hub: Hub, factory: Callable[[], asyncio.Protocol]
) -> None:
    """Accept connections on ``sock`` while fewer than ``max_connections`` are open."""
    loop = asyncio.get_running_loop()
    while True:
        await hub.wait_for_slot()
        conn, _ = await loop.sock_accept(sock)
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.connect_accepted_socket(factory, conn)
        except asyncio.CancelledError:
            conn.close()
            raise
        except OSError as exc:
            # The client left between accept and setup; nothing to serve.
            conn.close()
            event(logger, logging.DEBUG, "accept_failed", error=exc)
