"""AuthGate: the line protocol's password gate, without sockets."""

from __future__ import annotations

from minidb.protocol import OK, Get, RequestDecoder, Set
from minidb.server._line_auth import (
    AUTH_REQUIRED,
    INVALID_PASSWORD,
    LINE_TOO_LONG,
    MAX_UNAUTHENTICATED_LINE_BYTES,
    AuthGate,
)


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


def test_gate_auth_verb_is_case_insensitive() -> None:
    """``auth pw`` and ``Auth pw`` authenticate: verbs are case-insensitive everywhere."""
    for verb in (b"auth", b"Auth", b"AUTH"):
        gate = AuthGate(RequestDecoder(), b"pw")
        gate.receive(verb + b" pw\nGET 0 k\n")
        assert gate.next_requests(5) == [OK, Get(b"0", b"k")]
    gate = AuthGate(RequestDecoder(), b"pw")
    gate.receive(b"authx pw\nauth  pw\n")  # the password is what follows the first space
    assert gate.next_requests(5) == [AUTH_REQUIRED, INVALID_PASSWORD]


def test_gate_bounds_an_unauthenticated_line() -> None:
    """A client that sends megabytes without a newline before AUTH is answered once the line
    is known to be too long, and the stream ends: nothing it sends after is kept or taken."""
    inner = RequestDecoder()
    gate = AuthGate(inner, b"pw")
    gate.receive(b"GET 0 k\n")
    for _ in range(100):
        gate.receive(b"x" * 65536)
        assert gate.buffered <= len(b"GET 0 k\n")
    gate.receive(b"x\nAUTH pw\n")
    assert gate.next_requests(5) == [AUTH_REQUIRED, LINE_TOO_LONG]
    assert inner.closing and not gate.authenticated
    assert not gate.has_request() and gate.next_requests(5) == []


def test_gate_refuses_a_whole_long_line_before_auth_and_ends_the_stream() -> None:
    """A complete line over ``MAX_UNAUTHENTICATED_LINE_BYTES`` is refused and nothing after
    it is taken, even an AUTH; one of exactly the limit is an ordinary refused line. After
    AUTH, the same line is a request like any other."""
    inner = RequestDecoder()
    gate = AuthGate(inner, b"pw")
    at_limit = b"x" * MAX_UNAUTHENTICATED_LINE_BYTES
    long_set = b"SET 0 k " + b"v" * MAX_UNAUTHENTICATED_LINE_BYTES
    gate.receive(at_limit + b"\r\n" + long_set + b"\nAUTH pw\n")
    assert gate.next_requests(5) == [AUTH_REQUIRED, LINE_TOO_LONG]
    assert inner.closing and not gate.authenticated and not gate.has_request()
    gate = AuthGate(RequestDecoder(), b"pw")
    gate.receive(b"AUTH pw\n" + long_set + b"\n")
    assert gate.next_requests(5) == [OK, Set(b"0", b"k", long_set[8:])]


def test_gate_limit_fits_a_long_password() -> None:
    """A password longer than the limit can still be sent, in pieces: the limit is what
    ``AUTH <password>`` needs, and one byte more is refused."""
    password = b"p" * (2 * MAX_UNAUTHENTICATED_LINE_BYTES)
    gate = AuthGate(RequestDecoder(), password)
    gate.receive(b"AUTH " + password[:100])
    gate.receive(password[100:] + b"\r\n")
    assert gate.next_requests(5) == [OK]
    gate = AuthGate(RequestDecoder(), password)
    gate.receive(b"AUTH " + password + b"p\n")
    assert gate.next_requests(5) == [LINE_TOO_LONG]
