"""Listening sockets and the accept loop with admission control.

The server accepts connections itself (``loop.sock_accept``) instead of letting
``create_server`` accept everything, so that at its connection limit a listener can simply stop
calling accept: the next clients wait in the kernel's backlog, connected but unserved, instead
of being accepted and parked (which would cost a file descriptor and a buffer each and hide the
overload from the client). Both listeners work this way: the line port at
``--max-connections``, the metrics port at its own small limit. Every await of the loop is a
cancellation point, and cancelling the accept task is how shutdown stops accepting.

Failed accepts. ``accept(2)`` fails for three kinds of reasons, and none of them may end the
loop (a listener whose accept task died leaves clients in the backlog forever, and the error
would resurface at shutdown):

- the process or the system is out of a resource (``RESOURCE_ERRNOS``: out of file
  descriptors, buffers or memory). The connection stays in the backlog and the listener stays
  readable, so retrying at once would spin: wait ``accept_backoff(n)`` on the loop clock
  (doubling from ``ACCEPT_BACKOFF_MIN_S`` to ``ACCEPT_BACKOFF_MAX_S``) and try again. This is
  what asyncio's own servers and libuv do, with a fixed delay;
- one connection went wrong before we took it (``TRANSIENT_ERRNOS``: aborted, reset, Linux's
  pending network errors, which accept(2) says to treat like EAGAIN): it is gone, and the next
  one is unaffected, so accept again at once;
- anything else (a listener the kernel no longer accepts on): treated like a resource error,
  since backing off costs nothing and the operator sees the error in the log.

A run of failures is one *episode*: logged once when it begins (``accept_failing``, with the
error and the connections open) and once when an accept succeeds again (``accept_resumed``,
with how long it lasted and how many attempts failed), not once per retry.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from minidb.server._config import LISTEN_BACKLOG
from minidb.server._logging import event

logger = logging.getLogger("minidb.server")

ACCEPT_BACKOFF_MIN_S = 0.01
"""Wait before the first retry after an accept failed for want of a resource."""
ACCEPT_BACKOFF_MAX_S = 0.5
"""Longest wait between accept retries: bounds how late a freed descriptor is noticed."""

RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""accept(2) failed for want of descriptors or memory: back off and retry."""
TRANSIENT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "ECONNABORTED", "ECONNRESET", "EPROTO", "EPERM", "EINTR", "ETIMEDOUT", "ENETDOWN",
        "ENETUNREACH", "EHOSTDOWN", "EHOSTUNREACH", "ENOPROTOOPT", "ENONET",
    )
    if hasattr(errno, name)
)
"""accept(2) failed for that one connection only: accept the next at once."""


def accept_backoff(failures: int) -> float:
    """Seconds to wait after the ``failures``-th consecutive resource failure (1-based)."""
    return min(ACCEPT_BACKOFF_MAX_S, ACCEPT_BACKOFF_MIN_S * float(2 ** min(failures - 1, 30)))


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


@dataclass(frozen=True, slots=True)
class AcceptStatistics:
    """What one listener's accept loop has done."""

    accepted: int
    """Connections accepted and handed to their protocol."""
    resource_failures: int
    """Accepts that failed for want of descriptors or memory (each retry counts)."""
    transient_failures: int
    """Accepts that failed for that one connection only."""
    other_failures: int
    """Accepts that failed for any other reason."""
    episodes: int
    """Runs of consecutive failures (resource or other) so far."""
    failing: bool
    """True while the current run of failures lasts."""


class Acceptor:
    """Accepts connections on one listening socket while its admission says there is room."""

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.Protocol],
        wait_for_slot: Callable[[], Awaitable[None]],
        *,
        listener: str,
        open_connections: Callable[[], int],
    ) -> None:
        self._sock = sock
        self._factory = factory
        self._wait_for_slot = wait_for_slot
        self._listener = listener
        self._open_connections = open_connections
        self._accepted = 0
        self._resource_failures = 0
        self._transient_failures = 0
        self._other_failures = 0
        self._episodes = 0
        self._streak = 0  # consecutive failed accepts of the current episode
        self._streak_began = 0.0

    async def run(self) -> None:
        """Accept until cancelled; never ends on a failed accept."""
        loop = asyncio.get_running_loop()
        sock = self._sock
        while True:
            await self._wait_for_slot()
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as exc:
                delay = self._failed(loop, exc)
                if delay:
                    await asyncio.sleep(delay)
                continue
            if self._streak:
                self._resumed(loop)
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.connect_accepted_socket(self._factory, conn)
            except asyncio.CancelledError:
                conn.close()
                raise
            except OSError as exc:
                # The client left between accept and setup; nothing to serve.
                conn.close()
                event(logger, logging.DEBUG, "accept_failed", listener=self._listener, error=exc)
            else:
                self._accepted += 1

    def _failed(self, loop: asyncio.AbstractEventLoop, exc: OSError) -> float:
        """Count and log a failed accept; return how long to wait before the next."""
        if exc.errno in TRANSIENT_ERRNOS:
            self._transient_failures += 1
            event(logger, logging.DEBUG, "accept_failed", listener=self._listener, error=exc)
            return 0.0
        if exc.errno in RESOURCE_ERRNOS:
            self._resource_failures += 1
        else:
            self._other_failures += 1
        self._streak += 1
        if self._streak == 1:
            self._episodes += 1
            self._streak_began = loop.time()
            event(
                logger, logging.WARNING if exc.errno in RESOURCE_ERRNOS else logging.ERROR,
                "accept_failing", listener=self._listener,
                errno=errno.errorcode.get(exc.errno or 0, exc.errno), error=exc.strerror,
                connections=self._open_connections(), action="backing off",
            )
        return accept_backoff(self._streak)

    def _resumed(self, loop: asyncio.AbstractEventLoop) -> None:
        event(
            logger, logging.WARNING, "accept_resumed", listener=self._listener,
            failed_attempts=self._streak,
            after_s=f"{loop.time() - self._streak_began:.3f}",
            connections=self._open_connections(),
        )
        self._streak = 0

    def statistics(self) -> AcceptStatistics:
        return AcceptStatistics(
            accepted=self._accepted,
            resource_failures=self._resource_failures,
            transient_failures=self._transient_failures,
            other_failures=self._other_failures,
            episodes=self._episodes,
            failing=self._streak > 0,
        )
