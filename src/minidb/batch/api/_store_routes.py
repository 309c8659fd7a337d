"""The routes over the attached minidb server: the store browser and the server's figures.

``/store/...`` reads the store for every token and changes it for operators only (403 for a
``user``, before the request is looked at); ``/server/stats`` is one reading of the server's
figures for the page's charts. A key travels in the query string (``key``, with
``encoding=hex`` for a key that is not UTF-8), because keys may hold any byte, ``/`` and
``?`` included; ``_keyview`` reads it as bytes and checks every input before a command is
sent. Each request is one or two pipelines on one RESP connection (``_attached``): its
``SELECT`` travels with its commands, and a change answers with the key as it is after it,
read in the same pipeline.

Contract: docs/batch-api.md, "The attached server".
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import ValidationError
from starlette.responses import JSONResponse, Response

from minidb.batch.api import _figures
from minidb.batch.api._attached import AttachedServer, ServerUnavailable
from minidb.batch.api._keyview import (
    MAX_BUCKETS_LISTED,
    MAX_DOWNLOAD_BYTES,
    MAX_SET_VALUE_BYTES,
    PREVIEW_BYTES,
    SCAN_COUNT_DEFAULT,
    SCAN_COUNT_MAX,
    SCAN_ROUNDS_MAX,
    check_bucket,
    check_pattern,
    download_name,
    key_view,
    parse_key,
    parse_scan_cursor,
    query_bytes,
    ttl_ms,
    value_view,
)
from minidb.batch.api._problem import ApiProblem
from minidb.batch.api._routes import _problems, _read_body, principal, read_json
from minidb.batch.api._schemas import (
    BucketList,
    KeyDetail,
    KeyPage,
    ServerStats,
    TtlChange,
)
from minidb.batch.api._tokens import Principal
from minidb.client import RespError
from minidb.protocol import ErrorReply, Simple

router = APIRouter()

MAX_TTL_BODY_BYTES = 1024
"""Largest ``PUT /store/ttl`` body, in bytes (it is ``{"seconds": N}``)."""


def attached(request: Request) -> AttachedServer:
    server: AttachedServer = request.app.state.attached
    return server


def operator(who: Annotated[Principal, Depends(principal)]) -> Principal:
    """The caller, if an operator: changing the store is theirs alone (403 otherwise)."""
    if not who.operator:
        raise ApiProblem(403, "only operators change keys", code="forbidden")
    return who


Server = Annotated[AttachedServer, Depends(attached)]
Reader = Annotated[Principal, Depends(principal)]
Operator = Annotated[Principal, Depends(operator)]
BucketParam = Annotated[str, Query(description="a bucket (database) name or number")]
KeyParam = Annotated[str, Query(description="the key's UTF-8 text, or its hex with "
                                "encoding=hex")]
EncodingParam = Annotated[Literal["utf-8", "hex"], Query(description="how key is written")]


def _ok(reply: Any) -> Any:
    """A reply that must not be an error."""
    if isinstance(reply, ErrorReply):
        raise RespError(reply.message)
    return reply


def _text(reply: Any) -> str:
    reply = _ok(reply)
    return reply.text if isinstance(reply, Simple) else bytes(reply).decode("ascii", "replace")


def _key(request: Request, encoding: str) -> bytes:
    return parse_key(query_bytes(request.scope["query_string"], "key"), encoding)


def _detail_commands(key: bytes) -> list[tuple[Any, ...]]:
    """What a key's detail reads: its type, PTTL, length and first ``PREVIEW_BYTES``."""
    return [("TYPE", key), ("PTTL", key), ("STRLEN", key),
            ("GETRANGE", key, 0, PREVIEW_BYTES - 1)]


def _detail(bucket: bytes, key: bytes, replies: list[Any]) -> dict[str, Any]:
    """The ``KeyDetail`` of ``_detail_commands``' replies (404 if the key is not there)."""
    kind = _text(replies[0])
    if kind == "none":
        raise ApiProblem(404, "no such key", code="no_such_key")
    size = replies[2] if isinstance(replies[2], int) else None
    head = replies[3] if kind == "string" and isinstance(replies[3], bytes) else None
    return {
        "bucket": bucket.decode("ascii"), **key_view(key), "type": kind, "size": size,
        "ttl_ms": ttl_ms(_ok(replies[1])),
        "value": None if head is None or size is None else value_view(head, size),
    }


# --- reading ------------------------------------------------------------------------------------

@router.get("/store/buckets", response_model=BucketList, summary="Buckets and their key counts",
            responses=_problems())
async def list_buckets(server: Server, who: Reader) -> Response:
    found = _figures.buckets(_figures.parse_info(await server.info("keyspace")))
    return JSONResponse({"buckets": found[:MAX_BUCKETS_LISTED],
                         "truncated": len(found) > MAX_BUCKETS_LISTED})


@router.get("/store/keys", response_model=KeyPage, summary="A page of a bucket's keys (SCAN)",
            responses=_problems(400, 404))
async def list_keys(
    request: Request, server: Server, who: Reader, bucket: BucketParam,
    pattern: Annotated[str, Query(description="SCAN MATCH glob")] = "*",
    cursor: Annotated[str, Query(description="0, or the cursor of the previous page")] = "0",
    count: Annotated[int, Query(ge=1, le=SCAN_COUNT_MAX,
                                description="keys the server examines per SCAN call")]
    = SCAN_COUNT_DEFAULT,
) -> Response:
    name = check_bucket(bucket)
    match = check_pattern(query_bytes(request.scope["query_string"], "pattern"))
    position = parse_scan_cursor(cursor)
    keys: list[bytes] = []
    for rounds in range(1, SCAN_ROUNDS_MAX + 1):
        scan = ("SCAN", position, "MATCH", match, "COUNT", count)
        if rounds == 1:
            size, page = await server.run(name, [("DBSIZE",), scan])
            if _ok(size) == 0:
                raise ApiProblem(404, "no such bucket (it has no keys)", code="no_such_bucket")
        else:
            (page,) = await server.run(name, [scan])
        after, found = _ok(page)
        keys += found
        position = int(after)
        if position == 0 or len(keys) >= count:
            break
    replies = await server.run(name, [command for key in keys for command in (
        ("TYPE", key), ("PTTL", key), ("STRLEN", key))])
    items = []
    for i, key in enumerate(keys):
        kind, pttl, size = replies[3 * i: 3 * i + 3]
        kind = _text(kind)
        if kind == "none":
            continue  # deleted or expired since the SCAN
        items.append({**key_view(key), "type": kind,
                      "size": size if isinstance(size, int) else None,
                      "ttl_ms": ttl_ms(pttl) if isinstance(pttl, int) else None})
    return JSONResponse({"bucket": bucket, "pattern": match.decode("utf-8"), "keys": items,
                         "cursor": str(position)})


@router.get("/store/key", response_model=KeyDetail, summary="A key and a preview of its value",
            responses=_problems(400, 404))
async def get_key(
    request: Request, server: Server, who: Reader, bucket: BucketParam, key: KeyParam,
    encoding: EncodingParam = "utf-8",
) -> Response:
    name, raw = check_bucket(bucket), _key(request, encoding)
    return JSONResponse(_detail(name, raw, await server.run(name, _detail_commands(raw))))


@router.get(
    "/store/value", summary="A key's whole value, as a file",
    response_class=Response, responses={200: {"content": {"application/octet-stream": {
        "schema": {"type": "string", "format": "binary"}}}}, **_problems(400, 404, 409, 413)},
)
async def download_value(
    request: Request, server: Server, who: Reader, bucket: BucketParam, key: KeyParam,
    encoding: EncodingParam = "utf-8",
) -> Response:
    name, raw = check_bucket(bucket), _key(request, encoding)
    kind, size = await server.run(name, [("TYPE", raw), ("STRLEN", raw)])
    kind = _text(kind)
    if kind == "none":
        raise ApiProblem(404, "no such key", code="no_such_key")
    if kind != "string":
        raise ApiProblem(409, f"the key holds a {kind}, not a value", code="conflict")
    if _ok(size) > MAX_DOWNLOAD_BYTES:
        raise ApiProblem(413, f"the value is larger than {MAX_DOWNLOAD_BYTES} bytes")
    (value,) = await server.run(name, [("GET", raw)])
    if _ok(value) is None:
        raise ApiProblem(404, "no such key", code="no_such_key")
    return Response(bytes(value), media_type="application/octet-stream", headers={
        "Content-Disposition": f'attachment; filename="{download_name(raw)}"',
        "Cache-Control": "no-store"})


# --- changing (operators) -------------------------------------------------------------------------

@router.put(
    "/store/key", response_model=KeyDetail, summary="Set a key's value (operators)",
    responses=_problems(400, 403, 409, 413, 422),
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}},
)
async def set_value(
    request: Request, server: Server, who: Operator, bucket: BucketParam, key: KeyParam,
    encoding: EncodingParam = "utf-8",
) -> Response:
    name, raw = check_bucket(bucket), _key(request, encoding)
    value = await _read_body(request, MAX_SET_VALUE_BYTES)
    replies = await server.run(name, [("SET", raw, value, "KEEPTTL"), *_detail_commands(raw)])
    _ok(replies[0])
    return JSONResponse(_detail(name, raw, replies[1:]))


@router.delete("/store/key", status_code=204, summary="Delete a key (operators)",
               responses=_problems(400, 403, 404, 409, 422))
async def delete_key(
    request: Request, server: Server, who: Operator, bucket: BucketParam, key: KeyParam,
    encoding: EncodingParam = "utf-8",
) -> Response:
    name, raw = check_bucket(bucket), _key(request, encoding)
    (deleted,) = await server.run(name, [("DEL", raw)])
    if _ok(deleted) == 0:
        raise ApiProblem(404, "no such key", code="no_such_key")
    return Response(status_code=204)


_TTL_BODY = {"required": True, "content": {"application/json": {
    "schema": TtlChange.model_json_schema()}}}


@router.put(
    "/store/ttl", response_model=KeyDetail, summary="Set or remove a key's TTL (operators)",
    responses=_problems(400, 403, 404, 409, 413, 415, 422),
    openapi_extra={"requestBody": _TTL_BODY},
)
async def set_ttl(
    request: Request, server: Server, who: Operator, bucket: BucketParam, key: KeyParam,
    encoding: EncodingParam = "utf-8",
) -> Response:
    name, raw = check_bucket(bucket), _key(request, encoding)
    data = await read_json(request, MAX_TTL_BODY_BYTES)
    try:
        change = TtlChange.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise ApiProblem(422, f"{where}: {first.get('msg')}", code="invalid_request") from None
    command = ("PERSIST", raw) if change.seconds is None else ("EXPIRE", raw, change.seconds)
    replies = await server.run(name, [command, *_detail_commands(raw)])
    _ok(replies[0])
    return JSONResponse(_detail(name, raw, replies[1:]))


# --- the server's figures -------------------------------------------------------------------------

@router.get("/server/stats", response_model=ServerStats,
            summary="One reading of the attached server's figures", responses=_problems())
async def server_stats(server: Server, who: Reader) -> Response:
    # One after the other (a few loopback round trips): nothing is left running when one fails.
    info = _figures.parse_info(await server.info(*_figures.INFO_SECTIONS))
    probes = await server.probe()
    try:
        text = await server.metrics_text()
    except ServerUnavailable:
        text = None  # the charts fed by /metrics pause; those fed by INFO go on
    figures = None if text is None else _figures.parse_metrics(text)
    return JSONResponse(_figures.stats_reading(info, figures, probes))
