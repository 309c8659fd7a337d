"""``RespDecoder.take_whole`` in C (``_cresp.take_whole_method``: the checks read the
decoder's slots) held to its Python twin: two decoders given the same reads, commands taken,
authentication changes and ``take_whole`` attempts answer the same and end in the same state."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.protocol import RespDecoder, _resp, encode_command
from minidb.protocol._resp import MIN_BUFFER_HEADROOM_BYTES

pytestmark = [
    pytest.mark.accelerator,
    pytest.mark.skipif(_resp._cresp is None, reason="C accelerator not built"),
]

_COMMANDS = st.lists(
    st.lists(st.binary(max_size=12) | st.just(b"\r\n"), min_size=1, max_size=4),
    min_size=1, max_size=4,
).map(lambda argvs: b"".join(encode_command(a) for a in argvs))
_READS = _COMMANDS | st.binary(max_size=20) | st.sampled_from([
    b"PING\r\n", b"*1\r\n$4\r\nPI", b"GET k", b"*2\r\n$3\r\nGET\r\n", b"*1\r\n+x\r\n",
])
"""Whole commands, noise, and the reads that leave something held: half a header, an inline
line with no end, a command with an argument still to come, a protocol error."""
_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["feed", "take", "take_whole", "auth", "noauth", "error"]),
        _READS,
        st.integers(1, 3),
        st.booleans(),
    ),
    max_size=12,
)


Step = tuple[str, bytes, int, bool]
"""(what, the read, next_commands's limit, whether take takes)"""


class _Take:
    """The ``take`` lent the scan: decodes the read with it, as ``store.express`` does, and
    takes it (or, told so, refuses it); records each call."""

    def __init__(self, takes: bool) -> None:
        self.takes = takes
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, scan: Any, data: bytes, count: int, bulk: int, lane: object) -> Any:
        self.calls.append((scan is _resp._scan_raw, data, count, bulk, lane))
        out: list[list[bytes]] = []
        if not self.takes or scan(data, 0, out, 1000, count, bulk) != len(data) or not out:
            return None
        return (out, "rest")


def _state(decoder: RespDecoder) -> tuple[object, ...]:
    return (
        decoder.statistics(), decoder.buffered, decoder.authenticated,
        decoder.error and decoder.error.reason,
    )


def _step(decoder: RespDecoder, take_whole: Any, step: Step) -> object:
    kind, data, limit, takes = step
    if kind == "feed":
        decoder.feed(data)
        return None
    if kind == "take":
        try:
            return decoder.next_commands(limit)
        except _resp.RespProtocolError as error:
            return error.reason
    if kind == "auth" or kind == "noauth":
        decoder.authenticated = kind == "auth"
        return None
    if kind == "error":
        data = memoryview(data)  # not bytes: refused
    take = _Take(takes)
    taken = take_whole(decoder, data, take, ("lane", limit))
    if taken is not None:
        decoder.feed(b"")  # (taken: nothing of it is held)
    return taken, take.calls


@settings(max_examples=400, deadline=None)
@given(_STEPS)
def test_take_whole_in_c_answers_as_the_python_one(steps: list[Step]) -> None:
    c, python = RespDecoder(), RespDecoder()
    assert type(RespDecoder.__dict__["take_whole"]).__name__ == "method_descriptor"
    for step in steps:
        assert _step(c, RespDecoder.take_whole, step) == _step(
            python, RespDecoder.take_whole_py, step
        ), step
        assert _state(c) == _state(python)


def test_take_whole_counts_what_it_took() -> None:
    decoder = RespDecoder()
    wire = encode_command([b"SET", b"k", b"v"]) + encode_command([b"GET", b"k"])
    taken = decoder.take_whole(wire, _Take(True), None)
    assert taken is not None and taken[0] == [[b"SET", b"k", b"v"], [b"GET", b"k"]]
    assert decoder.statistics().commands == 2 and decoder.statistics().bytes_fed == len(wire)
    assert decoder.take_whole(wire, _Take(False), None) is None  # refused: nothing counted
    assert decoder.statistics().commands == 2 and decoder.statistics().bytes_fed == len(wire)


@pytest.mark.parametrize(
    "held",
    [
        b"GET k",  # an inline line with no end yet
        b"*2\r\n$3\r\nGET\r\n",  # a command with an argument to come
        b"*1\r\n+x\r\n",  # a protocol error
        b"x" * (17 + MIN_BUFFER_HEADROOM_BYTES),  # past the buffer's bound
    ],
)
@pytest.mark.parametrize("parsed", [False, True])
def test_take_whole_takes_nothing_while_anything_is_held(held: bytes, parsed: bool) -> None:
    wire = encode_command([b"GET", b"k"])
    for take_whole in (RespDecoder.take_whole, RespDecoder.take_whole_py):
        decoder = RespDecoder(max_bulk_bytes=16, max_buffer_bytes=16 + MIN_BUFFER_HEADROOM_BYTES)
        decoder.feed(held)
        if parsed:
            with contextlib.suppress(_resp.RespProtocolError):
                decoder.next_commands()
        take = _Take(True)
        assert take_whole(decoder, wire, take, None) is None and take.calls == []


def test_take_whole_takes_only_bytes() -> None:
    wire = encode_command([b"GET", b"k"])
    for take_whole in (RespDecoder.take_whole, RespDecoder.take_whole_py):
        for data in (bytearray(wire), memoryview(wire)):
            take = _Take(True)
            assert take_whole(RespDecoder(), data, take, None) is None and take.calls == []


def test_take_whole_of_a_subclass_or_a_bare_instance_goes_the_python_way() -> None:
    class Decoder(RespDecoder):
        __slots__ = ("extra",)

    wire = encode_command([b"GET", b"k"])
    taken = Decoder().take_whole(wire, _Take(True), None)
    assert taken == ([[b"GET", b"k"]], "rest")
    bare = RespDecoder.__new__(RespDecoder)  # no slot set: Python raises AttributeError
    with pytest.raises(AttributeError):
        bare.take_whole(wire, _Take(True), None)
    with pytest.raises(TypeError):
        RespDecoder().take_whole(wire, _Take(True), None, "extra")  # type: ignore[call-arg]
    with pytest.raises(RuntimeError, match="one decoder class"):
        _resp._cresp.take_whole_method(RespDecoder, RespDecoder.take_whole_py)
