"""Signed file URLs: sign and verify_presigned are pure and refuse every alteration."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from minidb.objstore import PresignError, verify_presigned
from minidb.objstore._presign import sign

SECRET = b"s" * 32
NOW = 1_800_000_000


def _parts(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.path, parts.query


def test_genuine_url_yields_its_key() -> None:
    """A fresh URL verifies to its key, quoted characters included."""
    url = sign(SECRET, "GET", "a b/é?.csv", NOW + 60, "http://host:1")
    assert url.startswith("http://host:1/files/")
    assert verify_presigned(SECRET, "GET", *_parts(url), now=NOW) == "a b/é?.csv"


def test_expired_url_is_refused() -> None:
    """At or after its expiry a URL is refused with reason ``expired``."""
    path, query = _parts(sign(SECRET, "GET", "k", NOW + 60))
    with pytest.raises(PresignError) as caught:
        verify_presigned(SECRET, "GET", path, query, now=NOW + 60)
    assert (caught.value.reason, caught.value.status) == ("expired", 403)


@pytest.mark.parametrize("change", ["method", "key", "exp", "sig", "secret"])
def test_any_alteration_is_a_signature_error(change: str) -> None:
    """Changing the method, key, expiry, signature or secret makes the signature fail."""
    path, query = _parts(sign(SECRET, "GET", "k", NOW + 60))
    method, secret = "GET", SECRET
    if change == "method":
        method = "PUT"
    elif change == "key":
        path = path + "x"
    elif change == "exp":
        query = query.replace(f"exp={NOW + 60}", f"exp={NOW + 6000}")
    elif change == "sig":
        query = query[:-1] + ("0" if not query.endswith("0") else "1")
    else:
        secret = b"t" * 32
    with pytest.raises(PresignError) as caught:
        verify_presigned(secret, method, path, query, now=NOW)
    assert caught.value.reason == "signature"


@pytest.mark.parametrize("path,query", [("/other/k", "exp=1&sig=a"), ("/files/k", "sig=a"),
                                        ("/files/k", "exp=x&sig=a")])
def test_malformed_urls_are_refused(path: str, query: str) -> None:
    """URLs missing parts or outside /files/ are refused as malformed."""
    with pytest.raises(PresignError) as caught:
        verify_presigned(SECRET, "GET", path, query, now=NOW)
    assert caught.value.reason == "malformed"


def test_mapping_query_is_accepted() -> None:
    """A web framework's parsed query mapping works like the raw string."""
    path, query = _parts(sign(SECRET, "PUT", "k", NOW + 5))
    params = dict(p.split("=") for p in query.split("&"))
    assert verify_presigned(SECRET, "PUT", path, params, now=NOW) == "k"
