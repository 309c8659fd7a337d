"""Glob matching: agrees with Redis's matcher, and stays linear on hostile patterns."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.store._glob import glob_match

# Generous on purpose: a backtracking matcher takes hours on these inputs and a Python-level
# quadratic one tens of seconds, while the linear one needs milliseconds; a tight bound would
# only measure how loaded the machine is (0.58 s was seen on a busy CI machine).
HOSTILE_DEADLINE_S = 5.0
"""A hostile match must finish within this (it takes milliseconds; backtracking takes hours)."""


def redis_match(pattern: bytes, string: bytes) -> bool:
    """A line-by-line port of Redis's ``stringmatchlen_impl`` (util.c): the reference."""
    skip = [False]

    def impl(p: int, s: int) -> bool:
        plen, slen = len(pattern) - p, len(string) - s
        while plen and slen:
            c = pattern[p]
            if c == ord("*"):
                while plen > 1 and pattern[p + 1] == ord("*"):
                    p += 1
                    plen -= 1
                if plen == 1:
                    return True
                while slen:
                    if impl(p + 1, s):
                        return True
                    if skip[0]:
                        return False
                    s += 1
                    slen -= 1
                skip[0] = True
                return False
            if c == ord("?"):
                s += 1
                slen -= 1
            elif c == ord("["):
                p += 1
                plen -= 1
                negate = plen > 0 and pattern[p] == ord("^")
                if negate:
                    p += 1
                    plen -= 1
                match = False
                while True:
                    if plen >= 2 and pattern[p] == ord("\\"):
                        p += 1
                        plen -= 1
                        if pattern[p] == string[s]:
                            match = True
                    elif plen > 0 and pattern[p] == ord("]"):
                        break
                    elif plen == 0:
                        p -= 1
                        plen += 1
                        break
                    elif plen >= 3 and pattern[p + 1] == ord("-"):
                        lo, hi = sorted((pattern[p], pattern[p + 2]))
                        p += 2
                        plen -= 2
                        if lo <= string[s] <= hi:
                            match = True
                    elif pattern[p] == string[s]:
                        match = True
                    p += 1
                    plen -= 1
                if negate:
                    match = not match
                if not match:
                    return False
                s += 1
                slen -= 1
            else:
                if c == ord("\\") and plen >= 2:
                    p += 1
                    plen -= 1
                if pattern[p] != string[s]:
                    return False
                s += 1
                slen -= 1
            p += 1
            plen -= 1
            if slen == 0:
                while plen and pattern[p] == ord("*"):
                    p += 1
                    plen -= 1
                break
        return plen == 0 and slen == 0

    return impl(0, 0)


PATTERN_BYTES = st.sampled_from(list(b"ab*?[]^-\\"))
KEY_BYTES = st.sampled_from(list(b"ab]^-\\c"))


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.lists(PATTERN_BYTES, max_size=8).map(bytes),
    key=st.lists(KEY_BYTES, min_size=1, max_size=8).map(bytes),
)
def test_glob_agrees_with_redis_on_random_small_patterns(pattern: bytes, key: bytes) -> None:
    """On every non-empty key, the linear matcher answers as Redis's recursive one."""
    assert glob_match(pattern, key) == redis_match(pattern, key)


def test_glob_agrees_with_redis_on_many_random_pairs() -> None:
    """20,000 seeded random (pattern, key) pairs over the syntax's bytes: no disagreement."""
    rng = random.Random(1234)
    for _ in range(20_000):
        pattern = bytes(rng.choice(b"ab*?[]^-\\") for _ in range(rng.randrange(9)))
        key = bytes(rng.choice(b"ab]^-\\c") for _ in range(rng.randrange(1, 9)))
        assert glob_match(pattern, key) == redis_match(pattern, key), (pattern, key)


@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        (b"h?llo", b"hello", True),
        (b"h*llo", b"heeeello", True),
        (b"h[ae]llo", b"hallo", True),
        (b"h[^e]llo", b"hello", False),
        (b"h[a-b]llo", b"hbllo", True),
        (b"h[b-a]llo", b"hbllo", True),  # a reversed range is swapped
        (b"h\\*llo", b"h*llo", True),
        (b"h\\*llo", b"hello", False),
        (b"[]a", b"a", False),  # an empty set never matches
        (b"[^]", b"x", True),
        (b"a[bc", b"ac", True),  # an unclosed set runs to the end
        (b"a[\\]]", b"a]", True),
        (b"ab\\", b"ab\\", True),  # a trailing backslash is literal
        (b"user:*:session", b"user:42:session", True),
        (b"*:x:*", b"a:x:b", True),
        (b"*:x:*", b"a:y:b", False),
        (b"ab*ba", b"aba", False),  # prefix and suffix may not overlap
        (b"*", b"", True),  # differs from Redis on purpose: the empty key matches
        (b"a*", b"", False),
    ],
)
def test_glob_cases(pattern: bytes, key: bytes, expected: bool) -> None:
    """Documented corners of Redis's syntax match as specified."""
    assert glob_match(pattern, key) is expected


@pytest.mark.parametrize(
    "pattern",
    [
        b"a*" * 200 + b"b",  # literal segments: the bytes.find path
        b"a*?" * 200 + b"b",  # wildcards: the bit-parallel path
        b"[a]*" * 200 + b"[b]",
        b"*" + b"a" * 5000 + b"b*",
    ],
    ids=["literal-stars", "wildcard-stars", "set-stars", "long-segment"],
)
def test_glob_hostile_pattern_within_deadline(pattern: bytes) -> None:
    """``a*a*a*...b`` against a long run of ``a`` (exponential for backtracking) is fast."""
    key = b"a" * 60_000
    start = time.perf_counter()
    assert glob_match(pattern, key) is False
    assert glob_match(pattern, key + b"b") is True
    assert time.perf_counter() - start < HOSTILE_DEADLINE_S
