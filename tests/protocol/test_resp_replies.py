"""The RESP reply encoder and the client half: both versions, Redis's doubles, round trips."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.protocol import (
    NULL_ARRAY,
    SIMPLE_OK,
    SIMPLE_PONG,
    ErrorReply,
    RespEncoder,
    RespProtocolError,
    RespReplyDecoder,
    Simple,
    Verbatim,
    encode_resp_reply,
    format_double,
)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at the given offsets (taken modulo its length + 1)."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


# -- reply encoding ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "result, resp2, resp3",
    [
        (SIMPLE_OK, b"+OK\r\n", b"+OK\r\n"),
        (Simple("QUEUED"), b"+QUEUED\r\n", b"+QUEUED\r\n"),
        (
            ErrorReply("WRONGTYPE Operation"),
            b"-WRONGTYPE Operation\r\n",
            b"-WRONGTYPE Operation\r\n",
        ),
        (b"xxx", b"$3\r\nxxx\r\n", b"$3\r\nxxx\r\n"),
        (b"", b"$0\r\n\r\n", b"$0\r\n\r\n"),
        ("h\u00e9", b"$3\r\nh\xc3\xa9\r\n", b"$3\r\nh\xc3\xa9\r\n"),
        (None, b"$-1\r\n", b"_\r\n"),
        (NULL_ARRAY, b"*-1\r\n", b"_\r\n"),
        (0, b":0\r\n", b":0\r\n"),
        (-42, b":-42\r\n", b":-42\r\n"),
        (123456, b":123456\r\n", b":123456\r\n"),
        (2**63 - 1, b":9223372036854775807\r\n", b":9223372036854775807\r\n"),
        (2**63, b"$19\r\n9223372036854775808\r\n", b"(9223372036854775808\r\n"),
        (True, b":1\r\n", b"#t\r\n"),
        (False, b":0\r\n", b"#f\r\n"),
        (1.5, b"$3\r\n1.5\r\n", b",1.5\r\n"),
        (math.inf, b"$3\r\ninf\r\n", b",inf\r\n"),
        ([b"a", 1, None], b"*3\r\n$1\r\na\r\n:1\r\n$-1\r\n", b"*3\r\n$1\r\na\r\n:1\r\n_\r\n"),
        ((), b"*0\r\n", b"*0\r\n"),
        ({b"proto": 3}, b"*2\r\n$5\r\nproto\r\n:3\r\n", b"%1\r\n$5\r\nproto\r\n:3\r\n"),
        ({b"m"}, b"*1\r\n$1\r\nm\r\n", b"~1\r\n$1\r\nm\r\n"),
        (Verbatim("a\r\nb"), b"$4\r\na\r\nb\r\n", b"=8\r\ntxt:a\r\nb\r\n"),
        ([[b"x"], []], b"*2\r\n*1\r\n$1\r\nx\r\n*0\r\n", b"*2\r\n*1\r\n$1\r\nx\r\n*0\r\n"),
    ],
)
def test_encoder_every_type_in_both_versions(result: object, resp2: bytes, resp3: bytes) -> None:
    """Each result has its RESP2 and RESP3 wire form, singly and in a batch."""
    assert encode_resp_reply(result, 2) == resp2  # type: ignore[arg-type]
    assert encode_resp_reply(result, 3) == resp3  # type: ignore[arg-type]
    assert RespEncoder(3).encode_many([result, result]) == resp3 * 2  # type: ignore[list-item]


def test_encoder_large_headers_and_values() -> None:
    """Lengths past the precomputed tables are formatted, and a 4 MB bulk survives."""
    value = b"v" * 4_000_000
    assert encode_resp_reply(value) == b"$4000000\r\n" + value + b"\r\n"
    assert encode_resp_reply([1] * 2000).startswith(b"*2000\r\n:1\r\n")
    assert encode_resp_reply({n: n for n in range(1500)}, 3).startswith(b"%1500\r\n:0\r\n:0\r\n")


def test_encoder_protocol_switch() -> None:
    """``HELLO 3`` switches a connection's encoder; nulls change with it."""
    encoder = RespEncoder()
    assert encoder.encode(None) == b"$-1\r\n"
    encoder.protocol = 3
    assert (encoder.protocol, encoder.encode(None)) == (3, b"_\r\n")
    with pytest.raises(ValueError):
        encoder.protocol = 4


def test_encoder_refuses_what_is_not_a_result() -> None:
    """A value outside the vocabulary is a TypeError, not a guess."""
    with pytest.raises(TypeError):
        encode_resp_reply(bytearray(b"x"))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        encode_resp_reply([object()])  # type: ignore[list-item]


@pytest.mark.parametrize("text", ["a\r\nb", "a\nb", "a\rb"])
def test_simple_and_error_refuse_line_breaks(text: str) -> None:
    """Simple strings and errors cannot carry CR or LF (they would break framing)."""
    with pytest.raises(ValueError):
        Simple(text)
    with pytest.raises(ValueError):
        ErrorReply(text)


def test_error_reply_code() -> None:
    """``code`` is the first word of the message."""
    assert ErrorReply("WRONGTYPE Operation against a key").code == "WRONGTYPE"


@pytest.mark.parametrize(
    "value, text",
    [
        (1.5, b"1.5"),
        (-2.25, b"-2.25"),
        (0.0, b"0"),
        (-0.0, b"-0"),
        (3.0, b"3"),
        (1e18, b"1000000000000000000"),
        (1e19, b"1e+19"),
        (3.14e20, b"3.14e+20"),
        (0.001, b"0.001"),
        (1e-5, b"0.00001"),
        (1e-7, b"1e-7"),
        (1.2345e-8, b"1.2345e-8"),
        (123456.789, b"123456.789"),
        (1 / 3, b"0.3333333333333333"),
        (math.inf, b"inf"),
        (-math.inf, b"-inf"),
        (math.nan, b"nan"),
        (5e-324, b"5e-324"),
        (1.7976931348623157e308, b"1.7976931348623157e+308"),
    ],
)
def test_format_double_matches_redis(value: float, text: bytes) -> None:
    """Doubles print as Redis's d2string prints them."""
    assert format_double(value) == text


@settings(max_examples=1000, deadline=None)
@given(st.floats())
def test_format_double_round_trips(value: float) -> None:
    """Every double's text parses back to the same double."""
    parsed = float(format_double(value))
    assert parsed == value or (math.isnan(parsed) and math.isnan(value))


# -- round trips through the client half ------------------------------------------------------

_SCALARS = (
    st.binary(max_size=20)
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.booleans()
    | st.floats(allow_nan=False)
    | st.none()
    | st.sampled_from([SIMPLE_OK, SIMPLE_PONG, ErrorReply("ERR x"), Verbatim("i\r\nnfo", "txt")])
)
_RESULTS = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.binary(max_size=5), inner, max_size=3)
        | st.frozensets(st.binary(max_size=5), max_size=3)
    ),
    max_leaves=12,
)


def _as_resp2(value: object) -> object:
    """What a RESP2 client reads back for ``value``."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return str(value).encode()
    if isinstance(value, float):
        return format_double(value)
    if isinstance(value, Verbatim):
        return value.text.encode()
    if isinstance(value, dict):
        return [_as_resp2(x) for pair in value.items() for x in pair]
    if isinstance(value, (list, tuple, frozenset)):
        return [_as_resp2(x) for x in value]
    return value


@settings(max_examples=400, deadline=None)
@given(_RESULTS, st.lists(st.integers(min_value=0), max_size=4))
def test_replies_round_trip_through_the_client_decoder(result: object, cuts: list[int]) -> None:
    """Encoded replies, split anywhere, decode to the result (RESP3) or its RESP2 reading."""
    for protocol, expected in ((3, result), (2, _as_resp2(result))):
        wire = encode_resp_reply(result, protocol)  # type: ignore[arg-type]
        decoder = RespReplyDecoder()
        got = [value for piece in _split(wire, cuts) for value in decoder.feed(piece)]
        if protocol == 3 and isinstance(result, frozenset):
            expected = set(result)
        assert got == [expected]


def test_reply_decoder_reads_resp3_extras() -> None:
    """Attributes are skipped, pushes are lists, blob errors are errors, big numbers ints."""
    decoder = RespReplyDecoder()
    wire = (
        b"|1\r\n+ttl\r\n:5\r\n:7\r\n>2\r\n+message\r\n$1\r\nx\r\n!5\r\nERR x\r\n"
        b"(-12345678901234567890123\r\n"
    )
    assert decoder.feed(wire) == [
        7,
        [Simple("message"), b"x"],
        ErrorReply("ERR x"),
        -12345678901234567890123,
    ]
    with pytest.raises(RespProtocolError):
        RespReplyDecoder().feed(b"?\r\n")


def test_text_goes_out_as_utf8_with_raw_bytes_preserved() -> None:
    """Text is UTF-8, and bytes decoded with surrogateescape go back unchanged."""
    raw_key = b"k\xff".decode("utf-8", "surrogateescape")
    assert ErrorReply(f"ERR no such key '{raw_key}'").wire == b"-ERR no such key 'k\xff'\r\n"
    assert encode_resp_reply("h\u00e9 " + raw_key) == b"$6\r\nh\xc3\xa9 k\xff\r\n"
    assert Simple("d\u00e9j\u00e0").wire == b"+d\xc3\xa9j\xc3\xa0\r\n"
    assert RespReplyDecoder().feed(b"-ERR k\xff\r\n") == [ErrorReply("ERR " + raw_key)]


def test_reply_decoder_bounds_big_numbers() -> None:
    """A 5000-digit big number is a protocol error, not CPython's int-digit ValueError."""
    with pytest.raises(RespProtocolError):
        RespReplyDecoder().feed(b"(" + b"9" * 5000 + b"\r\n")
