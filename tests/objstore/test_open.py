"""open_store parses file: and s3:// URLs and refuses anything else."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from minidb.errors import ConfigError
from minidb.objstore import FileStore, S3Store, open_store


@pytest.mark.parametrize("form", ["file:{p}", "file://{p}"])
def test_file_urls_open_a_file_store(tmp_path: Path, form: str) -> None:
    """file:DIR and file:///DIR both name the directory."""
    store = open_store(form.format(p=tmp_path / "d"))
    assert isinstance(store, FileStore)
    assert store.endpoint == f"file:{(tmp_path / 'd').resolve()}"
    asyncio.run(store.close())


def test_s3_url_names_bucket_prefix_and_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """s3://BUCKET/PREFIX with AWS_ENDPOINT_URL gives a store on that endpoint and prefix."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    store = open_store("s3://bucket/some/prefix/")
    assert isinstance(store, S3Store)
    assert store.endpoint == "http://127.0.0.1:9/bucket"
    assert store._full("k") == "some/prefix/k"
    url = store.presign_get("k", 60)
    assert url.startswith("http://127.0.0.1:9/bucket/some/prefix/k?")
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in url  # SigV4 even on a custom endpoint
    asyncio.run(store.close())


def test_explicit_endpoint_wins_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """endpoint_url= (the CLI's --s3-endpoint) overrides AWS_ENDPOINT_URL."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    store = open_store("s3://b", endpoint_url="http://127.0.0.1:10", access_key_id="a",
                       secret_access_key="b")
    assert store.endpoint == "http://127.0.0.1:10/b"
    asyncio.run(store.close())


@pytest.mark.parametrize("url", ["", "dir", "file:", "s3://", "s3://b?x=1", "http://x/y",
                                 "file://host/dir"])
def test_bad_urls_are_config_errors(url: str) -> None:
    """Unknown schemes, missing buckets or directories are ConfigError."""
    with pytest.raises(ConfigError):
        open_store(url)
