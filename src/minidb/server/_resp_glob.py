"""Redis's glob patterns (``stringmatchlen``), for CONFIG GET and COMMAND LIST FILTERBY PATTERN.

``*`` any run, ``?`` one byte, ``[abc]`` / ``[a-z]`` / ``[^a]`` a class, ``\\x`` a literal
``x``; matching is case-insensitive where Redis calls it with ``nocase`` (both of our uses).
Python's ``fnmatch`` differs (``[!a]`` negation, no backslash escape), hence this module.

Theory of operation: the pattern is compiled to tokens (literal byte, any byte, class, star)
and matched with the classic two-pointer algorithm that remembers only the last star, which
is O(len(pattern) * len(text)) in the worst case. A regular expression or naive recursion
would backtrack exponentially on patterns like ``*a*a*a*a*b`` (Redis itself had to cap its
recursion, CVE-2022-36021); the names we match are short, but the patterns come from clients.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_PATTERN_BYTES = 1024
"""A longer pattern matches nothing (config and command names are under 64 bytes)."""

_STAR = object()
_ANY = object()


@dataclass(frozen=True, slots=True)
class _Class:
    members: frozenset[int]
    negate: bool

    def matches(self, byte: int) -> bool:
        return (byte in self.members) != self.negate


_Token = object | int | _Class


def _compile(pattern: bytes) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == ord("*"):
            if not tokens or tokens[-1] is not _STAR:
                tokens.append(_STAR)
            i += 1
        elif c == ord("?"):
            tokens.append(_ANY)
            i += 1
        elif c == ord("["):
            i += 1
            negate = i < n and pattern[i] == ord("^")
            if negate:
                i += 1
            members: set[int] = set()
            while i < n and pattern[i] != ord("]"):
                if pattern[i] == ord("\\") and i + 1 < n:
                    members.add(pattern[i + 1])
                    i += 2
                elif i + 2 < n and pattern[i + 1] == ord("-") and pattern[i + 2] != ord("]"):
                    lo, hi = sorted((pattern[i], pattern[i + 2]))
                    members.update(range(lo, hi + 1))
                    i += 3
                else:
                    members.add(pattern[i])
                    i += 1
            i += 1  # the closing bracket (Redis also accepts an unterminated class)
            tokens.append(_Class(frozenset(members), negate))
        elif c == ord("\\") and i + 1 < n:
            tokens.append(pattern[i + 1])
            i += 2
        else:
            tokens.append(c)
            i += 1
    return tokens


def _one(token: _Token, byte: int) -> bool:
    if token is _ANY:
        return True
    if isinstance(token, _Class):
        return token.matches(byte)
    return token == byte


def glob_match(pattern: bytes, text: bytes, *, nocase: bool = True) -> bool:
    """Whether ``text`` matches the Redis glob ``pattern``."""
    if len(pattern) > MAX_PATTERN_BYTES:
        return False
    if nocase:
        pattern, text = pattern.lower(), text.lower()
    tokens = _compile(pattern)
    t = p = 0
    star_p = star_t = -1
    while t < len(text):
        if p < len(tokens) and tokens[p] is _STAR:
            star_p, star_t = p, t
            p += 1
        elif p < len(tokens) and _one(tokens[p], text[t]):
            p += 1
            t += 1
        elif star_p >= 0:
            # Let the last star swallow one more byte and retry what followed it.
            star_t += 1
            t = star_t
            p = star_p + 1
        else:
            return False
    while p < len(tokens) and tokens[p] is _STAR:
        p += 1
    return p == len(tokens)
