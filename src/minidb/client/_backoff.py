"""Retry delays: exponential backoff with full jitter and a cap, as a pure function of a
random source (no clock, no asyncio), so the arithmetic is testable exactly.

Attempt 1 runs immediately. Before attempt ``n + 1`` (n >= 1) the caller sleeps a delay drawn
uniformly from ``[0, min(cap, base * 2 ** (n - 1)))``: "full jitter", which spreads a crowd of
clients that failed together better than jittering around the exponential value does (AWS
Architecture Blog, "Exponential Backoff And Jitter", 2015). There is no delay after the last
attempt: a caller that has given up should not wait before saying so.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

DEFAULT_ATTEMPTS = 5
DEFAULT_BASE_S = 0.1
"""The first retry waits up to this long; each later one up to twice the previous bound."""
DEFAULT_CAP_S = 5.0
"""No single wait is longer than this."""
_MAX_EXPONENT = 1000
"""Keeps ``2.0 ** n`` finite for absurd attempt counts (the cap applies long before)."""


@dataclass(frozen=True)
class Backoff:
    """How often to try and how long to wait in between."""

    attempts: int = DEFAULT_ATTEMPTS
    base: float = DEFAULT_BASE_S
    cap: float = DEFAULT_CAP_S

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.base < 0 or self.cap < 0:
            raise ValueError("base and cap must not be negative")

    def ceiling(self, retry: int) -> float:
        """The upper bound of the wait before retry number ``retry`` (1 = second attempt)."""
        return min(self.cap, self.base * 2.0 ** min(retry - 1, _MAX_EXPONENT))

    def delays(self, random: Callable[[], float] = _random.random) -> Iterator[float]:
        """The ``attempts - 1`` waits, in order; ``random()`` returns a float in [0, 1)."""
        for retry in range(1, self.attempts):
            yield random() * self.ceiling(retry)
