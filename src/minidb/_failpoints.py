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

Known names: ``store.apply``, ``store.owner``, ``wal.append``, ``wal.sync``.
"""

from __future__ import annotations

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


def load_from_env() -> dict[str, Failpoint]:
    """(Re)read ``MINIDB_FAILPOINTS`` into ``ACTIVE`` and return it."""
    ACTIVE.clear()
    ACTIVE.update(parse(os.environ.get(ENV_VAR, "")))
    return ACTIVE


def hit(name: str) -> float:
    """Hit failpoint ``name`` if configured; see the module docstring for the result."""
    point = ACTIVE.get(name)
    return point.hit() if point is not None else 0.0


ACTIVE: dict[str, Failpoint] = {}
load_from_env()
