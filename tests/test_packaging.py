"""What the sdist must carry for the C accelerators to build from it.

A C source's quoted ``#include`` (a header beside it, like ``wal/_crc32c.h``) is not a file
setuptools ships on its own, and an extension that fails to compile is skipped quietly
(``optional=True``): an install from the sdist would then run pure Python without a word. So
every header the extensions include must be named in ``MANIFEST.in``."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def _sources() -> list[Path]:
    """Every C source setup.py names (``"src/....c"`` strings in it)."""
    setup = (ROOT / "setup.py").read_text()
    return [ROOT / path for path in re.findall(r'"(src/[^"]+\.c)"', setup)]


def test_every_header_an_extension_includes_is_in_the_manifest() -> None:
    sources = _sources()
    assert len(sources) >= 7, sources  # setup.py's seven accelerators at least
    manifest = {
        line.split()[1]
        for line in (ROOT / "MANIFEST.in").read_text().splitlines()
        if line.startswith("include ")
    }
    for source in sources:
        for header in _INCLUDE.findall(source.read_text()):
            path = (source.parent / header).resolve().relative_to(ROOT).as_posix()
            assert (ROOT / path).is_file(), f"{source.name} includes a missing {header}"
            assert path in manifest, f"{source.name} includes {path}, which MANIFEST.in lacks"
