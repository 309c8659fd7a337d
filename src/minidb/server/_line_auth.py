"""The line protocol's password gate (``--requirepass``): ``AUTH <password>`` before anything.

It sits between the connection and the line decoder, so the data owner never sees a request
of a connection that has not authenticated: until a line ``AUTH <password>`` matches, every line
is answered here (``ERR auth required``, or ``ERR invalid password`` for a wrong ``AUTH``) as a
reply the connection sends in its place (see ``Connection``, local replies). After it, bytes go
straight to the wrapped decoder and the gate costs one attribute test per call.

The password is compared with ``hmac.compare_digest``, in time independent of where the first
difference is. An unauthenticated client can make the gate hold at most one line of
``MAX_LINE_BYTES`` (plus what one read brings): past that the partial line is answered as a
refused line and dropped.
"""

from __future__ import annotations

import hmac
from typing import Any

from minidb.protocol import MAX_LINE_BYTES, OK, RequestDecoder, error_reply

AUTH_REQUIRED = error_reply("auth required")
INVALID_PASSWORD = error_reply("invalid password")
_AUTH = b"AUTH "


class AuthGate:
    """A ``Decoder`` that answers every line itself until one authenticates the connection."""

    __slots__ = ("_buffer", "_discarding", "_inner", "_password", "authenticated")

    def __init__(self, inner: RequestDecoder, password: bytes) -> None:
        self._inner = inner
        self._password = password
        self._buffer = b""
        self._discarding = False  # dropping the rest of an over-long line, up to its newline
        self.authenticated = False

    @property
    def buffered(self) -> int:
        """Bytes held before authentication."""
        return len(self._buffer)

    def receive(self, data: bytes) -> None:
        if self.authenticated:
            self._inner.receive(data)
            return
        if self._discarding:
            newline = data.find(b"\n")
            if newline < 0:
                return
            self._discarding = False
            data = data[newline + 1 :]
        buffer = self._buffer + data
        last = buffer.rfind(b"\n")
        if len(buffer) - last - 1 > MAX_LINE_BYTES:
            # An over-long unauthenticated line: refused once, the rest of it never kept.
            buffer = buffer[: last + 1] + b"#\n"
            self._discarding = True
        self._buffer = buffer

    def has_request(self) -> bool:
        if self.authenticated:
            return self._inner.has_request()
        return b"\n" in self._buffer

    def discard_partial(self) -> None:
        if self.authenticated:
            self._inner.discard_partial()
        else:
            self._buffer = self._buffer[: self._buffer.rfind(b"\n") + 1]

    def next_requests(self, limit: int) -> list[Any]:
        if self.authenticated:
            return self._inner.next_requests(limit)
        out: list[Any] = []
        while len(out) < limit and not self.authenticated:
            line, newline, rest = self._buffer.partition(b"\n")
            if not newline:
                return out
            self._buffer = rest
            out.append(self._check(line.removesuffix(b"\r")))
        if self.authenticated:
            self._inner.receive(self._buffer)
            self._buffer = b""
            if len(out) < limit:
                out += self._inner.next_requests(limit - len(out))
        return out

    def _check(self, line: bytes) -> bytes:
        if not line.startswith(_AUTH):
            return AUTH_REQUIRED
        if hmac.compare_digest(line[len(_AUTH) :], self._password):
            self.authenticated = True
            return OK
        return INVALID_PASSWORD
