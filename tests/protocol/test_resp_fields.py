"""Redis's two small grammars: header numbers (string2ll) and inline arguments (sdssplitargs)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.protocol._resp_fields import split_inline, strict_int


@pytest.mark.parametrize(
    "line, argv",
    [
        (b"PING", [b"PING"]),
        (b"  set  a   b ", [b"set", b"a", b"b"]),
        (b'SET "a b" c', [b"SET", b"a b", b"c"]),
        (b'"\\n\\r\\t\\b\\a\\\\\\"\\q"', [b'\n\r\t\b\a\\"q']),
        (b'"\\x41\\x4a\\xzz"', [b"AJxzz"]),
        (b"'it\\'s' 'a\\nb'", [b"it's", b"a\\nb"]),
        (b'a"b c"d', None),
        (b'a"b c" d', [b"ab c", b"d"]),
        (b'""', [b""]),
        (b"a\x0bb", [b"a\x0bb"]),
        (b"\x0b a", [b"a"]),
        (b"a\x00 b", [b"a"]),
        (b'"abc', None),
        (b"'abc", None),
        (b'"a"b', None),
        (b"'a'b", None),
        (b'"a\\', None),
    ],
)
def test_split_inline_follows_sdssplitargs(line: bytes, argv: list[bytes] | None) -> None:
    """Inline arguments split and unquote exactly as Redis's sdssplitargs does."""
    assert split_inline(line) == argv


@pytest.mark.parametrize(
    "field, value",
    [
        (b"0", 0),
        (b"7", 7),
        (b"-7", -7),
        (b"9223372036854775807", 2**63 - 1),
        (b"-9223372036854775808", -(2**63)),
        (b"9223372036854775808", None),
        (b"-0", None),
        (b"007", None),
        (b"+7", None),
        (b" 7", None),
        (b"7_0", None),
        (b"", None),
        (b"-", None),
        (b"\xd9\xa3", None),
        (b"1" * 4301, None),
    ],
)
def test_strict_int_follows_string2ll(field: bytes, value: int | None) -> None:
    """Numbers parse under Redis's string2ll rules, long fields refused before int()."""
    assert strict_int(field) == value


def _catrepr(word: bytes) -> bytes:
    """``word`` quoted as Redis's sdscatrepr quotes it (what redis-cli prints)."""
    named = {92: b"\\\\", 34: b'\\"', 10: b"\\n", 13: b"\\r", 9: b"\\t", 7: b"\\a", 8: b"\\b"}
    out = b"".join(named.get(c) or (bytes([c]) if 32 <= c < 127 else b"\\x%02x" % c) for c in word)
    return b'"' + out + b'"'


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=12), max_size=5), st.sampled_from([b" ", b"  ", b"\t"]))
def test_split_inline_inverts_sdscatrepr(words: list[bytes], blank: bytes) -> None:
    """Words quoted the way Redis prints them split back into the same words."""
    assert split_inline(blank.join(_catrepr(w) for w in words)) == words
