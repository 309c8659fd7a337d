"""RESP's two small grammars, after Redis: numbers in headers, and inline arguments.

``strict_int`` is Redis's ``string2ll`` (src/util.c): what a ``*`` count or ``$`` length may
look like, bounded before conversion. ``split_inline`` is Redis's ``sdssplitargs``
(src/sds.c): how an inline request (``SET "a b" 'c'``) splits into arguments. Both are pure
functions of one field or line; the framing around them is ``_resp``'s.
"""

from __future__ import annotations

import re
from typing import Final

_LONG_STR_SIZE: Final = 21  # Redis's string2ll refuses a field this long or longer.
# Inline requests without these split like ``bytes.split()``; with them, Redis's rules apply.
_INLINE_SPECIAL: Final = re.compile(b"[\"'\x00\x0b\x0c]")
_ISSPACE: Final = b" \t\n\x0b\x0c\r"
_TOKEN_END: Final = b" \t\n\r"
_HEX: Final = b"0123456789abcdefABCDEF"
_ESCAPES: Final = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}


def strict_int(field: bytes) -> int | None:
    """``field`` as a signed 64-bit integer under Redis's ``string2ll`` rules, else None.

    No sign but ``-``, no blanks, no leading zeros, at most 20 characters: checked before
    ``int()`` sees the field, so its length cannot make the conversion slow or fail.
    """
    size = len(field)
    if size == 0 or size >= _LONG_STR_SIZE:
        return None
    if field == b"0":
        return 0
    digits = field[1:] if field[0] == 45 else field  # 45: "-"
    if not digits or digits[0] == 48 or not digits.isdigit():  # 48: "0"; isdigit is ASCII-only
        return None
    value = int(digits)
    if digits is field:
        return value if value < 2**63 else None
    return -value if value <= 2**63 else None


def split_inline(line: bytes) -> list[bytes] | None:
    """Split an inline request into arguments as Redis's ``sdssplitargs`` does.

    Returns None for unbalanced quotes, or a closing quote followed by something other than a
    blank.
    """
    if _INLINE_SPECIAL.search(line) is None:
        return line.split()
    return _split_quoted(line)


def _split_quoted(line: bytes) -> list[bytes] | None:
    # A port of sdssplitargs, which reads a C string: a NUL ends the line.
    nul = line.find(b"\x00")
    if nul >= 0:
        line = line[:nul]
    out: list[bytes] = []
    end = len(line)
    p = 0
    while True:
        while p < end and line[p] in _ISSPACE:
            p += 1
        if p >= end:
            return out
        token = bytearray()
        quote = 0  # the open quote: 34 ('"'), 39 ("'"), or 0
        while True:
            c = line[p] if p < end else 0
            if quote:
                if (
                    quote == 34
                    and c == 92  # backslash
                    and p + 3 < end
                    and line[p + 1] == 120  # "x"
                    and line[p + 2] in _HEX
                    and line[p + 3] in _HEX
                ):
                    token.append(int(line[p + 2 : p + 4], 16))
                    p += 3
                elif quote == 34 and c == 92 and p + 1 < end:
                    p += 1
                    token.append(_ESCAPES.get(line[p], line[p]))
                elif quote == 39 and c == 92 and p + 1 < end and line[p + 1] == 39:
                    p += 1
                    token.append(39)
                elif c == quote:  # a closing quote must be followed by a blank or the end
                    if p + 1 < end and line[p + 1] not in _ISSPACE:
                        return None
                    p += 1
                    break
                elif p >= end:
                    return None
                else:
                    token.append(c)
            elif p >= end or c in _TOKEN_END:
                p += 1
                break
            elif c == 34 or c == 39:
                quote = c
            else:
                token.append(c)
            p += 1
        out.append(bytes(token))
