"""The line codec, sans-IO: bytes in, requests out; replies in wire form out; and back again.

One request per line (LF or CRLF), one reply per line. ``RequestDecoder`` does the framing for
a server connection: it is fed whatever one read delivered (``receive``) and hands out the
requests completed so far on demand, at most as many as asked for (``next_requests``), keeping
the rest as undecoded bytes (so a request split across packets is still one request, whatever
pauses in between, and a connection that may take only a few more requests does not turn a
whole 256 KiB read into thousands of request objects). A line longer than ``MAX_LINE_BYTES`` is
not buffered whole: once it is known to be too long, bytes are dropped up to its newline and the
line is answered ``ERR line too long`` in its place.

A ``BULK <n>`` line opens a frame: it and the ``n`` row lines after it (each a ``SET`` or a
``DEL`` exactly as a request of its own) are one request, ``Bulk``, applied atomically and
answered once, ``OK <n>``. A frame with a row that is no such request is one ``Invalid``,
``ERR row <i>: <reason>``, and nothing of it is applied. A frame the decoder cannot find the end
of without holding too much (a count not in ``1..MAX_BULK_ROWS``, rows over ``MAX_BULK_BYTES``,
a row over ``MAX_LINE_BYTES``) is answered with its ``ERR`` and ends the stream: the decoder
turns ``closing`` and takes nothing more, and the connection closes once it has replied.

The common lines (a plain ``SET``, ``GET`` or ``DEL``, and a frame's rows when all are plain
``SET``s) are made requests in C when the accelerator ``_cline`` is built (``_decode_lines``,
``_plain_rows``): the same requests as the regexes below give, held to them by
tests/store/test_line_twin.py; every other line still goes to ``parse_request``.

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
from collections.abc import Callable

from minidb._accelerators import load
from minidb.protocol._messages import (
    MAX_BULK_BYTES,
    MAX_BULK_ROWS,
    MAX_ECHO_CHARS,
    MAX_EXPIRE_SECONDS,
    MAX_LINE_BYTES,
    MAX_NAME_CHARS,
    MAX_SCAN_COUNT,
    MAX_VALUE_BYTES,
    Bulk,
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
BULK_HEADER = Invalid("BULK needs its rows")
"""What ``parse_request`` makes of a ``BULK`` line on its own; ``RequestDecoder`` takes it as
the header of a frame (identity tells it apart)."""
FRAME_TOO_LARGE = Invalid("bulk frame too large")
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

_PLAIN_ROWS = re.compile(
    rb"^SET (" + _NAME_CHARS + rb") (" + _NAME_CHARS + rb") ([\x00-\x09\x0b\x0c\x0e-\x7f]{0,%d})\n"
    % MAX_VALUE_BYTES,
    re.MULTILINE,
).findall
"""The rows of a frame of plain SETs (``_PLAIN_SET`` with its LF), all found in one call."""

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
    if verb == b"BULK":
        return BULK_HEADER
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
    if type(request) is Bulk:
        return b"\n".join([b"BULK %d" % len(request.rows), *map(encode_request, request.rows)])
    raise ValueError(f"cannot encode {request!r}")


_BULK_PREFIX = b"BULK "
"""How a frame's header starts when it is sent as ``BulkWriter`` sends it (one ``startswith``
finds it; any other spelling of the verb is found by ``parse_request``)."""
_ROW_TYPES = frozenset((Set, Delete))
"""What a row of a frame may be."""
_ROWS_DIGITS = len(str(MAX_BULK_ROWS))
"""Significant digits a valid ``BULK`` count can have; longer is refused before ``int()``."""


_ROWS_PATTERNS: dict[int, re.Pattern[bytes]] = {}


def _rows_pattern(count: int) -> re.Pattern[bytes]:
    """Matches ``count`` whole lines: where a frame of ``count`` rows ends, found in one C call
    without copying what follows it (compiled once per count, at most ``MAX_BULK_ROWS``)."""
    pattern = _ROWS_PATTERNS.get(count)
    if pattern is None:
        # ``.`` is any byte but LF; possessive, so a line's bytes are never given back and a
        # frame not all there fails in one pass.
        pattern = _ROWS_PATTERNS[count] = re.compile(rb"(?:.*+\n){%d}" % count)
    return pattern


def _bulk_count(header: bytes) -> int | Invalid:
    """The row count of a ``BULK <n>`` header line (terminator optional), or its refusal."""
    _, _, rest = header.rstrip(b"\r\n").partition(b" ")
    args = rest.split()
    count = _bounded_int(args[0], _ROWS_DIGITS, MAX_BULK_ROWS) if len(args) == 1 else None
    if count:
        return count
    rest = rest.strip()
    return Invalid("invalid bulk count" + (" " + _echo(rest) if rest else ""))


def _row_error(number: int, row: Request) -> str:
    """Why row ``number`` (1-based) cannot be in a frame."""
    if row is BULK_HEADER:
        return f"row {number}: BULK not allowed in a frame"
    if type(row) is Invalid:
        return f"row {number}: {row.reason}"
    verb = encode_request(row).partition(b" ")[0].decode()
    return f"row {number}: {verb} not allowed in a frame"


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

    Frames. A request has a *weight*: 1, or ``n`` for a ``Bulk`` of ``n`` rows, and ``limit``
    counts weight (``extra_weight`` says how much more than one per request the last take
    weighed). A frame heavier than what is left of ``limit`` ends the take and is held whole
    (``_ready``) for the next one, where it is taken first whatever its weight: a frame is never
    split, and never starved. When ``next_requests`` reaches a header it splits the frame off
    if it is all there (one ``split`` of ``n`` lines); if not, the frame's bytes move to
    ``_frame``, a ``bytearray`` that each ``receive`` extends (amortised O(1), however small the
    reads) while counting its newlines (``_frame_seen`` of ``_frame_rows``), so the frame is
    split once, when complete. Its row bytes are known to be too many as soon as ``_frame``
    holds more than ``MAX_BULK_BYTES`` without its last newline: the caller keeps reading only
    while ``has_request`` is false, so what a frame makes the decoder hold is at most
    ``MAX_BULK_BYTES`` plus one read. Whether a frame is refused never depends on how its bytes
    were cut into reads.

    State that must survive between reads lives here, not in any coroutine, so a read that is
    interrupted loses nothing: the next ``receive`` continues where the last one stopped.
    """

    __slots__ = (
        "_at_header",
        "_buffer",
        "_discarding",
        "_frame",
        "_frame_rows",
        "_frame_seen",
        "_header_seen",
        "_ready",
        "closing",
        "extra_weight",
    )

    def __init__(self) -> None:
        self._buffer = b""
        self._discarding = False
        self._frame: bytearray | None = None  # a frame's bytes after its header, not complete
        self._frame_rows = self._frame_seen = 0
        self._ready: Bulk | None = None  # a complete frame too heavy for the last take
        self._at_header = False  # _buffer starts with a header parse_request found
        self._header_seen = False
        self.closing = False
        """A frame could not be delimited: its ``ERR`` was the last request; nothing more is
        taken (the connection closes once it has replied)."""
        self.extra_weight = 0
        """What the requests of the last ``next_requests`` weighed beyond one each."""

    @property
    def buffered(self) -> int:
        """Undecoded bytes held: lines not taken yet and an incomplete line (or the stub of an
        over-long one, ``MAX_LINE_BYTES + 1`` bytes), or a frame not complete yet."""
        return len(self._buffer) + (len(self._frame) if self._frame is not None else 0)

    def receive(self, data: bytes) -> None:
        """Take the bytes of one read (nothing is parsed until ``next_requests``)."""
        frame = self._frame
        if frame is not None:
            if self._frame_seen < self._frame_rows:
                self._frame_seen += data.count(b"\n")
            frame += data
            return
        if self.closing:
            return
        if self._discarding:
            newline = data.find(b"\n")
            if newline < 0:
                return
            self._discarding = False
            data = data[newline:]  # the newline ends the stub of the over-long line
        self._keep(self._buffer + data if self._buffer else data)

    def _keep(self, buffer: bytes) -> None:
        """Hold ``buffer`` as the undecoded bytes, cutting an over-long incomplete line."""
        last = buffer.rfind(b"\n")  # from the end: scans only the incomplete tail
        if len(buffer) - last - 1 > MAX_LINE_BYTES + 1:
            # The stub must parse as too long: MAX_LINE_BYTES + 1 bytes, not ending in CR.
            buffer = buffer[: last + 1 + MAX_LINE_BYTES] + b"#"
            self._discarding = True
        self._buffer = buffer

    def next_requests(self, limit: int) -> list[Request]:
        """Requests completed so far, in order, weighing at most ``limit`` (at least 1), or
        one frame heavier than that; fewer means no complete request is left, or the next is
        a frame heavier than what was left (then ``has_request()`` is true)."""
        out: list[Request] = []
        weight = 0
        plain_set = _PLAIN_SET.fullmatch  # the bulk load's line: one regex call, one tuple
        parse = self._parse
        while weight < limit:
            ready = self._ready
            if ready is not None:
                rows = len(ready.rows)
                if out and weight + rows > limit:
                    break
                out.append(ready)
                weight += rows
                self._ready = None
                continue
            if self.closing:
                break
            if self._frame is not None:
                found = self._complete_frame()
                if found is None:
                    break
                if type(found) is Bulk:
                    self._ready = found  # taken, or held, at the top of the loop
                else:
                    out.append(found)
                    weight += 1
                continue
            if self._at_header or self._buffer.startswith(_BULK_PREFIX):
                taken = self._take_frames(out, limit - weight)
                if taken is None:
                    break
                weight += taken
                continue
            want = limit - weight
            if _decode_lines is not None:
                parsed, used, at_header = _decode_lines(self._buffer, want, parse_request)
                if used:
                    self._buffer = self._buffer[used:]
                out += parsed
                weight += len(parsed)
                if at_header:
                    self._at_header = True  # a frame starts here: its path takes it
                    continue
                if len(parsed) < want:
                    break
                continue
            lines = self._buffer.split(b"\n", want)
            # The last piece is either the incomplete line or, if ``want`` lines were split
            # off, the undecoded rest; in both cases it starts at a line boundary.
            self._buffer = lines.pop()
            self._header_seen = False
            parsed = [
                _new_tuple(Set, match.groups()) if (match := plain_set(line)) else parse(line)
                for line in lines
            ]
            if self._header_seen:
                # A frame starts among these lines: it and what follows go back, unparsed.
                at = parsed.index(BULK_HEADER)
                self._buffer = b"\n".join([*lines[at:], self._buffer])
                self._at_header = True
                del parsed[at:]
                out += parsed
                weight += at
                continue
            out += parsed
            weight += len(parsed)
            if len(parsed) < want:
                break
        self.extra_weight = weight - len(out)
        return out

    def _parse(self, line: bytes) -> Request:
        request = parse_request(line)
        if request is BULK_HEADER:
            self._header_seen = True
        return request

    def _take_frames(self, out: list[Request], room: int) -> int | None:
        """Append to ``out`` the frames at the front of ``_buffer`` that fit in ``room`` (the
        first of a take whatever it weighs), with one slice of the buffer at the end however
        many there are; their weight, or None if none was complete."""
        buffer = self._buffer
        at = 0
        taken = 0
        progress = False
        while True:
            found, end = self._frame_at(buffer, at)
            if found is None:
                break
            progress = True
            at = end
            if type(found) is Bulk:
                rows = len(found.rows)
                if out and taken + rows > room:
                    self._ready = found
                    break
                taken += rows
            else:
                taken += 1
            out.append(found)
            if self.closing or taken >= room or not buffer.startswith(_BULK_PREFIX, at):
                break
        if self._frame is None and not self.closing:
            self._buffer = buffer[at:] if at else buffer
        return taken if progress else None

    def _frame_at(self, buffer: bytes, at: int) -> tuple[Request | None, int]:
        """The frame whose header starts at ``buffer[at]`` and where it ends: a ``Bulk``, the
        ``Invalid`` of a bad row, or the ``Invalid`` that ends the stream; None if the header
        is not complete, or the rows (then moved to ``_frame``, ``_buffer`` emptied)."""
        end = buffer.find(b"\n", at)
        if end < 0:
            return None, at
        self._at_header = False
        header = buffer[at:end]
        count = _bulk_count(header)
        if isinstance(count, Invalid):
            return self._close_with(count), len(buffer)
        start = end + 1
        match = _rows_pattern(count).match(buffer, start)
        if match is None:
            if len(buffer) - start > MAX_BULK_BYTES:
                return self._close_with(FRAME_TOO_LARGE), len(buffer)
            # Not all there: collect the rest as it arrives (see the class docstring).
            self._frame = bytearray(memoryview(buffer)[start:])
            self._frame_rows = count
            self._frame_seen = buffer.count(b"\n", start)
            self._buffer = b""
            return None, len(buffer)
        stop = match.end()
        return self._frame_of(buffer[start:stop], count), stop

    def _complete_frame(self) -> Request | None:
        """The frame collected in ``_frame`` once its rows are all there (see ``_frame_at``);
        None until then."""
        frame = self._frame
        assert frame is not None
        count = self._frame_rows
        if self._frame_seen < count:
            return self._close_with(FRAME_TOO_LARGE) if len(frame) > MAX_BULK_BYTES else None
        data = bytes(frame)
        self._frame = None
        match = _rows_pattern(count).match(data)
        assert match is not None, (count, self._frame_seen)
        stop = match.end()
        self._keep(data[stop:])  # what came after the frame: no line of it was checked yet
        return self._frame_of(data[:stop], count)

    def _frame_of(self, body: bytes, count: int) -> Request:
        """The request of a complete frame: its ``count`` row lines, ``body``."""
        if len(body) > MAX_BULK_BYTES:
            return self._close_with(FRAME_TOO_LARGE)
        if _plain_rows is not None:
            plain = _plain_rows(body)
            if plain is not None and len(plain) == count:
                return _new_tuple(Bulk, (plain,))
        else:
            # A matched row starts at a line start and ends at its LF, so ``count`` matches
            # are every row (a quarter cheaper than a match call per row).
            found = _PLAIN_ROWS(body)
            if len(found) == count:
                return _new_tuple(Bulk, ([_new_tuple(Set, row) for row in found],))
        plain_set = _PLAIN_SET.fullmatch
        rows = [
            _new_tuple(Set, match.groups()) if (match := plain_set(line)) else parse_request(line)
            for line in body[:-1].split(b"\n")
        ]
        if _ROW_TYPES.issuperset(map(type, rows)):
            return _new_tuple(Bulk, (rows,))
        number, row = next((i, r) for i, r in enumerate(rows, 1) if type(r) not in _ROW_TYPES)
        if row is TOO_LONG:
            # Refused like a frame too large: a row that long is no row of a frame.
            return self._close_with(Invalid(f"row {number}: line too long"))
        return Invalid(_row_error(number, row))

    def _close_with(self, refusal: Invalid) -> Invalid:
        """End the stream: ``refusal`` is the last request; nothing more is kept or taken."""
        self.close()
        return refusal

    def close(self) -> None:
        """End the stream here: nothing more is kept or taken, and ``closing`` tells the
        connection to close once it has replied (what a decoder in front of this one, the
        auth gate, uses when it refuses a line)."""
        self.closing = True
        self._buffer = b""
        self._frame = None
        self._discarding = False

    def has_request(self) -> bool:
        """Whether a complete request is waiting to be taken."""
        if self._ready is not None:
            return True
        if self.closing:
            return False
        frame = self._frame
        if frame is not None:
            return self._frame_seen >= self._frame_rows or len(frame) > MAX_BULK_BYTES
        return b"\n" in self._buffer

    def feed(self, data: bytes) -> list[Request]:
        """``receive`` then every request completed (for callers that need no bound)."""
        self.receive(data)
        return self.next_requests(_UNLIMITED)

    def discard_partial(self) -> None:
        """Forget a half-received line or frame, keeping complete requests (on shutdown: the
        half one was never a request, the complete ones were received and are owed replies)."""
        self._buffer = self._buffer[: self._buffer.rfind(b"\n") + 1]
        if self._frame is not None and self._frame_seen < self._frame_rows:
            self._frame = None
        self._discarding = False


_UNLIMITED = 2**62
"""A ``next_requests`` limit no buffer reaches."""

_c = load("minidb.protocol._cline")
if _c is not None:
    _c.bind(Get, Set, Delete, BULK_HEADER, MAX_NAME_CHARS, MAX_VALUE_BYTES)
_decode_lines: Callable[
    [bytes, int, Callable[[bytes], Request]], tuple[list[Request], int, bool]
] | None = _c.decode_lines if _c is not None else None
"""``_cline.decode_lines`` (the C twin of ``next_requests``'s split and regex per line: see
``_cline.c``), or None: then those run in Python."""
_plain_rows: Callable[[bytes], list[Set] | None] | None = (
    _c.plain_rows if _c is not None else None
)
"""``_cline.plain_rows`` (a frame's rows if all are plain SETs, the C twin of ``_PLAIN_ROWS``),
or None."""


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
    if text == "OK" or (text.startswith("OK ") and text[3:].isdigit()):  # OK <n>: a frame
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


