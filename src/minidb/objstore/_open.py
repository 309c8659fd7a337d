"""``open_store(url)``: the store a URL names (``file:DIR`` or ``s3://BUCKET/PREFIX``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from minidb.errors import ConfigError

from ._file import FileStore
from ._types import ObjectStore

FILE_SCHEME = "file:"
S3_SCHEME = "s3://"


def open_store(url: str, **options: Any) -> ObjectStore:
    """Open the store at ``url``; ``options`` go to the backend's constructor.

    ``file:DIR`` (``file:relative/dir``, ``file:/abs/dir`` or ``file:///abs/dir``) opens a
    ``FileStore``; ``s3://BUCKET/PREFIX`` an ``S3Store`` (``endpoint_url=`` or the
    ``AWS_ENDPOINT_URL`` variable for a non-AWS endpoint). Anything else is a ``ConfigError``.
    """
    if url.startswith(FILE_SCHEME):
        path = url[len(FILE_SCHEME):]
        if path.startswith("//"):
            parts = urlsplit(url)
            if parts.netloc not in ("", "localhost"):
                raise ConfigError(f"file: URL with a host is not supported: {url!r}")
            path = parts.path
        if not path:
            raise ConfigError(f"file: URL needs a directory: {url!r}")
        return FileStore(path, **options)
    if url.startswith(S3_SCHEME):
        parts = urlsplit(url)
        if not parts.netloc:
            raise ConfigError(f"s3: URL needs a bucket: {url!r}")
        if parts.query or parts.fragment:
            raise ConfigError(f"s3: URL takes no query or fragment: {url!r}")
        from ._s3 import S3Store  # botocore only for S3 users (see the package docstring)

        return S3Store(parts.netloc, parts.path.strip("/"), **options)
    raise ConfigError(f"object store URL must start with file: or s3://, not {url!r}")
