"""The line codec, sans-IO: bytes in, requests out; replies in wire form out; and back again.

One request per line (LF or CRLF), one reply per line. ``RequestDecoder`` does the framing for
a server connection: it is fed whatever one read delivered (``receive``) and hands out the
requests completed so far on demand, at most as many as asked for (``next_requests``), keeping
the rest as undecoded bytes (so a request split across packets is still one request, whatever
pauses in between, and a connection that may take only a few more requests does not turn a
whole 256 KiB read into thousands of request objects). A line longer than ``MAX_LINE_BYTES`` is
not buffered whole: once it is known to be too long, bytes are dropped up to its newline and the
line is answered ``ERR line too long`` in its place.

Parsing never raises, whatever the bytes: every numeric field is bounded in length before it is
converted (CPython refuses ``int()`` of more than 4300 digits), and a token echoed back in an
``ERR`` reply is cut to ``MAX_ECHO_CHARS``.

Server replies are produced as wire bytes by small functions (``value_reply`` ...) and shared
constants (``OK``, ``NIL`` ...). The client side uses ``ReplyDecoder`` and ``parse_reply``.
``encode_request`` is the inverse of ``parse_request``. (The write-ahead log's first format
stored these lines; it now stores binary operations, so no value is ever re-parsed at replay.)
"""

from __future__ import annotations

import re

from minidb.protocol._messages import (
    MAX_ECHO_CHARS,
    MAX_EXPIRE_SECONDS,
    MAX_LINE_BYTES,
    MAX_NAME_CHARS,
    MAX_SCAN_COUNT,
    MAX_VALUE_BYTES,
    Delete,
    Error,
    Expire,
    Get,
    Invalid,
    Keys,
    Nil,
    Ok,
    Persist,
    Reply,
    Request,
    Scan,
    Set,
    Ttl,
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
LF = 0x0A
"""The line terminator as a byte value, for ``in`` tests (``LF in value`` is a memchr)."""
NOT_REPRESENTABLE = b"ERR not representable in the line protocol\n"
"""The reply to a GET of a key whose value this protocol cannot carry (see ``can_carry``)."""

# Replies in wire form.
OK = b"OK\n"
NIL = b"NIL\n"
BUSY = b"ERR busy\n"
UNAVAILABLE = b"ERR store unavailable\n"


def is_name(name: bytes) -> bool:
    """Whether ``name`` is a bucket or key name of this protocol (``MAX_NAME_CHARS`` of
    ``[A-Za-z0-9_.:/-]``): a key stored by another protocol may not be one."""
    return _NAME.fullmatch(name) is not None


def can_carry(value: bytes) -> bool:
    """Whether ``VALUE <value>`` carries ``value``: exactly the values a ``SET`` of this
    protocol can store (at most ``MAX_VALUE_BYTES`` of UTF-8 without LF; a CR, even a last
    one, is kept byte for byte, as ``SET`` kept it). A value another protocol stored may be
    anything.

    Cost: the common ASCII value takes three C calls (length, a memchr, ``isascii``); only
    non-ASCII values are decoded. (``LF in value`` with an ``int``: a ``bytes`` needle costs
    ten times more.)
    """
    if len(value) > MAX_VALUE_BYTES or LF in value:
        return False
    if value.isascii():
        return True
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


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


_COUNT_DIGITS = len(str(MAX_SCAN_COUNT))
"""Significant digits a valid ``SCAN`` count can have; longer is refused before ``int()``."""
_SECONDS_DIGITS = len(str(MAX_EXPIRE_SECONDS))
"""Significant digits a valid ``EXPIRE`` time can have; longer is refused before ``int()``."""

_KEYED: dict[bytes, type[Get] | type[Delete] | type[Ttl] | type[Persist]] = {
    b"GET": Get, b"DEL": Delete, b"TTL": Ttl, b"PERSIST": Persist,
}
"""Verbs whose arguments are exactly a bucket and a key."""


def _bounded_int(token: bytes, digits: int, largest: int) -> int | None:
    """``token`` as an integer in 0..``largest``, or None; never converts more than
    ``digits`` significant digits (leading zeros are harmless)."""
    significant = token.lstrip(b"0")
    if not token.isdigit() or len(significant) > digits:
        return None
    value = int(significant or b"0")
    return value if value <= largest else None


def _echo(token: bytes) -> str:
    """A client's token as text for an ``ERR`` reply, cut to ``MAX_ECHO_CHARS``."""
    text = token[: MAX_ECHO_CHARS * 4 + 4].decode("utf-8", "replace")
    return text if len(text) <= MAX_ECHO_CHARS else text[:MAX_ECHO_CHARS] + "..."


def _bad_name(name: bytes) -> Invalid:
    return Invalid("invalid name " + _echo(name))


# The shape of nearly every well-formed GET, SET and DEL, matched by one regex call. Anything
# it does not match exactly (other case, extra spaces, CR, SCAN, errors) takes the full path.
_FAST = re.compile(
    rb"(GET|SET|DEL) (" + _NAME_CHARS + rb") (" + _NAME_CHARS + rb")(?: (.*))?", re.DOTALL
)


# A plain SET whose value needs no check beyond the match: at most MAX_VALUE_BYTES of ASCII
# without CR (so no CR of a CRLF to strip). What ``RequestDecoder`` tries first on every line;
# anything else (a value with a CR or non-ASCII, any other verb) takes ``parse_request``,
# which gives the same ``Set`` for every line this matches.
_PLAIN_SET = re.compile(
    rb"SET (" + _NAME_CHARS + rb") (" + _NAME_CHARS + rb") ([\x00-\x0c\x0e-\x7f]{0,%d})"
    % MAX_VALUE_BYTES
)

_new_tuple = tuple.__new__
"""Builds a request named tuple without its Python-level ``__new__`` (a third of a fast-path
parse was that constructor)."""


def parse_request(line: bytes) -> Request:
    """Parse one request line (terminator optional) into a request; never raises."""
    match = _FAST.fullmatch(line)
    if match is not None:
        verb, bucket, key, value = match.groups()
        if value is None:
            if verb == b"GET":
                return _new_tuple(Get, (bucket, key))
            if verb == b"DEL":
                return _new_tuple(Delete, (bucket, key))
        elif (
            verb == b"SET"
            and len(value) <= MAX_VALUE_BYTES
            and value.isascii()
            and not value.endswith((b"\r", b"\n"))
        ):
            return _new_tuple(Set, (bucket, key, value))
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
    keyed = _KEYED.get(verb)
    if keyed is not None:
        args = rest.split()
        if len(args) != 2:
            return MISSING if len(args) < 2 else TOO_MANY
        bucket, key = args
        if _NAME.fullmatch(bucket) is None:
            return _bad_name(bucket)
        if _NAME.fullmatch(key) is None:
            return _bad_name(key)
        return keyed(bucket, key)
    if verb == b"EXPIRE":
        args = rest.split()
        if len(args) != 3:
            return MISSING if len(args) < 3 else TOO_MANY
        bucket, key, seconds = args
        if _NAME.fullmatch(bucket) is None:
            return _bad_name(bucket)
        if _NAME.fullmatch(key) is None:
            return _bad_name(key)
        ttl = _bounded_int(seconds, _SECONDS_DIGITS, MAX_EXPIRE_SECONDS)
        if ttl is None:
            return Invalid("invalid seconds " + _echo(seconds))
        return Expire(bucket, key, ttl)
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
            return Invalid("invalid cursor " + _echo(cursor))
        # Bounded before int(): leading zeros are harmless, any other long run of digits is
        # over the limit anyway and would make int() raise past 4300 digits.
        limit = _bounded_int(count, _COUNT_DIGITS, MAX_SCAN_COUNT)
        if not limit:
            return Invalid("invalid count " + _echo(count))
        return Scan(bucket, cursor, limit)
    if not line.strip():
        return EMPTY
    return Invalid("unknown verb " + _echo(head).upper())


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
    if type(request) is Expire:
        return b"EXPIRE %b %b %d" % (request.bucket, request.key, request.seconds)
    if type(request) is Ttl:
        return b"TTL " + request.bucket + b" " + request.key
    if type(request) is Persist:
        return b"PERSIST " + request.bucket + b" " + request.key
    raise ValueError(f"cannot encode {request!r}")


class RequestDecoder:
    """Turns a connection's byte stream into requests: ``receive`` each read, then take the
    completed requests with ``next_requests(limit)``, as many at a time as the caller can use.

    Theory of operation. ``_buffer`` holds undecoded bytes starting at a line boundary: whole
    lines not asked for yet, then at most one incomplete line. ``next_requests`` splits off at
    most ``limit`` lines (``bytes.split`` with a maxsplit: one C call, and the bytes after the
    last split line are not scanned) and parses only those. The caller bounds what is buffered
    by not reading more while complete lines are still waiting; then ``buffered`` is at most
    one read plus one incomplete line.

    An incomplete line longer than ``MAX_LINE_BYTES + 1`` (+1: room for the CR of a CRLF not
    arrived whole) is cut to a stub of ``MAX_LINE_BYTES + 1`` bytes and the rest of it is dropped
    as it arrives, up to its newline; the stub then parses as ``ERR line too long`` in its turn.

    State that must survive between reads lives here, not in any coroutine, so a read that is
    interrupted loses nothing: the next ``receive`` continues where the last one stopped.
    """

    __slots__ = ("_buffer", "_discarding")

    def __init__(self) -> None:
        self._buffer = b""
        self._discarding = False

    @property
    def buffered(self) -> int:
        """Undecoded bytes held: lines not taken yet and an incomplete line (or the stub of an
        over-long one, ``MAX_LINE_BYTES + 1`` bytes)."""
        return len(self._buffer)

    def receive(self, data: bytes) -> None:
        """Take the bytes of one read (nothing is parsed until ``next_requests``)."""
        if self._discarding:
            newline = data.find(b"\n")
            if newline < 0:
                return
            self._discarding = False
            data = data[newline:]  # the newline ends the stub of the over-long line
        buffer = self._buffer + data if self._buffer else data
        last = buffer.rfind(b"\n")  # from the end: scans only the incomplete tail
        if len(buffer) - last - 1 > MAX_LINE_BYTES + 1:
            # The stub must parse as too long: MAX_LINE_BYTES + 1 bytes, not ending in CR.
            buffer = buffer[: last + 1 + MAX_LINE_BYTES] + b"#"
            self._discarding = True
        self._buffer = buffer

    def next_requests(self, limit: int) -> list[Request]:
        """Up to ``limit`` (at least 1) requests completed so far, in order; fewer means no
        complete line is left."""
        lines = self._buffer.split(b"\n", limit)
        # The last piece is either the incomplete line or, if ``limit`` lines were split off,
        # the undecoded rest; in both cases it starts at a line boundary.
        self._buffer = lines.pop()
        plain_set = _PLAIN_SET.fullmatch  # the bulk load's line: one regex call, one tuple
        return [
            _new_tuple(Set, match.groups()) if (match := plain_set(line)) else parse_request(line)
            for line in lines
        ]

    def has_request(self) -> bool:
        """Whether a complete request is waiting to be taken."""
        return b"\n" in self._buffer

    def feed(self, data: bytes) -> list[Request]:
        """``receive`` then every request completed (for callers that need no bound)."""
        self.receive(data)
        return self.next_requests(_UNLIMITED)

    def discard_partial(self) -> None:
        """Forget a half-received line, keeping complete ones (on shutdown: the half line was
        never a request, the complete ones were received and are owed replies)."""
        self._buffer = self._buffer[: self._buffer.rfind(b"\n") + 1]
        self._discarding = False


_UNLIMITED = 2**62
"""A ``next_requests`` limit no buffer reaches."""


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


