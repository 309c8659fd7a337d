"""AuthGate: the line protocol's password gate, without sockets."""

from __future__ import annotations

from minidb.protocol import OK, Get, RequestDecoder, Set
from minidb.server._line_auth import AUTH_REQUIRED, INVALID_PASSWORD, AuthGate


def test_gate_answers_every_line_until_auth_then_passes_requests() -> None:
    """GET before AUTH is refused locally, a wrong AUTH too; after AUTH requests flow."""
    gate = AuthGate(RequestDecoder(), b"pw")
    gate.receive(b"GET 0 k\nAUTH nope\nAUTH pw\r\nSET 0 k v\nGET 0 k\n")
    assert gate.next_requests(10) == [
        AUTH_REQUIRED, INVALID_PASSWORD, OK, Set(b"0", b"k", b"v"), Get(b"0", b"k"),
    ]  # fmt: skip
    assert gate.authenticated and not gate.has_request()


def test_gate_takes_at_most_the_limit() -> None:
    """The limit counts the gate's own replies and the requests after AUTH together."""
    gate = AuthGate(RequestDecoder(), b"pw")
    gate.receive(b"AUTH pw\nGET 0 a\nGET 0 b\n")
    assert gate.next_requests(2) == [OK, Get(b"0", b"a")]
    assert gate.has_request() and gate.next_requests(5) == [Get(b"0", b"b")]


def test_gate_waits_for_a_whole_line() -> None:
    """A partial AUTH line is neither answered nor lost."""
    gate = AuthGate(RequestDecoder(), b"pw")
    gate.receive(b"AUTH p")
    assert not gate.has_request() and gate.next_requests(5) == []
    gate.receive(b"w\n")
    assert gate.next_requests(5) == [OK]


def test_gate_bounds_an_unauthenticated_line() -> None:
    """A client that sends megabytes without a newline before AUTH holds no more than a line."""
    gate = AuthGate(RequestDecoder(), b"pw")
    for _ in range(100):
        gate.receive(b"x" * 65536)
        assert gate.buffered <= 2
    gate.receive(b"x\nAUTH pw\n")
    assert gate.next_requests(5) == [AUTH_REQUIRED, OK]
