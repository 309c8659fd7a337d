"""The metrics port's HTTP/1.1, sans-IO: request heads in, a request or a refusal out; responses.

Theory of operation. ``RequestHead.feed`` takes whatever a read delivered and returns ``None``
(need more), a ``Request``, or a ``Refusal`` carrying the status to answer with. It buffers at
most ``MAX_REQUEST_HEAD_BYTES`` (plus one read), so a head that never ends, a single endless
line or a stream of garbage costs a bounded buffer and then a status: 414 when even the request
line does not fit, 431 when the header lines do not, 400 for anything that is not an HTTP/1.x
request head. The first complete head decides; bytes after it (a pipelined second request, a
body) are ignored, because the listener answers one request per connection with
``Connection: close`` (RFC 9112 9.6 lets a server close after any response, and a client that
pipelined retries the rest on a new connection).

Only what the metrics port needs is accepted: ``GET`` and ``HEAD`` (405 with ``Allow``
otherwise), origin-form (``/metrics?x``) or absolute-form (``http://host/metrics``) targets,
HTTP/1.0 and 1.1 (505 for another major version). The header lines are checked for shape and
then ignored. Parsing follows RFC 9112: a bare LF ends a line as CRLF does, empty lines before
the request line are skipped, obsolete line folding and bytes that are not visible ASCII in
the request line are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from http import HTTPStatus

MAX_REQUEST_HEAD_BYTES = 8192
"""Bytes a request head (request line and header lines) may take, in all."""

METHODS = ("GET", "HEAD")
"""What the metrics port answers; anything else is 405."""

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(rb"HTTP/([0-9])\.([0-9])")
_TARGET = re.compile(rb"[\x21-\x7e]+")  # visible ASCII: RFC 3986 characters, no spaces
_FIELD_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")  # obs-text allowed in values


@dataclass(frozen=True, slots=True)
class Request:
    """A well-formed request head the metrics port will answer."""

    method: str
    path: str
    """The target's path, without query: what selects the endpoint."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request head answered with an error status and closed."""

    status: HTTPStatus
    detail: str


class RequestHead:
    """Collects one request head from a byte stream and parses it."""

    def __init__(self, limit: int = MAX_REQUEST_HEAD_BYTES) -> None:
        self._limit = limit
        self._buffer = bytearray()
        self._searched = 0  # the end of the head is not before this offset

    def feed(self, data: bytes) -> Request | Refusal | None:
        """Take the next bytes; the request or refusal once decided, else ``None``."""
        buffer = self._buffer
        buffer += data
        if self._searched == 0:
            # RFC 9112 2.2: ignore empty lines received before the request line.
            start = len(buffer) - len(buffer.lstrip(b"\r\n"))
            del buffer[:start]
        end = _end_of_head(buffer, max(self._searched - 2, 0))
        if end is not None and end <= self._limit:
            return parse_head(bytes(buffer[:end]))
        if len(buffer) > self._limit:
            if b"\n" not in buffer[: self._limit]:
                return Refusal(HTTPStatus.REQUEST_URI_TOO_LONG, "request line too long")
            return Refusal(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"request head over {self._limit} bytes",
            )
        self._searched = len(buffer)
        return None

    def pending(self) -> bool:
        """True if part of a head has arrived (empty lines before it do not count)."""
        return bool(self._buffer)

    def finish(self) -> Refusal:
        """The refusal for a peer that stopped sending before the head was complete."""
        return Refusal(HTTPStatus.BAD_REQUEST, "incomplete request head")


def _end_of_head(buffer: bytearray, start: int) -> int | None:
    """Offset just past the empty line that ends the head, or ``None`` if it is not there."""
    best: int | None = None
    for ending in (b"\n\r\n", b"\n\n"):
        at = buffer.find(ending, start)
        if at >= 0 and (best is None or at + len(ending) < best):
            best = at + len(ending)
    return best


def parse_head(head: bytes) -> Request | Refusal:
    """Parse a complete request head (request line, header lines, the empty line)."""
    lines = [line[:-1] if line.endswith(b"\r") else line for line in head.split(b"\n")]
    request_line, fields = lines[0], [line for line in lines[1:] if line]
    parts = request_line.split(b" ")
    if len(parts) != 3 or not all(parts):
        return Refusal(HTTPStatus.BAD_REQUEST, "malformed request line")
    method, target, version = parts
    if not _TOKEN.fullmatch(method):
        return Refusal(HTTPStatus.BAD_REQUEST, "malformed method")
    if not _TARGET.fullmatch(target):
        return Refusal(HTTPStatus.BAD_REQUEST, "malformed request target")
    match = _VERSION.fullmatch(version)
    if match is None:
        return Refusal(HTTPStatus.BAD_REQUEST, "malformed HTTP version")
    if match.group(1) != b"1":
        return Refusal(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, "only HTTP/1.x")
    for field in fields:
        name, colon, value = field.partition(b":")
        if not colon or not _TOKEN.fullmatch(name) or not _FIELD_VALUE.fullmatch(value):
            return Refusal(HTTPStatus.BAD_REQUEST, "malformed header line")
    if method.decode() not in METHODS:
        return Refusal(HTTPStatus.METHOD_NOT_ALLOWED, f"only {' and '.join(METHODS)}")
    path = _path_of(target.decode("ascii"))
    if path is None:
        return Refusal(HTTPStatus.BAD_REQUEST, "request target is not a path")
    return Request(method.decode(), path)


def _path_of(target: str) -> str | None:
    """The path of an origin-form or absolute-form target (RFC 9112 3.2)."""
    if target.lower().startswith(("http://", "https://")):
        rest = target.split("://", 1)[1]
        slash = rest.find("/")
        target = rest[slash:] if slash >= 0 else "/"
    if not target.startswith("/"):
        return None
    return target.split("?", 1)[0].split("#", 1)[0]


def response(
    status: HTTPStatus,
    body: bytes,
    content_type: str = "text/plain; charset=utf-8",
    *,
    head_only: bool = False,
    headers: tuple[tuple[str, str], ...] = (),
) -> bytes:
    """A complete ``Connection: close`` response with the standard reason phrase.

    ``head_only`` (the answer to HEAD) sends the headers a GET would get, without the body.
    """
    lines = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in headers),
    ]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
    return head if head_only else head + body
