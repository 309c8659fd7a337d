"""The metrics port's sans-IO HTTP: request heads in, a request or a refusal out, no sockets."""

from __future__ import annotations

from http import HTTPStatus

import pytest

from minidb.server._http import (
    MAX_REQUEST_HEAD_BYTES,
    Refusal,
    Request,
    RequestHead,
    parse_head,
    response,
)


def _feed_all(*chunks: bytes) -> Request | Refusal | None:
    head = RequestHead()
    decided = None
    for chunk in chunks:
        decided = head.feed(chunk)
        if decided is not None:
            return decided
    return decided


@pytest.mark.parametrize(
    "raw, path",
    [
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "/metrics"),
        (b"GET /metrics?name=x HTTP/1.0\n\n", "/metrics"),                 # bare LF, query
        (b"\r\n\r\nGET /debug/tasks HTTP/1.1\r\n\r\n", "/debug/tasks"),    # leading empty lines
        (b"GET http://h:9/metrics HTTP/1.1\r\n\r\n", "/metrics"),          # absolute-form
        (b"GET http://h:9 HTTP/1.1\r\n\r\n", "/"),
        (b"GET /metrics HTTP/1.1\r\nUser-Agent: caf\xc3\xa9\r\n\r\n", "/metrics"),  # obs-text
    ],
)
def test_head_well_formed_requests_parse(raw: bytes, path: str) -> None:
    """Well-formed heads give their path, whatever the line endings and target form."""
    assert _feed_all(raw) == Request("GET", path)


def test_head_split_into_single_bytes_parses() -> None:
    """A head delivered one byte per read is the same request."""
    raw = b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    head = RequestHead()
    decided = [head.feed(raw[i : i + 1]) for i in range(len(raw))]
    assert decided[:-1] == [None] * (len(raw) - 1)
    assert decided[-1] == Request("HEAD", "/metrics")


@pytest.mark.parametrize(
    "raw, status",
    [
        (b"GET\r\n\r\n", HTTPStatus.BAD_REQUEST),                          # one word
        (b"GET /metrics\r\n\r\n", HTTPStatus.BAD_REQUEST),                 # HTTP/0.9 style
        (b"GET  /metrics HTTP/1.1\r\n\r\n", HTTPStatus.BAD_REQUEST),       # two spaces
        (b"GET /metrics HTTP/1.1 extra\r\n\r\n", HTTPStatus.BAD_REQUEST),
        (b"GET /metrics FTP/1.1\r\n\r\n", HTTPStatus.BAD_REQUEST),
        (b"GET /metrics HTTP/2.0\r\n\r\n", HTTPStatus.HTTP_VERSION_NOT_SUPPORTED),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", HTTPStatus.HTTP_VERSION_NOT_SUPPORTED),
        (b"POST /metrics HTTP/1.1\r\n\r\n", HTTPStatus.METHOD_NOT_ALLOWED),
        (b"DELETE /metrics HTTP/1.1\r\n\r\n", HTTPStatus.METHOD_NOT_ALLOWED),
        (b"get /metrics HTTP/1.1\r\n\r\n", HTTPStatus.METHOD_NOT_ALLOWED),  # case-sensitive
        (b"G\xc9T /metrics HTTP/1.1\r\n\r\n", HTTPStatus.BAD_REQUEST),     # not ASCII
        (b"GET /m\xc3\xa9trics HTTP/1.1\r\n\r\n", HTTPStatus.BAD_REQUEST),
        (b"GET /metrics\x00 HTTP/1.1\r\n\r\n", HTTPStatus.BAD_REQUEST),     # control byte
        (b"GET /metrics HTTP/1.1\rHost: x\r\n\r\n", HTTPStatus.BAD_REQUEST),  # lone CR
        (b"GET metrics HTTP/1.1\r\n\r\n", HTTPStatus.BAD_REQUEST),          # not a path
        (b"GET * HTTP/1.1\r\n\r\n", HTTPStatus.BAD_REQUEST),
        (b"GET /metrics HTTP/1.1\r\nNo colon here\r\n\r\n", HTTPStatus.BAD_REQUEST),
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", HTTPStatus.BAD_REQUEST),
        (b"GET /metrics HTTP/1.1\r\nX: a\x01b\r\n\r\n", HTTPStatus.BAD_REQUEST),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n", HTTPStatus.BAD_REQUEST),  # TLS
    ],
)
def test_head_malformed_requests_are_refused(raw: bytes, status: HTTPStatus) -> None:
    """Every malformed, foreign or unsupported head is a refusal with its status."""
    decided = _feed_all(raw)
    assert isinstance(decided, Refusal) and decided.status is status, decided


def test_head_that_never_ends_is_431_at_the_limit() -> None:
    """Header lines without the empty line: 431 once the head passes the limit, not before."""
    head = RequestHead()
    assert head.feed(b"GET /metrics HTTP/1.1\r\n") is None
    line = b"X-Filler: " + b"a" * 90 + b"\r\n"
    fed = len(b"GET /metrics HTTP/1.1\r\n")
    while fed + len(line) <= MAX_REQUEST_HEAD_BYTES:
        assert head.feed(line) is None
        fed += len(line)
    decided = head.feed(line)
    assert decided == Refusal(
        HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
        f"request head over {MAX_REQUEST_HEAD_BYTES} bytes",
    )


def test_head_single_huge_line_is_414() -> None:
    """A request line that alone passes the limit is 414, in one read or many."""
    assert _feed_all(b"GET /" + b"a" * MAX_REQUEST_HEAD_BYTES) == Refusal(
        HTTPStatus.REQUEST_URI_TOO_LONG, "request line too long"
    )
    decided = _feed_all(b"GET /", *([b"a" * 1000] * 9))
    assert isinstance(decided, Refusal) and decided.status is HTTPStatus.REQUEST_URI_TOO_LONG


def test_head_endless_empty_lines_are_bounded() -> None:
    """Empty lines before the request line are skipped without growing the buffer."""
    head = RequestHead()
    for _ in range(10_000):
        assert head.feed(b"\r\n") is None
    assert not head.pending()
    assert head.feed(b"GET / HTTP/1.1\r\n\r\n") == Request("GET", "/")


def test_head_garbage_without_newlines_is_refused_at_the_limit() -> None:
    """Random bytes with no line end: refused once they pass the limit."""
    garbage = bytes(range(256)).replace(b"\n", b"") * 40
    decided = _feed_all(garbage)
    assert isinstance(decided, Refusal) and decided.status is HTTPStatus.REQUEST_URI_TOO_LONG


def test_head_pipelined_second_request_is_ignored() -> None:
    """Only the first head of a pipeline decides."""
    assert _feed_all(b"GET /a HTTP/1.1\r\n\r\nPOST /b HTTP/1.1\r\n\r\n") == Request("GET", "/a")


def test_head_incomplete_at_eof_is_400() -> None:
    """A peer that stops sending mid-head gets a 400 from finish()."""
    head = RequestHead()
    assert head.feed(b"GET /metrics HTTP/1.1\r\nHost:") is None
    assert head.pending()
    assert head.finish().status is HTTPStatus.BAD_REQUEST


def test_parse_head_rejects_an_empty_request_line() -> None:
    """parse_head on a head whose request line is empty refuses it."""
    assert isinstance(parse_head(b"\r\n\r\n"), Refusal)


def test_response_uses_standard_reason_phrases() -> None:
    """Status lines carry the reason phrase http.HTTPStatus has for the code."""
    assert response(HTTPStatus.NOT_FOUND, b"x").startswith(b"HTTP/1.1 404 Not Found\r\n")
    assert response(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, b"").startswith(
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    )


def test_response_to_head_has_the_length_but_no_body() -> None:
    """HEAD gets the headers GET would get (Content-Length included) and no body."""
    full = response(HTTPStatus.OK, b"hello")
    head_only = response(HTTPStatus.OK, b"hello", head_only=True)
    assert full == head_only + b"hello"
    assert b"Content-Length: 5\r\n" in head_only and head_only.endswith(b"\r\n\r\n")
