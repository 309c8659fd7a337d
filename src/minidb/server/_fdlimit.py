"""The file-descriptor budget: fit ``--max-connections`` to ``RLIMIT_NOFILE`` at start.

Every connection costs a descriptor, and a process out of descriptors cannot accept, open a
log segment or write a checkpoint. So at start, as Redis does for ``maxclients``, the server
asks for enough: ``--max-connections`` plus a reserve for everything else it opens
(``fd_reserve``). It raises its soft limit toward the hard one (never lowering it, never above
what it needs), and if even the hard limit is short it lowers ``--max-connections`` to what
fits, with a warning naming both numbers; if not even one connection fits it refuses to start.

The reserve is a stated estimate, not a count of what happens to be open: a process can hold
descriptors the server does not know of (inherited ones, a library's), so the accept loop still
survives running out (see ``_listeners``). ``plan_fd_budget`` is the pure arithmetic;
``fit_to_fd_limit`` reads and sets the limit and logs.
"""

from __future__ import annotations

import dataclasses
import logging
import resource
from dataclasses import dataclass

from minidb.errors import ConfigError
from minidb.server._config import ServerConfig
from minidb.server._logging import event

logger = logging.getLogger("minidb.server")

FD_RESERVE = 32
"""Descriptors kept for everything but client connections: stdio, the log's segment, directory
and lock files, a checkpoint's snapshot being written, the listeners, the selector and its
wakeup pipe, with room to spare (Redis reserves the same 32)."""


def fd_reserve(config: ServerConfig) -> int:
    """Descriptors ``config`` needs besides its line connections."""
    if config.metrics_port is None:
        return FD_RESERVE
    from minidb.server._metrics import METRICS_MAX_CONNECTIONS

    return FD_RESERVE + METRICS_MAX_CONNECTIONS


@dataclass(frozen=True, slots=True)
class FdBudget:
    """The descriptor limit the server runs with and the connections it allows."""

    soft: int
    """Soft RLIMIT_NOFILE to set (equal to the current one if nothing changes)."""
    max_connections: int
    """Line connections that fit (at most what was asked for; below 1: cannot start)."""


def plan_fd_budget(soft: int, hard: int | None, connections: int, reserve: int) -> FdBudget:
    """The soft limit to ask for and the connections it allows (``hard`` None: unlimited)."""
    needed = connections + reserve
    reachable = needed if hard is None else min(needed, hard)
    new_soft = max(soft, reachable)
    return FdBudget(new_soft, min(connections, new_soft - reserve))


def fit_to_fd_limit(config: ServerConfig) -> ServerConfig:
    """Raise the soft descriptor limit for ``config`` and return it with the connections that fit.

    Raises ``ConfigError`` if the limit leaves no room for a single connection.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    reserve = fd_reserve(config)
    budget = plan_fd_budget(
        _finite(soft, unlimited), None if hard == unlimited else hard,
        config.max_connections, reserve,
    )
    if soft != unlimited and budget.soft > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (budget.soft, hard))
        except (ValueError, OSError) as exc:
            # e.g. macOS refuses more than kern.maxfilesperproc whatever the hard limit says.
            event(
                logger, logging.WARNING, "fd_limit_not_raised", fd_limit=soft,
                wanted=budget.soft, error=exc,
            )
            budget = FdBudget(soft, min(config.max_connections, soft - reserve))
        else:
            event(logger, logging.INFO, "fd_limit_raised", previous=soft, fd_limit=budget.soft)
    if budget.max_connections < 1:
        raise ConfigError(
            f"the open file limit (ulimit -n) of {budget.soft} leaves no room for a connection:"
            f" the server needs at least {reserve + 1} ({reserve} reserved)"
        )
    if budget.max_connections == config.max_connections:
        return config
    event(
        logger, logging.WARNING, "max_connections_lowered",
        requested=config.max_connections, max_connections=budget.max_connections,
        fd_limit=budget.soft, reserved_fds=reserve,
        hint="raise ulimit -n to at least " + str(config.max_connections + reserve),
    )
    return dataclasses.replace(config, max_connections=budget.max_connections)


def _finite(value: int, unlimited: int) -> int:
    """``value``, with the platform's RLIM_INFINITY read as a very large limit."""
    return 2**62 if value == unlimited else value
