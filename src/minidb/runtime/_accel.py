"""Which timer wheel the loop runs on: the C accelerator when it was built, else the pure one.

``minidb.runtime._cwheel`` (optional, built from ``_cwheel.c`` when a compiler is at hand) is a
C twin of ``_wheel.TimerWheel`` with the same API and behaviour, plus ``schedule()``, which does
all of ``call_at`` after the loop's own checks without running bytecode, and ``reschedule()``,
the body of ``loop.reschedule``. ``minidb.runtime._cio`` (optional, from ``_cio.c``) is the
loop's I/O turn: the epoll poll into the ready queue and the socket transport's read and
write, beside their Python twins in ``_loop.py``. Each is used unless the
environment sets ``MINIDB_PURE_PYTHON=1`` (read once, at import) or it did not build. The pure
module stays the reference: both are tested against the same model and the same loop tests.
"""

from __future__ import annotations

import importlib
import os
import selectors
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from minidb.runtime import _wheel

PURE_PYTHON_ENV = "MINIDB_PURE_PYTHON"
"""Environment variable: ``1`` makes the runtime use the pure-Python wheel even when the C
accelerator is installed."""

__all__ = [
    "ACCELERATED", "PURE_PYTHON_ENV", "TimerWheel", "io_methods", "poll", "reschedule",
    "run_ready", "schedule",
]

Schedule = Callable[..., Any]
"""``schedule(loop, wheel, cls, when, callback, args, context, tick_tolerance) -> handle``."""


def _load(name: str) -> Any:
    """The extension module ``minidb.runtime.<name>``, or None when it is switched off or was
    not built."""
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return None
    try:
        return importlib.import_module(f"minidb.runtime.{name}")
    except ImportError:
        return None


_cwheel = _load("_cwheel")
_cio = _load("_cio")

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


poll: Callable[..., None] | None = None
"""``poll(loop, epfd, timeout, fd_to_key, append)``: the C body of ``_poll_epoll`` (Linux)."""

io_methods: Callable[..., tuple[Any, Any, Any]] | None = None
"""``io_methods(cls, python_read_ready, stock_write, stock_get_write_buffer_size)``: C
``_read_ready``, ``write`` and ``get_write_buffer_size`` methods for the socket transport class
``cls``."""

run_ready: Callable[..., int] | None = None
"""``run_ready(ready, ntodo, stock_types, callback_failed) -> taken``: the ready loop of
``_run_once`` in C for the stock handles (it stops at any other)."""

# The C module hard-codes the selector's event bits; a Python whose differ keeps the twins.
if _cio is not None and (_cio.EVENT_READ, _cio.EVENT_WRITE) == (
    selectors.EVENT_READ, selectors.EVENT_WRITE
):
    poll = getattr(_cio, "poll", None)
    io_methods = _cio.io_methods
    run_ready = _cio.run_ready
