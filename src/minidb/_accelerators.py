"""The optional C accelerators: one switch, and one way to load each.

``protocol._cresp`` and ``._cline``, ``store._cplain``, ``wal._cpayload`` and ``._creader``,
and ``batch._ccsv`` are C twins of hot loops (``runtime`` has ``_cwheel`` and ``_cio``), built
by ``setup.py`` when a C compiler is at hand (see docs/architecture.md, "Hot loops in optional C").
Each layer loads its own with ``load``: the module, or None when it was not built or the
environment sets ``MINIDB_PURE_PYTHON=1``, and then the pure-Python code runs. ``runtime``
applies the same rule in its own ``_accel.py``, because it imports nothing else of minidb.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PURE_PYTHON_ENV = "MINIDB_PURE_PYTHON"
"""Environment variable: ``1`` keeps every layer pure Python even when its C twin is built."""


def load(name: str) -> ModuleType | None:
    """The extension module ``name``, or None when switched off or not built (read once, at
    the importing module's import)."""
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
