"""Task retry backoff (capped, doubling, equal jitter) and the adaptive idle poll interval."""

from __future__ import annotations

import random

import pytest

from minidb.batch._backoff import (
    ERROR_PAUSE_BASE_S,
    ERROR_PAUSE_CAP_S,
    POLL_JITTER,
    IdlePoll,
    RetryBackoff,
)


def test_retry_ceiling_doubles_then_caps() -> None:
    """The ceiling doubles from base and stops at the cap."""
    backoff = RetryBackoff(base_s=1, cap_s=10)
    assert [backoff.ceiling(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_retry_delay_lies_in_the_upper_half() -> None:
    """Equal jitter: each delay is in [ceiling / 2, ceiling)."""
    backoff = RetryBackoff(base_s=1, cap_s=300)
    rng = random.Random(7)
    for n in range(1, 30):
        delay = backoff.delay(n, rng)
        assert backoff.ceiling(n) / 2 <= delay < backoff.ceiling(n) or delay == backoff.ceiling(n)


def test_retry_delay_is_reproducible_with_a_seed() -> None:
    """The same seed gives the same delays."""
    a = [RetryBackoff().delay(n, random.Random(3)) for n in range(1, 5)]
    b = [RetryBackoff().delay(n, random.Random(3)) for n in range(1, 5)]
    assert a == b


def test_retry_backoff_rejects_negative() -> None:
    """Negative bounds are refused."""
    with pytest.raises(ValueError):
        RetryBackoff(base_s=-1)


def test_idle_poll_is_quick_after_work_and_grows_to_the_cap() -> None:
    """The first empty poll after work waits the minimum; each further one doubles it, up to
    the cap (the defaults: 1, 2, 4, 8, then 10 s)."""
    poll = IdlePoll(min_s=1, cap_s=30, factor=2)
    assert [poll.interval(k) for k in range(1, 9)] == [1, 2, 4, 8, 16, 30, 30, 30]
    assert [IdlePoll().interval(k) for k in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert IdlePoll().interval(10_000) == 10


def test_idle_poll_sleep_is_jittered_within_bounds() -> None:
    """Sleeps stay within the jitter band around the interval."""
    poll = IdlePoll()
    rng = random.Random(1)
    sleeps = [poll.sleep_for(10, rng) for _ in range(1000)]
    assert all(10 * (1 - POLL_JITTER) <= s < 10 * (1 + POLL_JITTER) for s in sleeps)
    assert len(set(sleeps)) > 900


def test_idle_poll_validates() -> None:
    """A minimum above the cap or a shrinking factor is refused."""
    with pytest.raises(ValueError):
        IdlePoll(min_s=10, cap_s=1)
    with pytest.raises(ValueError):
        IdlePoll(factor=0.5)


def test_error_pause_is_short_and_capped_whatever_the_idle_interval() -> None:
    """After polls that failed on the store the pause is 0.5 s doubling to 5 s (jittered),
    never the idle interval, however large its cap."""
    poll = IdlePoll(min_s=1, cap_s=3600)
    rng = random.Random(5)
    pauses = [poll.error_pause(n, rng) for n in range(1, 9)]
    for n, pause in enumerate(pauses, start=1):
        ceiling = min(ERROR_PAUSE_CAP_S, ERROR_PAUSE_BASE_S * 2 ** (n - 1))
        assert ceiling * (1 - POLL_JITTER) <= pause < ceiling * (1 + POLL_JITTER)
    assert max(pauses) < ERROR_PAUSE_CAP_S * (1 + POLL_JITTER)
