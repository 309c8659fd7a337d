"""The streaming import reader: exact rows and line numbers, bad rows with reasons, structural
failures with stable codes, bounded memory on hostile input."""

from __future__ import annotations

import csv
import io
import itertools
import tracemalloc
from collections.abc import Iterator
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.batch import _csv_import
from minidb.batch._csv_import import (
    MAX_FIELD_BYTES,
    BadRow,
    GoodRow,
    ImportReader,
    Row,
    read_all,
)
from minidb.batch._errors import CsvError
from minidb.protocol import MAX_VALUE_BYTES

pytestmark = pytest.mark.accelerator  # its C twin is driven by every test

HEAD = b"bucket,key,value\n"


def good(line: int, bucket: str, key: str, value: str) -> GoodRow:
    """The ``GoodRow`` of these cells (a good row carries the file's UTF-8 bytes)."""
    return GoodRow(line, bucket.encode(), key.encode(), value.encode())


def rows(data: bytes) -> list[Row]:
    """All rows of ``data`` fed in one chunk."""
    return read_all([data])


def reasons(data: bytes) -> list[tuple[int, str]]:
    """(line, reason or 'ok') of every row."""
    return [(r.line, r.reason if isinstance(r, BadRow) else "ok") for r in rows(data)]


def code(data: bytes | list[bytes]) -> str:
    """The structural error code the file fails with."""
    with pytest.raises(CsvError) as info:
        read_all(data if isinstance(data, list) else [data])
    return info.value.code


def test_good_rows_with_lines() -> None:
    """Plain rows are returned with the line they start on (the header is line 1)."""
    assert rows(HEAD + b"b,k,v\nb2,k2,hello world\n") == [
        good(2, "b", "k", "v"), good(3, "b2", "k2", "hello world"),
    ]


def test_header_only_is_zero_rows() -> None:
    """A file with only the header imports nothing and succeeds."""
    assert rows(b"bucket,key,value") == []
    assert rows(HEAD) == []


def test_last_row_without_newline() -> None:
    """The final row need not end with a newline."""
    assert rows(HEAD + b"b,k,v") == [good(2, "b", "k", "v")]


def test_crlf_and_lf_read_the_same() -> None:
    """CRLF and LF terminators give the same rows and lines."""
    lf = HEAD + b'b,k,v\n"b","k","x,y"\nb,k3,z\n'
    assert rows(lf) == rows(lf.replace(b"\n", b"\r\n"))


def test_quoted_fields_rfc4180() -> None:
    """Quoted fields may hold commas, doubled quotes, and be empty."""
    assert rows(HEAD + b'"b","k","a,""b"",c"\nb,k2,""\nb,k3,""""\n') == [
        good(2, "b", "k", 'a,"b",c'), good(3, "b", "k2", ""), good(4, "b", "k3", '"'),
    ]


def test_line_numbers_count_newlines_inside_quotes() -> None:
    """A row after a multi-line quoted field gets its physical line number."""
    data = HEAD + b'b,k,"one\ntwo\nthree"\nb,k2,v\n'
    assert reasons(data) == [(2, "value_has_newline"), (5, "ok")]


def test_blank_lines_are_skipped() -> None:
    """Empty lines between and after rows are not rows."""
    assert reasons(HEAD + b"\nb,k,v\n\r\n\n") == [(3, "ok")]


def test_utf8_bom_before_the_header_is_accepted() -> None:
    """A UTF-8 BOM (as spreadsheets write) is skipped, even split across chunks."""
    assert read_all([b"\xef", b"\xbb", b"\xbfbucket,key,value\nb,k,v\n"]) == [
        good(2, "b", "k", "v"),
    ]


def test_quoted_header_is_accepted() -> None:
    """The header cells may be quoted."""
    assert rows(b'"bucket","key","value"\nb,k,v\n') == [good(2, "b", "k", "v")]


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"b,k", "wrong_column_count"),
        (b"b,k,v,extra", "wrong_column_count"),
        (b",", "wrong_column_count"),
        (b"b,k,a\"b", "stray_quote"),
        (b'b,k,"a"b', "stray_quote"),
        (b'"b"x,k,v', "stray_quote"),
        (b'b,k,"a" ', "stray_quote"),
        (b"b,k,\xff\xfe", "invalid_utf8"),
        (b"b,\xc3,v", "invalid_utf8"),
        (b",k,v", "invalid_bucket"),
        (b"b b,k,v", "invalid_bucket"),
        (b"b,,v", "invalid_key"),
        (b"b,k\x00,v", "invalid_key"),
        (b"b,k\rx,v", "invalid_key"),
        (b"b," + b"k" * 65 + b",v", "invalid_key"),
        (b"b,k\xc3\xa9,v", "invalid_key"),
        (b"b,k,a\rb", "value_has_newline"),
        (b'b,k,"a\nb"', "value_has_newline"),
        (b"b,k,a\x00b", "value_has_nul"),
        (b"b,k," + b"x" * (MAX_VALUE_BYTES + 1), "value_too_long"),
    ],
)
def test_bad_rows_have_reasons(line: bytes, reason: str) -> None:
    """Each kind of bad row is reported with its reason, and the next row is still read."""
    got = reasons(HEAD + line + b"\nb,next,v\n")
    assert got[0] == (2, reason)
    assert got[-1][1] == "ok"


def test_value_at_the_limit_is_good() -> None:
    """A value of exactly MAX_VALUE_BYTES bytes (multi-byte UTF-8 included) imports."""
    value = "é" * (MAX_VALUE_BYTES // 2)
    assert rows(HEAD + b"b,k," + value.encode() + b"\n") == [good(2, "b", "k", value)]


def test_nul_and_unicode_values() -> None:
    """Non-ASCII UTF-8 values import verbatim; formula-like values are not altered."""
    assert rows(HEAD + "b,k,=1+1 ünï ✓\n".encode()) == [good(2, "b", "k", "=1+1 ünï ✓")]


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"", "empty_file"),
        (b"\n", "bad_header"),
        (b"\xef\xbb\xbf", "bad_header"),
        (b"\xef\xbb", "bad_header"),
        (b"bucket,key\nb,k\n", "bad_header"),
        (b"Bucket,Key,Value\n", "bad_header"),
        (b"bucket,key,value,x\n", "bad_header"),
        (b"bucket ,key,value\n", "bad_header"),
        (b"b,k,v\n", "bad_header"),
        (b'"bucket"x,key,value\n', "bad_header"),
        (HEAD + b'b,k,"never closed\nb,k,v\n', "unterminated_quote"),
        (b'"bucket,key,value\n', "unterminated_quote"),
        (HEAD + b"b,k," + b"x" * (MAX_FIELD_BYTES + 1) + b"\n", "field_too_large"),
        (HEAD + b'b,k,"' + b"x" * (MAX_FIELD_BYTES + 1) + b'"\n', "field_too_large"),
    ],
)
def test_structural_failures_have_stable_codes(data: bytes, expected: str) -> None:
    """Files that are not import CSVs at all fail with their code."""
    assert code(data) == expected


def test_unterminated_quote_names_the_line_where_it_opened() -> None:
    """The error points at the row whose quote never closes."""
    with pytest.raises(CsvError) as info:
        rows(HEAD + b"b,k,v\nb,k,\"open\nmore\nmore\n")
    assert info.value.line == 3


def _endless(prefix: bytes, filler: bytes, chunk: int, total: int) -> Iterator[bytes]:
    yield prefix
    for _ in range(total // chunk):
        yield filler * chunk


def test_huge_quoted_field_fails_fast_in_constant_memory() -> None:
    """A 100 MB quoted field streamed in chunks fails with field_too_large after ~8 KiB."""
    reader = ImportReader()
    fed = 0
    with pytest.raises(CsvError) as info:
        for chunk in _endless(HEAD + b'b,k,"', b"x", 4096, 100 * 1024 * 1024):
            fed += len(chunk)
            reader.feed(chunk)
    assert info.value.code == "field_too_large" and info.value.line == 2
    assert fed < 4 * MAX_FIELD_BYTES


def test_huge_unquoted_line_fails_fast() -> None:
    """A 100 MB line without separators fails the same way, without reading it all."""
    reader = ImportReader()
    with pytest.raises(CsvError, match="longer than"):
        for chunk in _endless(HEAD, b"y", 65536, 100 * 1024 * 1024):
            reader.feed(chunk)
    assert reader.bytes_consumed < 200_000


def test_a_million_commas_is_one_bad_row_in_bounded_memory() -> None:
    """A row with endless empty fields is counted, not stored: one wrong_column_count row."""
    tracemalloc.start()
    try:
        reader = ImportReader()
        out: list[Row] = []
        for chunk in _endless(HEAD + b"b,k,v", b",", 65536, 4 * 1024 * 1024):
            out += reader.feed(chunk)
        out += reader.feed(b"\n") + reader.close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(r.line, r.reason) for r in out if isinstance(r, BadRow)] == [(2, "wrong_column_count")]
    assert peak < 1024 * 1024


def test_streaming_a_large_file_keeps_memory_bounded() -> None:
    """Streaming 1 MB of rows in 64 KiB chunks never holds more than about one chunk."""
    row = b'b,key-%07d,"value, with ""quotes"""\r\n'
    chunk = b"".join(row % i for i in range(2000))
    tracemalloc.start()
    try:
        reader = ImportReader()
        count = len(reader.feed(HEAD))
        for _ in range(1024 * 1024 // len(chunk)):
            count += len(reader.feed(chunk))
        count += len(reader.close())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 2000 * (1024 * 1024 // len(chunk))
    assert peak < 4 * len(chunk) + 2 * 1024 * 1024


def test_bytes_consumed_tracks_progress() -> None:
    """bytes_consumed counts every byte fed."""
    reader = ImportReader()
    reader.feed(HEAD)
    reader.feed(b"b,k,v\n")
    assert reader.bytes_consumed == len(HEAD) + 6
    stats = reader.statistics()
    assert stats.rows_good == 1 and stats.rows_bad == 0


def test_feed_after_close_is_an_error() -> None:
    """A closed reader takes no more input."""
    reader = ImportReader()
    reader.feed(HEAD)
    reader.close()
    with pytest.raises(ValueError):
        reader.feed(b"x")


# --- properties -----------------------------------------------------------------------------

names = st.text(alphabet="abcXYZ019_.:/-", min_size=1, max_size=64)
values = st.text(
    alphabet=st.characters(blacklist_characters="\r\n\x00", blacklist_categories=("Cs",)),
    max_size=200,
)
_TOKENS = [b",", b'"', b'""', b"\r", b"\n", b"\r\n", b"a", b"b", b"k", b"\x00", b"\xff", b"\xc3"]
hostile = st.one_of(
    st.binary(max_size=300),
    st.lists(st.sampled_from(_TOKENS), max_size=120).map(b"".join),
).map(lambda b: HEAD + b)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(names, names, values), max_size=20), st.sampled_from(["\r\n", "\n"]))
def test_stdlib_writer_output_reads_back_exactly(
    cells: list[tuple[str, str, str]], terminator: str
) -> None:
    """Whatever the stdlib csv writer writes (either terminator), we read the same cells."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=terminator)
    writer.writerow(["bucket", "key", "value"])
    writer.writerows(cells)
    got = rows(buffer.getvalue().encode())
    assert [(r.bucket, r.key, r.value) for r in got if isinstance(r, GoodRow)] == [
        tuple(c.encode() for c in row) for row in cells
    ]
    assert len(got) == len(cells)


@settings(max_examples=300, deadline=None)
@given(hostile, st.lists(st.integers(0, 400), max_size=6))
def test_chunking_never_changes_the_result(data: bytes, cuts: list[int]) -> None:
    """Any split of the bytes into chunks gives the same rows or the same error code."""

    def outcome(chunks: list[bytes]) -> object:
        try:
            return read_all(chunks)
        except CsvError as exc:
            return (exc.code, exc.line)

    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in itertools.pairwise([0, *points, len(data)])]
    assert outcome(chunks) == outcome([data])
    assert outcome([data[i : i + 1] for i in range(len(data))]) == outcome([data])


@settings(max_examples=300, deadline=None)
@given(hostile)
def test_hostile_bytes_agree_with_the_stdlib_reader_on_good_rows(data: bytes) -> None:
    """Where we accept a row, the stdlib reader (strict mode) reads the same cells there."""
    try:
        got = rows(data)
    except CsvError:
        return
    good = [r for r in got if isinstance(r, GoodRow)]
    if len(good) != len(got):
        return  # with bad rows around, the two readers may resynchronise differently
    try:
        text = data.decode("utf-8")
        theirs = [r for r in csv.reader(io.StringIO(text, newline=""), strict=True) if r]
    except (UnicodeDecodeError, csv.Error):
        return
    assert [[c.decode() for c in r[1:]] for r in good] == theirs[1:]


class _ByteLevelReader(ImportReader):
    """The reader with its line-level fast paths off: every byte takes the state machine."""

    def _fast_rows(self, data: bytes, i: int, out: list[Row]) -> int:
        return i


def _outcome(reader: ImportReader, data: bytes) -> object:
    try:
        return [*reader.feed(data), *reader.close()]
    except CsvError as exc:
        return (exc.code, exc.line)


quoted_values = st.text(alphabet='ab ,;"\'xé', max_size=40)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(names, names, quoted_values), max_size=12),
    st.sampled_from(["\r\n", "\n"]),
    st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL, csv.QUOTE_NONNUMERIC]),
)
def test_quoted_rows_read_the_same_by_line_and_by_byte(
    cells: list[tuple[str, str, str]], terminator: str, quoting: int
) -> None:
    """Rows with quoted fields (commas, doubled quotes, any quoting style) read exactly as
    the byte-level state machine reads them, and as the cells written."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=terminator, quoting=quoting)
    writer.writerow(["bucket", "key", "value"])
    writer.writerows(cells)
    data = buffer.getvalue().encode()
    fast = _outcome(ImportReader(), data)
    assert fast == _outcome(_ByteLevelReader(), data)
    assert [(r.bucket, r.key, r.value) for r in fast] == [  # type: ignore[union-attr]
        tuple(c.encode() for c in row) for row in cells
    ]


@settings(max_examples=500, deadline=None)
@given(hostile)
def test_hostile_bytes_read_the_same_by_line_and_by_byte(data: bytes) -> None:
    """On any bytes, the line-level fast paths give exactly the byte-level outcome (rows with
    their lines and reasons, or the same structural error)."""
    assert _outcome(ImportReader(), data) == _outcome(_ByteLevelReader(), data)


def test_quoted_row_fast_path_keeps_bad_rows_and_line_numbers() -> None:
    """A quoted row with a stray quote, one spanning two lines, and good quoted rows around
    them: reasons and starting lines are those of the byte-level reader."""
    data = (
        HEAD + b'b,k1,"a,""b"""\n'
        b'b,k2,"x"y\n'
        b'b,k3,"two\nlines"\n'
        b'"b","k4",""\r\n'
    )
    got = _outcome(ImportReader(), data)
    assert got == _outcome(_ByteLevelReader(), data)
    assert [(r.line, getattr(r, "reason", None)) for r in got] == [  # type: ignore[union-attr]
        (2, None), (3, "stray_quote"), (4, "value_has_newline"), (6, None),
    ]
    assert got[0].value == b'a,"b"'  # type: ignore[index,union-attr]


# --- the C reader of common rows (``_ccsv``) against the Python one ---------------------------

_EDGE_NAMES = [b"n" * 64, b"n" * 65, b"", b"a b", b"a\xff", b"a\x00", b'"a"', b"a\r"]
_VALUE_TOKENS = [*_TOKENS, b"x" * 50, b"\x7f", b"\xc3\xa9", b"\t", b" ", b"'"]
_name_fields = st.one_of(names.map(str.encode), st.sampled_from(_EDGE_NAMES))
_value_bodies = st.one_of(
    st.lists(st.sampled_from(_VALUE_TOKENS), max_size=10).map(b"".join),
    st.sampled_from([b"v" * MAX_VALUE_BYTES, b"v" * (MAX_VALUE_BYTES + 1),
                     b"v" * (MAX_VALUE_BYTES - 1) + b'"']),
)
_value_fields = st.one_of(
    _value_bodies,
    _value_bodies.map(lambda body: b'"' + body.replace(b'"', b'""') + b'"'),  # quoted right
    _value_bodies.map(lambda body: b'"' + body + b'"'),  # quoted, quotes not doubled
)
_common_rows = st.lists(
    st.tuples(_name_fields, _name_fields, _value_fields, st.sampled_from([b"\n", b"\r\n", b"\r"]))
    .map(lambda r: b",".join(r[:3]) + r[3]),
    max_size=12,
).map(lambda lines: HEAD + b"".join(lines))


def _outcome_in_python(data: bytes) -> object:
    """The reader's outcome with its C scan of common rows switched off."""
    with mock.patch.object(_csv_import, "_good_rows", None):
        return _outcome(ImportReader(), data)


@settings(max_examples=500, deadline=None)
@given(_common_rows)
def test_common_rows_read_the_same_in_c_and_in_python(data: bytes) -> None:
    """Rows near every rule of the common row (name length 64/65 and bytes, value length at
    the limit, NUL, CR, non-ASCII, doubled and stray quotes, either terminator) read exactly
    alike with the C scan and without it, and as the byte-level state machine reads them."""
    expected = _outcome(_ByteLevelReader(), data)
    assert _outcome_in_python(data) == expected
    assert _outcome(ImportReader(), data) == expected


@pytest.mark.skipif(not _csv_import.ACCELERATED, reason="the C reader is not built")
def test_c_reader_of_common_rows_checks_its_arguments() -> None:
    """Wrong types and a position outside the data are refused, not read past."""
    good_rows = _csv_import._good_rows
    assert good_rows is not None
    out: list[Row] = []
    with pytest.raises(TypeError):
        good_rows("text", 0, 2, out, GoodRow, 10, 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        good_rows(b"a,b,c\n", 0, 2, out, dict, 10, 10)
    with pytest.raises(ValueError):
        good_rows(b"a,b,c\n", 7, 2, out, GoodRow, 10, 10)
    assert good_rows(b"a,b,c\nd,e,\"f\"\"\"\r\nbad", 0, 2, out, GoodRow, 10, 10) == (17, 2)
    assert out == [GoodRow(2, b"a", b"b", b"c"), GoodRow(3, b"d", b"e", b'f"')]
