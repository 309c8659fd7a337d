"""``minidb.runtime.timeout()``: an ``asyncio.timeout`` whose ``reschedule()`` moves in place.

Stock ``asyncio.Timeout.reschedule`` cancels its ``TimerHandle`` and allocates a new one on
every call; at a million connections whose idle timeout is pushed out on every request, that
allocation and the garbage it leaves are most of the cost. On a ``WheelEventLoop`` this class
moves the armed handle with ``loop.reschedule`` instead. Everywhere else (another loop, a timer
that already fired, a deadline already past, ``None``) it defers to the stock implementation,
so the observable behaviour is exactly ``asyncio.timeout``'s.
"""

from __future__ import annotations

import asyncio
from asyncio import timeouts
from typing import Any

_ENTERED: Any = timeouts._State.ENTERED  # type: ignore[attr-defined]

__all__ = ["Timeout", "timeout", "timeout_at"]


class Timeout(asyncio.Timeout):  # type: ignore[misc]  # final in typeshed, not at run time
    """An ``asyncio.Timeout`` that reschedules in place on loops that support it."""

    _timeout_handler: asyncio.TimerHandle | asyncio.Handle | None
    _state: Any
    _when: float | None

    def reschedule(self, when: float | None) -> None:
        handle = self._timeout_handler
        if when is not None and handle is not None and self._state is _ENTERED:
            loop = asyncio.get_running_loop()
            move = getattr(loop, "reschedule", None)
            if move is not None and when > loop.time() and move(handle, when):
                self._when = when
                return
        super().reschedule(when)


def timeout(delay: float | None) -> Timeout:
    """Like ``asyncio.timeout(delay)``: cancel the enclosed block after ``delay`` seconds."""
    loop = asyncio.get_running_loop()
    return Timeout(loop.time() + delay if delay is not None else None)


def timeout_at(when: float | None) -> Timeout:
    """Like ``asyncio.timeout_at(when)``: cancel the enclosed block at loop time ``when``."""
    return Timeout(when)
