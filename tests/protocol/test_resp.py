"""The RESP request decoder: framing at any split, Redis's errors word for word, the limits.

Every test runs on the pure decoder and, when it is built, on the C accelerator's scans.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.protocol import (
    MAX_INLINE_BYTES,
    RespDecoder,
    RespProtocolError,
    _resp,
    encode_command,
)
from minidb.protocol._resp import MIN_BUFFER_HEADROOM_BYTES
from minidb.protocol._resp_fields import split_inline, strict_int

_C_SCANS = (_resp._scan, _resp._scan_raw)


@pytest.fixture(
    scope="module",
    autouse=True,
    params=[
        "pure",
        pytest.param(
            "c",
            marks=[
                pytest.mark.skipif(_C_SCANS[0] is None, reason="C accelerator not built"),
                pytest.mark.accelerator,
            ],
        ),
    ],
)
def implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the module on the pure decoder, then on the accelerated one."""
    saved = _resp._scan, _resp._scan_raw
    _resp._scan, _resp._scan_raw = (None, None) if request.param == "pure" else _C_SCANS
    yield request.param
    _resp._scan, _resp._scan_raw = saved


SET = encode_command([b"SET", b"key:__rand_int__", b"xxx"])
GET = encode_command([b"GET", b"key:__rand_int__"])


def decode_all(data: bytes, **limits: int) -> list[list[bytes]]:
    """Feed ``data`` in one read and take every command."""
    decoder = RespDecoder(**limits)
    decoder.feed(data)
    return decoder.next_commands()


def decode_in_pieces(pieces: list[bytes], decoder: RespDecoder | None = None) -> list[list[bytes]]:
    """Feed each piece as one read, taking the commands after each."""
    decoder = decoder or RespDecoder()
    out: list[list[bytes]] = []
    for piece in pieces:
        decoder.feed(piece)
        out += decoder.next_commands()
    return out


def protocol_error(data: bytes, **limits: int) -> str:
    """The reason of the protocol error ``data`` ends in (asserting one is raised)."""
    decoder = RespDecoder(**limits)
    decoder.feed(data)
    with pytest.raises(RespProtocolError) as caught:
        while decoder.next_commands():
            pass
        decoder.next_commands()  # raises, unless the stream ended without an error
    return caught.value.reason


# -- framing ----------------------------------------------------------------------------------


def test_decoder_benchmark_shapes() -> None:
    """redis-benchmark's SET and GET decode to their argv."""
    assert decode_all(SET + GET) == [
        [b"SET", b"key:__rand_int__", b"xxx"],
        [b"GET", b"key:__rand_int__"],
    ]


@pytest.mark.parametrize(
    "argv",
    [[b"PING"], [b""], [b"a\r\nb", b"\r\n", b"\r", b"\n"], [b"x" * 5000, b"y"], [b"k"] * 70],
)
def test_decoder_multibulk_any_content(argv: list[bytes]) -> None:
    """Arguments with CRLFs, empty ones, long ones and many of them come back byte for byte."""
    assert decode_all(encode_command(argv)) == [argv]


@pytest.mark.parametrize("empty", [b"*0\r\n", b"*-1\r\n", b"\r\n", b"\n", b"   \r\n", b"\t\n"])
def test_decoder_empty_commands_are_ignored(empty: bytes) -> None:
    """``*0``, ``*-1`` and blank inline lines produce no command, as in Redis."""
    assert decode_all(empty + GET) == [[b"GET", b"key:__rand_int__"]]


def test_decoder_inline_lf_and_crlf() -> None:
    """Inline lines end at LF with or without CR, mixed freely with multibulk."""
    data = b"PING\nGET a\r\n" + GET + b"ECHO 'x'\n"
    assert decode_all(data) == [
        [b"PING"],
        [b"GET", b"a"],
        [b"GET", b"key:__rand_int__"],
        [b"ECHO", b"x"],
    ]


_MIXED = (
    SET
    + GET
    + b"PING\r\n"
    + encode_command([b"SET", b"k", b"a\r\nb\r\n"])
    + b"GET 'q r'\n"
    + encode_command([b"x" * 300] * 3)
    + b"*0\r\n"
    + encode_command([b"MSET"] + [b"v"] * 100)
)
_MIXED_COMMANDS = decode_all(_MIXED)


def test_decoder_every_single_split_gives_the_same_commands() -> None:
    """A stream cut into two reads at every byte decodes as in one read."""
    assert len(_MIXED_COMMANDS) == 7
    for cut in range(len(_MIXED) + 1):
        assert decode_in_pieces([_MIXED[:cut], _MIXED[cut:]]) == _MIXED_COMMANDS, cut


def test_decoder_byte_at_a_time_gives_the_same_commands() -> None:
    """A stream fed one byte per read decodes as in one read."""
    assert decode_in_pieces([bytes([b]) for b in _MIXED]) == _MIXED_COMMANDS


def test_decoder_ten_thousand_pipelined_commands_in_one_read() -> None:
    """10k commands in one read all come out, in order."""
    argvs = [[b"SET", b"k%d" % n, b"v%d" % n] for n in range(10_000)]
    assert decode_all(b"".join(encode_command(a) for a in argvs)) == argvs


def test_decoder_next_commands_takes_at_most_limit_and_keeps_the_rest() -> None:
    """``next_commands(limit)`` leaves later commands undecoded in ``buffered``."""
    decoder = RespDecoder()
    decoder.feed(SET * 40 + b"*1\r\n$4\r\nPI")
    assert len(decoder.next_commands(16)) == 16
    assert decoder.buffered == len(SET) * 24 + 10
    assert len(decoder.next_commands(16)) == 16
    decoder.feed(b"NG\r\n")
    assert decoder.next_commands(16) == [[b"SET", b"key:__rand_int__", b"xxx"]] * 8 + [[b"PING"]]
    assert decoder.next_commands(16) == []
    assert decoder.buffered == 0
    stats = decoder.statistics()
    assert (stats.commands, stats.bytes_fed, stats.buffered) == (41, len(SET) * 40 + 14, 0)


def test_decoder_big_value_in_small_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 5 MB value with CRLFs inside, in 64 KiB reads, arrives whole and joined once."""
    value = (b"0123456789\r\n" * 500_000)[:5_000_000]
    data = encode_command([b"SET", b"big", value]) + GET
    joins = 0
    merge = RespDecoder._merge

    def counting_merge(self: RespDecoder) -> None:
        nonlocal joins
        joins += 1
        merge(self)

    monkeypatch.setattr(RespDecoder, "_merge", counting_merge)
    pieces = [data[n : n + 65536] for n in range(0, len(data), 65536)]
    assert decode_in_pieces(pieces) == [[b"SET", b"big", value], [b"GET", b"key:__rand_int__"]]
    assert joins <= 3  # the first read, the completing one, and possibly the last


# -- limits and errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"*x\r\n", "Protocol error: invalid multibulk length"),
        (b"*01\r\n", "Protocol error: invalid multibulk length"),
        (b"*+1\r\n", "Protocol error: invalid multibulk length"),
        (b"* 1\r\n", "Protocol error: invalid multibulk length"),
        (b"*1 \r\n", "Protocol error: invalid multibulk length"),
        (b"*-0\r\n", "Protocol error: invalid multibulk length"),
        (b"*\r\n", "Protocol error: invalid multibulk length"),
        (b"*2147483648\r\n", "Protocol error: invalid multibulk length"),
        (b"*1048577\r\n", "Protocol error: invalid multibulk length"),
        (b"*" + b"9" * 5000 + b"\r\n", "Protocol error: invalid multibulk length"),
        (b"*1\r\n$x\r\n", "Protocol error: invalid bulk length"),
        (b"*1\r\n$-1\r\n", "Protocol error: invalid bulk length"),
        (b"*1\r\n$03\r\n", "Protocol error: invalid bulk length"),
        (b"*1\r\n$\r\n", "Protocol error: invalid bulk length"),
        (b"*1\r\n$" + b"1" * 5000 + b"\r\n", "Protocol error: invalid bulk length"),
        (b"*1\r\n$536870913\r\n", "Protocol error: invalid bulk length"),
        (b"*1\r\n+OK\r\n", "Protocol error: expected '$', got '+'"),
        (b"*2\r\n$1\r\na\r\n:1\r\n", "Protocol error: expected '$', got ':'"),
        (b"*1\r\n\r\n", "Protocol error: expected '$', got ' '"),
        (b"*1\r\n$3\r\nabcd\r\n", "Protocol error: expected CRLF after bulk data"),
        (b"*1\r\n$3\r\nabcde", "Protocol error: expected CRLF after bulk data"),
        (b"*1\r\n$3\r\nab\r\n\r\n", "Protocol error: expected CRLF after bulk data"),
        (b'SET "a b\r\n', "Protocol error: unbalanced quotes in request"),
        (b"SET 'a'b\r\n", "Protocol error: unbalanced quotes in request"),
        (b"*" + b"1" * (MAX_INLINE_BYTES + 2), "Protocol error: too big mbulk count string"),
        (b"*1\r\n$" + b"1" * (MAX_INLINE_BYTES + 2), "Protocol error: too big bulk count string"),
        (b"P" * (MAX_INLINE_BYTES + 2), "Protocol error: too big inline request"),
        (b"P" * (MAX_INLINE_BYTES + 1) + b"\r\n", "Protocol error: too big inline request"),
    ],
)
def test_decoder_protocol_errors_have_redis_wording(data: bytes, reason: str) -> None:
    """Each malformed stream ends in its protocol error, worded as Redis words it."""
    assert protocol_error(data) == reason


def test_decoder_error_reply_and_the_commands_before_it() -> None:
    """Commands before an error come out first; then the error, with its reply, every call."""
    decoder = RespDecoder()
    decoder.feed(GET + b"PING\r\n*1\r\n$x\r\n" + GET)
    assert decoder.next_commands() == [[b"GET", b"key:__rand_int__"], [b"PING"]]
    assert decoder.error is not None
    for _ in range(2):
        with pytest.raises(RespProtocolError) as caught:
            decoder.next_commands()
        assert caught.value.reply == b"-ERR Protocol error: invalid bulk length\r\n"
    decoder.feed(GET)  # ignored: the stream is over
    assert decoder.error is caught.value


def test_decoder_raw_byte_in_error_is_sent_back_as_is() -> None:
    """``expected '$'`` quotes the offending byte, which goes back unchanged."""
    decoder = RespDecoder()
    decoder.feed(b"*1\r\n\xff\r\n")
    with pytest.raises(RespProtocolError) as caught:
        decoder.next_commands()
    assert caught.value.reply == b"-ERR Protocol error: expected '$', got '\xff'\r\n"


def test_decoder_max_bulk_bytes_is_a_parameter() -> None:
    """A bulk of exactly ``max_bulk_bytes`` passes; one byte more is an invalid bulk length."""
    limits = {"max_bulk_bytes": 10}
    assert decode_all(encode_command([b"x" * 10]), **limits) == [[b"x" * 10]]
    assert (
        protocol_error(encode_command([b"x" * 11]), **limits)
        == "Protocol error: invalid bulk length"
    )


def test_decoder_max_multibulk_count_is_a_parameter() -> None:
    """A count of exactly ``max_multibulk_count`` passes; one more is invalid."""
    assert decode_all(encode_command([b"a"] * 3), max_multibulk_count=3) == [[b"a"] * 3]
    reason = protocol_error(encode_command([b"a"] * 4), max_multibulk_count=3)
    assert reason == "Protocol error: invalid multibulk length"


def test_decoder_buffer_limit_ends_the_stream_after_held_commands() -> None:
    """Past ``max_buffer_bytes`` held, new bytes are dropped and the stream ends in an error
    after the commands already held."""
    limit = 100 + MIN_BUFFER_HEADROOM_BYTES
    decoder = RespDecoder(max_bulk_bytes=100, max_buffer_bytes=limit)
    held = SET * (limit // len(SET))
    decoder.feed(held)
    assert len(decoder.next_commands(1)) == 1
    decoder.feed(SET * 2)  # too much while the rest is still held
    assert decoder.buffered <= limit
    assert len(decoder.next_commands()) == len(held) // len(SET) - 1
    with pytest.raises(RespProtocolError) as caught:
        decoder.next_commands()
    assert caught.value.reason == "Protocol error: max query buffer length reached"


def test_decoder_buffer_limit_counts_the_arguments_read_so_far() -> None:
    """A multibulk whose arguments together exceed the buffer limit fails while arriving."""
    decoder = RespDecoder(
        max_bulk_bytes=100_000, max_buffer_bytes=100_000 + MIN_BUFFER_HEADROOM_BYTES
    )
    decoder.feed(b"*100\r\n")
    with pytest.raises(RespProtocolError) as caught:
        for _ in range(20):
            decoder.feed(encode_command([b"v" * 99_990])[4:])
            assert decoder.next_commands() == []
            assert decoder.buffered <= 100_000 + MIN_BUFFER_HEADROOM_BYTES
    assert caught.value.reason == "Protocol error: max query buffer length reached"


def test_decoder_consumed_reads_do_not_count_against_the_limit() -> None:
    """A long stream of complete commands, taken as it comes, never hits the limit."""
    decoder = RespDecoder(max_bulk_bytes=100, max_buffer_bytes=100 + MIN_BUFFER_HEADROOM_BYTES)
    for _ in range(200):
        decoder.feed(SET * 1000)
        assert len(decoder.next_commands()) == 1000


def test_decoder_rejects_a_buffer_smaller_than_one_command() -> None:
    """``max_buffer_bytes`` must hold the largest bulk and its headers."""
    with pytest.raises(ValueError):
        RespDecoder(max_bulk_bytes=1000, max_buffer_bytes=1000)


# -- a header ends at its first CR (Redis's processMultibulkBuffer) -------------------------


@pytest.mark.parametrize(
    "data, commands",
    [
        (b"*1\rx$4\r\nPING\r\n", [[b"PING"]]),
        (b"*1\r\n$4\rxPING\r\n", [[b"PING"]]),
        (b"*2\r\r$4\r\nECHO\r\n$1\r\na\r\n", [[b"ECHO", b"a"]]),
        (b"*-1\rx*1\r\n$4\r\nPING\r\n", [[b"PING"]]),
        (b"*0\r\rPING\r\n", [[b"PING"]]),
        (b"*-1\r\r\nPING\r\n", [[b"PING"]]),  # the LF left over is an empty inline line
    ],
)
def test_decoder_header_ends_at_its_first_cr_and_skips_the_next_byte(
    data: bytes, commands: list[list[bytes]]
) -> None:
    """A ``*`` or ``$`` header ends at its first CR, whatever byte follows it (Redis skips
    that byte unread), in one read or cut anywhere."""
    assert decode_all(data) == commands
    for cut in range(len(data) + 1):
        assert decode_in_pieces([data[:cut], data[cut:]]) == commands, cut


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"*x\r\r", "Protocol error: invalid multibulk length"),
        (b"*\r\r", "Protocol error: invalid multibulk length"),
        (b"*1\r\n$x\r\r", "Protocol error: invalid bulk length"),
        (b"*1\r\n$\r\r", "Protocol error: invalid bulk length"),
        (b"*1\r\n\r\r", "Protocol error: expected '$', got ' '"),
        (b"*1\r\nx\r\r", "Protocol error: expected '$', got 'x'"),
        (b"*1\r\r\n$4\r\n", "Protocol error: expected '$', got ' '"),
        (b"*1\r\r\r\n", "Protocol error: expected '$', got ' '"),
        (b"*" + b"1" * MAX_INLINE_BYTES, "Protocol error: too big mbulk count string"),
        (b"*1\r\n$" + b"1" * MAX_INLINE_BYTES, "Protocol error: too big bulk count string"),
    ],
)
def test_decoder_header_ended_by_a_bare_cr_fails_as_redis_fails(data: bytes, reason: str) -> None:
    """A header ended by CR and any byte is complete: a bad one is refused at once (Redis:
    ``*x\\r\\r`` is ``invalid multibulk length`` and a close, not a wait for an LF), while
    without its last byte (a CR with nothing after it yet, or 64 KiB without a CR) it waits."""
    decoder = RespDecoder()
    decoder.feed(data[:-1])
    assert decoder.next_commands() == [] and decoder.error is None
    decoder.feed(data[-1:])
    with pytest.raises(RespProtocolError) as caught:
        decoder.next_commands()
    assert caught.value.reason == reason


# -- limits before AUTH (Redis's CVE-2021-32675 fix) ------------------------------------------


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"*11\r\n", "Protocol error: unauthenticated multibulk length"),
        (b"*12\rx", "Protocol error: unauthenticated multibulk length"),
        (b"*2000000\r\n", "Protocol error: unauthenticated multibulk length"),
        (b"*2147483648\r\n", "Protocol error: invalid multibulk length"),
        (b"*1\r\n$16385\r\n", "Protocol error: unauthenticated bulk length"),
        (b"*1\r\n$20000\rx", "Protocol error: unauthenticated bulk length"),
        (b"*1\r\n$536870913\r\n", "Protocol error: invalid bulk length"),
        (b"*1\r\n$-1\r\n", "Protocol error: invalid bulk length"),
    ],
)
def test_decoder_before_auth_refuses_long_headers_as_redis_does(data: bytes, reason: str) -> None:
    """Unauthenticated, a count over 10 or a length over 16384 ends the stream with Redis's
    words, checked in Redis's order (an invalid number is still ``invalid``)."""
    decoder = RespDecoder(authenticated=False)
    decoder.feed(data)
    with pytest.raises(RespProtocolError) as caught:
        decoder.next_commands()
    assert caught.value.reason == reason


def test_decoder_before_auth_takes_what_redis_takes() -> None:
    """Ten arguments of 16384 bytes each pass before AUTH, and an inline line is not bound by
    the multibulk limits."""
    argv = [b"v" * 16384] * 10
    words = [b"w"] * 20
    decoder = RespDecoder(authenticated=False)
    decoder.feed(encode_command(argv) + b" ".join(words) + b"\r\n")
    assert decoder.next_commands() == [argv]
    assert decoder.next_commands() == [words]


def test_decoder_before_auth_hands_out_one_command_at_a_time() -> None:
    """Before AUTH each call returns one command, so a pipelined AUTH can lift the limits for
    the command after it; ``authenticated = False`` (RESET) brings them back."""
    big = encode_command([b"MSET"] + [b"k", b"x" * 20000] * 6)
    decoder = RespDecoder(authenticated=False)
    decoder.feed(encode_command([b"AUTH", b"pw"]) + big + big)
    assert decoder.next_commands() == [[b"AUTH", b"pw"]]
    decoder.authenticated = True
    assert len(decoder.next_commands()) == 2
    decoder.feed(big)
    decoder.authenticated = False
    with pytest.raises(RespProtocolError) as caught:
        decoder.next_commands()
    assert caught.value.reason == "Protocol error: unauthenticated multibulk length"


_ARGS = st.lists(
    st.binary(max_size=40) | st.sampled_from([b"\r\n", b"a\r", b"\nb"]), min_size=1, max_size=6
)
_WORDS = st.lists(
    st.text(alphabet="abcXYZ019:_-", min_size=1, max_size=8).map(str.encode), min_size=1, max_size=4
)


@st.composite
def _streams(draw: st.DrawFn) -> tuple[bytes, list[list[bytes]]]:
    """A valid stream of multibulk and inline commands, and the commands it holds."""
    wire: list[bytes] = []
    argvs: list[list[bytes]] = []
    for is_inline, args, words in draw(
        st.lists(st.tuples(st.booleans(), _ARGS, _WORDS), max_size=8)
    ):
        if is_inline:
            wire.append(b" ".join(words) + draw(st.sampled_from([b"\n", b"\r\n"])))
            argvs.append(words)
        else:
            wire.append(encode_command(args))
            argvs.append(args)
    return b"".join(wire), argvs


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@settings(max_examples=300, deadline=None)
@given(_streams(), st.lists(st.integers(min_value=0), max_size=10))
def test_decoder_valid_streams_at_random_splits(
    stream: tuple[bytes, list[list[bytes]]], cuts: list[int]
) -> None:
    """Any valid stream decodes to its commands however it is split into reads."""
    data, argvs = stream
    assert decode_in_pieces(_split(data, cuts)) == argvs


@settings(max_examples=200, deadline=None)
@given(_streams(), st.lists(st.integers(min_value=0), max_size=6), st.integers(1, 4))
def test_decoder_slow_path_agrees_with_fast_path(
    stream: tuple[bytes, list[list[bytes]]], cuts: list[int], limit: int
) -> None:
    """With the fast path off (small limits) and a small ``limit``, the commands are the same."""
    data, argvs = stream
    decoder = RespDecoder(max_bulk_bytes=100)
    out: list[list[bytes]] = []
    for piece in _split(data, cuts):
        decoder.feed(piece)
        while batch := decoder.next_commands(limit):
            assert len(batch) <= limit
            out += batch
    assert out == argvs


_NOISE = st.lists(
    st.binary(max_size=24)
    | st.sampled_from(
        [
            b"*",
            b"$",
            b"\r\n",
            b"*2\r\n",
            b"$3\r\n",
            b"-1",
            b"99999999999999999999",
            b'"',
            b"'",
            b"\\x4",
            b"\n",
            b"\x00",
            b"PING",
        ]
    ),
    max_size=12,
)


@settings(max_examples=1000, deadline=None)
@given(_NOISE)
def test_decoder_random_bytes_only_ever_raise_protocol_errors(chunks: list[bytes]) -> None:
    """Random reads give commands of bytes or RespProtocolError, never another exception."""
    decoder = RespDecoder(max_bulk_bytes=64)
    for chunk in chunks:
        decoder.feed(chunk)
        try:
            batch = decoder.next_commands(3)
        except RespProtocolError as error:
            assert error.reason.startswith("Protocol error: ")
            assert error.reply.endswith(b"\r\n") and error.reply.count(b"\r\n") == 1
            return
        assert len(batch) <= 3
        assert all(type(arg) is bytes for argv in batch for arg in argv)
        assert decoder.buffered >= 0


@settings(max_examples=200, deadline=None)
@given(st.lists(_ARGS, min_size=1, max_size=5))
def test_commands_round_trip_through_the_decoder(argvs: list[list[bytes]]) -> None:
    """``encode_command`` and the decoder are inverses."""
    assert decode_all(b"".join(encode_command(a) for a in argvs)) == argvs


_needs_c = pytest.mark.skipif(_C_SCANS[0] is None, reason="C accelerator not built")


@_needs_c
def test_c_scan_raw_takes_complete_plain_commands_only() -> None:
    """``scan_raw`` takes whole, plainly valid multibulks and stops at the first other thing."""
    scan_raw = _C_SCANS[1]
    assert scan_raw is not None
    for rest in [
        b"",
        b"PING\r\n",
        b"*1\r\n$4\r\nPIN",
        b"*1\r\n$3\r\nabcd\r\n",
        b"*0\r\n",
        b"*1\r\n$01\r\nx\r\n",
        b"*2\r\n$1\r\na\r\n:1\r\n",
        b"*1\r\n$-1\r\n",
    ]:
        out: list[list[bytes]] = []
        buf = SET * 3 + encode_command([b"a\r\nb"]) + rest
        assert scan_raw(buf, 0, out, 100, 1024, 1024) == len(buf) - len(rest), rest
        assert out == [[b"SET", b"key:__rand_int__", b"xxx"]] * 3 + [[b"a\r\nb"]]
    out = []
    assert scan_raw(SET * 3, len(SET), out, 1, 1024, 1024) == 2 * len(SET)  # from pos, to limit
    assert scan_raw(SET, 0, [], 10, 2, 1024) == 0  # more arguments than max_count
    assert scan_raw(SET, 0, [], 10, 1024, 15) == 0  # a bulk over max_bulk


@_needs_c
def test_c_scan_takes_whole_lines_commands_only() -> None:
    """``scan`` takes whole multibulks from split lines; a CRLF in data is left to Python."""
    scan = _C_SCANS[0]
    assert scan is not None
    lines = (SET * 2 + encode_command([b"a\r\nb"]) + GET).split(b"\r\n")
    out: list[list[bytes]] = []
    assert scan(lines, 0, len(lines) - 1, out, 100, 1024, 1024) == 14
    assert out == [[b"SET", b"key:__rand_int__", b"xxx"]] * 2
    assert scan(lines, 0, 1000, out, 100, 1024, 1024) == 14  # ``last`` past the list is clamped


@_needs_c
def test_c_scans_check_their_arguments() -> None:
    """Wrong types are a TypeError, not a crash."""
    scan, scan_raw = _C_SCANS
    assert scan is not None and scan_raw is not None
    with pytest.raises(TypeError):
        scan_raw(bytearray(SET), 0, [], 1, 1, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        scan((), 0, 0, [], 1, 1, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        scan_raw(SET, 0, [])  # type: ignore[call-arg]


def _reference_decode(
    data: bytes, max_bulk: int, authenticated: bool = True
) -> tuple[list[list[bytes]], str | None]:
    """A plain offset-walking decoder of the whole stream, written from docs/resp.md: the
    model the decoder must agree with, at any split. Returns the commands and the error."""
    out: list[list[bytes]] = []
    pos = 0
    big = MAX_INLINE_BYTES + 1

    def header_end(start: int, too_big: str) -> int | str | None:
        # A header ends at its first CR once a byte follows it (skipped unread, as Redis
        # skips it); more than 64 KiB without a CR is too big.
        cr = data.find(b"\r", start)
        if cr < 0:
            return too_big if len(data) - start > MAX_INLINE_BYTES else None
        return cr if cr + 1 < len(data) else None

    while pos < len(data):
        if data[pos] != 42:  # inline
            lf = data.find(b"\n", pos)
            if lf < 0:
                return out, (_resp.TOO_BIG_INLINE if len(data) - pos > big else None)
            line = data[pos : lf - 1] if data[lf - 1 : lf] == b"\r" and lf > pos else data[pos:lf]
            if len(line) > MAX_INLINE_BYTES:
                return out, _resp.TOO_BIG_INLINE
            words = split_inline(line)
            if words is None:
                return out, _resp.UNBALANCED_QUOTES
            if words:
                out.append(words)
            pos = lf + 1
            continue
        end = header_end(pos, _resp.TOO_BIG_MULTIBULK)
        if not isinstance(end, int):
            return out, end
        count = strict_int(data[pos + 1 : end])
        if count is None or count > 2**31 - 1:
            return out, _resp.INVALID_MULTIBULK
        if not authenticated and count > 10:
            return out, "Protocol error: unauthenticated multibulk length"
        if count > 1024 * 1024:
            return out, _resp.INVALID_MULTIBULK
        pos = end + 2
        argv: list[bytes] = []
        for _ in range(count):
            end = header_end(pos, _resp.TOO_BIG_BULK)
            if not isinstance(end, int):
                return out, end
            if data[pos : pos + 1] != b"$":
                return out, _resp._expected_dollar(data[pos:end])
            size = strict_int(data[pos + 1 : end])
            if size is None or size < 0 or size > max_bulk:
                return out, _resp.INVALID_BULK
            if not authenticated and size > 16384:
                return out, "Protocol error: unauthenticated bulk length"
            pos = end + 2
            if len(data) - pos < size + 2:
                return out, None
            if data[pos + size : pos + size + 2] != b"\r\n":
                return out, _resp.EXPECTED_CRLF
            argv.append(data[pos : pos + size])
            pos += size + 2
        if argv:
            out.append(argv)
    return out, None


_PIECES = st.lists(
    st.sampled_from(
        [
            SET,
            GET,
            b"*",
            b"*1",
            b"*2",
            b"*3",
            b"*0",
            b"*-1",
            b"*01",
            b"$",
            b"$0",
            b"$1",
            b"$2",
            b"$3",
            b"$-1",
            b"$4096",
            b"$16385",
            b"*11",
            b"\r\n",
            b"\r",
            b"\n",
            b"a",
            b"ab",
            b"abc",
            b" ",
            b'"',
            b"'",
            b"\\",
            b"x",
            b"PING",
            b"\x00",
            b"\x0b",
            b":",
            b"+",
        ]
    )
    | st.binary(max_size=6),
    max_size=30,
)


@settings(max_examples=1500, deadline=None)
@given(
    _PIECES,
    st.lists(st.integers(min_value=0), max_size=8),
    st.integers(1, 5),
    st.booleans(),
    st.booleans(),
)
def test_decoder_agrees_with_the_reference_model(
    pieces: list[bytes], cuts: list[int], limit: int, small: bool, authenticated: bool
) -> None:
    """On any stream, valid or not, split anywhere and drained ``limit`` at a time, the decoder
    returns the model's commands and ends in the model's error, before AUTH and after."""
    data = b"".join(pieces)
    max_bulk = 3 if small else _resp.DEFAULT_MAX_BULK_BYTES
    expected, expected_error = _reference_decode(data, max_bulk, authenticated)
    decoder = RespDecoder(max_bulk_bytes=max_bulk, authenticated=authenticated)
    out: list[list[bytes]] = []
    error = None
    try:
        for piece in _split(data, cuts):
            decoder.feed(piece)
            while batch := decoder.next_commands(limit):
                out += batch
    except RespProtocolError as caught:
        error = caught.reason
    assert (out, error) == (expected, expected_error)


def test_decoder_read_arriving_while_empty_keeps_every_byte_accounted() -> None:
    """A read fed to an empty decoder (kept whole for one scan) counts in ``buffered`` until
    taken; a command and a half take the general path; two reads before a take lose nothing;
    a limit smaller than the read's commands leaves the rest buffered."""
    half = GET[:3]  # within its first line: nothing of it is parsed yet
    decoder = RespDecoder()
    decoder.feed(SET + half)
    assert decoder.buffered == len(SET) + len(half)
    assert decoder.next_commands() == [[b"SET", b"key:__rand_int__", b"xxx"]]
    assert decoder.buffered == len(half)
    decoder.feed(GET[3:])
    assert decoder.next_commands() == [[b"GET", b"key:__rand_int__"]]
    assert decoder.buffered == 0
    decoder.feed(GET)
    decoder.feed(SET)
    assert decoder.buffered == len(GET) + len(SET)
    assert decoder.next_commands(1) == [[b"GET", b"key:__rand_int__"]]
    assert decoder.buffered == len(SET)
    assert decoder.next_commands() == [[b"SET", b"key:__rand_int__", b"xxx"]]
    decoder.feed(GET * 3)
    assert decoder.next_commands(2) == [[b"GET", b"key:__rand_int__"]] * 2
    assert decoder.buffered == len(GET)
    assert decoder.statistics().commands == 6
    assert decoder.statistics().bytes_fed == len(SET) * 2 + len(GET) * 5


def test_decoder_inline_command_in_a_read_arriving_while_empty() -> None:
    """An inline request in a fresh read (which the C scan leaves) is still decoded."""
    decoder = RespDecoder()
    decoder.feed(b"PING\r\n")
    assert decoder.next_commands() == [[b"PING"]]
    decoder.feed(GET + b"PING\r\n")
    assert decoder.next_commands() == [[b"GET", b"key:__rand_int__"], [b"PING"]]
