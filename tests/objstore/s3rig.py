"""A real S3 API on 127.0.0.1 for tests: moto's server app with mutating requests serialised.

moto checks a write's precondition in the request handler and stores the object afterwards,
so two racing conditional PUTs with large bodies can both pass the check (measured: 4 of 20
racing create rounds with 10 MB bodies had two winners). ``SerialisedWrites`` closes that
window the way S3 does not need to: every PUT, POST and DELETE takes one lock and the whole
response (body included) is materialised inside it, so check-then-write is atomic. GETs and
LISTs stay concurrent.

``MotoServer`` serves the wrapped app with werkzeug's threaded server on port 0 in a daemon
thread; ``start()`` returns once the socket is listening, ``stop()`` shuts it down. Later test
suites (the batch layer) import this module together with ``faultproxy``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from moto.server import (  # type: ignore[attr-defined]  # (not in its __all__)
    DomainDispatcherApplication,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

MUTATING_METHODS = frozenset({"PUT", "POST", "DELETE"})
"""Methods whose check-then-write must not interleave with another write."""

REGION = "us-east-1"
ACCESS_KEY = "testing"
SECRET_KEY = "testing-secret"

StartResponse = Callable[..., Any]


class SerialisedWrites:
    """WSGI middleware: one mutating request at a time, response fully read under the lock."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()
        self.serialised = 0

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD", "GET") not in MUTATING_METHODS:
            return self._app(environ, start_response)
        with self._lock:
            self.serialised += 1
            result = self._app(environ, start_response)
            try:
                body = b"".join(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        return [body]


class _QuietHandler(WSGIRequestHandler):
    """werkzeug's handler without the access log line per request."""

    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


class MotoServer:
    """moto's S3 behind ``SerialisedWrites`` on 127.0.0.1:<ephemeral>, in a thread."""

    def __init__(self) -> None:
        self.app = SerialisedWrites(DomainDispatcherApplication(create_backend_app))
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "server not started"
        return f"http://127.0.0.1:{self._server.server_port}"

    def start(self) -> MotoServer:
        self._server = make_server(
            "127.0.0.1", 0, self.app, threaded=True, request_handler=_QuietHandler
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="moto-s3", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def new_bucket(self) -> str:
        """Create a bucket with a fresh name and return the name."""
        name = f"test-{uuid.uuid4().hex[:16]}"
        boto_client(self.endpoint).create_bucket(Bucket=name)
        return name


def boto_client(endpoint: str) -> Any:
    """A plain boto3 S3 client for test setup and inspection (not the code under test)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
