"""minidb.batch.api: the HTTP control API of the batch queue (``minidb batch serve``).

The contract (paths, status codes, JSON shapes, auth, idempotency, cursors, presigned URLs)
is docs/batch-api.md. Pure cores: ``_tokens`` (the tokens file, constant-time lookup),
``_cursor`` (HMAC-signed page cursors), ``_idempotency`` (key rules and the key record),
``_schemas`` (the JSON shapes). Shells: ``_service`` (the calls on queue and store),
``_problem`` (every error as RFC 9457 problem+json), ``_routes``, ``_metrics``, ``_web``
(the page's static shell), ``_app`` (the factory) and ``_serve`` (uvicorn on minidb.runtime's
loop, the in-process workers, SIGTERM).
"""

from minidb.batch.api._app import create_app
from minidb.batch.api._service import ApiService, ApiSettings
from minidb.batch.api._tokens import (
    Principal,
    TokenFileError,
    TokenTable,
    load_tokens,
    parse_tokens,
)

__all__ = [
    "ApiService",
    "ApiSettings",
    "Principal",
    "TokenFileError",
    "TokenTable",
    "create_app",
    "load_tokens",
    "parse_tokens",
]
