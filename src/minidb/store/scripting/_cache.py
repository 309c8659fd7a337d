"""The server's script cache: SHA1 of the body -> the compiled function, shared by every
connection (as Redis's).

``EVAL`` adds its script, ``SCRIPT LOAD`` loads one, ``EVALSHA`` finds one, ``SCRIPT FLUSH``
empties it. The cache is not logged (Redis 7 replicates a script's effects, never the script),
so it starts empty after a restart and clients get ``NOSCRIPT`` and load again, which is what
redis-py's ``Script`` does.

Bounded: scripts added by ``EVAL`` are kept up to ``MAX_EVAL_SCRIPTS``, least recently used
dropped first (Redis 7.4's rule, against clients that build a new script per call); scripts
``SCRIPT LOAD`` loaded are never dropped, but at most ``MAX_LOADED_SCRIPTS`` of them are
taken, and no body over ``MAX_SCRIPT_BYTES``.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

MAX_EVAL_SCRIPTS = 500
"""Scripts added by EVAL kept at most (least recently used dropped), as Redis 7.4."""
MAX_LOADED_SCRIPTS = 10_000
"""Scripts SCRIPT LOAD may hold at once; one more is refused (``SCRIPT FLUSH`` frees)."""
MAX_SCRIPT_BYTES = 16 << 20
"""The longest script body taken."""


def sha1_of(body: bytes) -> bytes:
    """The cache key: the body's SHA1 in lower-case hex."""
    return hashlib.sha1(body).hexdigest().encode()


class ScriptCache:
    """SHA1 -> compiled function; see the module docstring for the bounds."""

    def __init__(self) -> None:
        self._loaded: dict[bytes, Any] = {}
        self._evaluated: OrderedDict[bytes, Any] = OrderedDict()

    def __len__(self) -> int:
        return len(self._loaded) + len(self._evaluated)

    def get(self, sha: bytes) -> Any | None:
        """The function cached under ``sha`` (any case), or None."""
        sha = sha.lower()
        found = self._loaded.get(sha)
        if found is not None:
            return found
        found = self._evaluated.get(sha)
        if found is not None:
            self._evaluated.move_to_end(sha)
        return found

    def add_evaluated(self, sha: bytes, fn: Any) -> None:
        if sha in self._loaded:
            return
        self._evaluated[sha] = fn
        self._evaluated.move_to_end(sha)
        while len(self._evaluated) > MAX_EVAL_SCRIPTS:
            self._evaluated.popitem(last=False)

    def add_loaded(self, sha: bytes, fn: Any) -> bool:
        """Keep ``fn`` for good; False if the cache already holds its maximum."""
        if sha in self._loaded:
            return True
        if len(self._loaded) >= MAX_LOADED_SCRIPTS:
            return False
        self._evaluated.pop(sha, None)
        self._loaded[sha] = fn
        return True

    def exists(self, sha: bytes) -> bool:
        sha = sha.lower()
        return sha in self._loaded or sha in self._evaluated

    def flush(self) -> None:
        self._loaded.clear()
        self._evaluated.clear()
