"""Redis's glob patterns for the names CONFIG GET and COMMAND LIST FILTERBY PATTERN match.

The matcher is the keyspace's (``minidb.store._glob``: Redis's ``stringmatchlen`` syntax, linear
time whatever the pattern); this module only adds what these two uses need on top of it: Redis
calls them with ``nocase``, and a pattern far longer than any name matches nothing.
"""

from __future__ import annotations

from minidb.store._glob import glob_match as _match

MAX_PATTERN_BYTES = 1024
"""A longer pattern matches nothing (config and command names are under 64 bytes)."""


def glob_match(pattern: bytes, text: bytes, *, nocase: bool = True) -> bool:
    """Whether ``text`` matches the Redis glob ``pattern`` (case-insensitive by default)."""
    if len(pattern) > MAX_PATTERN_BYTES:
        return False
    if nocase:
        # Lowering the pattern too is what Redis's nocase does: it lowers every byte it compares,
        # the ends of a class range included.
        pattern, text = pattern.lower(), text.lower()
    return _match(pattern, text)
