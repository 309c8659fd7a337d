"""A streaming, sans-IO reader of import CSVs: bytes in, good rows and bad rows out.

The input is RFC 4180 CSV (https://www.rfc-editor.org/rfc/rfc4180) with the header exactly
``bucket,key,value``. ``ImportReader.feed(chunk)`` takes the next bytes of the file, in chunks
of any size, and returns the rows completed by them; ``close()`` ends the file. Memory is
bounded whatever the file: a field is at most ``MAX_FIELD_BYTES`` (more fails the task at once
with ``field_too_large``, so an unmatched quote at the top of a 100 MB file fails fast instead
of being read to the end), at most ``EXPECTED_FIELDS`` fields of a row are kept (further ones
are only counted), and the rows returned are those of one chunk.

Why a byte-level reader rather than ``csv.reader`` over a text wrapper: exact 1-based line
numbers of where a row starts (newlines inside quoted fields counted), a UTF-8 error that makes
*one row* bad instead of raising out of the decoder for the whole file, and a field bound that
fails fast. The scanner jumps between special bytes with ``bytes.find`` and a regex, and whole
lines take fast paths whose per-byte work is in C: a common good row (name, name, plain or
quoted value) is one ``_GOOD_ROW`` match, any other row of three plain or quoted fields one
``_QUOTED_ROW`` match, a row without quotes one ``split``; whatever they do not match takes the
byte-level state machine, which is the reference (a property test holds the fast paths to its
results on any bytes). Measured on ``bench/batch_import.py``'s rows (nearly every value is
quoted): 9.75 us of CPU per row with only the split path, 2.8 us with the two matches.

Rules, with the stable codes a caller reports:

Structural (``CsvError``, the task fails, not retryable):
  ``empty_file``          the file has 0 bytes;
  ``bad_header``          the first row is not ``bucket,key,value`` (a UTF-8 BOM before it is
                          accepted, quoting of the header cells too);
  ``unterminated_quote``  a quoted field is still open at the end of the file;
  ``field_too_large``     a field is longer than ``MAX_FIELD_BYTES`` bytes.

Bad rows (``BadRow``, reported in ``errors.csv``; the task decides with ``max_bad_rows``):
  ``wrong_column_count``  not exactly 3 fields;
  ``stray_quote``         a quote inside an unquoted field, or text after a closing quote;
  ``invalid_utf8``        a field is not valid UTF-8;
  ``invalid_bucket`` / ``invalid_key``  not a name of the line protocol (1 to
                          ``MAX_NAME_CHARS`` of ``[A-Za-z0-9_.:/-]``);
  ``value_too_long``      the value is over ``MAX_VALUE_BYTES`` UTF-8 bytes;
  ``value_has_newline``   the value contains LF or CR (the line protocol cannot carry it);
  ``value_has_nul``       the value contains a NUL byte.

Rows end at LF or CRLF outside quotes. A CR not followed by LF is data (so it makes the row bad
via the name or value checks rather than silently splitting it). Lines are counted by LF. A
blank line (no bytes between two terminators) is skipped; a header-only file has zero rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from minidb._accelerators import load
from minidb.batch._errors import CsvError
from minidb.protocol import MAX_NAME_CHARS, MAX_VALUE_BYTES

MAX_FIELD_BYTES = 8192
"""The longest field kept, in bytes: twice the 4096-byte value limit, so a value a little too
long is a bad row with its reason, while an endless field fails the task at once."""
EXPECTED_FIELDS = 3
HEADER = (b"bucket", b"key", b"value")
MAX_REPORTED_CELL_CHARS = 128
"""A bad row's bucket and key are reported cut to this many characters (a field may hold up
to ``MAX_FIELD_BYTES``; a name is at most ``MAX_NAME_CHARS``, so a valid one is never cut)."""

_BOM = b"\xef\xbb\xbf"
_NAME = re.compile(rb"[A-Za-z0-9_.:/-]{1,%d}" % MAX_NAME_CHARS)
_SPECIAL = re.compile(rb'[,"\r\n]')
_ROW_SPECIAL = re.compile(rb'["\r\n]')
_LONG_RUN = re.compile(rb'[^,"\r\n]{%d}' % (MAX_FIELD_BYTES + 1))
# One whole row of exactly three fields, each plain (no quote, comma, CR or LF) or quoted (any
# bytes but CR and LF inside, a quote written twice), ending in LF or CRLF: what a CSV writer
# makes of free text. Each field is one group pair (plain, quoted); the quoted body is matched
# by the unrolled loop ``[^"]*(?:""[^"]*)*``, so the engine never backtracks per byte.
_CELL = rb'(?:([^,"\r\n]*)|"([^"\r\n]*(?:""[^"\r\n]*)*)")'
_QUOTED_ROW = re.compile(_CELL + b"," + _CELL + b"," + _CELL + rb"\r?\n")
# The common good row in one match: a plain bucket and key that are names, and a plain or
# quoted value without CR, LF or NUL. What it matches needs only the value's length and UTF-8
# checked (``_check_row``'s other rules hold by construction); anything else takes the paths
# above, which give every reason.
_NAME_CELL = rb"([A-Za-z0-9_.:/-]{1,%d})" % MAX_NAME_CHARS
_GOOD_ROW = re.compile(
    _NAME_CELL + b"," + _NAME_CELL
    + rb',(?:([^,"\r\n\x00]*)|"([^"\r\n\x00]*(?:""[^"\r\n\x00]*)*)")\r?\n'
)
_QUOTE, _COMMA, _LF, _CR = 0x22, 0x2C, 0x0A, 0x0D
_new_tuple = tuple.__new__
"""Builds a ``GoodRow`` without the Python-level ``__new__`` of a NamedTuple: once per row."""


GoodRows = Callable[[bytes, int, int, list[Any], type, int, int], tuple[int, int]]
"""``good_rows(data, pos, line, out, row_type, max_value, max_name) -> (next pos, rows)``."""


_ccsv = load("minidb.batch._ccsv")
_good_rows: GoodRows | None = None if _ccsv is None else _ccsv.good_rows
"""``_ccsv.good_rows`` (the common row in C, see ``_ccsv.c``), or None."""
ACCELERATED = _good_rows is not None
"""Whether the reader takes its common rows in C."""


class GoodRow(NamedTuple):
    """A row that can be imported; ``line`` is where it starts (1-based, header is line 1).

    The cells are the file's bytes, already checked to be what a line-protocol ``SET``
    carries (names of the grammar, a value of valid UTF-8 without LF, CR or NUL), so they go
    to the wire without a decode and an encode per row. A tuple, not a dataclass: one is built
    per row of the file, and a frozen dataclass costs several times as much to build."""

    line: int
    bucket: bytes
    key: bytes
    value: bytes


@dataclass(frozen=True)
class BadRow:
    """A row that cannot be imported: a stable ``reason`` code, a human ``detail``, and the
    row's bucket and key cells as far as they exist (decoded with replacement, cut to
    ``MAX_REPORTED_CELL_CHARS``) so the error report can name the row."""

    line: int
    reason: str
    detail: str
    bucket: str = ""
    key: str = ""

    def report_cells(self) -> tuple[str, str, str, str]:
        """The row's cells in ``errors.csv``: ``line,reason,bucket,key``."""
        return (str(self.line), self.reason, self.bucket, self.key)


Row = GoodRow | BadRow


@dataclass(frozen=True)
class ImportReaderStatistics:
    """Counters of one reader: bytes fed and rows returned so far."""

    bytes_consumed: int
    rows_good: int
    rows_bad: int
    lines: int


class ImportReader:
    """Parses one import file fed in chunks. Not reusable: one reader per file."""

    def __init__(self) -> None:
        self._head = bytearray()  # the first bytes, until the BOM question is settled
        self._started = False
        self._header_done = False
        self._line = 1  # line of the next byte
        self._row_line = 1  # line where the current row started
        self._field = bytearray()
        self._fields: list[bytes] = []
        self._nfields = 0
        self._row_started = False  # any byte of the current row seen (blank-line detection)
        self._in_quotes = False
        self._pending_quote = False  # inside quotes, the last byte was '"': '""' or the end?
        self._after_quote = False  # a quoted field just closed: a separator must follow
        self._pending_cr = False  # outside quotes, the last byte was CR: CRLF or data?
        self._flag: str | None = None
        self._consumed = 0
        self._good = 0
        self._bad = 0
        self._closed = False

    def statistics(self) -> ImportReaderStatistics:
        """Bytes consumed (for progress), rows returned, and lines seen."""
        return ImportReaderStatistics(self._consumed, self._good, self._bad, self._line)

    @property
    def bytes_consumed(self) -> int:
        """Bytes fed so far."""
        return self._consumed

    def feed(self, chunk: bytes) -> list[Row]:
        """The rows completed by ``chunk`` (raises ``CsvError`` on a structural failure)."""
        if self._closed:
            raise ValueError("feed() after close()")
        self._consumed += len(chunk)
        out: list[Row] = []
        if not self._started:
            self._head += chunk
            if len(self._head) < len(_BOM) and _BOM.startswith(bytes(self._head)):
                return out
            data = bytes(self._head)
            self._head.clear()
            self._started = True
            self._scan(data[len(_BOM):] if data.startswith(_BOM) else data, out)
            return out
        self._scan(chunk, out)
        return out

    def close(self) -> list[Row]:
        """The last row (a file need not end with a newline); checks the file was complete."""
        if self._closed:
            return []
        self._closed = True
        out: list[Row] = []
        if self._consumed == 0:
            raise CsvError("empty_file", "the file is empty (0 bytes)")
        if not self._started:  # fewer bytes than a BOM, all of them a BOM prefix
            self._started = True
            self._scan(bytes(self._head), out)
        if self._in_quotes and not self._pending_quote:
            raise CsvError(
                "unterminated_quote", "a quoted field is not closed at the end of the file",
                line=self._row_line,
            )
        if self._pending_cr:
            self._pending_cr = False
            self._append(b"\r")
        if self._row_started or self._field or self._nfields:
            self._end_row(out)
        if not self._header_done:
            raise CsvError("bad_header", "the file has no header row bucket,key,value", line=1)
        return out

    # --- scanning ---------------------------------------------------------------------------

    def _append(self, data: bytes) -> None:
        if self._after_quote:
            self._flag = self._flag or "stray_quote"
            self._after_quote = False
        self._field += data
        self._row_started = True
        if len(self._field) > MAX_FIELD_BYTES:
            raise CsvError(
                "field_too_large", f"a field is longer than {MAX_FIELD_BYTES} bytes",
                line=self._row_line,
            )

    def _scan(self, data: bytes, out: list[Row]) -> None:
        i, n = 0, len(data)
        while i < n:
            if self._in_quotes:
                if self._pending_quote:
                    self._pending_quote = False
                    if data[i] == _QUOTE:  # '""' is one quote of data
                        self._append(b'"')
                        i += 1
                        continue
                    self._in_quotes = False
                    self._after_quote = True
                    continue
                j = data.find(b'"', i)
                end = n if j < 0 else j
                span = data[i:end]
                self._line += span.count(b"\n")
                self._append(span)
                if j < 0:
                    return
                self._pending_quote = True
                i = j + 1
                continue
            if self._pending_cr:
                self._pending_cr = False
                if data[i] == _LF:
                    i += 1
                    self._end_row(out)
                    self._line += 1
                    self._row_line = self._line
                    continue
                self._append(b"\r")  # a bare CR is data
            if self._at_row_start():
                i = self._fast_rows(data, i, out)
                if i >= n:
                    return
            elif self._nfields >= EXPECTED_FIELDS and not self._after_quote:
                i = self._count_extra_fields(data, i)
            match = _SPECIAL.search(data, i)
            j = n if match is None else match.start()
            if j > i:
                self._append(data[i:j])
            if match is None:
                return
            c = data[j]
            i = j + 1
            if c == _COMMA:
                self._end_field()
                self._row_started = True
            elif c == _LF:
                self._end_row(out)
                self._line += 1
                self._row_line = self._line
            elif c == _CR:
                self._pending_cr = True
            elif not self._field and not self._after_quote:  # a quote opening a field
                self._in_quotes = True
                self._row_started = True
            else:
                self._flag = self._flag or "stray_quote"
                self._after_quote = False
                self._append(b'"')

    def _at_row_start(self) -> bool:
        return not (self._row_started or self._field or self._nfields or self._after_quote)

    def _fast_rows(self, data: bytes, i: int, out: list[Row]) -> int:
        """Whole lines without bare CRs, split in C: lines without quotes by ``split``, rows of
        three plain or quoted fields by one ``_QUOTED_ROW`` match; anything else (a quoted
        field spanning lines, a stray quote, a bare CR, a field too long) stops here and takes
        the byte-level path, which decides every error. Returns where it stopped."""
        match_quoted = _QUOTED_ROW.match
        match_good = _GOOD_ROW.match
        good_rows = _good_rows if self._header_done else None
        while True:
            if good_rows is not None:
                # The common rows in C, up to the first other one, which the code below takes.
                i, taken = good_rows(
                    data, i, self._line, out, GoodRow, MAX_VALUE_BYTES, MAX_NAME_CHARS
                )
                if taken:
                    self._good += taken
                    self._line += taken
                    self._row_line = self._line
            j = data.find(b"\n", i)
            if j < 0:
                return i
            if (
                good_rows is None
                and self._header_done
                and (row := match_good(data, i)) is not None
            ):
                # (No class of the pattern takes a LF: the match ends at this line's.)
                bucket, key, value, quoted = row.groups()
                if value is None:
                    value = quoted.replace(b'""', b'"')
                if len(value) <= MAX_VALUE_BYTES and value.isascii():
                    out.append(_new_tuple(GoodRow, (self._line, bucket, key, value)))
                    self._good += 1
                    self._line += 1
                    self._row_line = self._line
                    i = j + 1
                    continue
            line = data[i:j]
            if line.endswith(b"\r"):
                line = line[:-1]
            if b'"' in line:
                row = match_quoted(data, i)
                if row is None or len(line) > MAX_FIELD_BYTES:
                    return i  # (a long line may hold a field too long: the slow path says)
                bucket, quoted_bucket, key, quoted_key, value, quoted_value = row.groups()
                cells = [
                    bucket if bucket is not None else quoted_bucket.replace(b'""', b'"'),
                    key if key is not None else quoted_key.replace(b'""', b'"'),
                    value if value is not None else quoted_value.replace(b'""', b'"'),
                ]
                self._emit(cells, EXPECTED_FIELDS, None, self._line, out)
                self._line += 1
                self._row_line = self._line
                i = j + 1
                continue
            if b"\r" in line:
                return i
            if line.count(b",") >= EXPECTED_FIELDS:  # a bad row: count, do not split
                if _LONG_RUN.search(line) is not None:
                    return i
                # Only the first two cells are kept, for the error report.
                cells = line.split(b",", EXPECTED_FIELDS - 1)[: EXPECTED_FIELDS - 1]
                self._emit(cells, line.count(b",") + 1, None, self._line, out)
            elif line:
                cells = line.split(b",")
                # No cell of a line this short can be too long: skip the per-cell test.
                if len(line) > MAX_FIELD_BYTES and max(map(len, cells)) > MAX_FIELD_BYTES:
                    return i  # the slow path raises field_too_large with the line
                self._emit(cells[:EXPECTED_FIELDS], len(cells), None, self._line, out)
            self._line += 1
            self._row_line = self._line
            i = j + 1

    def _count_extra_fields(self, data: bytes, i: int) -> int:
        """Fields past the third are only counted: a run of them is skipped in C (a row of a
        million commas costs no Python per comma); returns where it stopped."""
        match = _ROW_SPECIAL.search(data, i)
        span = data[i : len(data) if match is None else match.start()]
        last = span.rfind(b",")
        if last < 0 or _LONG_RUN.search(span) is not None:
            return i  # no comma, or a field too long: the byte-level path decides
        self._append(span[: span.find(b",")])
        self._nfields += span.count(b",")
        self._field.clear()
        return i + last + 1

    def _end_field(self) -> None:
        if self._nfields < EXPECTED_FIELDS:
            self._fields.append(bytes(self._field))
        self._nfields += 1
        self._field.clear()
        self._after_quote = False

    def _end_row(self, out: list[Row]) -> None:
        if self._row_started or self._field or self._nfields:
            self._end_field()
            self._emit(self._fields, self._nfields, self._flag, self._row_line, out)
        self._fields = []
        self._nfields = 0
        self._row_started = False
        self._flag = None

    # --- rows -------------------------------------------------------------------------------

    def _emit(
        self, fields: list[bytes], count: int, flag: str | None, line: int, out: list[Row]
    ) -> None:
        if not self._header_done:
            if flag is not None or count != EXPECTED_FIELDS or tuple(fields) != HEADER:
                raise CsvError("bad_header", "the header must be exactly bucket,key,value",
                               line=line)
            self._header_done = True
            return
        row = _check_row(fields, count, flag, line)
        if isinstance(row, GoodRow):
            self._good += 1
        else:
            self._bad += 1
        out.append(row)


def _check_row(fields: list[bytes], count: int, flag: str | None, line: int) -> Row:
    if count == EXPECTED_FIELDS and flag is None:
        bucket, key, value = fields
        # The common row is ASCII: three C calls instead of three decodes.
        if not (bucket.isascii() and key.isascii() and value.isascii()):
            bad = _utf8_error(fields)
            if bad is not None:
                return _bad(fields, line, "invalid_utf8", bad)
        if _NAME.fullmatch(bucket) is None:
            return _bad(fields, line, "invalid_bucket",
                        f"bucket must be 1-{MAX_NAME_CHARS} of [A-Za-z0-9_.:/-]")
        if _NAME.fullmatch(key) is None:
            return _bad(fields, line, "invalid_key",
                        f"key must be 1-{MAX_NAME_CHARS} of [A-Za-z0-9_.:/-]")
        if len(value) > MAX_VALUE_BYTES:
            return _bad(fields, line, "value_too_long",
                        f"value is {len(value)} bytes, over {MAX_VALUE_BYTES}")
        if b"\n" in value or b"\r" in value:
            return _bad(fields, line, "value_has_newline", "value contains LF or CR")
        if b"\x00" in value:
            return _bad(fields, line, "value_has_nul", "value contains a NUL byte")
        return GoodRow(line, bucket, key, value)
    if count != EXPECTED_FIELDS:
        return _bad(fields, line, "wrong_column_count", f"expected 3 fields, found {count}")
    return _bad(fields, line, flag or "stray_quote",
                "a quote inside an unquoted field or after a closing quote")


def _utf8_error(fields: list[bytes]) -> str | None:
    for field in fields:
        try:
            field.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"invalid UTF-8 at byte {exc.start} of a field"
    return None


def _bad(fields: list[bytes], line: int, reason: str, detail: str) -> BadRow:
    cells = [
        f[: 4 * MAX_REPORTED_CELL_CHARS].decode("utf-8", "replace")[:MAX_REPORTED_CELL_CHARS]
        for f in fields[: EXPECTED_FIELDS - 1]
    ]
    cells += [""] * (EXPECTED_FIELDS - 1 - len(cells))
    return BadRow(line, reason, detail, cells[0], cells[1])


def read_all(chunks: list[bytes]) -> list[Row]:
    """Every row of a file given as chunks (a convenience for tests and small inputs)."""
    reader = ImportReader()
    rows: list[Row] = []
    for chunk in chunks:
        rows.extend(reader.feed(chunk))
    rows.extend(reader.close())
    return rows
