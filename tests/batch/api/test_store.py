"""The store browser's endpoints against a real ``minidb serve``: buckets, SCAN paging with the
server's cursor, keys and values (text, binary, large, HTML-looking), operators' changes read
back over RESP with redis-py, roles (401, 403) and every kind of malformed input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from minidb.batch.api._attached import ServerLink
from minidb.batch.api._keyview import (
    MAX_KEY_BYTES,
    MAX_PATTERN_CHARS,
    MAX_SET_VALUE_BYTES,
    PREVIEW_BYTES,
    SCAN_COUNT_MAX,
)

from .conftest import (
    ALICE,
    ROOT,
    ApiServer,
    MinidbServer,
    attached_api,
    auth,
    free_port,
    is_problem,
)

XSS_KEY = "<img src=x onerror=alert(1)>"
XSS_VALUE = "<script>alert('pwned')</script>"


@pytest.fixture
def resp(minidb_server: MinidbServer) -> Iterator[Any]:
    """A redis-py client of the server's RESP listener (bucket ``browse``)."""
    with redis.Redis(port=minidb_server.ports["resp"], db="browse",  # type: ignore[arg-type]
                     socket_timeout=10) as client:
        yield client


@pytest.fixture
def root(attached: ApiServer) -> Iterator[httpx.Client]:
    with attached.client(ROOT) as client:
        yield client


@pytest.fixture
def alice(attached: ApiServer) -> Iterator[httpx.Client]:
    with attached.client(ALICE) as client:
        yield client


def code(response: httpx.Response) -> str:
    """The problem's ``code`` (after checking it is a problem)."""
    assert is_problem(response, response.status_code), response.text
    return str(response.json()["code"])


def keys_of(client: httpx.Client, bucket: str, pattern: str, count: int) -> list[list[str]]:
    """Every page of a listing, following the server's cursor to "0"."""
    pages: list[list[str]] = []
    cursor = "0"
    while True:
        answer = client.get("/store/keys", params={"bucket": bucket, "pattern": pattern,
                                                   "cursor": cursor, "count": count})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        pages.append([item["key"] for item in body["keys"]])
        cursor = body["cursor"]
        if cursor == "0":
            return pages
        assert len(pages) < 100, "the scan does not end"


# --- reading --------------------------------------------------------------------------------


def test_buckets_lists_each_bucket_with_its_counts(alice: httpx.Client, resp: Any) -> None:
    """A user reads the buckets of INFO keyspace: its keys and those with a TTL."""
    resp.execute_command("SELECT", "counted")
    resp.set("a", "1")
    resp.set("b", "2", ex=100)
    answer = alice.get("/store/buckets")
    assert answer.status_code == 200, answer.text
    found = {b["name"]: b for b in answer.json()["buckets"]}
    assert found["counted"] == {"name": "counted", "keys": 2, "expires": 1}
    assert answer.json()["truncated"] is False


def test_keys_page_through_a_pattern_with_the_server_cursor(
    alice: httpx.Client, resp: Any
) -> None:
    """120 keys matching ``page:*`` among others come back exactly once over the pages, none
    of the others, each page bounded by twice its count."""
    resp.execute_command("SELECT", "paged")
    with resp.pipeline(transaction=False) as pipe:
        for i in range(120):
            pipe.set(f"page:{i:03d}", f"value {i}")
        for i in range(80):
            pipe.set(f"other:{i:03d}", "x")
        pipe.execute()
    pages = keys_of(alice, "paged", "page:*", 25)
    listed = [key for page in pages for key in page]
    assert sorted(listed) == [f"page:{i:03d}" for i in range(120)]
    assert len(pages) > 2 and all(len(page) <= 50 for page in pages)
    first = alice.get("/store/keys", params={"bucket": "paged", "pattern": "page:00?",
                                             "count": 500}).json()
    assert sorted(k["key"] for k in first["keys"]) == [f"page:{i:03d}" for i in range(10)]
    assert first["keys"][0]["type"] == "string" and first["keys"][0]["ttl_ms"] is None
    assert first["keys"][0]["size"] == len("value 0")


def test_keys_show_binary_keys_as_hex_and_ttl(alice: httpx.Client, resp: Any) -> None:
    """A key that is not UTF-8 is listed as hex; a TTL as milliseconds left."""
    resp.execute_command("SELECT", "binkeys")
    resp.set(b"\xff\x00key", b"v")
    resp.set("ttl", "v", ex=100)
    items = {k["key"]: k for k in alice.get(
        "/store/keys", params={"bucket": "binkeys", "count": 100}).json()["keys"]}
    assert items["ff006b6579"]["encoding"] == "hex"
    assert items["ttl"]["encoding"] == "utf-8"
    assert 90_000 < items["ttl"]["ttl_ms"] <= 100_000


def test_key_shows_text_binary_large_and_html_values_as_data(
    alice: httpx.Client, resp: Any
) -> None:
    """Text comes back as text, bytes as hex with their length, a large value cut at the
    preview with its whole length, an HTML-looking key and value as the same characters."""
    resp.execute_command("SELECT", "values")
    resp.set("text", "héllo\nworld")
    resp.set("bin", bytes([0, 1, 2, 255]))
    resp.set("big", "é" * PREVIEW_BYTES)  # two bytes each: the preview ends inside one
    resp.set(XSS_KEY, XSS_VALUE)

    def get(key: str, **params: str) -> Any:
        answer = alice.get("/store/key", params={"bucket": "values", "key": key, **params})
        assert answer.status_code == 200, answer.text
        return answer.json()

    assert get("text")["value"] == {"encoding": "text", "data": "héllo\nworld",
                                    "length": 12, "truncated": False}
    assert get("bin")["value"] == {"encoding": "hex", "data": "000102ff", "length": 4,
                                   "truncated": False}
    big = get("big")
    assert big["value"]["encoding"] == "text" and big["value"]["truncated"] is True
    assert big["value"]["length"] == big["size"] == 2 * PREVIEW_BYTES
    assert big["value"]["data"] == "é" * (PREVIEW_BYTES // 2)
    html = get(XSS_KEY)
    assert html["key"] == XSS_KEY and html["value"]["data"] == XSS_VALUE
    assert get(XSS_KEY.encode().hex(), encoding="hex")["key"] == XSS_KEY


def test_value_downloads_whole(alice: httpx.Client, resp: Any) -> None:
    """``/store/value`` is the value's bytes as a file, whatever they are."""
    resp.execute_command("SELECT", "files")
    data = bytes(range(256)) * 300
    resp.set(b"\x00blob", data)
    answer = alice.get("/store/value", params={"bucket": "files", "key": "00626c6f62",
                                               "encoding": "hex"})
    assert answer.status_code == 200
    assert answer.content == data
    assert answer.headers["content-type"] == "application/octet-stream"
    assert answer.headers["content-disposition"] == 'attachment; filename="blob"'
    missing = alice.get("/store/value", params={"bucket": "files", "key": "nope"})
    assert missing.status_code == 404 and code(missing) == "no_such_key"


# --- changing -------------------------------------------------------------------------------


def test_operator_sets_ttls_and_deletes_a_key_read_back_over_resp(
    root: httpx.Client, resp: Any
) -> None:
    """PUT sets the bytes (keeping a TTL), PUT /store/ttl sets and removes it, DELETE removes
    the key: each seen by redis-py, and each answer shows the key as it is after it."""
    resp.execute_command("SELECT", "edit")
    where = {"bucket": "edit", "key": "k"}
    put = root.put("/store/key", params=where, content=b"\x00binary\xff")
    assert put.status_code == 200, put.text
    assert put.json()["value"]["encoding"] == "hex"
    assert resp.get("k") == b"\x00binary\xff"

    ttl = root.put("/store/ttl", params=where, json={"seconds": 500})
    assert ttl.status_code == 200, ttl.text
    assert 490_000 < ttl.json()["ttl_ms"] <= 500_000
    assert 490 < resp.ttl("k") <= 500
    assert root.put("/store/key", params=where, content=b"kept").json()["ttl_ms"] > 0
    assert resp.get("k") == b"kept" and resp.ttl("k") > 0

    persist = root.put("/store/ttl", params=where, json={"seconds": None})
    assert persist.status_code == 200 and persist.json()["ttl_ms"] is None
    assert resp.ttl("k") == -1

    gone = root.delete("/store/key", params=where)
    assert gone.status_code == 204
    assert resp.exists("k") == 0
    again = root.delete("/store/key", params=where)
    assert again.status_code == 404 and code(again) == "no_such_key"
    absent = root.put("/store/ttl", params=where, json={"seconds": 5})
    assert absent.status_code == 404


def test_user_cannot_change_keys(alice: httpx.Client, resp: Any) -> None:
    """A user's PUT, DELETE and TTL are 403 (before the request is even looked at) and the
    key is untouched."""
    resp.execute_command("SELECT", "guarded")
    resp.set("k", "original")
    where = {"bucket": "guarded", "key": "k"}
    for response in (
        alice.put("/store/key", params=where, content=b"changed"),
        alice.delete("/store/key", params=where),
        alice.put("/store/ttl", params=where, json={"seconds": 1}),
        alice.put("/store/key", params={"bucket": "bad bucket", "key": ""}, content=b"x"),
        alice.delete("/store/key"),
    ):
        assert response.status_code == 403 and code(response) == "forbidden"
    assert resp.get("k") == b"original" and resp.ttl("k") == -1


def test_every_store_endpoint_needs_the_token(attached: ApiServer) -> None:
    """No token (or a wrong one): 401 with WWW-Authenticate on each endpoint."""
    where = {"bucket": "x", "key": "k"}
    with attached.client() as anon, attached.client("wrong-token-0123456789") as wrong:
        for client in (anon, wrong):
            for method, path in (("GET", "/me"), ("GET", "/store/buckets"),
                                 ("GET", "/store/keys"), ("GET", "/store/key"),
                                 ("GET", "/store/value"), ("PUT", "/store/key"),
                                 ("DELETE", "/store/key"), ("PUT", "/store/ttl"),
                                 ("GET", "/server/stats")):
                response = client.request(method, path, params=where)
                assert response.status_code == 401, (method, path, response.text)
                assert response.headers["www-authenticate"] == "Bearer"


# --- malformed input --------------------------------------------------------------------------


@pytest.mark.parametrize(("params", "expected"), [
    ({"bucket": "a b"}, "invalid_bucket"),
    ({"bucket": "x" * 65}, "invalid_bucket"),
    ({"bucket": "bücket"}, "invalid_bucket"),
    ({"bucket": ""}, "invalid_bucket"),
    ({"pattern": "x" * (MAX_PATTERN_CHARS + 1)}, "invalid_pattern"),
    ({"pattern": "a\nb"}, "invalid_pattern"),
    ({"pattern": ""}, "invalid_pattern"),
    ({"cursor": "abc"}, "invalid_cursor"),
    ({"cursor": "-1"}, "invalid_cursor"),
    ({"cursor": str(2**64)}, "invalid_cursor"),
    ({"cursor": "1" * 21}, "invalid_cursor"),
    ({"count": str(SCAN_COUNT_MAX + 1)}, "invalid_request"),
    ({"count": "0"}, "invalid_request"),
    ({"count": "10" * 20}, "invalid_request"),
])
def test_keys_refuse_malformed_input_with_400(
    alice: httpx.Client, resp: Any, params: dict[str, str], expected: str
) -> None:
    """Each bad part of a listing is a 400 problem naming it; nothing is sent to the server."""
    resp.execute_command("SELECT", "malformed")
    resp.set("k", "v")
    answer = alice.get("/store/keys", params={"bucket": "malformed", **params})
    assert answer.status_code == 400, answer.text
    assert code(answer) == expected


def test_keys_refuse_a_pattern_that_is_not_utf8_and_a_repeated_one(alice: httpx.Client) -> None:
    """Percent-encoded bytes that are not UTF-8, or ``pattern`` given twice: 400."""
    bad = alice.get("/store/keys?bucket=malformed&pattern=%ff*")
    assert bad.status_code == 400 and code(bad) == "invalid_pattern"
    twice = alice.get("/store/keys?bucket=malformed&pattern=a*&pattern=b*")
    assert twice.status_code == 400 and code(twice) == "invalid_pattern"


def test_keys_of_an_unknown_bucket_is_404(alice: httpx.Client) -> None:
    """A bucket that has no keys is 404 ``no_such_bucket``."""
    answer = alice.get("/store/keys", params={"bucket": "never-written"})
    assert answer.status_code == 404 and code(answer) == "no_such_bucket"


@pytest.mark.parametrize(("query", "expected"), [
    pytest.param("bucket=values&key=%ff%fe", "invalid_key", id="binary-key-as-text"),
    pytest.param("bucket=values&key=zz&encoding=hex", "invalid_key", id="not-hex"),
    pytest.param("bucket=values&key=abc&encoding=hex", "invalid_key", id="odd-hex"),
    pytest.param("bucket=values&key=", "invalid_key", id="empty-key"),
    pytest.param("bucket=values&key=a&key=b", "invalid_key", id="key-twice"),
    pytest.param(f"bucket=values&key={'k' * (MAX_KEY_BYTES + 1)}", "invalid_key",
                 id="key-too-long"),
    pytest.param("bucket=values&key=k&encoding=base64", "invalid_request", id="bad-encoding"),
    pytest.param("bucket=values", "invalid_request", id="no-key"),
    pytest.param("bucket=a%2Fb%3Fc%20d&key=k", "invalid_bucket", id="bad-bucket"),
])
def test_key_refuses_malformed_input_with_400(
    alice: httpx.Client, query: str, expected: str
) -> None:
    """Each bad way of naming a key (or its bucket) is a 400 problem naming it."""
    answer = alice.get(f"/store/key?{query}")
    assert answer.status_code == 400, answer.text
    assert code(answer) == expected


def test_set_refuses_an_oversized_value_and_bad_ttl_bodies(
    root: httpx.Client, resp: Any
) -> None:
    """A value over the limit is 413 (declared or streamed); a TTL body must be JSON (415),
    parse (400) and say ``{"seconds": 1.. | null}`` (422); nothing is changed."""
    resp.execute_command("SELECT", "limits")
    resp.set("k", "v")
    where = {"bucket": "limits", "key": "k"}
    big = root.put("/store/key", params=where, content=b"x" * (MAX_SET_VALUE_BYTES + 1))
    assert big.status_code == 413 and code(big) == "payload_too_large"

    def chunks() -> Iterator[bytes]:
        for _ in range(MAX_SET_VALUE_BYTES // 65536 + 2):
            yield b"y" * 65536

    streamed = root.put("/store/key", params=where, content=chunks())
    assert streamed.status_code == 413
    assert resp.get("k") == b"v"
    not_json = root.put("/store/ttl", params=where, content=b"5",
                        headers={"Content-Type": "text/plain"})
    assert not_json.status_code == 415
    broken = root.put("/store/ttl", params=where, content=b"{",
                      headers={"Content-Type": "application/json"})
    assert broken.status_code == 400 and code(broken) == "malformed_json"
    for body in ({"seconds": 0}, {"seconds": -5}, {"seconds": "5"}, {"seconds": 1.5},
                 {"seconds": 10**12}, {}, {"seconds": 5, "more": 1}, [5]):
        answer = root.put("/store/ttl", params=where, json=body)
        assert answer.status_code == 422, (body, answer.text)
    assert resp.ttl("k") == -1


# --- the server's figures and the link ------------------------------------------------------


def test_server_stats_reads_the_servers_figures(alice: httpx.Client, resp: Any) -> None:
    """INFO and /metrics figures, with the command count rising by what was sent."""
    before = alice.get("/server/stats")
    assert before.status_code == 200, before.text
    for i in range(50):
        resp.set(f"stat{i}", "x")
    after = alice.get("/server/stats").json()
    first = before.json()
    assert after["commands_total"] >= first["commands_total"] + 50
    assert after["commands"]["set"] >= first["commands"].get("set", 0) + 50
    assert after["sources"] == {"info": True, "metrics": True}
    assert after["wal_appends"] >= first["wal_appends"] + 50
    assert after["wal_syncs"] > 0 and after["memory_bytes"] > 1 << 20
    assert after["connections"] >= 1 and after["keys"] >= 50
    assert len(after["probe_ms"]) == 3 and all(ms > 0 for ms in after["probe_ms"])
    assert after["replication"] is None and after["unix_ms"] > 0


def test_without_metrics_stats_come_from_info_alone(
    tmp_path: Path, minidb_server: MinidbServer
) -> None:
    """Attached without ``--minidb-metrics``: commands from INFO commandstats, no WAL figures."""
    link = ServerLink(resp=("127.0.0.1", minidb_server.ports["resp"]))
    api = attached_api(tmp_path, link)
    try:
        with api.client(ALICE) as alice:
            body = alice.get("/server/stats").json()
        assert body["sources"] == {"info": True, "metrics": False}
        assert body["wal_appends"] is None and body["commands"]["info"] >= 1
    finally:
        api.stop()


def test_not_attached_and_unreachable_servers_are_503(tmp_path: Path) -> None:
    """No RESP address: 503 ``not_attached``; an address nobody answers: 503
    ``server_unavailable`` with Retry-After; the rest of the API still serves."""
    plain = attached_api(tmp_path / "plain", ServerLink())
    gone = attached_api(tmp_path / "gone", ServerLink(resp=("127.0.0.1", free_port())))
    try:
        for api, expected in ((plain, "not_attached"), (gone, "server_unavailable")):
            with api.client(ALICE) as alice:
                for path in ("/store/buckets", "/server/stats"):
                    answer = alice.get(path)
                    assert answer.status_code == 503 and code(answer) == expected
                assert alice.get("/me").status_code == 200
                if expected == "server_unavailable":
                    assert answer.headers["retry-after"] == "1"
    finally:
        plain.stop()
        gone.stop()


def test_openapi_documents_every_new_endpoint(attached: ApiServer) -> None:
    """Each store and server route is in /openapi.json with its 401 (and 403 for changes)."""
    paths = httpx.get(f"{attached.url}/openapi.json").json()["paths"]
    for path, method, forbidden in (
        ("/me", "get", False), ("/store/buckets", "get", False), ("/store/keys", "get", False),
        ("/store/key", "get", False), ("/store/value", "get", False),
        ("/store/key", "put", True), ("/store/key", "delete", True), ("/store/ttl", "put", True),
        ("/server/stats", "get", False), ("/tasks", "get", True),
    ):
        responses = paths[path][method]["responses"]
        assert "401" in responses, (path, method)
        assert ("403" in responses) == forbidden, (path, method)
        assert paths[path][method]["security"], (path, method)
    assert httpx.get(f"{attached.url}/openapi.json", headers=auth(ROOT)).status_code == 200
