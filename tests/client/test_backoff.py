"""Backoff: full jitter under a doubling, capped ceiling; no wait before the first attempt or
after the last."""

from __future__ import annotations

import pytest

from minidb.client import Backoff


def test_backoff_one_attempt_never_waits() -> None:
    """With one attempt there is nothing to wait for."""
    assert list(Backoff(attempts=1).delays(lambda: 0.5)) == []


def test_backoff_waits_between_attempts_only() -> None:
    """N attempts give N - 1 waits."""
    assert len(list(Backoff(attempts=6).delays())) == 5


def test_backoff_ceiling_doubles_then_caps() -> None:
    """The ceiling doubles from base and stops at cap."""
    backoff = Backoff(attempts=8, base=0.1, cap=1.0)
    assert [backoff.ceiling(n) for n in range(1, 8)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    )


def test_backoff_full_jitter_scales_the_ceiling() -> None:
    """Each wait is random() times its ceiling, so it lies in [0, ceiling)."""
    draws = iter([0.0, 0.5, 0.999])
    delays = list(Backoff(attempts=4, base=1.0, cap=3.0).delays(lambda: next(draws)))
    assert delays == pytest.approx([0.0, 1.0, 0.999 * 3.0])


def test_backoff_huge_attempt_counts_stay_finite() -> None:
    """The exponent is clamped, so absurd retry numbers do not overflow."""
    assert Backoff(attempts=5000, base=0.1, cap=30.0).ceiling(4999) == 30.0


@pytest.mark.parametrize("kwargs", [{"attempts": 0}, {"base": -1.0}, {"cap": -1.0}])
def test_backoff_rejects_nonsense(kwargs: dict[str, float]) -> None:
    """Zero attempts or negative times are refused."""
    with pytest.raises(ValueError):
        Backoff(**kwargs)  # type: ignore[arg-type]
