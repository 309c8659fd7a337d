"""Build hook for the optional C accelerators (everything else is in pyproject.toml).

``minidb.runtime._cwheel`` (the timer wheel), ``minidb.runtime._cio`` (the loop's I/O turn),
``minidb.protocol._cresp`` (the RESP decoder's hot loop), ``minidb.protocol._cline`` (the line
decoder's common lines), ``minidb.store._cplain`` (plain commands run on the keyspace),
``minidb.server.resp._cconnection`` (a RESP connection's express lane, once per read),
``minidb.wal._cpayload`` (many PUTs packed into one payload), ``minidb.wal._creader``
(the log reader's plainly valid records: framing, checksums, operations) and
``minidb.batch._ccsv`` (the import reader's common row) are built when a C compiler is at hand;
without one the build warns and carries on (``optional=True``), and the pure-Python code runs.
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
            depends=["src/minidb/_cslots.h"],  # slot offsets (shared with the others)
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            "minidb.runtime._cio",
            ["src/minidb/runtime/_cio.c"],
            depends=["src/minidb/_cslots.h", "src/minidb/_cexceptions.h"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            "minidb.protocol._cresp",
            ["src/minidb/protocol/_cresp.c"],
            depends=["src/minidb/_cslots.h", "src/minidb/_cint.h"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            "minidb.protocol._cline",
            ["src/minidb/protocol/_cline.c"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            "minidb.batch._ccsv",
            ["src/minidb/batch/_ccsv.c"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            "minidb.store._cplain",
            ["src/minidb/store/_cplain.c"],
            depends=["src/minidb/_cslots.h", "src/minidb/_cint.h"],  # the keyspace's slots, counters
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            "minidb.server.resp._cconnection",
            ["src/minidb/server/resp/_cconnection.c"],
            depends=["src/minidb/_cslots.h", "src/minidb/_cexceptions.h", "src/minidb/_cint.h"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            "minidb.wal._cpayload",
            ["src/minidb/wal/_cpayload.c"],
            depends=["src/minidb/wal/_crc32c.h"],  # shared CRC32C (in the sdist too)
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            "minidb.wal._creader",
            ["src/minidb/wal/_creader.c"],
            depends=["src/minidb/wal/_crc32c.h"],  # shared CRC32C (in the sdist too)
            extra_compile_args=_FLAGS,
            optional=True,
        ),
    ]
)
