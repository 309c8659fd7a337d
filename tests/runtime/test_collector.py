"""tune_for_throughput: the collector's young threshold raised, start-up objects frozen."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import minidb.runtime
from minidb.runtime._collector import YOUNG_THRESHOLD


@pytest.fixture
def restored_collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_collector")
def test_tune_for_throughput_raises_the_young_threshold_and_freezes() -> None:
    """The youngest generation is collected every YOUNG_THRESHOLD allocations, the older
    thresholds are kept, and what existed before the call is frozen; cycles made afterwards
    are still collected."""
    _, older, oldest = gc.get_threshold()
    minidb.runtime.tune_for_throughput()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, older, oldest)
    assert gc.get_freeze_count() > 0

    class Node:
        pass

    cycle = Node()
    cycle.self = cycle  # type: ignore[attr-defined]
    del cycle
    assert gc.collect() >= 1
