"""The store browser's rules (pure): what a request may name, and how keys and values show.

Keys and values are bytes (RESP is binary-safe); JSON and URLs carry text. So:

* **A key** is shown as its text when it is valid UTF-8 (``"encoding": "utf-8"``) and as hex
  otherwise (``"encoding": "hex"``), and a request names it the same way: ``key=TEXT``, or
  ``key=HEX&encoding=hex``. The query string is read as bytes (``query_bytes``), so a key
  sent as percent-encoded bytes that are not UTF-8 is refused with a clear 400 (use hex)
  instead of being silently replaced by U+FFFD, which would name another key.
* **A value** is shown as text when it is UTF-8 without control characters other than TAB,
  LF and CR, and as hex otherwise (``"encoding": "text" | "hex"``), either way at most
  ``PREVIEW_BYTES`` of it with its full ``length`` and whether it was ``truncated``; the page
  offers the whole value as a download.
* **A bucket** is a name of the server's ``SELECT`` rule (a database number is a bucket named
  by its digits); **a pattern** is ``SCAN MATCH`` glob text; **a cursor** is the server's own
  ``SCAN`` cursor, an unsigned 64-bit integer in decimal, passed through untouched.

Every check here runs before a command is sent; a refusal is ``BadStoreRequest`` with a stable
``code`` (400). Nothing here reads the keyspace: a page of keys is one bounded ``SCAN`` walk.
"""

from __future__ import annotations

import binascii
import codecs
import re
from typing import Any
from urllib.parse import parse_qsl

from minidb.errors import MinidbError
from minidb.protocol import MAX_EXPIRE_SECONDS, MAX_NAME_CHARS

BUCKET_RULE = f"1-{MAX_NAME_CHARS} characters of [A-Za-z0-9_.:/-]"
_BUCKET = re.compile(rf"[A-Za-z0-9_.:/-]{{1,{MAX_NAME_CHARS}}}", re.ASCII)
MAX_KEY_BYTES = 4096
"""Longest key a request may name, in bytes (the server allows 64 KiB, but a key travels in
the query string, and HTTP servers cap the request line; 4096 bytes is 8 KiB of hex)."""
MAX_PATTERN_CHARS = 256
"""Longest ``pattern`` of a key listing, in characters."""
SCAN_COUNT_DEFAULT = 50
SCAN_COUNT_MAX = 500
"""Largest ``count`` of a key listing: keys the server examines per ``SCAN`` call."""
SCAN_ROUNDS_MAX = 8
"""``SCAN`` calls one listing makes at most while a ``MATCH`` leaves its pages short, so a
sparse pattern still fills a page, but one request never walks more than
``SCAN_ROUNDS_MAX * count`` keys; the cursor goes back to the page for the rest."""
MAX_CURSOR = (1 << 64) - 1
MAX_CURSOR_DIGITS = 20
PREVIEW_BYTES = 16 * 1024
"""Bytes of a value shown in the page (as text, or as 32 KiB of hex); the rest is a download."""
MAX_SET_VALUE_BYTES = 1 << 20
"""Largest value ``PUT /store/key`` takes, in bytes (413 above): the page edits small values;
loads go through ``csv_import``."""
MAX_DOWNLOAD_BYTES = 64 << 20
"""Largest value ``GET /store/value`` sends, in bytes (413 above); read whole, in one ``GET``,
so the file is the value at one moment (the server's default limit is 16 MiB)."""
MAX_TTL_SECONDS = MAX_EXPIRE_SECONDS
"""Longest time to live ``PUT /store/ttl`` sets, in seconds (about 31.7 years)."""
MAX_BUCKETS_LISTED = 1000
"""Buckets ``GET /store/buckets`` lists at most (``truncated`` says there were more)."""

KEY_ENCODINGS = ("utf-8", "hex")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
"""Characters that make a value show as hex: C0 and C1 controls but TAB, LF and CR."""


class BadStoreRequest(MinidbError):
    """A request to the store browser that names nothing valid; ``code`` is the problem's
    stable token (``invalid_bucket``, ``invalid_key``, ``invalid_pattern``, ``invalid_cursor``)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def query_bytes(query_string: bytes, name: str) -> bytes | None:
    """The raw bytes of query parameter ``name`` (percent-decoding only; no UTF-8 decode), or
    None when absent; given twice it is refused (which one counts would be a guess)."""
    found = [value for key, value in parse_qsl(query_string.decode("latin-1"),
                                               keep_blank_values=True, encoding="latin-1")
             if key == name]
    if len(found) > 1:
        raise BadStoreRequest(f"invalid_{name}", f"{name} is given more than once")
    return found[0].encode("latin-1") if found else None


def check_bucket(name: str) -> bytes:
    """The bucket ``name`` names, as the server's ``SELECT`` takes it."""
    if _BUCKET.fullmatch(name) is None:
        raise BadStoreRequest("invalid_bucket", f"a bucket name is {BUCKET_RULE}")
    return name.encode("ascii")


def parse_key(raw: bytes | None, encoding: str) -> bytes:
    """The key a request names: ``raw`` is the query's ``key`` as bytes, ``encoding`` says
    whether it is the key's UTF-8 text or its hex."""
    if raw is None or not raw:
        raise BadStoreRequest("invalid_key", "key is required and may not be empty")
    if encoding == "hex":
        try:
            key = binascii.unhexlify(raw)
        except (binascii.Error, ValueError):
            raise BadStoreRequest("invalid_key", "key is not hex (encoding=hex)") from None
        if not key:
            raise BadStoreRequest("invalid_key", "key may not be empty")
    elif encoding == "utf-8":
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BadStoreRequest(
                "invalid_key", "key is not UTF-8 text; name a binary key by its hex with "
                "encoding=hex") from None
        key = raw
    else:
        raise BadStoreRequest("invalid_key", f"encoding is one of {', '.join(KEY_ENCODINGS)}")
    if len(key) > MAX_KEY_BYTES:
        raise BadStoreRequest("invalid_key", f"key is longer than {MAX_KEY_BYTES} bytes")
    return key


def check_pattern(raw: bytes | None) -> bytes:
    """A ``SCAN MATCH`` pattern: UTF-8 text of 1-``MAX_PATTERN_CHARS`` characters without
    control characters (``*`` when absent)."""
    if raw is None:
        return b"*"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadStoreRequest("invalid_pattern", "pattern is not UTF-8 text") from None
    if not 1 <= len(text) <= MAX_PATTERN_CHARS:
        raise BadStoreRequest("invalid_pattern",
                              f"pattern is 1-{MAX_PATTERN_CHARS} characters")
    if _CONTROL.search(text) or any(c in text for c in "\t\r\n"):
        raise BadStoreRequest("invalid_pattern", "pattern may not hold control characters")
    return raw


def parse_scan_cursor(text: str) -> int:
    """The server's ``SCAN`` cursor: ``0`` starts, any other is one a listing returned."""
    if not (text.isascii() and text.isdigit()) or len(text) > MAX_CURSOR_DIGITS:
        raise BadStoreRequest("invalid_cursor", "cursor is a decimal number a listing returned")
    cursor = int(text)
    if cursor > MAX_CURSOR:
        raise BadStoreRequest("invalid_cursor", "cursor is out of range")
    return cursor


def key_view(key: bytes) -> dict[str, str]:
    """``{"key", "encoding"}``: the key's text if it is UTF-8, else its hex."""
    try:
        return {"key": key.decode("utf-8"), "encoding": "utf-8"}
    except UnicodeDecodeError:
        return {"key": key.hex(), "encoding": "hex"}


def _as_text(head: bytes, cut: bool) -> str | None:
    """``head`` as text, or None if it is not shown as text. A value cut at the preview may
    end inside a UTF-8 sequence; those last bytes are dropped then, never otherwise."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        text = decoder.decode(head, final=not cut)
    except UnicodeDecodeError:
        return None
    return None if _CONTROL.search(text) else text


def value_view(head: bytes, length: int) -> dict[str, Any]:
    """How the page shows a value whose first bytes are ``head`` and whole length ``length``."""
    cut = length > len(head)
    text = _as_text(head, cut)
    if text is not None:
        return {"encoding": "text", "data": text, "length": length, "truncated": cut}
    return {"encoding": "hex", "data": head.hex(), "length": length, "truncated": cut}


def ttl_ms(pttl: int) -> int | None:
    """``PTTL``'s answer as the API shows it: milliseconds left, None for no expiry."""
    return pttl if pttl >= 0 else None


def download_name(key: bytes) -> str:
    """A file name for a value's download: the key's safe characters, else ``value.bin``."""
    text = key.decode("utf-8", "replace")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")[:100]
    return safe or "value.bin"
