"""Object storage with conditional writes: one interface, a ``file:`` and an ``s3:`` backend.

The batch layer keeps its task state here and log shipping will put WAL segments here. The
interface (``ObjectStore``), the semantics per backend, the error mapping and the self-test
are written down in docs/objstore.md.

Modules: ``_types`` (the interface and value types, pure), ``_errors``, ``_keys`` (key rules,
pure), ``_presign`` (signed file URLs, pure), ``_filecore`` (the file backend's blocking core)
and ``_file`` (its async shell), ``_s3`` and ``_s3_errors`` (the S3 backend and its one error
translation), ``_retry`` (the retries no caller can make: an upload's create settled by its
ETag, a streamed read resumed), ``_selftest``, ``_open`` (URL parsing).

The S3 backend is imported on first use (``S3Store``, ``PART_SIZE_BYTES``, or an ``s3://`` URL
given to ``open_store``): botocore costs about a quarter of a second to import, which every
``minidb`` command and every ``file:`` user would otherwise pay.
"""

from typing import TYPE_CHECKING, Any

from ._errors import (
    AmbiguousWrite,
    ConditionalWritesNotEnforced,
    InvalidKey,
    NotFound,
    ObjectStoreError,
    PreconditionFailed,
    PresignError,
    TransientError,
)
from ._file import FileStore
from ._keys import MAX_KEY_BYTES, check_key
from ._open import open_store
from ._presign import verify_presigned
from ._selftest import self_test
from ._types import (
    LIST_PAGE_MAX,
    PRESIGN_MAX_EXPIRES_S,
    Capabilities,
    ListEntry,
    ListPage,
    Object,
    ObjectReader,
    ObjectStore,
    StoreStatistics,
)

__all__ = [
    "LIST_PAGE_MAX",
    "MAX_KEY_BYTES",
    "PART_SIZE_BYTES",
    "PRESIGN_MAX_EXPIRES_S",
    "AmbiguousWrite",
    "Capabilities",
    "ConditionalWritesNotEnforced",
    "FileStore",
    "InvalidKey",
    "ListEntry",
    "ListPage",
    "NotFound",
    "Object",
    "ObjectReader",
    "ObjectStore",
    "ObjectStoreError",
    "PreconditionFailed",
    "PresignError",
    "S3Store",
    "StoreStatistics",
    "TransientError",
    "check_key",
    "open_store",
    "self_test",
    "verify_presigned",
]

if TYPE_CHECKING:
    from ._s3 import PART_SIZE_BYTES, S3Store


def __getattr__(name: str) -> Any:
    if name in ("S3Store", "PART_SIZE_BYTES"):
        from . import _s3

        return getattr(_s3, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
