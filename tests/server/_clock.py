"""A selector event loop on a virtual clock, for exact timing tests over real sockets.

Its selector never blocks: when the loop would wait for ``timeout`` seconds with no socket
ready, the clock jumps forward by exactly that much instead. Timers therefore fire at their
exact deadlines in no wall time, while loopback I/O (delivered synchronously by the kernel)
still works. (minidb.runtime's paused clock does the same for the wheel loop.)
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)
        if not events and timeout is not None and timeout > 0:
            self._loop.now += timeout
        return events


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """A selector loop whose ``time()`` only moves when the loop would otherwise sleep."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


def run_on_virtual_clock(body: Callable[[], Awaitable[T]]) -> T:
    """Run ``body()`` to completion on a fresh ``VirtualClockLoop``."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(body())  # type: ignore[arg-type]
