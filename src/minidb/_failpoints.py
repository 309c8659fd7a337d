"""Named fault-injection points, configured from the environment.

``MINIDB_FAILPOINTS="store.apply=delay(0.5);store.owner=crash-after(100);wal.sync=error(ENOSPC)"``

A failpoint costs nothing when it is not configured: call sites check the module-level
``ACTIVE`` mapping (empty unless the variable is set) before doing anything, e.g.::

    if failpoints.ACTIVE:
        failpoints.hit("store.apply")

Actions:

- ``delay(SECONDS)``: ``hit`` returns the delay; async callers sleep it on the loop clock.
- ``crash-after(N)``: the N+1-th hit raises ``FailpointCrash`` (the first N pass).
- ``error(ERRNO)``: every hit raises ``OSError(errno.ERRNO)``; ``error(ERRNO, N)`` only after N
  passing hits.

Known names: ``store.apply``, ``store.owner``, ``wal.append``, ``wal.sync``, ``wal.create``
(creating a file of a fresh data directory, or a new segment at open).

A bad specification never breaks an import (the ``minidb`` command imports modules that use
failpoints just to build its parser, and must still answer with a one-line usage error):
importing this module records the problem in ``ENV_ERROR`` instead of raising, and ``minidb``'s
``main`` checks it before running any command. Code that imports minidb as a library and never
checks still cannot run with failpoints silently off: ``ACTIVE`` then holds a placeholder, so
the guarded call sites reach ``hit``, which raises the parse error.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from dataclasses import dataclass

ENV_VAR = "MINIDB_FAILPOINTS"


class FailpointCrash(RuntimeError):
    """Raised by a ``crash-after`` failpoint: the component is meant to die here."""


@dataclass
class Failpoint:
    name: str
    action: str  # "delay" | "crash-after" | "error"
    seconds: float = 0.0
    after: int = 0
    errno_value: int = 0
    hits: int = 0

    def hit(self) -> float:
        """Record one hit; return a delay in seconds, or raise what the action says."""
        self.hits += 1
        if self.action == "delay":
            return self.seconds
        if self.hits <= self.after:
            return 0.0
        if self.action == "crash-after":
            raise FailpointCrash(f"failpoint {self.name}: crash after {self.after}")
        raise OSError(self.errno_value, f"{os.strerror(self.errno_value)} (failpoint {self.name})")


_SPEC = re.compile(r"^\s*([a-z_.]+)\s*=\s*([a-z-]+)\((.*)\)\s*$")


def parse(spec: str) -> dict[str, Failpoint]:
    """Parse a ``name=action(args);...`` string; raise ``ValueError`` naming the bad part."""
    points: dict[str, Failpoint] = {}
    for part in spec.split(";"):
        if not part.strip():
            continue
        m = _SPEC.match(part)
        if m is None:
            raise ValueError(f"bad failpoint {part.strip()!r}: expected name=action(args)")
        name, action, raw = m.group(1), m.group(2), m.group(3)
        args = [a.strip() for a in raw.split(",") if a.strip()]
        try:
            if action == "delay" and len(args) == 1:
                points[name] = Failpoint(name, action, seconds=float(args[0]))
            elif action == "crash-after" and len(args) == 1:
                points[name] = Failpoint(name, action, after=int(args[0]))
            elif action == "error" and 1 <= len(args) <= 2:
                code = getattr(errno, args[0]) if not args[0].isdigit() else int(args[0])
                after = int(args[1]) if len(args) == 2 else 0
                points[name] = Failpoint(name, action, errno_value=code, after=after)
            else:
                raise ValueError(action)
        except (ValueError, AttributeError):
            raise ValueError(f"bad failpoint {part.strip()!r}") from None
    return points


_INVALID = "<invalid MINIDB_FAILPOINTS>"
"""Key of the placeholder ``ACTIVE`` holds while ``ENV_ERROR`` is set (never a real name)."""


def load_from_env() -> dict[str, Failpoint]:
    """(Re)read ``MINIDB_FAILPOINTS`` into ``ACTIVE`` and return it; raise ``ValueError``
    (and leave only the placeholder active) if the variable does not parse."""
    global ENV_ERROR
    ACTIVE.clear()
    try:
        points = parse(os.environ.get(ENV_VAR, ""))
    except ValueError as exc:
        ENV_ERROR = str(exc)
        ACTIVE[_INVALID] = Failpoint(_INVALID, "invalid")
        raise
    ENV_ERROR = None
    ACTIVE.update(points)
    return ACTIVE


def hit(name: str) -> float:
    """Hit failpoint ``name`` if configured; see the module docstring for the result."""
    if ENV_ERROR is not None and _INVALID in ACTIVE:
        raise ValueError(f"{ENV_VAR}: {ENV_ERROR}")
    point = ACTIVE.get(name)
    return point.hit() if point is not None else 0.0


ACTIVE: dict[str, Failpoint] = {}
ENV_ERROR: str | None = None
"""Why ``MINIDB_FAILPOINTS`` did not parse at import, or None."""
with contextlib.suppress(ValueError):
    load_from_env()
