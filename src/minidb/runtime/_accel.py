"""Which timer wheel the loop runs on: the C accelerator when it was built, else the pure one.

``minidb.runtime._cwheel`` (optional, built from ``_cwheel.c`` when a compiler is at hand) is a
C twin of ``_wheel.TimerWheel`` with the same API and behaviour, plus ``schedule()``, which does
all of ``call_at`` after the loop's own checks without running bytecode, and ``reschedule()``,
the body of ``loop.reschedule``. It is used unless the
environment sets ``MINIDB_PURE_PYTHON=1`` (read once, at import) or it did not build. The pure
module stays the reference: both are tested against the same model and the same loop tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from minidb.runtime import _wheel

PURE_PYTHON_ENV = "MINIDB_PURE_PYTHON"
"""Environment variable: ``1`` makes the runtime use the pure-Python wheel even when the C
accelerator is installed."""

__all__ = ["ACCELERATED", "PURE_PYTHON_ENV", "TimerWheel", "reschedule", "schedule"]

Schedule = Callable[..., Any]
"""``schedule(loop, wheel, cls, when, callback, args, context, tick_tolerance) -> handle``."""


def _load() -> Any:
    """The ``_cwheel`` module, or None when it is switched off or was not built."""
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return None
    try:
        from minidb.runtime import _cwheel  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _cwheel


_cwheel = _load()

ACCELERATED: bool = _cwheel is not None
"""Whether the loop's timers run on the C wheel."""

if TYPE_CHECKING:
    # Both have the pure class's interface; type checkers see the reference implementation.
    from minidb.runtime._wheel import TimerWheel
else:
    TimerWheel = _cwheel.TimerWheel if ACCELERATED else _wheel.TimerWheel

schedule: Schedule | None = _cwheel.schedule if ACCELERATED else None
"""The C ``call_at`` body when accelerated, else None (the loop runs its Python one)."""

reschedule: Callable[..., bool] | None = _cwheel.reschedule if ACCELERATED else None
"""``reschedule(loop, wheel, handle, when, tick_tolerance)``: the C ``loop.reschedule`` body."""


cancel_method: Callable[[type], Any] | None = _cwheel.cancel_method if ACCELERATED else None
"""``cancel_method(cls)``: a C ``cancel`` method descriptor for the handle class."""


def check_handle_class(cls: type) -> bool:
    """Whether ``schedule`` can fill handles of ``cls`` (every field a plain slot)."""
    return bool(ACCELERATED and _cwheel.check_handle_class(cls))
