"""The store browser's pure rules: names in requests, and how keys and values are shown."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minidb.batch.api._keyview import (
    MAX_CURSOR,
    BadStoreRequest,
    check_bucket,
    check_pattern,
    download_name,
    key_view,
    parse_key,
    parse_scan_cursor,
    query_bytes,
    value_view,
)


def test_query_bytes_keeps_the_percent_decoded_bytes() -> None:
    """No UTF-8 decode (so no U+FFFD): ``%ff`` is the byte 0xff, ``+`` a space."""
    assert query_bytes(b"key=%ff%00a+b&x=1", "key") == b"\xff\x00a b"
    assert query_bytes(b"x=1", "key") is None
    assert query_bytes(b"key=", "key") == b""
    with pytest.raises(BadStoreRequest) as twice:
        query_bytes(b"key=a&key=b", "key")
    assert twice.value.code == "invalid_key"


@given(st.binary(min_size=1, max_size=64))
def test_key_view_round_trips_through_parse_key(key: bytes) -> None:
    """Whatever the bytes, the key as shown names the same key again."""
    shown = key_view(key)
    assert parse_key(shown["key"].encode(), shown["encoding"]) == key


def test_parse_key_refuses_what_names_no_key() -> None:
    """Bytes that are not UTF-8, bad hex, empty, unknown encodings and long keys are refused."""
    for raw, encoding in ((b"\xff", "utf-8"), (b"zz", "hex"), (b"", "utf-8"), (None, "hex"),
                          (b"k", "base64"), (b"k" * 4097, "utf-8"), (b"ab" * 4097, "hex")):
        with pytest.raises(BadStoreRequest) as refused:
            parse_key(raw, encoding)
        assert refused.value.code == "invalid_key"


def test_bucket_pattern_and_cursor_rules() -> None:
    """Buckets follow SELECT's rule, patterns are short control-free UTF-8, cursors u64 decimal."""
    assert check_bucket("users") == b"users" and check_bucket("0") == b"0"
    assert check_pattern(None) == b"*" and check_pattern("é*".encode()) == "é*".encode()
    assert parse_scan_cursor("0") == 0 and parse_scan_cursor(str(MAX_CURSOR)) == MAX_CURSOR
    for bad in ("", "a b", "x" * 65, "é"):
        with pytest.raises(BadStoreRequest, match="bucket"):
            check_bucket(bad)
    for raw in (b"", b"\xff", b"a\x00", b"a\tb", b"x" * 257):
        with pytest.raises(BadStoreRequest, match="pattern"):
            check_pattern(raw)
    for text in ("", "-1", "1.0", "\u0661", str(MAX_CURSOR + 1), "0" * 21):
        with pytest.raises(BadStoreRequest, match="cursor"):
            parse_scan_cursor(text)


def test_value_view_text_hex_and_cut() -> None:
    """Text stays text (TAB, LF, CR allowed); controls or bad UTF-8 turn it into hex; a cut
    inside a UTF-8 sequence drops only that sequence's bytes."""
    assert value_view(b"a\tb\r\n", 5) == {"encoding": "text", "data": "a\tb\r\n", "length": 5,
                                          "truncated": False}
    assert value_view(b"a\x00", 2)["encoding"] == "hex"
    assert value_view(b"\x1b[31m", 5)["data"] == "1b5b33316d"
    assert value_view(b"\xc3", 1)["encoding"] == "hex"  # whole, yet incomplete: binary
    cut = value_view("é".encode() + b"\xc3", 10)
    assert cut == {"encoding": "text", "data": "é", "length": 10, "truncated": True}


def test_download_name_is_a_safe_file_name() -> None:
    """A download's file name keeps the key's safe characters only."""
    assert download_name(b"user:0001") == "user_0001"
    assert download_name(b"../../etc/passwd") == "etc_passwd"
    assert download_name(b"\xff\xfe") == "value.bin"
