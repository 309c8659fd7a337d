"""The line codec's ``BULK <n>`` frames: framing across reads, weights, every refusal."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.protocol import (
    MAX_BULK_BYTES,
    MAX_BULK_ROWS,
    MAX_LINE_BYTES,
    Bulk,
    Delete,
    Get,
    Invalid,
    Ok,
    RequestDecoder,
    Set,
    encode_request,
    parse_reply,
    parse_request,
)

FRAME = b"BULK 3\nSET b k1 v1\nDEL b k2\r\nSET b k3 a value with spaces\n"
FRAME_REQUEST = Bulk(
    [Set(b"b", b"k1", b"v1"), Delete(b"b", b"k2"), Set(b"b", b"k3", b"a value with spaces")]
)
STREAM = (
    b"SET b k0 v0\n" + FRAME + b"GET b k1\nbulk 1\r\nDEL b k0\r\n" + FRAME + FRAME
    + b"BULK 2\nSET b k v\nGET b k\nGET b k\n"
)
STREAM_REQUESTS = [
    Set(b"b", b"k0", b"v0"),
    FRAME_REQUEST,
    Get(b"b", b"k1"),
    Bulk([Delete(b"b", b"k0")]),
    FRAME_REQUEST,
    FRAME_REQUEST,
    Invalid("row 2: GET not allowed in a frame"),
    Get(b"b", b"k"),
]


def rows_frame(rows: int, value: bytes = b"v") -> bytes:
    return b"BULK %d\n" % rows + b"".join(b"SET b k%d %b\n" % (i, value) for i in range(rows))


def test_bulk_frame_is_one_request_of_its_rows() -> None:
    """A frame decodes to one ``Bulk`` of its SET and DEL rows (LF or CRLF), in order."""
    assert RequestDecoder().feed(FRAME) == [FRAME_REQUEST]


def test_bulk_frames_and_lines_in_one_read() -> None:
    """Many frames and plain lines in one read come out in order, each frame whole."""
    decoder = RequestDecoder()
    assert decoder.feed(STREAM) == STREAM_REQUESTS
    assert decoder.buffered == 0
    assert not decoder.closing


def test_bulk_stream_split_at_every_byte_decodes_the_same() -> None:
    """Cut into two reads at any byte, the stream gives the same requests as in one read."""
    for cut in range(len(STREAM) + 1):
        decoder = RequestDecoder()
        got = decoder.feed(STREAM[:cut]) + decoder.feed(STREAM[cut:])
        assert got == STREAM_REQUESTS, cut


def test_bulk_stream_fed_byte_by_byte_decodes_the_same() -> None:
    """One byte per read, the stream still gives the same requests."""
    decoder = RequestDecoder()
    got = []
    for at in range(len(STREAM)):
        got += decoder.feed(STREAM[at : at + 1])
    assert got == STREAM_REQUESTS


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, len(STREAM)), max_size=12), limit=st.integers(1, 8))
def test_bulk_stream_any_reads_any_limit_decodes_the_same(cuts: list[int], limit: int) -> None:
    """However the stream is cut into reads and however little is taken at a time, the
    requests are the same and no take weighs more than its limit unless it is one frame."""
    decoder = RequestDecoder()
    got: list[object] = []
    edges = [0, *sorted(cuts), len(STREAM)]
    for start, end in itertools.pairwise(edges):
        decoder.receive(STREAM[start:end])
        while taken := decoder.next_requests(limit):
            weight = len(taken) + decoder.extra_weight
            assert weight == sum(len(r.rows) if type(r) is Bulk else 1 for r in taken)
            assert weight <= limit or len(taken) == 1
            got += taken
    assert got == STREAM_REQUESTS


def test_bulk_frame_heavier_than_the_limit_is_taken_first_in_a_take() -> None:
    """A frame that does not fit what is left of a take is held for the next take, which
    takes it first whatever it weighs; ``extra_weight`` says what it weighed beyond one."""
    decoder = RequestDecoder()
    decoder.receive(b"GET b k\n" + FRAME + b"GET b k\n")
    assert decoder.next_requests(2) == [Get(b"b", b"k")]
    assert decoder.has_request()
    assert decoder.next_requests(2) == [FRAME_REQUEST]
    assert decoder.extra_weight == 2
    assert decoder.next_requests(2) == [Get(b"b", b"k")]
    assert decoder.extra_weight == 0
    assert not decoder.has_request()


def test_bulk_incomplete_frame_is_no_request_yet() -> None:
    """Until its last row arrives a frame is not a request, and ``has_request`` says so."""
    decoder = RequestDecoder()
    assert decoder.feed(FRAME[:-1]) == []
    assert not decoder.has_request()
    decoder.receive(b"\n")
    assert decoder.has_request()
    assert decoder.next_requests(1) == [FRAME_REQUEST]


@pytest.mark.parametrize(
    "header, reason",
    [
        (b"BULK 0", "invalid bulk count 0"),
        (b"BULK -1", "invalid bulk count -1"),
        (b"BULK 99999999999999999999", "invalid bulk count 99999999999999999999"),
        (b"BULK %d" % (MAX_BULK_ROWS + 1), f"invalid bulk count {MAX_BULK_ROWS + 1}"),
        (b"BULK x", "invalid bulk count x"),
        (b"BULK 1 2", "invalid bulk count 1 2"),
        (b"BULK", "invalid bulk count"),
        (b"BULK " + b"9" * 5000, "invalid bulk count " + "9" * 128 + "..."),
    ],
)
def test_bulk_hostile_header_ends_the_stream(header: bytes, reason: str) -> None:
    """A header without a valid count is refused and nothing after it is ever taken."""
    decoder = RequestDecoder()
    assert decoder.feed(b"GET b k\n" + header + b"\r\nSET b k v\nGET b k\n") == [
        Get(b"b", b"k"),
        Invalid(reason),
    ]
    assert decoder.closing
    assert decoder.feed(b"GET b k\n") == []
    assert decoder.buffered == 0
    assert not decoder.has_request()


def test_bulk_largest_frame_is_accepted() -> None:
    """``MAX_BULK_ROWS`` rows of exactly ``MAX_BULK_BYTES`` in all are one frame."""
    rows = [b"SET b k%04d " % i for i in range(MAX_BULK_ROWS)]
    fill = (MAX_BULK_BYTES - sum(len(r) + 1 for r in rows)) // MAX_BULK_ROWS
    rows = [row + b"x" * fill for row in rows]
    rows[-1] += b"x" * (MAX_BULK_BYTES - sum(len(r) + 1 for r in rows))
    data = b"BULK %d\n" % MAX_BULK_ROWS + b"\n".join(rows) + b"\n"
    assert len(data) - len(b"BULK 1024\n") == MAX_BULK_BYTES
    [request] = RequestDecoder().feed(data)
    assert type(request) is Bulk and len(request.rows) == MAX_BULK_ROWS


@pytest.mark.parametrize("chunk", [1000, 64 * 1024, 4 * MAX_BULK_BYTES])
def test_bulk_frame_over_max_bytes_ends_the_stream_holding_bounded_memory(chunk: int) -> None:
    """Rows beyond ``MAX_BULK_BYTES`` are refused once that much has arrived without the
    frame's end; the decoder never holds more than that and one read."""
    decoder = RequestDecoder()
    data = rows_frame(MAX_BULK_ROWS, b"x" * 2000)  # ~2 MiB of rows
    got = []
    for at in range(0, len(data), chunk):
        decoder.receive(data[at : at + chunk])
        assert decoder.buffered <= MAX_BULK_BYTES + chunk + len(b"BULK 1024\n")
        got += decoder.next_requests(MAX_BULK_ROWS)
        if decoder.closing:
            break
    assert got == [Invalid("bulk frame too large")]
    assert decoder.buffered == 0


def test_bulk_row_over_max_line_bytes_ends_the_stream() -> None:
    """A row longer than ``MAX_LINE_BYTES`` is refused naming the row, and closes."""
    decoder = RequestDecoder()
    data = b"BULK 2\nSET b k v\nSET b k " + b"x" * MAX_LINE_BYTES + b"\nGET b k\n"
    assert decoder.feed(data) == [Invalid("row 2: line too long")]
    assert decoder.closing


@pytest.mark.parametrize(
    "row, reason",
    [
        (b"SET b", "missing argument"),
        (b"SET b k!ey v", "invalid name k!ey"),
        (b"DEL b k extra", "too many arguments"),
        (b"", "empty request"),
        (b"GET b k", "GET not allowed in a frame"),
        (b"SCAN b 0 10", "SCAN not allowed in a frame"),
        (b"BULK 1", "BULK not allowed in a frame"),
        (b"FLY b k", "unknown verb FLY"),
        (b"SET b k " + b"x" * 5000, "value too long"),
    ],
)
def test_bulk_invalid_row_refuses_the_frame_and_keeps_the_stream(row: bytes, reason: str) -> None:
    """A frame with a row that is no SET or DEL is one ``ERR row <i>: <reason>`` (the reason
    that row would get on its own); the next request still decodes."""
    decoder = RequestDecoder()
    data = b"BULK 3\nSET b k1 v\n" + row + b"\nSET b k3 v\nGET b k1\n"
    assert decoder.feed(data) == [Invalid(f"row 2: {reason}"), Get(b"b", b"k1")]
    assert not decoder.closing


def test_bulk_discard_partial_forgets_a_half_frame() -> None:
    """On shutdown a frame not complete is forgotten, a complete one is still owed."""
    decoder = RequestDecoder()
    decoder.receive(FRAME + FRAME[:-5])
    decoder.discard_partial()
    assert decoder.next_requests(100) == [FRAME_REQUEST]
    assert not decoder.has_request()
    decoder.discard_partial()
    assert decoder.next_requests(100) == []
    assert decoder.buffered == 0


def test_bulk_encode_request_round_trips() -> None:
    """``encode_request`` of a frame is the wire form the decoder reads back."""
    assert RequestDecoder().feed(encode_request(FRAME_REQUEST) + b"\n") == [FRAME_REQUEST]


def test_bulk_header_alone_is_invalid_to_parse_request() -> None:
    """A ``BULK`` line parsed on its own (no decoder, no rows) is an error, not a request."""
    assert type(parse_request(b"BULK 3")) is Invalid


def test_bulk_reply_parses_as_ok() -> None:
    """The client reads ``OK <n>`` as ``Ok``."""
    assert parse_reply(b"OK 256\n") == Ok()


_ROW_TAILS = st.one_of(
    st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"v" * 4096, b"v" * 4097, b"x\r", b"caf\xc3\xa9", b"\xff", b""]),
)


@settings(max_examples=300, deadline=None)
@given(tails=st.lists(_ROW_TAILS, min_size=1, max_size=6), dels=st.lists(st.booleans()))
def test_bulk_rows_decode_as_parse_request_parses_them(
    tails: list[bytes], dels: list[bool]
) -> None:
    """Whatever shortcut the decoder takes for a frame of plain SETs, a frame is the ``Bulk``
    of its rows as ``parse_request`` parses them, or the refusal of its first bad row."""
    lines = [
        b"DEL b k%d" % i if i < len(dels) and dels[i] else b"SET b k%d " % i + tail
        for i, tail in enumerate(tails)
    ]
    parsed = [parse_request(line) for line in lines]
    [got] = RequestDecoder().feed(b"BULK %d\n" % len(lines) + b"".join(x + b"\n" for x in lines))
    bad = [(i, r) for i, r in enumerate(parsed, 1) if type(r) not in (Set, Delete)]
    if not bad:
        assert got == Bulk(parsed)
        assert all(type(row) in (Set, Delete) for row in got.rows)
    else:
        number, row = bad[0]
        assert type(row) is Invalid
        assert got == Invalid(f"row {number}: {row.reason}")
