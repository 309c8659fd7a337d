"""How long to wait: before a failed task's next attempt, and between idle polls of the queue.

Pure arithmetic over a random source passed in (seeded in tests); no clock, no asyncio.

Task retries use the ceiling of ``minidb.client.Backoff`` (doubling from ``base``, capped) with
*equal* jitter, a wait drawn from ``[ceiling / 2, ceiling)``, instead of the client's full
jitter: a client retrying a busy server wants the spread, but a task that just failed should
really wait (the downstream it failed on needs the time), and ``not_before`` then grows with
each attempt, which an operator can see.

The idle poll interval is adaptive: after a poll that claimed a task the worker polls again
at once (a burst is drained at the rate tasks finish); after the k-th empty poll in a row it
waits ``min_s * factor ** (k - 1)``, capped at ``cap_s`` (defaults 1, 2, 4, 8, then 10 s). So a
worker that has just seen work is quick to see the next, and an idle worker costs about
``3600 / cap_s`` LIST requests an hour instead of ``3600 / min_s`` (docs/batch.md, "Pick-up
latency"). Each sleep is jittered by ``POLL_JITTER`` so that workers started together (a
deploy, a fleet scaled up at once) drift apart instead of listing in step. A poll that failed
on the store is followed by ``error_pause`` instead: from ``ERROR_PAUSE_BASE_S`` doubling to
``ERROR_PAUSE_CAP_S``, so a flaky store is retried soon and an outage is not polled hard.
"""

from __future__ import annotations

import random as _random
from dataclasses import dataclass

from minidb.client import Backoff

DEFAULT_RETRY_BASE_S = 1.0
"""The first retry of a task waits about this long (between half of it and all of it)."""
DEFAULT_RETRY_CAP_S = 300.0
"""No retry of a task waits longer than this."""
DEFAULT_POLL_MIN_S = 1.0
"""Wait after the first empty poll that follows work (or start-up), in seconds."""
DEFAULT_POLL_CAP_S = 10.0
"""Poll interval of a worker that has been idle for a while, in seconds: what a task submitted
to an idle fleet waits at most (plus jitter) when no worker shares the API's process."""
DEFAULT_POLL_FACTOR = 2.0
"""Growth of the poll interval per empty poll."""
POLL_JITTER = 0.1
"""Each poll sleep is the interval times a factor drawn from [1 - this, 1 + this)."""
ERROR_PAUSE_BASE_S = 0.5
"""Pause after a poll that failed on a store error, in seconds (the first of a run of them)."""
ERROR_PAUSE_CAP_S = 5.0
"""Longest pause between polls while the store keeps failing, in seconds: a store back from
an outage is seen within this, whatever the idle interval had grown to."""


@dataclass(frozen=True)
class RetryBackoff:
    """Delays before a failed task's next attempt: capped, doubling, equal jitter."""

    base_s: float = DEFAULT_RETRY_BASE_S
    cap_s: float = DEFAULT_RETRY_CAP_S

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.cap_s < 0:
            raise ValueError("base_s and cap_s must not be negative")

    def ceiling(self, failures: int) -> float:
        """The bound of the wait after the ``failures``-th failure of the budget (1 = first)."""
        return Backoff(attempts=1, base=self.base_s, cap=self.cap_s).ceiling(max(failures, 1))

    def delay(self, failures: int, rng: _random.Random) -> float:
        """A wait in ``[ceiling / 2, ceiling)`` for the ``failures``-th failure."""
        ceiling = self.ceiling(failures)
        return ceiling / 2 + rng.random() * ceiling / 2


@dataclass(frozen=True)
class IdlePoll:
    """The adaptive poll schedule: quick after work, growing to ``cap_s`` while idle."""

    min_s: float = DEFAULT_POLL_MIN_S
    cap_s: float = DEFAULT_POLL_CAP_S
    factor: float = DEFAULT_POLL_FACTOR

    def __post_init__(self) -> None:
        if not 0 < self.min_s <= self.cap_s:
            raise ValueError("need 0 < min_s <= cap_s")
        if self.factor < 1:
            raise ValueError("factor must be at least 1")

    def interval(self, empty_polls: int) -> float:
        """The interval after the ``empty_polls``-th empty poll in a row (1 = the first after
        work or start-up), before jitter."""
        exponent = min(max(empty_polls, 1) - 1, 64)  # past 64 doublings it is the cap anyway
        return min(self.cap_s, self.min_s * self.factor ** exponent)

    def sleep_for(self, interval_s: float, rng: _random.Random) -> float:
        """The jittered sleep for ``interval_s``."""
        return interval_s * (1 - POLL_JITTER + 2 * POLL_JITTER * rng.random())

    def error_pause(self, failures: int, rng: _random.Random) -> float:
        """The jittered sleep after the ``failures``-th poll in a row that failed on the store:
        short and capped, never the idle interval (an error says nothing about the queue)."""
        ceiling = min(ERROR_PAUSE_CAP_S, ERROR_PAUSE_BASE_S * 2 ** (max(failures, 1) - 1))
        return self.sleep_for(ceiling, rng)
