"""The key rules shared by every backend (pure)."""

from __future__ import annotations

import pytest

from minidb.objstore import MAX_KEY_BYTES, InvalidKey, check_key
from minidb.objstore._keys import check_prefix


@pytest.mark.parametrize("key", ["a", "a/b/c.json", "t/x/tasks/7ZZ/status.json", "é/ü", "a.b",
                                 "..a", "a..", "_probe/1", "x" * MAX_KEY_BYTES])
def test_check_key_accepts_ordinary_keys(key: str) -> None:
    """Ordinary keys, dots inside names and keys up to the byte limit pass unchanged."""
    assert check_key(key) == key


@pytest.mark.parametrize("key", ["", "/a", "a/", "a//b", "../a", "a/..", "./a", "a\\b", "a\x00",
                                 "a\nb", "a\x7f", ".minidb-tmp/x", ".minidbx",
                                 "é" * (MAX_KEY_BYTES // 2 + 1), "\udc80"])
def test_check_key_refuses_unsafe_keys(key: str) -> None:
    """Each rule of the key grammar refuses its case with InvalidKey."""
    with pytest.raises(InvalidKey):
        check_key(key)


def test_check_key_refuses_non_strings() -> None:
    """Bytes are not keys: the caller decodes."""
    with pytest.raises(InvalidKey):
        check_key(b"a")


@pytest.mark.parametrize("prefix", ["", "a", "a/", "a/b/", "t/x/ta"])
def test_check_prefix_allows_partial_keys(prefix: str) -> None:
    """A listing prefix may be empty, end in a slash or stop mid-segment."""
    assert check_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["/", "a//", "../", "a\\"])
def test_check_prefix_refuses_what_no_key_could_start_with(prefix: str) -> None:
    """A prefix that no valid key can have is refused."""
    with pytest.raises(InvalidKey):
        check_prefix(prefix)
