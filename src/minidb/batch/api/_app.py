"""``create_app``: the FastAPI application of the control API over one object store.

The factory takes the store, the token table and the settings, so tests build the app
in-process (``httpx.ASGITransport``) or serve it over real HTTP (``_serve``) alike. It wires
the routes (the tasks', and the store browser's and server figures' over the minidb server of
``settings.server``), the problem+json error handling, the metrics registry and the access log.

The access log is our own (uvicorn's is off): one line per request with the method, the path
without its query string (a presigned URL's signature is in the query), the status and the
user, never the ``Authorization`` header.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections import Counter

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from minidb.batch._queue import TaskQueue
from minidb.batch._tasktypes import TaskTypeRegistry
from minidb.batch.api import _metrics, _problem, _routes, _store_routes, _web
from minidb.batch.api._attached import AttachedServer
from minidb.batch.api._service import ApiService, ApiSettings
from minidb.batch.api._tokens import TokenTable
from minidb.objstore import ObjectStore

access_log = logging.getLogger("minidb.batch.api.access")

UVICORN_ACCESS_LOGGER = "uvicorn.access"
"""uvicorn's own access log writes the request line with its query string, which for a
presigned ``/files/...`` URL is the signature. uvicorn decides whether to write it by whether
that logger *has handlers* (any ancestor's count: a root handler is enough), not by
``Config(access_log=False)`` when it is given no log config; so ``create_app`` disables the
logger itself. ``AccessLog`` above is the API's access log, with the path only."""


class AccessLog:
    """ASGI middleware: count answers by status class and log each request (no secrets)."""

    def __init__(self, app: ASGIApp, responses: Counter[str]) -> None:
        self.app = app
        self.responses = responses

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            status = status or 500  # a bug: Starlette's outermost layer answers 500
            raise
        finally:
            self.responses[f"{status // 100}xx" if status else "aborted"] += 1
            user = scope.get("state", {}).get("user", "-")
            access_log.info("%s %s %s %s", scope["method"], scope["path"][:200], status, user)


def create_app(
    store: ObjectStore,
    tokens: TokenTable,
    *,
    settings: ApiSettings | None = None,
    queue: TaskQueue | None = None,
    registry: TaskTypeRegistry | None = None,
) -> FastAPI:
    """The control API over ``store`` (docs/batch-api.md)."""
    logging.getLogger(UVICORN_ACCESS_LOGGER).disabled = True
    app = FastAPI(
        title="minidb batch control API", version=importlib.metadata.version("minidb"),
        description="Create, upload, submit, watch and fetch batch tasks; browse and change the "
        "store and read the server's figures (docs/batch-api.md).",
        docs_url="/docs", redoc_url=None,
        # One spelling per resource: no 307 from "/tasks/" to "/tasks" (an id of "%2F" would
        # otherwise be redirected instead of refused).
        redirect_slashes=False,
    )
    svc = ApiService(store, tokens, settings=settings, queue=queue, registry=registry)
    responses: Counter[str] = Counter()
    app.state.service = svc
    app.state.attached = AttachedServer(svc.settings.server)
    app.state.metrics = _metrics.registry_for(svc, responses, app.state.attached)
    _problem.install(app)
    app.include_router(_routes.router)
    app.include_router(_store_routes.router)
    app.include_router(_metrics.router)
    app.include_router(_web.router)
    app.add_middleware(AccessLog, responses=responses)
    return app
