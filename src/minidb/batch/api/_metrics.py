"""``GET /metrics`` (operators only): Prometheus text fed from the ``statistics()`` of the
API, its queue client, its store and its link to the minidb server, plus the requests the API
answered by status class.

One ``CollectorRegistry`` per app (not the process-global one), so two apps in one test
process do not collide; the collector reads the counters at scrape time.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.responses import PlainTextResponse, Response

from minidb.batch.api._attached import AttachedServer
from minidb.batch.api._problem import ApiProblem
from minidb.batch.api._routes import _problems, principal, service
from minidb.batch.api._service import ApiService
from minidb.batch.api._tokens import Principal

router = APIRouter()


class ApiCollector(Collector):
    """The counters of one API as Prometheus metrics."""

    def __init__(self, svc: ApiService, responses: Counter[str],
                 attached: AttachedServer | None = None) -> None:
        self._svc = svc
        self._responses = responses
        self._attached = attached

    def collect(self) -> Iterator[Metric]:
        answered = CounterMetricFamily(
            "minidb_batch_api_responses", "API responses by status class", labels=["status"]
        )
        for status, count in sorted(self._responses.items()):
            answered.add_metric([status], count)
        yield answered
        sources: list[tuple[str, Any]] = [
            ("minidb_batch_api", self._svc.statistics()),
            ("minidb_batch_queue", self._svc.queue.statistics()),
            ("minidb_batch_store", self._svc.store.statistics()),
        ]
        if self._attached is not None:
            sources.append(("minidb_batch_api_server", self._attached.statistics()))
        for prefix, stats in sources:
            for field in dataclasses.fields(stats):
                yield CounterMetricFamily(
                    f"{prefix}_{field.name}", f"{prefix} {field.name.replace('_', ' ')}",
                    value=getattr(stats, field.name),
                )


def registry_for(svc: ApiService, responses: Counter[str],
                 attached: AttachedServer | None = None) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ApiCollector(svc, responses, attached))
    return registry


@router.get("/metrics", summary="Prometheus metrics (operators only)",
            response_class=PlainTextResponse,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
                       **_problems(403)})
async def metrics(
    request: Request, svc: Annotated[ApiService, Depends(service)],
    who: Annotated[Principal, Depends(principal)],
) -> Response:
    if not who.operator:
        raise ApiProblem(403, "metrics are for operators", code="forbidden")
    registry: CollectorRegistry = request.app.state.metrics
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
