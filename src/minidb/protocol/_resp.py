"""The RESP request decoder, sans-IO: the bytes of each read in, commands (``list[bytes]``) out.

A Redis client sends either multibulk commands (``*2\\r\\n$3\\r\\nGET\\r\\n$1\\r\\nk\\r\\n``) or
inline ones (``PING\\r\\n``, split on blanks with Redis's quoting rules). ``RespDecoder`` frames
both, whatever the read boundaries, and holds back what is not a whole command yet. It is
fed with ``feed(data)`` and drained with ``next_commands(limit)``, which takes at most ``limit``
commands and leaves the rest undecoded, so a connection that stops taking commands (and
stops reading) holds a bounded amount of memory.

Theory of operation
-------------------
The decoder keeps the received bytes split at every CRLF: ``_lines`` is ``buf.split(b"\\r\\n")``
of the bytes not yet consumed, ``_li`` the first line not consumed, and the last element the
unterminated tail. Splitting is one C call per read, and it turns the common command into list
indexing: ``*3``, ``$3``, ``SET``, ``$16``, ``key:...``, ``$3``, ``xxx`` are seven consecutive
lines, and the command is valid exactly when each ``$n`` header is the canonical header of its
data line's length (one tuple lookup per argument, no ``int()``), so the hot path never scans
or copies a byte in Python. Every CRLF is a split point (the pattern cannot overlap itself), so
a bulk whose data contains CRLF spans several lines that are re-joined, and a bulk whose data
is not followed by CRLF is detected by length.

Bytes fed while the decoder waits are kept as a list of chunks and joined with the unconsumed
remainder only when they can make progress: when the wait is for a line, when a chunk brings
an LF; when the wait is for the data of a bulk of known length, when enough bytes arrived. A
16 MiB value arriving in 64 KiB reads is therefore joined once, not once per read. That join is
also the compaction: consumed lines are dropped with the old list.

A command that is only partly received keeps the arguments read so far (``_argv``), so a huge
multibulk arriving slowly is parsed once, not from its start at every read.

Headers end at their first CR, as in Redis (``processMultibulkBuffer`` searches for ``\\r``,
needs one byte after it, and skips that byte unread): ``*1\\rx`` is a whole header and
``*x\\r\\r`` a whole, invalid one. A header line with a CR inside is therefore cut there, and
the rest of its line (or, when the CR was the line's last byte, the LF of the line's CRLF) is
what follows it: ``_header`` rewrites ``_lines`` so that the line it hands back starts there.
The split at CRLF makes the plainly valid case need none of this.

Before authentication (``authenticated`` false, a server with a password) the limits are
Redis's for an unauthenticated client (``UNAUTHENTICATED_*``, the CVE-2021-32675 fix) and
``next_commands`` hands out one command per call, because a pipelined ``AUTH`` lifts them for
the command right after it: Redis decides each command before it parses the next, and the
caller marks the decoder ``authenticated`` between the two.

When the optional C accelerator ``_cresp`` is built (and ``MINIDB_PURE_PYTHON=1`` is not set),
a joined buffer is not split at once: ``scan_raw`` first takes every complete, plainly valid
multibulk command straight from its bytes (``_raw`` from offset ``_pos``; splitting costs more
than the parsing), and only what it leaves is split into lines, where ``scan`` does the same
per line before the Python loop looks at the next one. Anything else (inline, incomplete,
errors) is still decided here, so the Python code stays the reference for every outcome.

Errors
------
Hostile or broken input raises ``RespProtocolError`` with Redis's wording (``reason``) and the
reply to send (``reply``): the connection writes it and closes, as Redis does, because the
stream cannot be resynchronised. Commands that preceded the error in the stream are returned
first; the call after them raises. No other exception escapes, and every numeric field is
bounded in length before it is converted, so no input reaches CPython's integer digit limit.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any, Final

from minidb._accelerators import load
from minidb.errors import ProtocolError
from minidb.protocol._resp_fields import split_inline, strict_int

# Limits, after Redis's src/server.h and src/networking.c.
MAX_INLINE_BYTES: Final = 64 * 1024
"""An inline request longer than this many bytes, or this many bytes of a ``*``/``$`` header
without its CR, is refused (Redis's ``PROTO_INLINE_MAX_SIZE``)."""
DEFAULT_MAX_MULTIBULK_COUNT: Final = 1024 * 1024
"""Arguments one multibulk command may declare once authenticated. Redis allows ``INT_MAX``;
no command of minidb's needs more than a handful of arguments."""
UNAUTHENTICATED_MAX_MULTIBULK_COUNT: Final = 10
"""Arguments a multibulk command may declare before authentication (Redis's networking.c)."""
UNAUTHENTICATED_MAX_BULK_BYTES: Final = 16384
"""Bytes of one argument before authentication (Redis's networking.c). With the count above,
a command of an unauthenticated client holds at most about 160 KiB."""
DEFAULT_MAX_BULK_BYTES: Final = 512 * 1024 * 1024
"""Bytes of one argument (Redis's ``proto-max-bulk-len``); the server passes its own."""
BUFFER_HEADROOM_BYTES: Final = 1024 * 1024
"""Default ``max_buffer_bytes`` is ``max_bulk_bytes`` plus this: one largest argument plus the
rest of its command and a read or two."""
MIN_BUFFER_HEADROOM_BYTES: Final = 2 * MAX_INLINE_BYTES + 64
"""``max_buffer_bytes`` must leave at least this over ``max_bulk_bytes``, or a legal command
(a count line, a bulk header and the largest bulk) could not be held."""
_INT_MAX: Final = 2**31 - 1

# Reasons, word for word as Redis's networking.c sends them after "-ERR ".
INVALID_MULTIBULK: Final = "Protocol error: invalid multibulk length"
INVALID_BULK: Final = "Protocol error: invalid bulk length"
EXPECTED_DOLLAR: Final = "Protocol error: expected '$', got '%s'"
UNBALANCED_QUOTES: Final = "Protocol error: unbalanced quotes in request"
TOO_BIG_MULTIBULK: Final = "Protocol error: too big mbulk count string"
TOO_BIG_BULK: Final = "Protocol error: too big bulk count string"
TOO_BIG_INLINE: Final = "Protocol error: too big inline request"
UNAUTHENTICATED_MULTIBULK: Final = "Protocol error: unauthenticated multibulk length"
UNAUTHENTICATED_BULK: Final = "Protocol error: unauthenticated bulk length"
# minidb's own: Redis skips the two bytes after bulk data unchecked, and closes a connection
# over its query buffer limit without a reply.
EXPECTED_CRLF: Final = "Protocol error: expected CRLF after bulk data"
TOO_BIG_QUERY: Final = "Protocol error: max query buffer length reached"

_CRLF: Final = b"\r\n"
# The fast path recognises canonical headers by lookup: ``*1``..``*64`` and ``$0``..``$4095``.
_COUNTS: Final = {b"*%d" % n: n for n in range(1, 65)}
_FAST_BULK_LIMIT: Final = 4096
_HEADERS: Final = tuple(b"$%d" % n for n in range(_FAST_BULK_LIMIT))
_header_of = _HEADERS.__getitem__

Scan = Callable[[list[bytes], int, int, list[list[bytes]], int, int, int], int]
"""``scan(lines, i, last, out, limit, max_count, max_bulk) -> next i`` (see ``_cresp.c``)."""
ScanRaw = Callable[[bytes, int, list[list[bytes]], int, int, int], int]
"""``scan_raw(buf, pos, out, limit, max_count, max_bulk) -> next pos`` (see ``_cresp.c``)."""


_cresp = load("minidb.protocol._cresp")
"""The C scans and ``take_whole``, or None when they are switched off or were not built."""
_scan: Scan | None = None if _cresp is None else _cresp.scan
_scan_raw: ScanRaw | None = None if _cresp is None else _cresp.scan_raw
ACCELERATED: Final = _scan is not None
"""Whether the decoder's hot loop runs in C."""

_WAIT: Final = -1
_FAILED: Final = -2
_NO_LIMIT: Final = sys.maxsize


class RespProtocolError(ProtocolError):
    """The request stream broke RESP; answer ``reply`` and close the connection."""

    @property
    def reply(self) -> bytes:
        """The wire form of the answer: ``-ERR <reason>\\r\\n``."""
        # latin-1: a reason that quotes a raw byte sends that byte back, as Redis does.
        return b"-ERR " + self.reason.encode("latin-1") + _CRLF


@dataclass(frozen=True, slots=True)
class RespDecoderStatistics:
    """Counters of one decoder (one connection)."""

    commands: int
    """Commands returned so far."""
    bytes_fed: int
    """Bytes taken by ``feed`` (those dropped after an overflow excluded)."""
    buffered: int
    """Bytes received and not yet returned as commands."""


def _expected_dollar(header: bytes) -> str:
    # An empty line means the byte found was the CR of its CRLF; Redis turns CR and LF in an
    # error into spaces so the reply stays one line.
    c = header[0] if header else 13
    return EXPECTED_DOLLAR % (" " if c in (10, 13) else chr(c))


class RespDecoder:
    """Turns one connection's byte stream into commands, a bounded number at a time.

    ``feed`` never parses and never raises; ``next_commands`` parses and raises
    ``RespProtocolError`` once the commands before a protocol error have been returned.
    """

    __slots__ = (
        "_argv",
        "_argv_bytes",
        "_authenticated",
        "_bulk",
        "_bulk_limit",
        "_bytes_fed",
        "_chunks",
        "_chunks_len",
        "_commands",
        "_count_limit",
        "_error",
        "_fast",
        "_fresh",
        "_left",
        "_li",
        "_lines",
        "_max_buffer",
        "_max_bulk",
        "_max_count",
        "_merged",
        "_need",
        "_overflow",
        "_pos",
        "_raw",
        "_ready",
        "_want",
    )

    def __init__(
        self,
        *,
        max_bulk_bytes: int = DEFAULT_MAX_BULK_BYTES,
        max_multibulk_count: int = DEFAULT_MAX_MULTIBULK_COUNT,
        max_buffer_bytes: int | None = None,
        authenticated: bool = True,
    ) -> None:
        if max_buffer_bytes is None:
            max_buffer_bytes = max_bulk_bytes + BUFFER_HEADROOM_BYTES
        if max_bulk_bytes < 0 or max_multibulk_count < 1:
            raise ValueError("max_bulk_bytes must be >= 0 and max_multibulk_count >= 1")
        if max_buffer_bytes < max_bulk_bytes + MIN_BUFFER_HEADROOM_BYTES:
            raise ValueError(
                f"max_buffer_bytes must be at least max_bulk_bytes + {MIN_BUFFER_HEADROOM_BYTES}"
            )
        self._max_bulk = max_bulk_bytes
        self._max_count = max_multibulk_count
        self._max_buffer = max_buffer_bytes
        self.authenticated = authenticated  # sets the limits in force and the fast path
        self._lines: list[bytes] = [b""]
        self._li = 0
        self._raw: bytes | None = None  # a joined buffer not split yet (accelerated only)
        self._pos = 0  # ... consumed up to here
        self._merged = 0  # bytes in _lines when they were split (consumed ones included)
        self._chunks: list[bytes] = []
        self._chunks_len = 0
        self._ready = False  # the chunks may complete something: join them before parsing
        self._need = 1  # ... which they do once _chunks_len reaches this
        self._want: bytes | None = None  # ... or once a chunk brings this byte (LF, or CR)
        self._argv: list[bytes] | None = None  # a multibulk command partly read
        self._left = 0  # its arguments still to read
        self._bulk = -1  # length of the argument whose data starts at _li, or -1: header next
        self._argv_bytes = 0
        self._overflow = False
        self._error: RespProtocolError | None = None
        self._fresh: bytes | None = None  # a read kept whole while nothing else is held
        self._commands = 0
        self._bytes_fed = 0

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as commands (arguments read so far included)."""
        lines = self._lines
        li = self._li
        rest = sum(map(len, islice(lines, li, None))) + 2 * (len(lines) - li - 1)
        if self._raw is not None:
            rest += len(self._raw) - self._pos
        if self._fresh is not None:
            rest += len(self._fresh)
        return rest + self._chunks_len + self._argv_bytes

    @property
    def authenticated(self) -> bool:
        """Whether the connection has authenticated; until it has, Redis's limits for an
        unauthenticated client apply and ``next_commands`` returns one command per call.
        The caller sets it after each command that changes it (``AUTH``, ``RESET``)."""
        return self._authenticated

    @authenticated.setter
    def authenticated(self, authenticated: bool) -> None:
        self._authenticated = authenticated
        count, bulk = self._max_count, self._max_bulk
        if not authenticated:
            count = min(count, UNAUTHENTICATED_MAX_MULTIBULK_COUNT)
            bulk = min(bulk, UNAUTHENTICATED_MAX_BULK_BYTES)
        self._count_limit = count
        self._bulk_limit = bulk
        # The fast path's tables accept any header up to their size, so they may only be
        # trusted when the limits in force are at least as large.
        self._fast = bulk >= _FAST_BULK_LIMIT - 1 and count >= 64

    @property
    def error(self) -> RespProtocolError | None:
        """The protocol error met so far, if any (``next_commands`` raises it when due)."""
        return self._error

    def statistics(self) -> RespDecoderStatistics:
        """A snapshot of the counters."""
        return RespDecoderStatistics(self._commands, self._bytes_fed, self.buffered)

    def feed(self, data: bytes) -> None:
        """Take the bytes of one read. Cheap: parsing happens in ``next_commands``.

        Past ``max_buffer_bytes`` held, the data is dropped and the stream ends, after the
        commands already held, with ``TOO_BIG_QUERY``.
        """
        size = len(data)
        if not size or self._overflow or self._error is not None:
            return
        if type(data) is not bytes:
            data = bytes(data)
        if self._fresh is not None:
            self._spill(self._fresh)
        if self._merged + self._argv_bytes + self._chunks_len + size > self._max_buffer:
            self._merge()  # drop what was consumed; the bound is on what is really held
            if self._merged + self._argv_bytes + size > self._max_buffer:
                self._overflow = True
                self._ready = True
                return
        self._bytes_fed += size
        if _scan_raw is not None and self._holds_nothing():
            # Nothing held: keep the read whole for ``next_commands`` to try in one C scan
            # (the read of a client that waits for each reply, ``redis-benchmark -P 1``).
            self._fresh = data
            return
        self._chunks.append(data)
        self._chunks_len += size
        if not self._ready and (
            self._chunks_len >= self._need or (self._want is not None and self._want in data)
        ):
            self._ready = True

    def take_whole(
        self, data: bytes, take: Callable[..., tuple[Any, ...] | None], lane: object
    ) -> tuple[Any, ...] | None:
        """Lend the C scan to ``take`` for ``data``, a read that came while nothing is held:
        ``take(scan_raw, data, max_count, max_bulk, lane)`` decodes it whole, or answers None
        when it is not entirely plainly valid commands, and may act on them (the store's
        express lane: ``store.express``, whose first item is the commands). What it took is
        counted as fed and decoded; on None nothing was taken: ``feed`` it. Always None
        without the C scan."""
        if (
            _scan_raw is None
            or not self._authenticated
            or self._fresh is not None
            or self._overflow
            or self._error is not None
            or type(data) is not bytes
            # _holds_nothing(), spelled out: this runs once per read
            or self._chunks
            or self._raw is not None
            or self._argv is not None
            or self._li != len(self._lines) - 1
            or self._lines[-1]
        ):
            return None
        taken = take(_scan_raw, data, self._count_limit, self._bulk_limit, lane)
        if taken is not None:
            self._bytes_fed += len(data)
            self._commands += len(taken[0])
        return taken

    def next_commands(self, limit: int = _NO_LIMIT) -> list[list[bytes]]:
        """Up to ``limit`` complete commands, in order; [] when none is complete yet.

        Raises ``RespProtocolError`` when the next thing in the stream is a protocol error.
        Before authentication ``limit`` is taken as 1 (see ``authenticated``).
        """
        if self._error is not None:
            raise self._error
        if not self._authenticated:
            limit = 1
        out: list[list[bytes]] = []
        fresh = self._fresh
        if fresh is not None:
            # A read that came while nothing was held: when it is nothing but plainly valid
            # commands, at most ``limit``, one C call decodes it and nothing is stored.
            self._fresh = None
            assert _scan_raw is not None  # (only kept when the accelerator is there)
            if _scan_raw(fresh, 0, out, limit, self._count_limit, self._bulk_limit) == len(fresh):
                self._commands += len(out)
                return out
            out.clear()  # anything else: the general path decodes it from the start
            self._spill(fresh)
        while True:
            if self._ready:
                self._merge()
            at_end = self._parse(out, limit)
            if self._error is not None:
                if out:
                    break
                raise self._error
            if not (at_end and self._ready):
                break
        self._commands += len(out)
        return out

    # -- internals ------------------------------------------------------------------------

    def _holds_nothing(self) -> bool:
        """Whether no byte of an unfinished command is held (a read starts a command)."""
        return (
            not self._chunks
            and self._raw is None
            and self._argv is None
            and self._li == len(self._lines) - 1
            and not self._lines[-1]
        )

    def _spill(self, fresh: bytes) -> None:
        """Hand ``fresh``, a read kept whole, to the general path as a chunk to parse."""
        self._fresh = None
        self._chunks.append(fresh)
        self._chunks_len += len(fresh)
        self._ready = True

    def _merge(self) -> None:
        lines = self._lines
        li = self._li
        head = lines[li] if li == len(lines) - 1 else _CRLF.join(islice(lines, li, None))
        if self._raw is not None:  # then _lines is [b""]
            head = self._raw[self._pos :]
            self._raw = None
        chunks = self._chunks
        if not chunks:
            buf = head
        elif not head and len(chunks) == 1:
            buf = chunks[0]
        else:
            chunks.insert(0, head)
            buf = b"".join(chunks)
        if _scan_raw is not None and self._argv is None:
            self._raw = buf
            self._pos = 0
            self._lines = [b""]
        else:
            self._lines = buf.split(_CRLF)
        self._li = 0
        self._merged = len(buf)
        self._chunks = []
        self._chunks_len = 0
        self._ready = False

    def _parse(self, out: list[list[bytes]], limit: int) -> bool:
        """Append commands to ``out``; True if stopped for want of data, False at ``limit``."""
        if self._raw is not None and _scan_raw is not None:
            buf = self._raw
            pos = _scan_raw(buf, self._pos, out, limit, self._count_limit, self._bulk_limit)
            if len(out) >= limit and pos < len(buf):
                self._pos = pos
                return False
            self._raw = None
            self._li = 0
            if pos == len(buf):  # all taken: the common end of a read, made cheap
                self._lines = [b""]
                return self._wait_bytes(0, 1)
            self._lines = buf[pos:].split(_CRLF) if pos else buf.split(_CRLF)
        lines = self._lines
        i = self._li
        last = len(lines) - 1
        fast = self._fast
        max_count = self._count_limit
        counts_get = _COUNTS.get
        headers = _HEADERS
        count = len(out)
        scan = _scan
        scanning = scan is not None  # off after an inline request: the next is likely inline too
        max_bulk = self._bulk_limit
        while count < limit:
            if scanning and scan is not None and self._argv is None:
                i = scan(lines, i, last, out, limit, max_count, max_bulk)
                count = len(out)
                if count >= limit:
                    break
            if self._argv is not None:
                i = self._multibulk(lines, i, last, out)
                if i < 0:
                    return True
                count += 1
                continue
            line = lines[i]
            n = counts_get(line)
            if n is not None and fast and i + 2 * n < last:
                # The whole command is here: it is valid if every header is the canonical
                # header of its data line's length. SET and GET (3 and 2 arguments) are
                # unrolled: that is several times cheaper than the general loop.
                try:
                    if n == 3:
                        a = lines[i + 2]
                        b = lines[i + 4]
                        c = lines[i + 6]
                        if (
                            headers[len(a)] == lines[i + 1]
                            and headers[len(b)] == lines[i + 3]
                            and headers[len(c)] == lines[i + 5]
                        ):
                            out.append([a, b, c])
                            count += 1
                            i += 7
                            continue
                    elif n == 2:
                        a = lines[i + 2]
                        b = lines[i + 4]
                        if headers[len(a)] == lines[i + 1] and headers[len(b)] == lines[i + 3]:
                            out.append([a, b])
                            count += 1
                            i += 5
                            continue
                    else:
                        end = i + 2 * n
                        argv = lines[i + 2 : end + 1 : 2]
                        if list(map(_header_of, map(len, argv))) == lines[i + 1 : end : 2]:
                            out.append(argv)
                            count += 1
                            i = end + 1
                            continue
                except IndexError:  # an argument too long for the table: slow path
                    pass
            if line[:1] == b"*":
                if i == last or (n is None and b"\r" in line):
                    found = self._header(lines, i, last, TOO_BIG_MULTIBULK)
                    if found is None:
                        return True
                    line, i = found
                    n = None
                else:
                    i += 1
                if n is None:
                    n = strict_int(line[1:])
                    if n is None or n > _INT_MAX:
                        return self._fail(INVALID_MULTIBULK)
                if n > max_count:
                    # Redis's order: over 10 before AUTH is that, whatever minidb's cap says.
                    early = not self._authenticated and n > UNAUTHENTICATED_MAX_MULTIBULK_COUNT
                    return self._fail(UNAUTHENTICATED_MULTIBULK if early else INVALID_MULTIBULK)
                scanning = scan is not None
                if n > 0:  # Redis ignores ``*0`` and ``*-1``
                    self._argv = []
                    self._left = n
                    self._bulk = -1
                    self._argv_bytes = 0
                continue
            # An inline request ends at the first LF; CRLF was already split away.
            scanning = False
            lf = line.find(b"\n")
            if lf < 0:
                if i == last:
                    if not line:
                        return self._wait_bytes(i, 1)
                    if len(line) > MAX_INLINE_BYTES + 1:
                        return self._fail(TOO_BIG_INLINE)
                    # +2: room for the CR of a CRLF not arrived whole.
                    return self._wait_for(i, b"\n", MAX_INLINE_BYTES + 2 - len(line))
                i += 1
            else:
                lines[i] = line[lf + 1 :]
                line = line[: lf - 1] if line[lf - 1 : lf] == b"\r" else line[:lf]
            if len(line) > MAX_INLINE_BYTES:
                self._li = i
                return self._fail(TOO_BIG_INLINE)
            words = split_inline(line)
            if words is None:
                self._li = i
                return self._fail(UNBALANCED_QUOTES)
            if words:  # an empty line is no command
                out.append(words)
                count += 1
        self._li = i
        return False

    def _multibulk(self, lines: list[bytes], i: int, last: int, out: list[list[bytes]]) -> int:
        """Read ``_argv`` on from line ``i``; append it to ``out`` and return the next line,
        or return _WAIT or _FAILED."""
        argv = self._argv
        assert argv is not None
        left = self._left
        size = self._bulk
        while left:
            if size < 0:
                header = lines[i]
                if i == last or b"\r" in header:
                    self._left = left
                    self._bulk = -1
                    found = self._header(lines, i, last, TOO_BIG_BULK)
                    if found is None:
                        return _WAIT  # or failed: _error says which
                    header, i = found
                else:
                    i += 1
                if header[:1] != b"$":
                    self._fail(_expected_dollar(header))
                    return _FAILED
                parsed = strict_int(header[1:])
                if parsed is None or parsed < 0 or parsed > self._bulk_limit:
                    # Redis's order: an invalid length first, then over 16384 before AUTH.
                    invalid = parsed is None or parsed < 0 or parsed > self._max_bulk
                    self._fail(INVALID_BULK if invalid else UNAUTHENTICATED_BULK)
                    return _FAILED
                size = parsed
            data = lines[i]
            if i < last and len(data) == size:
                i += 1
            else:
                # The data holds CRLFs, is cut short, or overruns: measure lines until
                # ``size`` bytes plus their CRLF are covered.
                k = i
                total = len(data)
                while total < size and k < last:
                    k += 1
                    total += 2 + len(lines[k])
                if total == size and k < last:
                    data = _CRLF.join(lines[i : k + 1])
                    i = k + 1
                elif total >= size + 2:
                    blob = _CRLF.join(lines[i : k + 1])
                    if blob[size : size + 2] != _CRLF:
                        self._fail(EXPECTED_CRLF)
                        return _FAILED
                    data = blob[:size]
                    lines[k] = blob[size + 2 :]
                    i = k
                elif k < last:  # exactly one byte after the data, then a CRLF: not ours
                    self._fail(EXPECTED_CRLF)
                    return _FAILED
                else:
                    self._left = left
                    self._bulk = size
                    self._wait_bytes(i, size + 2 - total)
                    return _WAIT
            argv.append(data)
            self._argv_bytes += size
            size = -1
            left -= 1
        self._argv = None
        self._bulk = -1
        self._left = 0
        self._argv_bytes = 0
        out.append(argv)
        return i

    def _header(
        self, lines: list[bytes], i: int, last: int, too_big: str
    ) -> tuple[bytes, int] | None:
        """The ``*``/``$`` header starting line ``i``, when that line holds a CR or is the
        unterminated tail, and the line where what follows it starts; None when it is not
        complete yet (waiting) or too big (failed).

        As Redis: the header ends at its first CR once one byte follows it, and that byte is
        skipped unread; more than ``MAX_INLINE_BYTES`` without a CR is too big.
        """
        line = lines[i]
        cr = line.find(b"\r")
        if cr < 0:  # the tail, no CR yet
            if len(line) > MAX_INLINE_BYTES:
                self._fail(too_big)
                return None
            self._wait_for(i, b"\r", MAX_INLINE_BYTES + 1 - len(line))
            return None
        if cr + 1 < len(line):
            lines[i] = line[cr + 2 :]
            return line[:cr], i
        if i == last:  # the CR is the last byte received
            self._wait_bytes(i, 1)
            return None
        # The CR ends its line: the byte skipped is the CR of the line's CRLF, and its LF is
        # the first byte of what follows.
        lines[i + 1] = b"\n" + lines[i + 1]
        return line[:cr], i + 1

    def _wait_for(self, i: int, end: bytes, need: int) -> bool:
        # A line completes only with ``end`` (LF for an inline line, CR for a header), or
        # fails once ``need`` more bytes take it past its limit.
        self._li = i
        self._want = end
        self._need = need
        return self._waiting(any(end in chunk for chunk in self._chunks))

    def _wait_bytes(self, i: int, need: int) -> bool:
        self._li = i
        self._want = None
        self._need = need
        return self._waiting(False)

    def _waiting(self, lf_arrived: bool) -> bool:
        if self._overflow and not self._chunks:
            return self._fail(TOO_BIG_QUERY)
        self._ready = lf_arrived or self._chunks_len >= self._need
        return True

    def _fail(self, reason: str) -> bool:
        self._error = RespProtocolError(reason)
        self._argv = None
        return True

    # The Python take_whole, kept when the accelerator replaces it (below): the reference, and
    # what the C method hands what it does not take itself (a subclass, an unset slot).
    take_whole_py = take_whole


if _cresp is not None:
    # take_whole in C: its dozen checks read the decoder's slots at their offsets, with no
    # frame, once per read of the express lane.
    RespDecoder.take_whole = _cresp.take_whole_method(  # type: ignore[method-assign]
        RespDecoder, RespDecoder.take_whole_py
    )
