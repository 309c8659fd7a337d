"""Retention: which shipped objects no restore point inside the window needs, and deleting them.

Owns the rule of docs/replication.md ("Retention"). ``expired_keys`` is pure: given a catalog,
the current generation, the time and a policy, the keys to delete. ``sweep`` is its shell: one
listing, the pointer, plain deletes (objects are immutable, so a delete cannot race a rewrite).

The rule: the oldest point that must keep working is ``P`` (now minus the window, or the time of
the N-th newest snapshot of the lineage). ``P``'s plan starts from some snapshot ``S`` of some
generation ``G``; every later point plans from ``S`` or a newer snapshot, of ``G`` or of a
newer generation, so what lies before ``S`` in ``G``, every older generation of the lineage, and
every generation outside it that holds nothing newer than ``P``, is needed by no point after
``P``. Generation records and the pointer are never deleted (the lineage needs them).
"""

from __future__ import annotations

import dataclasses
import re

from minidb.errors import ConfigError
from minidb.objstore import ObjectStore
from minidb.replication._errors import RestoreError
from minidb.replication._layout import Catalog, GenerationObjects, plan_restore

_DURATION = re.compile(r"^(\d+)(s|m|h|d)$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclasses.dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Keep every restore point of the last ``window_ms``, or of the newest ``snapshots``."""

    window_ms: int | None = None
    snapshots: int | None = None

    @classmethod
    def parse(cls, text: str) -> RetentionPolicy:
        """``24h``, ``30m``, ``7d``, ``90s`` (a window) or ``5`` (a count of snapshots)."""
        if text.isdigit() and int(text) >= 1:
            return cls(snapshots=int(text))
        if (m := _DURATION.match(text)) and int(m.group(1)) >= 1:
            return cls(window_ms=int(m.group(1)) * _UNIT_MS[m.group(2)])
        raise ConfigError(
            f"--retain must be a duration (90s, 30m, 24h, 7d) or a count of snapshots, not {text!r}"
        )


def oldest_point(
    catalog: Catalog, current: str, now_ms: int, policy: RetentionPolicy
) -> int | None:
    """The time of the oldest restore point the policy keeps (``None``: keep everything)."""
    if policy.window_ms is not None:
        return now_ms - policy.window_ms
    assert policy.snapshots is not None
    times = sorted(
        (s.time_ms for g, until in catalog.lineage(current) for s in g.snapshots
         if until is None or s.time_ms <= until),
        reverse=True,
    )
    return times[policy.snapshots - 1] if len(times) >= policy.snapshots else None


def expired_keys(catalog: Catalog, current: str, now_ms: int, policy: RetentionPolicy) -> list[str]:
    """The keys of the objects no restore point the policy keeps needs, in listing order."""
    point = oldest_point(catalog, current, now_ms, policy)
    if point is None:
        return []
    try:
        plan = plan_restore(catalog, current, at_time_ms=point)
    except RestoreError:
        return []  # the oldest point is not restorable (yet): deleting could only lose more
    lineage = [g for g, _ in catalog.lineage(current)]
    names = [g.generation for g in lineage]
    keep_from = names.index(plan.generation)
    doomed: list[str] = []
    serving = lineage[keep_from]
    if plan.snapshot is not None:
        base = plan.snapshot.base
        doomed += [s.key for s in serving.snapshots if s.base < base]
        doomed += [c.key for c in serving.chunks if c.last < base]
    for g in lineage[keep_from + 1:]:
        doomed += _all_objects(g)
    for gen, g in catalog.generations.items():
        if gen not in names and all(t < point for t in _times(g)):
            doomed += _all_objects(g)
    return sorted(doomed)


def _all_objects(g: GenerationObjects) -> list[str]:
    return [s.key for s in g.snapshots] + [c.key for c in g.chunks]


def _times(g: GenerationObjects) -> list[int]:
    return [s.time_ms for s in g.snapshots] + [c.time_ms for c in g.chunks]


async def list_catalog(store: ObjectStore) -> Catalog:
    """Every layout object under the store's prefix, paged through."""
    return Catalog.from_listing(await store.list_every())


async def sweep(store: ObjectStore, current: str, now_ms: int, policy: RetentionPolicy) -> int:
    """Delete what ``expired_keys`` names; returns how many objects were deleted."""
    catalog = await list_catalog(store)
    keys = expired_keys(catalog, current, now_ms, policy)
    for key in keys:
        await store.delete(key)
    return len(keys)
