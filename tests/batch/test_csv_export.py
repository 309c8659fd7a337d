"""The export writer: RFC 4180 quoting that round-trips through any reader, and formula
neutralisation in every cell by default."""

from __future__ import annotations

import csv
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.batch._csv_export import ERROR_REPORT_CELLS, ExportWriter, neutralize, quote
from minidb.batch._csv_import import BadRow, GoodRow, read_all


def good(line: int, bucket: str, key: str, value: str) -> GoodRow:
    """The ``GoodRow`` of these cells (a good row carries the file's UTF-8 bytes)."""
    return GoodRow(line, bucket.encode(), key.encode(), value.encode())


def export(rows: list[tuple[str, str, str]], **kwargs: bool) -> bytes:
    """The bytes of an export of ``rows``."""
    writer = ExportWriter(**kwargs)
    return writer.header() + b"".join(writer.row(*r) for r in rows)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("=1+1", "'=1+1"),
        ("+SUM(A1)", "'+SUM(A1)"),
        ("-2", "'-2"),
        ("@x", "'@x"),
        ("\tfoo", "'\tfoo"),
        ("\rfoo", "'\rfoo"),
        ("\x00x", "'\x00x"),
        ("plain", "plain"),
        ("", ""),
        ("a=b", "a=b"),
    ],
)
def test_neutralize(value: str, expected: str) -> None:
    """Cells a spreadsheet would evaluate get a leading quote; others are untouched."""
    assert neutralize(value) == expected


def test_formula_cells_are_neutralised_in_every_column() -> None:
    """Keys and buckets are guarded as well as values, and the output parses back guarded."""
    data = export([("-b", "@k", "=1+1"), ("b", "k", "\tfoo")])
    parsed = list(csv.reader(io.StringIO(data.decode(), newline="")))
    assert parsed[1:] == [["'-b", "'@k", "'=1+1"], ["b", "k", "'\tfoo"]]


def test_neutralisation_can_be_turned_off() -> None:
    """Machine consumers get the values verbatim."""
    data = export([("b", "k", "=1+1")], neutralize_formulas=False)
    assert data == b"bucket,key,value\r\nb,k,=1+1\r\n"


@pytest.mark.parametrize(
    "cell, expected",
    [("a", "a"), ("a,b", '"a,b"'), ('a"b', '"a""b"'), ("a\nb", '"a\nb"'), ("a\rb", '"a\rb"')],
)
def test_quote_when_needed(cell: str, expected: str) -> None:
    """A cell with a quote, comma, CR or LF is quoted; others are bare."""
    assert quote(cell) == expected


def test_statistics_count_rows_bytes_and_guards() -> None:
    """The writer counts its rows, bytes and neutralised cells."""
    writer = ExportWriter()
    out = writer.header() + writer.row("b", "k", "=x") + writer.row("b", "k", "y")
    stats = writer.statistics()
    assert (stats.rows, stats.bytes_written, stats.cells_neutralized) == (2, len(out), 1)


def test_error_report_rows_of_bad_rows() -> None:
    """An import's bad rows write as line,reason,bucket,key (guarded) and read back."""
    data = b"bucket,key,value\nb,k\n=x,k,v\nb,k,v,w\n,,\n"
    bad = [r for r in read_all([data]) if isinstance(r, BadRow)]
    writer = ExportWriter(columns=ERROR_REPORT_CELLS)
    report = writer.header() + b"".join(writer.row(*r.report_cells()) for r in bad)
    parsed = list(csv.reader(io.StringIO(report.decode(), newline="")))
    assert parsed == [
        ["line", "reason", "bucket", "key"],
        ["2", "wrong_column_count", "b", "k"],
        ["3", "invalid_bucket", "'=x", "k"],
        ["4", "wrong_column_count", "b", "k"],
        ["5", "invalid_bucket", "", ""],
    ]


def test_row_needs_one_cell_per_column() -> None:
    """A row of the wrong width is a programming error."""
    with pytest.raises(ValueError):
        ExportWriter().row("b", "k")


cells = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=50)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(cells, cells, cells), max_size=15))
def test_round_trip_through_the_stdlib_reader(rows: list[tuple[str, str, str]]) -> None:
    """Any cells, bare CRs and quotes included, read back exactly with the stdlib reader."""
    data = export(rows, neutralize_formulas=False).decode()
    assert [tuple(r) for r in csv.reader(io.StringIO(data, newline=""))] == [
        ("bucket", "key", "value"), *rows,
    ]
    guarded = export(rows).decode()
    assert [tuple(r) for r in csv.reader(io.StringIO(guarded, newline=""))][1:] == [
        tuple(neutralize(c) for c in r) for r in rows
    ]


names = st.text(alphabet="abcXYZ019_.:/-", min_size=1, max_size=64)
values = st.text(
    alphabet=st.characters(blacklist_characters="\r\n\x00", blacklist_categories=("Cs",)),
    max_size=300,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(names, names, values), max_size=15))
def test_round_trip_through_our_import_reader(rows: list[tuple[str, str, str]]) -> None:
    """An unguarded export re-imports to exactly the rows exported."""
    got = read_all([export(rows, neutralize_formulas=False)])
    assert got == [good(i + 2, *r) for i, r in enumerate(rows)]


plain_names = st.text(alphabet="abcXYZ019_.:/", min_size=1, max_size=64)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(plain_names, plain_names, values), max_size=15))
def test_guarded_export_reimports_with_the_guard_kept(rows: list[tuple[str, str, str]]) -> None:
    """A guarded export re-imports verbatim: values keep their leading quote (import never
    alters data)."""
    got = read_all([export(rows)])
    assert got == [good(i + 2, b, k, neutralize(v)) for i, (b, k, v) in enumerate(rows)]
