"""A library's source distribution from PyPI, downloaded once and unpacked in a cache.

The client libraries' own tests ship in their sdists (redis-py's ``tests/``, RQ's, ...), so
the compat suites run exactly what each library's maintainers run, at a pinned version.
``MINIDB_COMPAT_CACHE`` moves the cache (default ``~/.cache/minidb-compat``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

DOWNLOAD_TIMEOUT_S = 300.0


def cache_dir() -> Path:
    """Where sdists, their trees and the suites' virtualenvs are kept between runs."""
    root = os.environ.get("MINIDB_COMPAT_CACHE") or Path.home() / ".cache" / "minidb-compat"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def fetch_sdist(name: str, version: str) -> Path:
    """The unpacked source tree of ``name==version`` (its top folder), fetched if not cached."""
    root = cache_dir() / "src"
    tree = root / f"{name}-{version}"
    if (tree / ".complete").exists():
        return _top(tree)
    downloads = cache_dir() / "sdists"
    downloads.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
         "--dest", str(downloads), f"{name}=={version}"],
        check=True, timeout=DOWNLOAD_TIMEOUT_S,
    )
    archive = _archive_of(downloads, name, version)
    tree.mkdir(parents=True, exist_ok=True)
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(tree)
    else:
        with tarfile.open(archive) as tarred:
            tarred.extractall(tree, filter="data")
    (tree / ".complete").touch()
    return _top(tree)


def _archive_of(folder: Path, name: str, version: str) -> Path:
    stems = {name.lower().replace("-", "_"), name.lower().replace("_", "-")}
    for path in folder.iterdir():
        lowered = path.name.lower()
        if any(lowered.startswith(f"{stem}-{version}.") for stem in stems):
            return path
    raise FileNotFoundError(f"pip downloaded no sdist of {name}=={version} into {folder}")


def _top(tree: Path) -> Path:
    """The sdist's one top folder (``redis-8.1.0/``), or the tree itself."""
    entries = [p for p in tree.iterdir() if p.name != ".complete"]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else tree
