"""LMPOP, BLMPOP, ZMPOP and BZMPOP parse ``[timeout] numkeys key... <side> [COUNT n]`` alike
(``store._lists.mpop_args``): each malformed form, and a few served ones, sent to a real
``minidb serve`` and a real ``redis-server``, the bytes compared in RESP2 and RESP3 (arity is
the session's check, the rest the engine's). Skipped without ``redis-server``; every socket
wait has a deadline."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server.conftest import ServeFactory, ServerProcess
from tests.server.test_containers_vs_redis import RedisServer
from tests.server.test_pubsub import Raw, _one_raw

SETUP = [
    [b"ZADD", b"z1", b"1", b"a", b"2", b"b", b"3", b"c"],
    [b"RPUSH", b"l1", b"a", b"b", b"c"],
    [b"SET", b"str", b"v"],
]

MALFORMED = [
    [],  # arity: the name alone
    [b"{t}"],
    [b"{t}", b"1"],
    [b"{t}", b"1", b"k"],
    [b"{t}", b"0", b"k", b"{min}"],  # numkeys
    [b"{t}", b"-1", b"k", b"{min}"],
    [b"{t}", b"x", b"k", b"{min}"],
    [b"{t}", b"1.5", b"k", b"{min}"],
    [b"{t}", b"9223372036854775808", b"k", b"{min}"],
    [b"{t}", b"9223372036854775807", b"k", b"{min}"],
    [b"{t}", b"2", b"k", b"{min}"],  # more keys than arguments
    [b"{t}", b"1", b"k", b"UP"],  # side
    [b"{t}", b"1", b"k", b"{other}"],
    [b"{t}", b"1", b"k", b"{min}", b"COUNT"],  # COUNT
    [b"{t}", b"1", b"k", b"{min}", b"COUNT", b"0"],
    [b"{t}", b"1", b"k", b"{min}", b"COUNT", b"-1"],
    [b"{t}", b"1", b"k", b"{min}", b"COUNT", b"x"],
    [b"{t}", b"1", b"k", b"{min}", b"COUNT", b"9223372036854775808"],
    [b"{t}", b"1", b"k", b"{min}", b"count", b"1", b"COUNT", b"2"],
    [b"{t}", b"1", b"k", b"{min}", b"FOO"],
    [b"{t}", b"1", b"str", b"{min}"],  # WRONGTYPE
]
"""Arguments after the name; ``{t}`` is the timeout (dropped for LMPOP, ZMPOP), ``{min}``
the first side, ``{other}`` the other family's."""

BAD_TIMEOUTS = [
    [b"x", b"1", b"k", b"{min}"],
    [b"-1", b"1", b"k", b"{min}"],
    [b"x", b"0", b"k", b"{min}"],  # numkeys is checked before the timeout
    [b"-1", b"1", b"k", b"UP"],  # and the side
    [b"x", b"1", b"k", b"{min}", b"COUNT", b"0"],  # and COUNT
]

SERVED = [
    [b"0", b"2", b"missing", b"{key}", b"{max}", b"COUNT", b"2"],
    [b"0", b"1", b"{key}", b"{min}", b"COUNT", b"9223372036854775807"],
    [b"0.01", b"1", b"{key}", b"{min}"],  # empty now: the timeout's null array
]

FAMILIES = {
    b"BZMPOP": {b"{min}": b"MIN", b"{max}": b"max", b"{other}": b"LEFT", b"{key}": b"z1"},
    b"BLMPOP": {b"{min}": b"LEFT", b"{max}": b"right", b"{other}": b"MIN", b"{key}": b"l1"},
}
"""Per blocking command, the words its cases are written with (its non-blocking form is the
name without the B)."""


def _commands(name: bytes) -> list[list[bytes]]:
    words = {b"{t}": b"0", **FAMILIES[name]}
    out = []
    for args in [*MALFORMED, *BAD_TIMEOUTS, *SERVED]:
        out.append([name, *(words.get(arg, arg) for arg in args)])
    # The non-blocking form of the malformed ones: the same parse, without the timeout.
    for args in MALFORMED[1:]:
        out.append([name[1:], *(words.get(arg, arg) for arg in args[1:])])
    return out


def _replies(conn: Raw, protocol: int, commands: list[list[bytes]]) -> list[bytes]:
    conn.call("HELLO", str(protocol))
    for argv in SETUP:
        conn.call(*argv)
    out = []
    for argv in commands:
        conn.send(*argv)
        out.append(b" ".join(argv) + b" -> " + _one_raw(conn))
    return out


@pytest.fixture
def resp(serve: ServeFactory) -> ServerProcess:
    server = serve("--resp-port", "0")
    assert server.resp_port is not None
    return server


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_mpop_arguments_answer_as_redis_server(
    resp: ServerProcess, tmp_path: Path, name: bytes, protocol: int
) -> None:
    """Every reply, error wording included, byte for byte as redis-server's."""
    real = RedisServer(tmp_path)
    assert resp.resp_port is not None
    ours_conn, theirs_conn = Raw(resp.resp_port), Raw(0, path=real.path)
    commands = _commands(name)
    try:
        ours = _replies(ours_conn, protocol, commands)
        theirs = _replies(theirs_conn, protocol, commands)
    finally:
        ours_conn.close()
        theirs_conn.close()
        real.close()
    for step, (mine, redis_reply) in enumerate(zip(ours, theirs, strict=True)):
        assert (step, mine) == (step, redis_reply)
