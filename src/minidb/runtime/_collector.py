"""The cyclic garbage collector, set for a long-running process that allocates per request.

A server or import worker allocates short-lived tuples and lists by the million (a row, a
command, a journal entry), nearly none of them in a cycle. Under CPython's default threshold
(a young collection every 700 allocations) every batch of rows still alive gets walked, and
promoted, and walked again: 15-25% of an import worker's CPU on a 1M-row file
(``bench/batch.py``). ``tune_for_throughput`` collects the young generation every
``YOUNG_THRESHOLD`` allocations instead and freezes what start-up made (modules, classes,
configuration: alive until exit), so full collections do not walk it. Cycles are still
collected, only in larger, rarer batches; the memory they can hold meanwhile is bounded by
the threshold.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000
"""Allocations between two collections of the youngest generation (CPython's default: 700)."""


def tune_for_throughput() -> None:
    """Collect rarely and freeze what exists now; call once, after start-up's imports."""
    _, older, oldest = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
