"""Build hook for the optional C accelerator of the timer wheel (everything else is in
pyproject.toml).

``minidb.runtime._cwheel`` is built when a C compiler is at hand; without one the build warns
and carries on (``optional=True``), and ``minidb.runtime`` uses the pure-Python wheel.
"""

import sys

from setuptools import Extension, setup

# Deadlines are computed as ``when * 1000 - tolerance`` in two IEEE steps, as Python does; a
# fused multiply-add would round once and could move a deadline by a tick.
_FLAGS = [] if sys.platform == "win32" else ["-O2", "-ffp-contract=off"]

setup(
    ext_modules=[
        Extension(
            "minidb.runtime._cwheel",
            ["src/minidb/runtime/_cwheel.c"],
            extra_compile_args=_FLAGS,
            optional=True,
        )
    ]
)
