"""A fault-injecting HTTP proxy for S3 traffic, controlled in-process from tests.

``FaultProxy(upstream)`` listens on 127.0.0.1:<ephemeral> and forwards every request to the
upstream S3 server (moto, see ``s3rig``), unless a ``Rule`` matches. A rule matches by
method, a regex searched in the object key (for a LIST, the prefix listed), and the n-th
matching request (1-based; ``None`` = every one) or every ``every``-th, at most ``times`` times
(``None``: no limit), and then does one ``Action``:

========================  ================================================================
``ERROR_BEFORE``          answer ``status`` (500 InternalError / 503 SlowDown, S3 XML body;
                          ``code`` overrides the S3 error code) without forwarding: nothing
                          applied
``ERROR_AFTER``           forward, then answer ``status`` instead: applied, looks failed
``DELAY``                 wait ``delay_s`` (past the client's read timeout), then forward
``DROP_BEFORE``           close the connection without forwarding
``DROP_AFTER``            forward, then close the connection without answering
``RESET_BEFORE``          reset the connection (RST, not FIN) without forwarding
``RESET_AFTER``           forward, then reset the connection without answering
``TRUNCATE``              forward, then send the headers and only ``truncate_at`` body bytes
``CONFLICT``              on a conditional PUT (If-Match / If-None-Match present): answer 409
                          ConditionalRequestConflict without forwarding (moto never does)
``STRIP_CONDITIONS``      remove If-Match / If-None-Match and forward: a store that ignores
                          them. A real server would then reject a header-signed request whose
                          SignedHeaders list them; moto verifies no signature, so this works.
========================  ================================================================

``strict_presign = True`` makes the proxy verify SigV4 presigned URLs (query-string auth), which
moto does not: the expiry against ``clock()`` (403 AccessDenied "Request has expired") and the
signature recomputed with botocore's signer (403 SignatureDoesNotMatch). ``clock`` is
settable so tests expire URLs without sleeping.
"""

from __future__ import annotations

import calendar
import contextlib
import dataclasses
import enum
import http.client
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit
from xml.sax.saxutils import escape

UPSTREAM_TIMEOUT_S = 30.0
"""How long the proxy waits for the upstream server per request, in seconds."""

CONDITION_HEADERS = ("If-Match", "If-None-Match")
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "expect", "transfer-encoding", "te", "trailer", "upgrade",
     "proxy-connection"}
)
ERROR_CODES = {
    400: "RequestTimeout",
    403: "AccessDenied",
    409: "ConditionalRequestConflict",
    429: "TooManyRequests",
    500: "InternalError",
    501: "NotImplemented",
    502: "BadGateway",
    503: "SlowDown",
    504: "GatewayTimeout",
}


class Action(enum.Enum):
    ERROR_BEFORE = "error-before"
    ERROR_AFTER = "error-after"
    DELAY = "delay"
    DROP_BEFORE = "drop-before"
    DROP_AFTER = "drop-after"
    RESET_BEFORE = "reset-before"
    RESET_AFTER = "reset-after"
    TRUNCATE = "truncate"
    CONFLICT = "conflict-409"
    STRIP_CONDITIONS = "strip-conditions"


@dataclasses.dataclass
class Rule:
    """One fault: which requests it matches and what it does to them."""

    action: Action
    method: str | None = None
    key: str = ""
    nth: int | None = None
    every: int | None = None
    times: int | None = None
    status: int = 500
    code: str | None = None
    delay_s: float = 0.0
    truncate_at: int = 0
    matched: int = 0
    fired: int = 0

    def matches(self, method: str, key: str, conditional: bool) -> bool:
        if self.times is not None and self.fired >= self.times:
            return False
        if self.method is not None and self.method != method:
            return False
        if self.action is Action.CONFLICT and not (method == "PUT" and conditional):
            return False
        return re.search(self.key, key) is not None


@dataclasses.dataclass(frozen=True)
class Seen:
    """A request the proxy handled: what came in and what the client was told."""

    method: str
    key: str
    status: int | None
    action: Action | None


def s3_error_body(status: int, code: str | None, message: str, resource: str) -> bytes:
    code = code or ERROR_CODES.get(status, "InternalError")
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
        f"<Resource>{escape(resource)}</Resource><RequestId>faultproxy</RequestId></Error>"
    ).encode()


def verify_presigned_url(
    method: str, host: str, raw_path: str, raw_query: str, now: float,
    secrets: dict[str, str],
) -> tuple[str, str] | None:
    """``None`` if a SigV4 presigned request is genuine and current, else (code, message)."""
    from botocore.auth import S3SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    params = dict(parse_qsl(raw_query, keep_blank_values=True))
    try:
        access_key, date, region, service, _ = params["X-Amz-Credential"].split("/")
        amz_date = params["X-Amz-Date"]
        expires = int(params["X-Amz-Expires"])
        signature = params["X-Amz-Signature"]
    except (KeyError, ValueError):
        return "AuthorizationQueryParametersError", "malformed presigned query"
    if access_key not in secrets:
        return "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist"
    try:
        signed_at = calendar.timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ"))
    except ValueError:
        return "AuthorizationQueryParametersError", "X-Amz-Date must be in the ISO8601 format"
    if now > signed_at + expires:
        return "AccessDenied", "Request has expired"
    unsigned = "&".join(
        part for part in raw_query.split("&") if not part.startswith("X-Amz-Signature=")
    )
    auth = S3SigV4QueryAuth(Credentials(access_key, secrets[access_key]), service, region,
                            expires=expires)
    request = AWSRequest(method=method, url=f"http://{host}{raw_path}?{unsigned}")
    request.context["timestamp"] = amz_date
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)),
                              request)
    if expected != signature or date != amz_date[:8]:
        return "SignatureDoesNotMatch", (
            "The request signature we calculated does not match the signature you provided"
        )
    return None


class FaultProxy:
    """The proxy: ``start()``, ``add(rule)``, ``clear()``, ``stop()``; see the module doc."""

    def __init__(self, upstream: str, secrets: dict[str, str] | None = None) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.secrets = dict(secrets or {})
        self.strict_presign = False
        self.clock: Callable[[], float] = time.time
        self.seen: list[Seen] = []
        self._rules: list[Rule] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "proxy not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fault-proxy", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        """Remove every rule, leave strict mode, reset the clock and the request log."""
        with self._lock:
            self._rules.clear()
            self.seen.clear()
        self.strict_presign = False
        self.clock = time.time

    def _fire(self, method: str, key: str, conditional: bool) -> Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.matches(method, key, conditional):
                    rule.matched += 1
                    if rule.every is not None:
                        due = rule.matched % rule.every == 0
                    else:
                        due = rule.nth is None or rule.matched == rule.nth
                    if due:
                        rule.fired += 1
                        return rule
            return None

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def _sleep(self, seconds: float) -> None:
        self._stopping.wait(seconds)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: FaultProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    # -- plumbing ----------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self, body: bytes, headers: dict[str, str]) -> tuple[int, list[tuple[str, str]],
                                                                      bytes]:
        connection = http.client.HTTPConnection(
            self.owner.upstream_host, self.owner.upstream_port, timeout=UPSTREAM_TIMEOUT_S
        )
        try:
            connection.request(self.command, self.path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            return response.status, response.getheaders(), data
        finally:
            connection.close()

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes,
               truncate_at: int | None = None) -> None:
        self.send_response(status)
        length_sent = False
        for name, value in headers:
            if name.lower() in HOP_BY_HOP:
                continue
            if name.lower() == "content-length":
                length_sent = True
                if self.command != "HEAD":
                    value = str(len(body))
            self.send_header(name, value)
        if not length_sent:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body if truncate_at is None else body[:truncate_at])
        if truncate_at is not None:
            self._drop()

    def _error(self, status: int, message: str, code: str | None = None) -> None:
        body = s3_error_body(status, code, message, self.path.split("?")[0])
        self._reply(status, [("Content-Type", "application/xml")], body)

    def _drop(self) -> None:
        self.close_connection = True
        self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _reset(self) -> None:
        """Close with an RST: SO_LINGER on with a zero timeout discards the send queue."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()

    # -- one request -------------------------------------------------------------------------

    def _handle(self) -> None:
        owner = self.owner
        body = self._read_body()
        raw_path, _, raw_query = self.path.partition("?")
        segments = unquote(raw_path).lstrip("/").split("/", 1)
        key = segments[1] if len(segments) > 1 else ""
        if not key and self.command == "GET":  # a LIST: match it by the prefix it lists
            key = dict(parse_qsl(raw_query)).get("prefix", "")
        headers = {n: v for n, v in self.headers.items() if n.lower() not in HOP_BY_HOP}
        conditional = any(h in self.headers for h in CONDITION_HEADERS)

        if owner.strict_presign and "X-Amz-Signature=" in raw_query:
            refusal = verify_presigned_url(
                self.command, self.headers.get("Host", ""), raw_path, raw_query, owner.clock(),
                owner.secrets,
            )
            if refusal is not None:
                owner._record(Seen(self.command, key, 403, None))
                self._error(403, refusal[1], refusal[0])
                return

        rule = owner._fire(self.command, key, conditional)
        action = rule.action if rule is not None else None
        if rule is not None and action in (Action.ERROR_BEFORE, Action.CONFLICT):
            status = 409 if action is Action.CONFLICT else rule.status
            owner._record(Seen(self.command, key, status, action))
            self._error(status, f"injected by the fault proxy ({rule.action.value})", rule.code)
            return
        if action in (Action.DROP_BEFORE, Action.RESET_BEFORE):
            owner._record(Seen(self.command, key, None, action))
            (self._drop if action is Action.DROP_BEFORE else self._reset)()
            return
        if rule is not None and action is Action.DELAY:
            owner._sleep(rule.delay_s)
        if action is Action.STRIP_CONDITIONS:
            stripped = {h.lower() for h in CONDITION_HEADERS}
            headers = {n: v for n, v in headers.items() if n.lower() not in stripped}

        status, response_headers, response_body = self._forward(body, headers)

        if rule is not None and action is Action.ERROR_AFTER:
            owner._record(Seen(self.command, key, rule.status, action))
            self._error(rule.status, "injected by the fault proxy after forwarding", rule.code)
            return
        if action in (Action.DROP_AFTER, Action.RESET_AFTER):
            owner._record(Seen(self.command, key, None, action))
            (self._drop if action is Action.DROP_AFTER else self._reset)()
            return
        owner._record(Seen(self.command, key, status, action))
        truncate = rule.truncate_at if rule is not None and action is Action.TRUNCATE else None
        try:
            self._reply(status, response_headers, response_body, truncate)
        except OSError:
            self.close_connection = True  # the client gave up (a DELAY past its timeout)
