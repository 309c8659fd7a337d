"""The line protocol's password gate (``--requirepass``): ``AUTH <password>`` before anything.

It sits between the connection and the line decoder, so the data owner never sees a request
of a connection that has not authenticated: until a line ``AUTH <password>`` matches (the verb
in any case, as every verb of the protocol), every line is answered here (``ERR auth
required``, or ``ERR invalid password`` for a wrong ``AUTH``) as a reply the connection sends
in its place (see ``Connection``, local replies). After it, bytes go straight to the wrapped
decoder and the gate costs one attribute test per call.

The password is compared with ``hmac.compare_digest``, in time independent of where the first
difference is.

Before AUTH a line may hold at most ``MAX_UNAUTHENTICATED_LINE_BYTES`` (more if ``AUTH
<password>`` needs it). A longer one, complete or not, is answered ``ERR line too long before
auth`` after the lines before it, and ends the stream: the gate takes nothing more and closes
the wrapped decoder, whose ``closing`` makes the connection close once it has replied. That is
Redis's answer to a client without the password that announces a long argument (its
unauthenticated bulk and multibulk limits, CVE-2021-32675): such a client can make the gate
hold no more than one read, and never wait for the end of a long line.
"""

from __future__ import annotations

import hmac
from typing import Any, Final

from minidb.protocol import OK, RequestDecoder, error_reply

MAX_UNAUTHENTICATED_LINE_BYTES: Final = 1024
"""The longest line (terminator excluded) taken before AUTH, raised to ``len("AUTH ") +
len(password)`` for a longer password. A client without the password has nothing to send but
``AUTH``; the line protocol's own limit (``MAX_LINE_BYTES``, 8 KiB) applies after it."""

AUTH_REQUIRED = error_reply("auth required")
INVALID_PASSWORD = error_reply("invalid password")
LINE_TOO_LONG = error_reply("line too long before auth")
"""The answer to a line over the limit before AUTH; the connection closes after it."""
_AUTH = b"AUTH"


class AuthGate:
    """A ``Decoder`` that answers every line itself until one authenticates the connection."""

    __slots__ = ("_buffer", "_inner", "_max_line", "_password", "_too_long", "authenticated")

    def __init__(self, inner: RequestDecoder, password: bytes) -> None:
        self._inner = inner
        self._password = password
        self._max_line = max(MAX_UNAUTHENTICATED_LINE_BYTES, len(_AUTH) + 1 + len(password))
        self._buffer = b""
        self._too_long = False  # the line after the buffered ones is over the limit
        self.authenticated = False

    @property
    def buffered(self) -> int:
        """Bytes held before authentication."""
        return len(self._buffer)

    def receive(self, data: bytes) -> None:
        if self.authenticated:
            self._inner.receive(data)
            return
        if self._too_long or self._inner.closing:
            return  # the stream ends at the over-long line
        buffer = self._buffer + data
        last = buffer.rfind(b"\n")
        # +1: room for the CR of a CRLF not arrived whole.
        if len(buffer) - last - 1 > self._max_line + 1:
            buffer = buffer[: last + 1]  # the complete lines are answered first
            self._too_long = True
        self._buffer = buffer

    def has_request(self) -> bool:
        if self.authenticated:
            return self._inner.has_request()
        if self._inner.closing:
            return False
        return self._too_long or b"\n" in self._buffer

    def discard_partial(self) -> None:
        if self.authenticated:
            self._inner.discard_partial()
        else:
            self._buffer = self._buffer[: self._buffer.rfind(b"\n") + 1]
            self._too_long = False  # a half line was never a request

    def next_requests(self, limit: int) -> list[Any]:
        if self.authenticated:
            return self._inner.next_requests(limit)
        out: list[Any] = []
        while len(out) < limit and not self.authenticated and not self._inner.closing:
            line, newline, rest = self._buffer.partition(b"\n")
            if not newline:
                if self._too_long:
                    out.append(self._end_stream())
                return out
            self._buffer = rest
            line = line.removesuffix(b"\r")
            out.append(self._end_stream() if len(line) > self._max_line else self._check(line))
        if self.authenticated:
            self._inner.receive(self._buffer)
            self._buffer = b""
            if len(out) < limit:
                out += self._inner.next_requests(limit - len(out))
        return out

    def _check(self, line: bytes) -> bytes:
        # Parsed as the line decoder parses a verb: up to the first space, in any case; the
        # password is the rest of the line, byte for byte.
        verb, _, password = line.partition(b" ")
        if verb.upper() != _AUTH:
            return AUTH_REQUIRED
        if hmac.compare_digest(password, self._password):
            self.authenticated = True
            return OK
        return INVALID_PASSWORD

    def _end_stream(self) -> bytes:
        """Refuse an over-long line: its reply is the last, nothing after it is taken."""
        self._buffer = b""
        self._too_long = False
        self._inner.close()
        return LINE_TOO_LONG
