"""A client's subscription changes take effect in order with its commands before them, as in
Redis: ``PUBLISH ch x`` then ``SUBSCRIBE ch`` in one write answers 0 and delivers nothing;
``PUBLISH ch x`` then ``UNSUBSCRIBE ch`` delivers to the publisher still subscribed. Through a
real ``minidb serve`` and a real ``redis-server``, frames diffed byte for byte, RESP2 and RESP3;
every socket wait has a deadline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from minidb.protocol import encode_command
from tests.server.conftest import ServeFactory, ServerProcess
from tests.server.test_containers_vs_redis import RedisServer
from tests.server.test_pubsub import Raw, _one_raw, _split_pushes, drain_stderr

SENTINEL = b"end-of-case"
"""The last command of each pipeline is ``PING <SENTINEL>``: its reply ends what is read."""


@dataclass(frozen=True)
class Case:
    setup: list[list[bytes]]
    """Sent one at a time before the pipeline, each answered with one frame per argument."""
    pipeline: list[list[bytes]]
    """Sent in one write, then ``PING <SENTINEL>``."""
    leads: bytes
    """What minidb answers first: the reply of the first command of the pipeline."""
    protocols: tuple[int, ...] = (2, 3)
    own_message: bool = False
    """The client receives a message it published itself: Redis 7.0 wrote it before the
    PUBLISH reply (7.2 after it), so only its placement may differ from redis-server 7.0."""


def _own_publish(subscribe: list[bytes], publish: list[bytes], change: list[bytes]) -> Case:
    """A RESP3 client subscribed with ``subscribe`` publishes to itself, then ``change``s its
    subscriptions: the PUBLISH still counts it, and its message still comes."""
    return Case([subscribe], [publish, change], b":1\r\n", protocols=(3,), own_message=True)


CASES: dict[str, Case] = {
    "publish then subscribe": Case(
        [], [[b"PUBLISH", b"ch", b"x"], [b"SUBSCRIBE", b"ch"]], b":0\r\n"
    ),
    "publish then psubscribe": Case(
        [], [[b"PUBLISH", b"ch", b"x"], [b"PSUBSCRIBE", b"c*"]], b":0\r\n"
    ),
    "spublish then ssubscribe": Case(
        [], [[b"SPUBLISH", b"ch", b"x"], [b"SSUBSCRIBE", b"ch"]], b":0\r\n"
    ),
    "publish in exec then subscribe": Case(
        [],
        [[b"MULTI"], [b"PUBLISH", b"ch", b"x"], [b"EXEC"], [b"SUBSCRIBE", b"ch"]],
        b"+OK\r\n",
    ),
    "read served inline then subscribe": Case(
        [], [[b"GET", b"k"], [b"SUBSCRIBE", b"ch"], [b"PUBLISH", b"ch", b"x"]],
        b"$-1\r\n", protocols=(2,),
    ),
    "read then subscribe then publish": Case(
        [], [[b"GET", b"k"], [b"SUBSCRIBE", b"ch"], [b"PUBLISH", b"ch", b"x"]],
        b"_\r\n", protocols=(3,), own_message=True,
    ),
    "unsubscribe then publish": Case(
        [[b"SUBSCRIBE", b"ch"]], [[b"UNSUBSCRIBE", b"ch"], [b"PUBLISH", b"ch", b"x"]],
        b"", protocols=(2, 3),
    ),
    "publish then unsubscribe": _own_publish(
        [b"SUBSCRIBE", b"ch"], [b"PUBLISH", b"ch", b"x"], [b"UNSUBSCRIBE", b"ch"]
    ),
    "publish then punsubscribe": _own_publish(
        [b"PSUBSCRIBE", b"c*"], [b"PUBLISH", b"ch", b"x"], [b"PUNSUBSCRIBE"]
    ),
    "spublish then sunsubscribe": _own_publish(
        [b"SSUBSCRIBE", b"ch"], [b"SPUBLISH", b"ch", b"x"], [b"SUNSUBSCRIBE", b"ch"]
    ),
    "publish then reset": _own_publish(
        [b"SUBSCRIBE", b"ch"], [b"PUBLISH", b"ch", b"x"], [b"RESET"]
    ),
}  # fmt: skip


def _run(conn: Raw, case: Case, protocol: int) -> tuple[bytes, tuple[int, ...]]:
    """What ``conn`` reads back for the pipeline, up to and with the sentinel PING's reply;
    and the server's version."""
    hello = conn.call("HELLO", str(protocol))
    if isinstance(hello, list):  # RESP2: the map as a flat array
        hello = dict(zip(hello[::2], hello[1::2], strict=True))
    version = tuple(int(part) for part in hello[b"version"].split(b"."))
    for argv in case.setup:
        conn.send(*argv)
        for _ in argv[1:]:
            _one_raw(conn)
    commands = [*case.pipeline, [b"PING", SENTINEL]]
    conn.sock.sendall(b"".join(encode_command(argv) for argv in commands))
    out = b""
    while True:
        frame = _one_raw(conn)
        out += frame
        if frame.endswith(b"$%d\r\n%s\r\n" % (len(SENTINEL), SENTINEL)):
            break
    # Nothing more was owed: the next command's reply is the next thing read.
    conn.send("PING", "again")
    assert _one_raw(conn).endswith(b"$5\r\nagain\r\n")
    return out, version


@pytest.fixture
def resp(serve: ServeFactory) -> ServerProcess:
    server = drain_stderr(serve("--resp-port", "0"))
    assert server.resp_port is not None
    return server


@pytest.mark.parametrize(
    ("name", "protocol"),
    [(name, protocol) for name, case in CASES.items() for protocol in case.protocols],
)
def test_subscription_changes_keep_their_place_against_redis_server(
    resp: ServerProcess, tmp_path: Path, name: str, protocol: int
) -> None:
    """Each pipeline answers minidb and redis-server the same bytes (with redis-server before
    7.2, a client's own message may stand elsewhere: see ``Case.own_message``)."""
    case = CASES[name]
    real = RedisServer(tmp_path)
    assert resp.resp_port is not None
    ours_conn, theirs_conn = Raw(resp.resp_port), Raw(0, path=real.path)
    try:
        ours, _ = _run(ours_conn, case, protocol)
        theirs, version = _run(theirs_conn, case, protocol)
    finally:
        ours_conn.close()
        theirs_conn.close()
        real.close()
    assert ours.startswith(case.leads)
    if case.own_message and version < (7, 2):
        assert _split_pushes(ours) == _split_pushes(theirs)
    else:
        assert ours == theirs
