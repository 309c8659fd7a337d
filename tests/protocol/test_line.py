"""The line codec: every request and reply round-trips, every malformed input gets its ERR."""

from __future__ import annotations

from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.protocol import (
    MAX_ECHO_CHARS,
    MAX_LINE_BYTES,
    MAX_VALUE_BYTES,
    Delete,
    Error,
    Get,
    Invalid,
    Keys,
    Nil,
    Ok,
    ReplyDecoder,
    Request,
    RequestDecoder,
    Scan,
    Set,
    Value,
    encode_reply,
    encode_request,
    parse_reply,
    parse_request,
)


@pytest.mark.parametrize(
    "line, request_",
    [
        (b"SET users alice hello", Set(b"users", b"alice", b"hello")),
        (b"GET users alice", Get(b"users", b"alice")),
        (b"DEL users alice", Delete(b"users", b"alice")),
        (b"SCAN users 0 10", Scan(b"users", b"0", 10)),
        (b"SCAN users +alice 1000", Scan(b"users", b"+alice", 1000)),
        (b"SET a.b:c/d-e_f K9 v", Set(b"a.b:c/d-e_f", b"K9", b"v")),
    ],
)
def test_parse_request_round_trips(line: bytes, request_: object) -> None:
    """Each verb parses to its request object and encodes back to the same line."""
    assert parse_request(line) == request_
    assert encode_request(parse_request(line)) == line  # type: ignore[arg-type]


@pytest.mark.parametrize("verb", [b"get", b"Get", b"gEt"])
def test_parse_request_verbs_are_case_insensitive(verb: bytes) -> None:
    """Verbs match whatever their case."""
    assert parse_request(verb + b" users alice") == Get(b"users", b"alice")


@pytest.mark.parametrize(
    "value",
    [b"", b" ", b"  two  spaces  ", b"trailing ", b" leading", "h\u00e9llo w\u00f6rld".encode()],
)
def test_parse_request_set_value_kept_byte_for_byte(value: bytes) -> None:
    """The value is the rest of the line after the key's single space, spaces included."""
    assert parse_request(b"SET users alice " + value) == Set(b"users", b"alice", value)


def test_parse_request_crlf_terminator_is_stripped() -> None:
    """A CRLF-terminated line parses like an LF-terminated one."""
    assert parse_request(b"SET users alice hello\r\n") == Set(b"users", b"alice", b"hello")


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"", "empty request"),
        (b"   ", "empty request"),
        (b"PING", "unknown verb PING"),
        (b"ping now", "unknown verb PING"),
        (b"GET users", "missing argument"),
        (b"GET", "missing argument"),
        (b"SET users alice", "missing argument"),
        (b"DEL users", "missing argument"),
        (b"SCAN users 0", "missing argument"),
        (b"GET users alice bob", "too many arguments"),
        (b"GET us$ers alice", "invalid name us$ers"),
        (b"GET users " + b"k" * 65, "invalid name " + "k" * 65),
        (b"SET users al\xc3\xa9 v", "invalid name al\u00e9"),
        (b"SCAN users x 10", "invalid cursor x"),
        (b"SCAN users 0 0", "invalid count 0"),
        (b"SCAN users 0 1001", "invalid count 1001"),
        (b"SCAN users 0 -1", "invalid count -1"),
        (b"SET users alice " + b"v" * (MAX_VALUE_BYTES + 1), "value too long"),
        (b"SET users alice \xff\xfe", "invalid utf-8"),
        (b"x" * (MAX_LINE_BYTES + 1), "line too long"),
    ],
)
def test_parse_request_malformed_gets_its_error(line: bytes, reason: str) -> None:
    """Every malformed line becomes Invalid with the reason the wire shows."""
    assert parse_request(line) == Invalid(reason)


def test_parse_request_longest_value_is_accepted() -> None:
    """A value of exactly the limit is fine."""
    value = b"v" * MAX_VALUE_BYTES
    assert parse_request(b"SET users alice " + value) == Set(b"users", b"alice", value)


def test_request_decoder_split_request_is_one_request() -> None:
    """A request split across reads, with reads in between, is still one request."""
    decoder = RequestDecoder()
    assert decoder.feed(b"GET us") == []
    assert decoder.feed(b"ers al") == []
    assert decoder.feed(b"ice\r") == []
    assert decoder.feed(b"\nGET a b\nSET") == [Get(b"users", b"alice"), Get(b"a", b"b")]
    assert decoder.buffered == 3


def test_request_decoder_long_line_is_discarded_without_buffering() -> None:
    """An over-long line is dropped as it arrives and answered once its newline comes."""
    decoder = RequestDecoder()
    assert decoder.feed(b"SET users alice ") == []
    for _ in range(10):
        assert decoder.feed(b"x" * 4096) == []
        assert decoder.buffered <= MAX_LINE_BYTES + 1
    assert decoder.feed(b"xx\nGET users alice\n") == [
        Invalid("line too long"),
        Get(b"users", b"alice"),
    ]


def test_request_decoder_long_line_in_one_read_is_refused() -> None:
    """A complete over-long line inside one read is refused, and the next line still parses."""
    decoder = RequestDecoder()
    data = b"x" * (MAX_LINE_BYTES + 10) + b"\nGET a b\n"
    assert decoder.feed(data) == [Invalid("line too long"), Get(b"a", b"b")]


def test_request_decoder_discard_partial_forgets_half_line() -> None:
    """Discarding the partial line means its rest is parsed as a fresh line."""
    decoder = RequestDecoder()
    decoder.feed(b"GET users al")
    decoder.discard_partial()
    assert decoder.feed(b"GET a b\n") == [Get(b"a", b"b")]


@pytest.mark.parametrize(
    "reply",
    [Ok(), Nil(), Value("hello"), Value(""), Value(" a b "), Error("busy"),
     Keys("0", ()), Keys("+bob", ("alice", "bob"))],
)
def test_parse_reply_round_trips(reply: object) -> None:
    """Every reply encodes to one line and parses back to itself."""
    wire = encode_reply(reply)  # type: ignore[arg-type]
    assert wire.endswith(b"\n") and wire.count(b"\n") == 1
    assert parse_reply(wire) == reply


def test_parse_reply_rejects_garbage() -> None:
    """A line that is no reply raises ValueError."""
    with pytest.raises(ValueError):
        parse_reply(b"HELLO")


def test_reply_decoder_frames_lines() -> None:
    """Reply framing keeps partial lines and strips CR."""
    decoder = ReplyDecoder()
    assert decoder.feed(b"OK\nVAL") == [b"OK"]
    assert decoder.feed(b"UE x\r\n") == [b"VALUE x"]


@settings(max_examples=10_000, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_request_decoder_never_crashes_on_random_bytes(chunks: list[bytes]) -> None:
    """Random byte strings fed in random chunks only ever produce requests (of every kind the
    protocol has: random bytes can spell ``PERSIST a -`` too)."""
    decoder = RequestDecoder()
    for chunk in chunks:
        for request in decoder.feed(chunk):
            assert isinstance(request, get_args(Request))


_TOKENS = st.sampled_from(
    [b"GET", b"SET", b"DEL", b"get", b"Set", b"SCAN", b"users", b"alice", b"a" * 64, b"a" * 65,
     b"", b" ", b"\r", b"x\xc3\xa9", b"\xff", b"0", b"+k", b"10", b"v" * 4096]
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(_TOKENS, max_size=6), st.sampled_from([b" ", b"  ", b""]))
def test_parse_request_fast_path_agrees_with_full_parser(tokens: list[bytes], sep: bytes) -> None:
    """The single-regex fast path gives exactly what the general parser gives."""
    from minidb.protocol._line import _parse_request_fully

    line = sep.join(tokens) if sep else b" ".join(tokens) + b" "
    assert parse_request(line) == _parse_request_fully(line)


@pytest.mark.parametrize("digits", [4301, 5000, MAX_LINE_BYTES - 20])
def test_parse_request_huge_count_is_refused_before_conversion(digits: int) -> None:
    """A SCAN count of thousands of digits (int() would raise past 4300) gets its ERR,
    with the echoed token cut short."""
    request = parse_request(b"SCAN a 0 " + b"9" * digits)
    assert isinstance(request, Invalid)
    assert request.reason.startswith("invalid count 999")
    assert len(request.reason) <= len("invalid count ") + MAX_ECHO_CHARS + 3


def test_parse_request_count_with_leading_zeros_still_parses() -> None:
    """Leading zeros do not count against the count's length bound."""
    assert parse_request(b"SCAN a 0 " + b"0" * 5000 + b"7") == Scan(b"a", b"0", 7)
    assert parse_request(b"SCAN a 0 0001001") == Invalid("invalid count 0001001")


def test_parse_request_long_tokens_are_echoed_bounded() -> None:
    """Names, cursors and verbs quoted in an ERR are cut to MAX_ECHO_CHARS."""
    long = b"x!" * 2000
    for line in (b"GET " + long + b" k", b"SCAN a +" + long + b" 1", long):
        request = parse_request(line)
        assert isinstance(request, Invalid) and request.reason.endswith("...")
        assert len(request.reason) < 20 + MAX_ECHO_CHARS + 3


def test_request_decoder_next_requests_hands_out_at_most_limit() -> None:
    """Complete lines stay undecoded bytes until asked for, at most ``limit`` at a time."""
    decoder = RequestDecoder()
    decoder.receive(b"".join(b"GET b k%d\n" % i for i in range(10)) + b"GET b pa")
    assert decoder.next_requests(4) == [Get(b"b", b"k%d" % i) for i in range(4)]
    assert decoder.buffered == len(b"".join(b"GET b k%d\n" % i for i in range(4, 10))) + 8
    assert decoder.next_requests(4) == [Get(b"b", b"k%d" % i) for i in range(4, 8)]
    assert decoder.next_requests(4) == [Get(b"b", b"k8"), Get(b"b", b"k9")]
    assert decoder.next_requests(4) == []
    decoder.receive(b"rt\n")
    assert decoder.next_requests(4) == [Get(b"b", b"part")]


def test_request_decoder_discard_partial_keeps_complete_lines() -> None:
    """On shutdown the half line goes, the complete lines not yet taken stay owed."""
    decoder = RequestDecoder()
    decoder.receive(b"GET a b\nGET a c\nGET a")
    decoder.discard_partial()
    assert decoder.next_requests(10) == [Get(b"a", b"b"), Get(b"a", b"c")]
    assert decoder.buffered == 0


@pytest.mark.parametrize(
    "line",
    [
        b"SET b k v",
        b"SET b k ",
        b"SET b k two words",
        b"SET b k x\r",
        b"SET b k x\ry",
        b"SET b k \x00\x7f",
        b"SET b k caf\xc3\xa9",
        b"SET b k \xff",
        b"SET b k " + b"v" * MAX_VALUE_BYTES,
        b"SET b k " + b"v" * (MAX_VALUE_BYTES + 1),
        b"SET b k " + b"v" * MAX_VALUE_BYTES + b"\r",
        b"SET b" + b"k" * 65 + b" v",
        b"SET b k",
        b"set b k v",
        b"SET  b k v",
        b"GET b k",
    ],
)
def test_decoder_fast_set_path_agrees_with_parse_request(line: bytes) -> None:
    """Whatever shortcut the decoder takes for a plain SET, each line decodes as
    ``parse_request`` parses it."""
    assert RequestDecoder().feed(line + b"\n") == [parse_request(line)]


@given(st.binary(max_size=40))
@settings(max_examples=300, deadline=None)
def test_decoder_agrees_with_parse_request_on_any_set_line(tail: bytes) -> None:
    """Any ``SET`` line without LF decodes as ``parse_request`` parses it."""
    line = b"SET b k " + tail.replace(b"\n", b"")
    assert RequestDecoder().feed(line + b"\n") == [parse_request(line)]
