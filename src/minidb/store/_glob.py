"""Redis's glob patterns (``KEYS``, ``SCAN MATCH``), matched in time linear in the key.

Syntax, read exactly as Redis's ``stringmatchlen`` reads it: ``*`` any run of bytes, ``?`` one
byte, ``[abc]`` one byte of a set, ``[^abc]`` one byte not in it, ``[a-z]`` a range (ends in
either order), ``\\x`` the byte ``x`` itself, inside or outside a set. The corners follow Redis
too: ``[]`` is an empty set (never matches) and ``[^]`` matches any byte, a set that is never
closed runs to the end of the pattern, ``[a-]`` is the range from ``a`` to ``]``, and a
trailing ``\\`` is a literal backslash. One deliberate difference: a pattern that matches the
empty string (``*``, ``a*`` without the ``a``...) matches the empty key, where Redis's matcher
answers no for every pattern but a lone ``*``.

Theory of operation
===================

Redis matches by recursion on every ``*``, which is exponential in the number of stars for a
pattern like ``a*a*a*a*...b`` (it carries a cut-off for that case, and a nesting limit). Here a
pattern is compiled once into tokens (a byte set per single-byte token, or a star) and matched
one of two ways, both linear in the key for a given pattern:

* **Literal segments** (no ``?`` and no sets, the usual ``user:*`` or ``*:session:*``): the
  pattern is ``s0 * s1 * ... * sn`` with literal segments. ``s0`` must be a prefix and ``sn``
  a suffix; the middle segments are found left to right, each at its leftmost occurrence after
  the previous one (``bytes.find``, linear in C). Leftmost is always safe: any match placing a
  segment later can place it earlier and leave more room for the rest.
* **Otherwise, a bit-parallel NFA** (Shift-And, Baeza-Yates and Gonnet): bit ``i`` of an
  integer says "the first ``i`` tokens match the key so far". Per key byte ``c`` the whole
  state moves with three integer operations: ``((S << 1) & ACCEPTS[c]) | (S & STARS)`` plus
  the closure over a star that matches nothing. The cost per byte is a few word operations per
  64 tokens, whatever the pattern: there is nothing to backtrack into.

``ACCEPTS[c]`` is computed lazily per byte value seen, so a pattern with many sets costs its
set tests once per distinct byte, never per key. Compiled patterns are cached (bounded).
"""

from __future__ import annotations

from collections.abc import Callable

MAX_CACHED_PATTERNS = 256
"""Compiled patterns kept for reuse (SCAN sends the same MATCH on every call)."""

_STAR = None
"""Token for ``*``; every other token is the ``frozenset`` of bytes it accepts."""

Token = frozenset[int] | None

_ALL_BYTES = frozenset(range(256))


def tokenize(pattern: bytes) -> list[Token]:
    """The pattern as tokens, runs of stars collapsed to one (see the module docstring)."""
    tokens: list[Token] = []
    n = len(pattern)
    i = 0
    while i < n:
        c = pattern[i]
        if c == 0x2A:  # '*'
            if not tokens or tokens[-1] is not _STAR:
                tokens.append(_STAR)
            i += 1
        elif c == 0x3F:  # '?'
            tokens.append(_ALL_BYTES)
            i += 1
        elif c == 0x5B:  # '['
            i += 1
            negate = i < n and pattern[i] == 0x5E  # '^'
            if negate:
                i += 1
            members: set[int] = set()
            # The order of these tests is Redis's: escape, close, end, range, literal.
            while True:
                if i < n and pattern[i] == 0x5C and n - i >= 2:  # '\\' escapes the next byte
                    members.add(pattern[i + 1])
                    i += 2
                elif i < n and pattern[i] == 0x5D:  # ']'
                    i += 1
                    break
                elif i >= n:  # never closed: the set runs to the end of the pattern
                    break
                elif n - i >= 3 and pattern[i + 1] == 0x2D:  # 'a-z'
                    lo, hi = sorted((pattern[i], pattern[i + 2]))
                    members.update(range(lo, hi + 1))
                    i += 3
                else:
                    members.add(pattern[i])
                    i += 1
            tokens.append(_ALL_BYTES - members if negate else frozenset(members))
        elif c == 0x5C and n - i >= 2:  # '\\x' is x
            tokens.append(frozenset((pattern[i + 1],)))
            i += 2
        else:
            tokens.append(frozenset((c,)))
            i += 1
    return tokens


def _literal_segments(tokens: list[Token]) -> list[bytes] | None:
    """``[s0, ..., sn]`` for a pattern ``s0*s1*...*sn`` of single-byte literals, else None."""
    segments: list[bytes] = []
    current = bytearray()
    for token in tokens:
        if token is _STAR:
            segments.append(bytes(current))
            current.clear()
        elif len(token) == 1:
            current += bytes(token)
        else:
            return None
    segments.append(bytes(current))
    return segments


def _segment_matcher(segments: list[bytes]) -> Callable[[bytes], bool]:
    if len(segments) == 1:
        only = segments[0]
        return lambda key: key == only
    first, middle, last = segments[0], segments[1:-1], segments[-1]
    if not middle:
        if not last:
            return lambda key: key.startswith(first)
        if not first:
            return lambda key: key.endswith(last)
        floor = len(first) + len(last)
        return lambda key: len(key) >= floor and key.startswith(first) and key.endswith(last)

    def match(key: bytes) -> bool:
        if not key.startswith(first):
            return False
        end = len(key) - len(last)
        if end < len(first) or not key.endswith(last):
            return False
        at = len(first)
        for segment in middle:
            found = key.find(segment, at, end)
            if found < 0:
                return False
            at = found + len(segment)
        return True

    return match


class _Automaton:
    """The Shift-And matcher of one pattern's tokens."""

    __slots__ = ("_accepts", "_final", "_sets", "_stars", "_start")

    def __init__(self, tokens: list[Token]) -> None:
        self._sets = [(i, t) for i, t in enumerate(tokens, 1) if t is not None]
        self._stars = sum(1 << i for i, t in enumerate(tokens, 1) if t is _STAR)
        self._final = 1 << len(tokens)
        self._start = 1 | ((1 << 1) & self._stars)
        self._accepts: dict[int, int] = {}

    def _accept_mask(self, byte: int) -> int:
        mask = 0
        for i, members in self._sets:
            if byte in members:
                mask |= 1 << i
        self._accepts[byte] = mask
        return mask

    def __call__(self, key: bytes) -> bool:
        state = self._start
        stars = self._stars
        accepts = self._accepts
        for byte in key:
            mask = accepts.get(byte)
            if mask is None:
                mask = self._accept_mask(byte)
            state = ((state << 1) & mask) | (state & stars)
            if not state:
                return False
            state |= (state << 1) & stars
        return bool(state & self._final)


_cache: dict[bytes, Callable[[bytes], bool]] = {}


def compile_glob(pattern: bytes) -> Callable[[bytes], bool]:
    """A function telling whether a key matches ``pattern``; cached by pattern."""
    matcher = _cache.get(pattern)
    if matcher is None:
        tokens = tokenize(pattern)
        segments = _literal_segments(tokens)
        matcher = _segment_matcher(segments) if segments is not None else _Automaton(tokens)
        if len(_cache) >= MAX_CACHED_PATTERNS:
            _cache.pop(next(iter(_cache)))
        _cache[pattern] = matcher
    return matcher


def glob_match(pattern: bytes, key: bytes) -> bool:
    """Whether ``key`` matches the Redis glob ``pattern``."""
    return compile_glob(pattern)(key)
