"""The line codec, sans-IO: bytes in, requests out; replies in wire form out; and back again.

One request per line (LF or CRLF), one reply per line. ``RequestDecoder`` does the framing for
a server connection: it is fed whatever one read delivered and returns every request completed
by it, keeping a partial line for the next read (so a request split across packets is still one
request, whatever pauses in between). A line longer than ``MAX_LINE_BYTES`` is not buffered
whole: once it is known to be too long, bytes are dropped up to its newline and the line is
answered ``ERR line too long`` in its place.

Server replies are produced as wire bytes by small functions (``value_reply`` ...) and shared
constants (``OK``, ``NIL`` ...). The client side uses ``ReplyDecoder`` and ``parse_reply``.
``encode_request`` is the inverse of ``parse_request``. (The write-ahead log's first format
stored these lines; it now stores binary operations, so no value is ever re-parsed at replay.)
"""

from __future__ import annotations

import re

from minidb.protocol._messages import (
    MAX_LINE_BYTES,
    MAX_NAME_CHARS,
    MAX_SCAN_COUNT,
    MAX_VALUE_BYTES,
    Delete,
    Error,
    Get,
    Invalid,
    Keys,
    Nil,
    Ok,
    Reply,
    Request,
    Scan,
    Set,
    Value,
)

_NAME_CHARS = rb"[A-Za-z0-9_.:/-]{1,%d}" % MAX_NAME_CHARS
_NAME = re.compile(_NAME_CHARS)
# A scan cursor is "0" (start) or "+" and the last key returned; "+" cannot start a name, so a
# key literally named "0" never reads as "start over".
_CURSOR = re.compile(rb"0|\+" + _NAME_CHARS)

EMPTY = Invalid("empty request")
MISSING = Invalid("missing argument")
TOO_MANY = Invalid("too many arguments")
TOO_LONG = Invalid("line too long")
BAD_UTF8 = Invalid("invalid utf-8")
VALUE_TOO_LONG = Invalid("value too long")

# Replies in wire form.
OK = b"OK\n"
NIL = b"NIL\n"
BUSY = b"ERR busy\n"
UNAVAILABLE = b"ERR store unavailable\n"


def value_reply(value: bytes) -> bytes:
    """``VALUE <value>``."""
    return b"VALUE " + value + b"\n"


def keys_reply(cursor: bytes, keys: list[bytes]) -> bytes:
    """``KEYS <next-cursor> <key>...``."""
    if not keys:
        return b"KEYS " + cursor + b"\n"
    return b"KEYS " + cursor + b" " + b" ".join(keys) + b"\n"


def error_reply(reason: str) -> bytes:
    """``ERR <reason>``."""
    return b"ERR " + reason.encode() + b"\n"


def _bad_name(name: bytes) -> Invalid:
    return Invalid("invalid name " + name.decode())


# The shape of nearly every well-formed GET, SET and DEL, matched by one regex call. Anything
# it does not match exactly (other case, extra spaces, CR, SCAN, errors) takes the full path.
_FAST = re.compile(
    rb"(GET|SET|DEL) (" + _NAME_CHARS + rb") (" + _NAME_CHARS + rb")(?: (.*))?", re.DOTALL
)


def parse_request(line: bytes) -> Request:
    """Parse one request line (terminator optional) into a request; never raises."""
    match = _FAST.fullmatch(line)
    if match is not None:
        verb, bucket, key, value = match.groups()
        if value is None:
            if verb == b"GET":
                return Get(bucket, key)
            if verb == b"DEL":
                return Delete(bucket, key)
        elif (
            verb == b"SET"
            and len(value) <= MAX_VALUE_BYTES
            and value.isascii()
            and not value.endswith((b"\r", b"\n"))
        ):
            return Set(bucket, key, value)
    return _parse_request_fully(line)


def _parse_request_fully(line: bytes) -> Request:
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    if len(line) > MAX_LINE_BYTES:
        return TOO_LONG
    if not line.isascii():
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return BAD_UTF8
    head, _, rest = line.partition(b" ")
    verb = head.upper()
    if verb == b"GET" or verb == b"DEL":
        args = rest.split()
        if len(args) != 2:
            return MISSING if len(args) < 2 else TOO_MANY
        bucket, key = args
        if _NAME.fullmatch(bucket) is None:
            return _bad_name(bucket)
        if _NAME.fullmatch(key) is None:
            return _bad_name(key)
        return Get(bucket, key) if verb == b"GET" else Delete(bucket, key)
    if verb == b"SET":
        # The value is the rest of the line after the single space that follows the key,
        # byte for byte, so only the first two separators are significant.
        parts = rest.split(b" ", 2)
        if len(parts) < 3:
            return MISSING
        bucket, key, value = parts
        if _NAME.fullmatch(bucket) is None:
            return _bad_name(bucket)
        if _NAME.fullmatch(key) is None:
            return _bad_name(key)
        if len(value) > MAX_VALUE_BYTES:
            return VALUE_TOO_LONG
        return Set(bucket, key, value)
    if verb == b"SCAN":
        args = rest.split()
        if len(args) != 3:
            return MISSING if len(args) < 3 else TOO_MANY
        bucket, cursor, count = args
        if _NAME.fullmatch(bucket) is None:
            return _bad_name(bucket)
        if _CURSOR.fullmatch(cursor) is None:
            return Invalid("invalid cursor " + cursor.decode())
        if not count.isdigit() or not 1 <= int(count) <= MAX_SCAN_COUNT:
            return Invalid("invalid count " + count.decode())
        return Scan(bucket, cursor, int(count))
    if not line.strip():
        return EMPTY
    return Invalid("unknown verb " + head.decode().upper())


def encode_request(request: Request) -> bytes:
    """The canonical line of a request, without its newline."""
    if type(request) is Set:
        return b"SET " + request.bucket + b" " + request.key + b" " + request.value
    if type(request) is Get:
        return b"GET " + request.bucket + b" " + request.key
    if type(request) is Delete:
        return b"DEL " + request.bucket + b" " + request.key
    if type(request) is Scan:
        return b"SCAN %b %b %d" % (request.bucket, request.cursor, request.limit)
    raise ValueError(f"cannot encode {request!r}")


class RequestDecoder:
    """Turns a connection's byte stream into requests, one ``feed`` per read.

    State that must survive between reads (the partial line, whether we are inside an
    over-long line) lives here, not in any coroutine, so a read that is interrupted loses
    nothing: the next ``feed`` continues where the last one stopped.
    """

    __slots__ = ("_discarding", "_partial")

    def __init__(self) -> None:
        self._partial = b""
        self._discarding = False

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete line held back (0 while discarding an over-long line)."""
        return len(self._partial)

    def feed(self, data: bytes) -> list[Request]:
        """Take the bytes of one read; return the requests completed by them, in order."""
        out: list[Request] = []
        if self._discarding:
            newline = data.find(b"\n")
            if newline < 0:
                return out
            self._discarding = False
            out.append(TOO_LONG)
            data = data[newline + 1 :]
        if self._partial:
            data = self._partial + data
            self._partial = b""
        lines = data.split(b"\n")
        tail = lines.pop()
        # +1 leaves room for the CR of a CRLF terminator that has not arrived whole yet.
        if len(tail) > MAX_LINE_BYTES + 1:
            self._discarding = True
        else:
            self._partial = tail
        for line in lines:
            out.append(parse_request(line))
        return out

    def discard_partial(self) -> None:
        """Forget a half-received line (used on shutdown: it was never a request)."""
        self._partial = b""
        self._discarding = False


class ReplyDecoder:
    """Client-side framing: feed bytes, get complete reply lines (without terminators)."""

    __slots__ = ("_partial",)

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, data: bytes) -> list[bytes]:
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def parse_reply(line: bytes) -> Reply:
    """Parse one reply line (terminator optional) into a reply object.

    Raises ``ValueError`` for a line that is not a reply of this protocol.
    """
    text = line.decode("utf-8").rstrip("\r\n")
    if text == "OK":
        return Ok()
    if text == "NIL":
        return Nil()
    if text.startswith("VALUE "):
        return Value(text[6:])
    if text.startswith("ERR "):
        return Error(text[4:])
    if text.startswith("KEYS "):
        parts = text[5:].split(" ")
        return Keys(parts[0], tuple(parts[1:]))
    raise ValueError(f"not a reply: {text!r}")


def encode_reply(reply: Reply) -> bytes:
    """Wire form of a reply object (the inverse of ``parse_reply``)."""
    if isinstance(reply, Ok):
        return OK
    if isinstance(reply, Nil):
        return NIL
    if isinstance(reply, Value):
        return value_reply(reply.value.encode())
    if isinstance(reply, Error):
        return error_reply(reply.reason)
    return keys_reply(reply.cursor.encode(), [k.encode() for k in reply.keys])


