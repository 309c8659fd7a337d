"""The writer of ``export.csv``: rows ``bucket,key,value`` that every reader parses back to
exactly the cells written, and that spreadsheets do not evaluate.

Quoting (RFC 4180): a cell is quoted when it contains ``"``, ``,``, CR or LF, with inner quotes
doubled; every other cell is written bare. The stdlib writer's ``QUOTE_MINIMAL`` quotes a cell
with a bare CR only when CR is part of its line terminator, so a reader splitting on CR would
cut such a cell in two; quoting on CR *and* LF always makes the file independent of the
reader's newline handling. Rows end with CRLF, as RFC 4180 says.

Formula neutralisation (OWASP "CSV Injection", ASVS 5.0 1.2.10, CWE-1236), on by default: a
cell starting with ``=``, ``+``, ``-``, ``@``, TAB, CR or NUL gets a leading single quote, in
every cell (bucket and key names too, although the line protocol's names cannot start with
most of these), so Excel, LibreOffice and Sheets show it as text. It changes data (``-5``
becomes ``'-5``), so machine consumers turn it off with ``neutralize_formulas=False``. Import
never alters data.
"""

from __future__ import annotations

from dataclasses import dataclass

TERMINATOR = "\r\n"
HEADER_CELLS = ("bucket", "key", "value")
"""The columns of ``export.csv``."""
ERROR_REPORT_CELLS = ("line", "reason", "bucket", "key")
"""The columns of an import's ``errors.csv`` (written with the same quoting and guard): the
1-based line where the bad row starts, its stable reason code, and its bucket and key cells
(empty where the row has none)."""
FORMULA_STARTS = frozenset("=+-@\t\r\x00")
"""First characters that make a spreadsheet evaluate (or be tricked by) a cell."""
_NEEDS_QUOTES = frozenset('",\r\n')


def neutralize(cell: str) -> str:
    """``cell`` with a leading ``'`` if a spreadsheet would read it as a formula."""
    return "'" + cell if cell and cell[0] in FORMULA_STARTS else cell


def quote(cell: str) -> str:
    """``cell`` as an RFC 4180 field: quoted when it holds a quote, comma, CR or LF."""
    if _NEEDS_QUOTES.isdisjoint(cell):
        return cell
    return '"' + cell.replace('"', '""') + '"'


@dataclass(frozen=True)
class ExportWriterStatistics:
    """What one writer produced: rows (header excluded), and bytes (header included)."""

    rows: int
    bytes_written: int
    cells_neutralized: int


class ExportWriter:
    """Encodes rows to UTF-8 bytes; the caller streams them to the output object.

    ``columns`` is the header (``export.csv`` by default; ``ERROR_REPORT_CELLS`` for an
    import's ``errors.csv``); every row must have that many cells.
    """

    def __init__(
        self, *, neutralize_formulas: bool = True, columns: tuple[str, ...] = HEADER_CELLS
    ) -> None:
        self.neutralize_formulas = neutralize_formulas
        self.columns = columns
        self._rows = 0
        self._bytes = 0
        self._neutralized = 0

    def statistics(self) -> ExportWriterStatistics:
        """Counters so far."""
        return ExportWriterStatistics(self._rows, self._bytes, self._neutralized)

    def header(self) -> bytes:
        """The header line (``bucket,key,value`` CRLF by default)."""
        return self._line(self.columns)

    def row(self, *cells: str) -> bytes:
        """One data line of ``len(columns)`` cells (``bucket, key, value`` by default)."""
        if len(cells) != len(self.columns):
            raise ValueError(f"expected {len(self.columns)} cells, got {len(cells)}")
        if self.neutralize_formulas:
            guarded = tuple(neutralize(c) for c in cells)
            self._neutralized += sum(a is not b for a, b in zip(cells, guarded, strict=True))
            cells = guarded
        self._rows += 1
        return self._line(cells)

    def _line(self, cells: tuple[str, ...]) -> bytes:
        data = (",".join(quote(c) for c in cells) + TERMINATOR).encode("utf-8")
        self._bytes += len(data)
        return data
