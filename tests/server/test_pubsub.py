"""Pub/sub through a real ``minidb serve --resp-port 0``: raw RESP2 and RESP3 sockets, redis-py's
``PubSub`` (sync and asyncio), a subscriber that never reads, SET-then-PUBLISH ordering and
durability under ``--fsync always``, INFO and CLIENT LIST, and the same frames diffed against a
real ``redis-server`` where one is installed. Every socket and subprocess wait has a deadline.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from minidb.protocol import encode_command
from minidb.protocol._resp_client import RespReplyDecoder
from tests.server.conftest import (
    IO_TIMEOUT_S,
    ServeFactory,
    ServerProcess,
    non_reader,
    rss_peak_bytes,
)
from tests.server.test_containers_vs_redis import RedisServer

redis = pytest.importorskip("redis", reason="redis-py is not installed (pip install redis)")

SOFT_LIMIT = 256 * 1024
HARD_LIMIT = 1024 * 1024
"""The slow-subscriber test's output limits: small, so that publishing past them is quick."""
MAX_VALUE = 128 * 1024
"""Its --max-value-bytes: the hard limit must leave room for one value over the soft one."""
RSS_GROWTH_CEILING = 48 * 2**20
"""What the server may grow by while a non-reading subscriber is published 64 MiB at: its
hard limit of unsent output, the publisher's traffic, and the allocator's slack; without the
bound it would hold all 64 MiB."""


def drain_stderr(server: ServerProcess) -> ServerProcess:
    """Read the server's log as it comes (a full pipe would block the server)."""
    assert server.proc.stderr is not None
    stream = server.proc.stderr
    lines: list[str] = []
    server.log = lines  # type: ignore[attr-defined]
    threading.Thread(target=lambda: lines.extend(stream), daemon=True).start()
    return server


@pytest.fixture
def resp(serve: ServeFactory) -> ServerProcess:
    server = drain_stderr(serve("--resp-port", "0"))
    assert server.resp_port is not None
    return server


class Raw:
    """A raw RESP client: commands out, replies decoded or raw bytes in, with a deadline."""

    def __init__(self, port: int, *, path: str | None = None) -> None:
        if path is None:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)
        else:
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.settimeout(IO_TIMEOUT_S)
            self.sock.connect(path)
        self.decoder = RespReplyDecoder()
        self.ready: list[Any] = []
        self.buffer = b""

    def send(self, *argv: bytes | str | int) -> None:
        self.sock.sendall(encode_command(argv))

    def replies(self, count: int) -> list[Any]:
        while len(self.ready) < count:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.ready += self.decoder.feed(chunk)
        out, self.ready = self.ready[:count], self.ready[count:]
        return out

    def call(self, *argv: bytes | str | int) -> Any:
        self.send(*argv)
        return self.replies(1)[0]

    def raw(self, size: int) -> bytes:
        """Exactly ``size`` bytes of what the server sends (no decoding)."""
        while len(self.buffer) < size:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buffer += chunk
        out, self.buffer = self.buffer[:size], self.buffer[size:]
        return out

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def clients(resp: ServerProcess) -> Iterator[list[Raw]]:
    opened: list[Raw] = []
    yield opened
    for client in opened:
        client.close()


def raw(resp: ServerProcess, opened: list[Raw]) -> Raw:
    assert resp.resp_port is not None
    client = Raw(resp.resp_port)
    opened.append(client)
    return client


SUBSCRIBED_ERROR = (
    "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are "
    "allowed in this context"
)


def test_resp2_subscribe_publish_and_subscribed_mode(
    resp: ServerProcess, clients: list[Raw]
) -> None:
    """RESP2: confirmations with the running count, a message as an array, the other commands
    refused in Redis 7's words, PING as ["pong", ""], and back to normal after UNSUBSCRIBE."""
    sub, pub = raw(resp, clients), raw(resp, clients)
    sub.send("SUBSCRIBE", "news", "sport")
    assert sub.raw(len(b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n")) == (
        b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
    )
    assert sub.raw(len(b"*3\r\n$9\r\nsubscribe\r\n$5\r\nsport\r\n:2\r\n")) == (
        b"*3\r\n$9\r\nsubscribe\r\n$5\r\nsport\r\n:2\r\n"
    )
    assert pub.call("PUBLISH", "news", "hello") == 1
    assert pub.call("PUBLISH", "nobody", "x") == 0
    frame = b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nhello\r\n"
    assert sub.raw(len(frame)) == frame
    assert sub.call("GET", "k").message == SUBSCRIBED_ERROR.format("get")
    assert sub.call("CLIENT", "ID").message == SUBSCRIBED_ERROR.format("client|id")
    assert sub.call("PING") == [b"pong", b""]
    assert sub.call("PING", "hi") == [b"pong", b"hi"]
    sub.send("UNSUBSCRIBE")
    assert sub.replies(2) == [[b"unsubscribe", b"news", 1], [b"unsubscribe", b"sport", 0]]
    assert sub.call("UNSUBSCRIBE") == [b"unsubscribe", None, 0]
    assert sub.call("SET", "k", "v").text == "OK"
    assert sub.call("PING").text == "PONG"


def test_resp3_push_frames_and_every_command(resp: ServerProcess, clients: list[Raw]) -> None:
    """RESP3: confirmations and messages are ``>`` push frames, and data commands run while
    subscribed, their replies and the messages each in its place."""
    sub, pub = raw(resp, clients), raw(resp, clients)
    assert sub.call("HELLO", "3")[b"proto"] == 3
    sub.send("SUBSCRIBE", "ch")
    assert sub.raw(len(b">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n")) == (
        b">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
    )
    sub.send("SET", "k", "v")
    assert sub.raw(5) == b"+OK\r\n"
    assert pub.call("PUBLISH", "ch", "m1") == 1
    assert sub.raw(len(b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nm1\r\n")) == (
        b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nm1\r\n"
    )
    sub.send("GET", "k")
    assert sub.raw(7) == b"$1\r\nv\r\n"
    sub.send("PSUBSCRIBE", "c*")
    assert sub.raw(len(b">3\r\n$10\r\npsubscribe\r\n$2\r\nc*\r\n:2\r\n")) == (
        b">3\r\n$10\r\npsubscribe\r\n$2\r\nc*\r\n:2\r\n"
    )
    assert pub.call("PUBLISH", "ch", "m2") == 2
    frames = sub.replies(2)
    assert sorted(frames, key=len) == [
        [b"message", b"ch", b"m2"], [b"pmessage", b"c*", b"ch", b"m2"],
    ]  # fmt: skip
    assert sub.call("PING").text == "PONG"  # no subscribed mode in RESP3


def test_hello_2_while_subscribed_restricts_and_reset_clears(
    resp: ServerProcess, clients: list[Raw]
) -> None:
    sub, other = raw(resp, clients), raw(resp, clients)
    sub.call("HELLO", "3")
    sub.call("SUBSCRIBE", "a")
    assert isinstance(sub.call("HELLO", "2"), list)  # HELLO's map as a RESP2 array
    assert sub.call("GET", "k").message == SUBSCRIBED_ERROR.format("get")
    assert sub.call("RESET").text == "RESET"
    assert other.call("PUBSUB", "NUMSUB", "a") == [b"a", 0]
    assert sub.call("GET", "k") is None


def test_disconnect_forgets_subscriptions(resp: ServerProcess, clients: list[Raw]) -> None:
    sub, other = raw(resp, clients), raw(resp, clients)
    sub.send("SUBSCRIBE", "a")
    sub.send("PSUBSCRIBE", "a*")
    sub.replies(2)
    assert other.call("PUBSUB", "NUMPAT") == 1
    sub.close()
    deadline = time.monotonic() + IO_TIMEOUT_S
    while other.call("PUBSUB", "NUMSUB", "a") != [b"a", 0] or other.call("PUBSUB", "NUMPAT"):
        assert time.monotonic() < deadline, "the closed subscriber's subscriptions stayed"
        time.sleep(0.02)
    assert other.call("PUBLISH", "a", "x") == 0


def test_info_and_client_list_show_subscriptions(resp: ServerProcess, clients: list[Raw]) -> None:
    sub, other = raw(resp, clients), raw(resp, clients)
    sub.send("SUBSCRIBE", "a", "b")
    sub.send("PSUBSCRIBE", "x*")
    sub.replies(3)
    info = other.call("INFO", "stats").decode()
    assert "pubsub_channels:2" in info
    assert "pubsub_patterns:1" in info
    listing = other.call("CLIENT", "LIST").decode()
    line = next(line for line in listing.splitlines() if "cmd=psubscribe" in line)
    assert " sub=2 psub=1 ssub=0 " in line
    assert "flags=P" in line
    pubsub_ids = other.call("CLIENT", "LIST", "TYPE", "pubsub").decode()
    normal_ids = other.call("CLIENT", "LIST", "TYPE", "normal").decode()
    assert pubsub_ids.count("id=") == 1 and "cmd=psubscribe" in pubsub_ids
    assert "cmd=psubscribe" not in normal_ids and "cmd=client" in normal_ids


def test_publish_inside_multi_and_pubsub_introspection(
    resp: ServerProcess, clients: list[Raw]
) -> None:
    """PUBLISH is a data command: queued in MULTI, run with EXEC, its message after EXEC."""
    sub, pub = raw(resp, clients), raw(resp, clients)
    sub.call("SUBSCRIBE", "tx")
    assert pub.call("MULTI").text == "OK"
    assert pub.call("SET", "k", "1").text == "QUEUED"
    assert pub.call("PUBLISH", "tx", "k").text == "QUEUED"
    result = pub.call("EXEC")
    assert result[1] == 1
    assert sub.replies(1) == [[b"message", b"tx", b"k"]]
    assert pub.call("PUBSUB", "CHANNELS") == [b"tx"]
    assert pub.call("PUBSUB", "CHANNELS", "t?") == [b"tx"]
    assert pub.call("PUBSUB", "NUMSUB", "tx", "none") == [b"tx", 1, b"none", 0]
    assert pub.call("MULTI").text == "OK"
    assert pub.call("SUBSCRIBE", "x").message == "ERR Command not allowed inside a transaction"
    assert pub.call("EXEC").message.startswith("EXECABORT")


def test_sharded_subscribe_and_spublish(resp: ServerProcess, clients: list[Raw]) -> None:
    sub, pub = raw(resp, clients), raw(resp, clients)
    assert sub.call("SSUBSCRIBE", "s1") == [b"ssubscribe", b"s1", 1]
    assert pub.call("SPUBLISH", "s1", "m") == 1
    assert pub.call("PUBLISH", "s1", "m") == 0  # another namespace
    assert sub.replies(1) == [[b"smessage", b"s1", b"m"]]
    assert pub.call("PUBSUB", "SHARDNUMSUB", "s1") == [b"s1", 1]
    assert sub.call("SUNSUBSCRIBE") == [b"sunsubscribe", b"s1", 0]


# -- hostile input -----------------------------------------------------------------------------


def test_ten_thousand_channels_in_one_subscribe(resp: ServerProcess, clients: list[Raw]) -> None:
    sub, pub = raw(resp, clients), raw(resp, clients)
    names = [b"ch:%d" % i for i in range(10_000)]
    sub.send("SUBSCRIBE", *names)
    frames = sub.replies(10_000)
    assert frames[0] == [b"subscribe", b"ch:0", 1]
    assert frames[-1] == [b"subscribe", b"ch:9999", 10_000]
    assert pub.call("PUBLISH", "ch:5000", "x") == 1
    assert sub.replies(1) == [[b"message", b"ch:5000", b"x"]]
    sub.send("UNSUBSCRIBE")
    assert sub.replies(10_000)[-1][2] == 0
    assert pub.call("PUBSUB", "CHANNELS") == []


def test_huge_channel_names(resp: ServerProcess, clients: list[Raw]) -> None:
    """A channel of the key limit (64 KiB) works; one byte more is refused, whole command."""
    sub, pub = raw(resp, clients), raw(resp, clients)
    huge = b"c" * 65536
    assert sub.call("SUBSCRIBE", huge) == [b"subscribe", huge, 1]
    assert pub.call("PUBLISH", huge, "m") == 1
    assert sub.replies(1) == [[b"message", huge, b"m"]]
    error = sub.call("SUBSCRIBE", "ok", huge + b"c")
    assert "too long" in error.message
    assert pub.call("PUBSUB", "NUMSUB", "ok") == [b"ok", 0]


def test_pathological_patterns_do_not_stall_publish(
    resp: ServerProcess, clients: list[Raw]
) -> None:
    """``a*a*...a*b`` patterns against a long run of ``a``: Redis's bounded matcher semantics,
    linear time; PUBLISH answers well within the deadline and matches nothing."""
    sub, pub = raw(resp, clients), raw(resp, clients)
    patterns = [b"a*" * n + b"b" for n in (10, 50, 100, 200)] + [b"*?" * 100 + b"[b-c]"]
    sub.send("PSUBSCRIBE", *patterns)
    sub.replies(len(patterns))
    started = time.monotonic()
    assert pub.call("PUBLISH", b"a" * 8192, "m") == 0
    assert time.monotonic() - started < 2.0
    assert pub.call("PUBLISH", b"a" * 10 + b"b", "m") == 1  # ten stars need ten a's


# -- redis-py ------------------------------------------------------------------------------------


def test_redis_py_pubsub_get_message_and_listen(resp: ServerProcess) -> None:
    """redis-py's PubSub in RESP2: get_message(timeout=...) for confirmations and messages, a
    pattern subscription, listen() ended by a deadline, and ordinary commands after it."""
    client = redis.Redis(port=resp.resp_port, socket_timeout=IO_TIMEOUT_S)
    pubsub = client.pubsub()
    try:
        pubsub.subscribe("news")
        pubsub.psubscribe("sp*")
        confirmations = [pubsub.get_message(timeout=IO_TIMEOUT_S) for _ in range(2)]
        assert [m["type"] for m in confirmations] == ["subscribe", "psubscribe"]
        assert pubsub.get_message(timeout=0.05) is None  # nothing published yet
        assert client.publish("news", "hello") == 1
        assert client.publish("sport", "goal") == 1
        message = pubsub.get_message(timeout=IO_TIMEOUT_S)
        assert message == {"type": "message", "pattern": None, "channel": b"news",
                           "data": b"hello"}  # fmt: skip
        pmessage = pubsub.get_message(timeout=IO_TIMEOUT_S)
        assert pmessage == {"type": "pmessage", "pattern": b"sp*", "channel": b"sport",
                            "data": b"goal"}  # fmt: skip
        for i in range(3):
            client.publish("news", f"m{i}")
        got: list[bytes] = []
        deadline = time.monotonic() + IO_TIMEOUT_S
        for item in pubsub.listen():
            if item["type"] == "message":
                got.append(item["data"])
            if len(got) == 3 or time.monotonic() > deadline:
                break
        assert got == [b"m0", b"m1", b"m2"]
        assert client.pubsub_numsub("news") == [(b"news", 1)]
        assert client.pubsub_numpat() == 1
        pubsub.unsubscribe()
        pubsub.punsubscribe()
    finally:
        pubsub.close()
        client.close()


def test_redis_py_pubsub_resp3(resp: ServerProcess) -> None:
    """redis-py with protocol=3 reads push frames."""
    try:
        client = redis.Redis(port=resp.resp_port, protocol=3, socket_timeout=IO_TIMEOUT_S)
    except TypeError:
        pytest.skip("this redis-py has no protocol=3")
    pubsub = client.pubsub()
    try:
        pubsub.subscribe("c3")
        assert pubsub.get_message(timeout=IO_TIMEOUT_S)["type"] == "subscribe"
        assert client.publish("c3", "x") == 1
        message = pubsub.get_message(timeout=IO_TIMEOUT_S)
        assert message["type"] == "message" and message["data"] == b"x"
    finally:
        pubsub.close()
        client.close()


def test_redis_py_async_pubsub(resp: ServerProcess) -> None:
    """redis.asyncio's PubSub: subscribe, publish from another client, a message in time."""
    import redis.asyncio as aredis

    async def scenario() -> tuple[Any, Any]:
        client = aredis.Redis(port=resp.resp_port, socket_timeout=IO_TIMEOUT_S)
        pubsub = client.pubsub()
        try:
            await pubsub.subscribe("ac")
            await pubsub.psubscribe("a*")
            assert (await pubsub.get_message(timeout=IO_TIMEOUT_S))["type"] == "subscribe"
            assert (await pubsub.get_message(timeout=IO_TIMEOUT_S))["type"] == "psubscribe"
            receivers = await client.publish("ac", "hi")
            first = await pubsub.get_message(timeout=IO_TIMEOUT_S)
            second = await pubsub.get_message(timeout=IO_TIMEOUT_S)
            return receivers, sorted([first["type"], second["type"]])
        finally:
            await pubsub.aclose() if hasattr(pubsub, "aclose") else await pubsub.close()
            await client.aclose() if hasattr(client, "aclose") else await client.close()

    receivers, kinds = asyncio.run(asyncio.wait_for(scenario(), IO_TIMEOUT_S * 2))
    assert receivers == 2
    assert kinds == ["message", "pmessage"]


# -- a subscriber that does not read -------------------------------------------------------------


def test_slow_subscriber_is_dropped_and_memory_stays_bounded(serve: ServeFactory) -> None:
    """A subscriber that never reads is published 64 MiB at: past --output-hard-limit it is
    dropped (Redis's pubsub class), the server's RSS does not grow by what was published, and
    the publisher is served throughout."""
    server = drain_stderr(serve(
        "--resp-port", "0", "--output-soft-limit", str(SOFT_LIMIT),
        "--output-hard-limit", str(HARD_LIMIT), "--max-value-bytes", str(MAX_VALUE),
    ))  # fmt: skip
    assert server.resp_port is not None
    sub = non_reader(server.resp_port, encode_command([b"SUBSCRIBE", b"firehose"]))
    pub = Raw(server.resp_port)
    try:
        deadline = time.monotonic() + IO_TIMEOUT_S
        while pub.call("PUBSUB", "NUMSUB", "firehose") != [b"firehose", 1]:
            assert time.monotonic() < deadline, "the subscription did not register"
            time.sleep(0.01)
        before = rss_peak_bytes(server)
        payload = b"x" * 65536
        answers = []
        for _ in range(64):  # 64 x 16 pipelined x 64 KiB = 64 MiB
            for _ in range(16):
                pub.send("PUBLISH", "firehose", payload)
            answers += pub.replies(16)
        assert answers[0] == 1  # delivered while it had room
        assert answers[-1] == 0  # dropped: nobody listens any more
        assert pub.call("PUBSUB", "NUMSUB", "firehose") == [b"firehose", 0]
        assert rss_peak_bytes(server) - before < RSS_GROWTH_CEILING
        assert pub.call("SET", "still", "fine").text == "OK"
        log = "".join(server.log)  # type: ignore[attr-defined]
        assert "connection_output_limit" in log
    finally:
        sub.close()
        pub.close()


# -- ordering and durability --------------------------------------------------------------------


def test_set_then_publish_is_visible_and_durable_when_the_message_arrives(
    serve: ServeFactory, tmp_path: Path
) -> None:
    """Under --fsync always, a client's SET k then PUBLISH ch k: when the subscriber has the
    message, another client reads the value, and a SIGKILL right then loses nothing (the
    message left only after the group was synced)."""
    data = tmp_path / "durable"
    server = drain_stderr(serve("--resp-port", "0", "--fsync", "always", data_dir=data))
    assert server.resp_port is not None
    sub, pub, reader = Raw(server.resp_port), Raw(server.resp_port), Raw(server.resp_port)
    try:
        sub.call("SUBSCRIBE", "jobs")
        for i in range(50):
            # Pipelined: both in one read, so both in one group of the owner.
            pub.send("SET", f"result:{i}", f"value:{i}")
            pub.send("PUBLISH", "jobs", f"result:{i}")
            kind, channel, key = sub.replies(1)[0]
            assert (kind, channel) == (b"message", b"jobs")
            assert reader.call("GET", key) == b"value:%d" % i
            assert pub.replies(2)[1] == 1
        pub.send("SET", "last", "written")
        pub.send("PUBLISH", "jobs", "last")
        assert sub.replies(1)[0][2] == b"last"
        server.kill()  # at once: the message proves the write is on disk
    finally:
        for client in (sub, pub, reader):
            client.close()
    again = drain_stderr(serve("--resp-port", "0", data_dir=data))
    assert again.resp_port is not None
    check = Raw(again.resp_port)
    try:
        assert check.call("GET", "last") == b"written"
        assert check.call("GET", "result:49") == b"value:49"
    finally:
        check.close()


def test_subscriber_is_not_closed_as_idle(serve: ServeFactory) -> None:
    """--idle-timeout closes a quiet connection but not a subscriber (Redis exempts them)."""
    server = drain_stderr(serve("--resp-port", "0", "--idle-timeout", "0.5"))
    assert server.resp_port is not None
    sub, idle = Raw(server.resp_port), Raw(server.resp_port)
    try:
        sub.call("SUBSCRIBE", "quiet")
        idle.call("PING")
        idle.sock.settimeout(IO_TIMEOUT_S)
        assert idle.sock.recv(1) == b""  # closed by the idle timer
        publisher = Raw(server.resp_port)
        try:
            assert publisher.call("PUBLISH", "quiet", "still here") == 1
        finally:
            publisher.close()
        assert sub.replies(1) == [[b"message", b"quiet", b"still here"]]
    finally:
        sub.close()
        idle.close()


# -- against redis-server -----------------------------------------------------------------------


SCRIPT: list[tuple[str, int, list[bytes]]] = [
    ("sub", 3, [b"SUBSCRIBE", b"a", b"b", b"a"]),
    ("sub", 1, [b"PSUBSCRIBE", b"a*"]),
    ("pub", 1, [b"PUBLISH", b"a", b"one"]),
    ("sub", 1, [b"PING"]),
    ("sub", 1, [b"PING", b"x"]),
    ("sub", 1, [b"GET", b"k"]),
    ("sub", 2, [b"UNSUBSCRIBE", b"b", b"zz"]),
    ("pub", 1, [b"PUBSUB", b"NUMSUB", b"a", b"b"]),
    ("pub", 1, [b"PUBSUB", b"NUMPAT"]),
    ("pub", 1, [b"PUBSUB", b"CHANNELS", b"a*"]),
    ("pub", 1, [b"PUBLISH", b"ab", b"two"]),
    ("sub", 1, [b"UNSUBSCRIBE"]),
    ("sub", 1, [b"PUNSUBSCRIBE"]),
    ("sub", 1, [b"UNSUBSCRIBE"]),
    ("sub", 1, [b"PUNSUBSCRIBE", b"q"]),
    ("sub", 1, [b"PING"]),
    ("sub", 1, [b"SSUBSCRIBE", b"s"]),
    ("pub", 1, [b"SPUBLISH", b"s", b"three"]),
    ("sub", 1, [b"SUNSUBSCRIBE"]),
    ("sub", 1, [b"SUBSCRIBE"]),
    ("pub", 1, [b"PUBLISH", b"a"]),
    ("pub", 1, [b"PUBSUB", b"NUMPAT", b"x"]),
    ("pub", 1, [b"PUBSUB", b"HELP"]),
    ("pub", 1, [b"PUBSUB", b"CHANNELS", b"a", b"b"]),
    ("pub", 1, [b"PUBSUB", b"NOPE"]),
    ("pub", 1, [b"PUBSUB", b"SHARDCHANNELS"]),
]
"""Commands, with how many frames each answers, whose replies (and the frames the publishes
cause) are compared byte for byte."""


def _run_script(sub: Raw, pub: Raw, protocol: int) -> list[bytes]:
    """What the subscriber connection receives, and each publisher reply, as wire bytes."""
    if protocol == 3:
        sub.call("HELLO", "3")
    out: list[bytes] = []
    for who, frames, argv in SCRIPT:
        conn = sub if who == "sub" else pub
        conn.send(*argv)
        for _ in range(frames):
            reply = _one_raw(conn)
            out.append(who.encode() + b" " + reply)
        if argv[0] in (b"PUBLISH", b"SPUBLISH") and reply.startswith(b":"):
            for _ in range(int(reply[1:-2])):
                out.append(b"sub " + _one_raw(sub))
    return out


def _one_raw(conn: Raw) -> bytes:
    """The bytes of the next whole reply on ``conn``."""
    while True:
        size = _reply_size(conn.buffer)
        if size:
            out, conn.buffer = conn.buffer[:size], conn.buffer[size:]
            return out
        chunk = conn.sock.recv(1 << 16)
        assert chunk, "connection closed"
        conn.buffer += chunk


def _reply_size(data: bytes) -> int:
    """The length of the first complete reply in ``data`` (0: none yet)."""
    for end in range(data.find(b"\n") + 1, len(data) + 1):
        if data[end - 1 : end] == b"\n" and RespReplyDecoder().feed(data[:end]):
            return end
    return 0


@pytest.mark.parametrize("protocol", [2, 3])
def test_frames_match_redis_server(
    resp: ServerProcess, tmp_path: Path, protocol: int
) -> None:
    """The same script against minidb and redis-server: the same bytes, reply by reply."""
    real = RedisServer(tmp_path)
    opened: list[Raw] = []
    try:
        assert resp.resp_port is not None
        opened += [Raw(0, path=real.path), Raw(0, path=real.path)]
        opened += [Raw(resp.resp_port), Raw(resp.resp_port)]
        theirs = _run_script(opened[0], opened[1], protocol)
        ours = _run_script(opened[2], opened[3], protocol)
        for step, (line_ours, line_theirs) in enumerate(zip(ours, theirs, strict=True)):
            assert (step, line_ours) == (step, line_theirs)
    finally:
        for conn in opened:
            conn.close()
        real.close()


# -- a publisher subscribed to what it publishes -------------------------------------------------


def _bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def _push(*items: bytes) -> bytes:
    """A RESP3 push frame of bulk strings, written out by hand (not minidb's encoder)."""
    return b">%d\r\n" % len(items) + b"".join(map(_bulk, items))


PONG3 = b"+PONG\r\n"

SELF_PUBLISH: dict[str, tuple[list[list[bytes]], list[list[bytes]], bytes]] = {
    "publish": (
        [[b"SUBSCRIBE", b"ch"]],
        [[b"PUBLISH", b"ch", b"x"], [b"GET", b"k"], [b"PING"]],
        b":1\r\n" + _push(b"message", b"ch", b"x") + b"_\r\n" + PONG3,
    ),
    "channel and pattern": (
        [[b"SUBSCRIBE", b"ch"], [b"PSUBSCRIBE", b"c*"]],
        [[b"PUBLISH", b"ch", b"x"], [b"PING"]],
        b":2\r\n" + _push(b"message", b"ch", b"x") + _push(b"pmessage", b"c*", b"ch", b"x")
        + PONG3,
    ),
    "spublish": (
        [[b"SSUBSCRIBE", b"sh"]],
        [[b"SPUBLISH", b"sh", b"w"], [b"PING"]],
        b":1\r\n" + _push(b"smessage", b"sh", b"w") + PONG3,
    ),
    "multi/exec": (
        [[b"SUBSCRIBE", b"ch"]],
        [
            [b"MULTI"], [b"SET", b"k", b"v"], [b"PUBLISH", b"ch", b"bar"],
            [b"PUBLISH", b"ch", b"vaz"], [b"GET", b"k"], [b"EXEC"], [b"PING"],
        ],
        b"+OK\r\n" + b"+QUEUED\r\n" * 4 + b"*4\r\n+OK\r\n:1\r\n:1\r\n$1\r\nv\r\n"
        + _push(b"message", b"ch", b"bar") + _push(b"message", b"ch", b"vaz") + PONG3,
    ),
    "eval": (
        [[b"SUBSCRIBE", b"ch"]],
        [
            [b"EVAL", b"redis.call('ping', 'abc'); redis.call('publish', 'ch', 'bar'); "
             b"redis.call('publish', 'ch', 'vaz'); return 'bla'", b"0"],
            [b"PING"],
        ],
        _bulk(b"bla") + _push(b"message", b"ch", b"bar") + _push(b"message", b"ch", b"vaz")
        + PONG3,
    ),
}  # fmt: skip
"""Per case: a RESP3 client's subscriptions, the commands it then sends in one write, and
what it must read back, in Redis 7.2's order (redis/redis#12326; its tests "publish to self
inside multi" and "... inside script"): each message right after the reply of the command that
published it, before the next command's reply."""


def _split_pushes(data: bytes) -> tuple[bytes, list[bytes]]:
    """``data`` without its push frames, and those frames in order, wherever they stand: Redis
    7.0 wrote a client's own message before PUBLISH's reply, and inside EXEC's array (RESP3
    pushes are out of band: an aggregate does not count them)."""
    pushes: list[bytes] = []
    rest: list[bytes] = []

    def element(at: int, keep: list[bytes]) -> int:
        """Past one element at ``at``, the push frames before it taken out."""
        while data[at : at + 1] == b">":
            end = whole(at, [])
            pushes.append(data[at:end])
            at = end
        return at if at == len(data) else whole(at, keep)

    def whole(at: int, keep: list[bytes]) -> int:
        kind, head = data[at : at + 1], data.index(b"\r\n", at) + 2
        keep.append(data[at:head])
        if kind in (b"$", b"=", b"!"):
            size = int(data[at + 1 : head - 2])
            if size >= 0:
                keep.append(data[head : head + size + 2])
                head += size + 2
        elif kind in (b"*", b"~", b">", b"%"):
            count = int(data[at + 1 : head - 2]) * (2 if kind == b"%" else 1)
            for _ in range(max(count, 0)):
                head = element(head, keep)
        return head

    at = 0
    while at < len(data):
        at = element(at, rest)
    return b"".join(rest), pushes


def _self_publish(conn: Raw, case: str) -> tuple[bytes, tuple[int, ...]]:
    """What ``conn`` reads back in ``case``, and the server's version (HELLO's)."""
    subscriptions, commands, expected = SELF_PUBLISH[case]
    hello = conn.call("HELLO", "3")
    assert hello[b"proto"] == 3
    for argv in subscriptions:
        conn.call(*argv)
    conn.sock.sendall(b"".join(encode_command(argv) for argv in commands))
    out = conn.raw(len(expected))
    assert conn.call("PING").text == "PONG"  # and nothing more came before it
    return out, tuple(int(part) for part in hello[b"version"].split(b"."))


@pytest.mark.parametrize("case", list(SELF_PUBLISH))
def test_own_message_follows_its_reply_against_redis_server(
    resp: ServerProcess, clients: list[Raw], tmp_path: Path, case: str
) -> None:
    """A RESP3 client publishing to itself reads each message right after the reply of the
    command that published it (PUBLISH, SPUBLISH, EXEC, EVAL; a pattern and a channel: two
    messages), before its next reply. redis-server gets the same bytes: the same replies and
    the same messages in the same order; with a redis-server before 7.2 only where they stand
    differs (7.0 wrote them before the reply, or inside EXEC's array), from 7.2 on, every
    byte is the same."""
    ours, _ = _self_publish(raw(resp, clients), case)
    assert ours == SELF_PUBLISH[case][2]
    real = RedisServer(tmp_path)
    try:
        theirs_conn = Raw(0, path=real.path)
        clients.append(theirs_conn)
        theirs, version = _self_publish(theirs_conn, case)
        assert _split_pushes(theirs) == _split_pushes(ours)
        if version >= (7, 2):
            assert theirs == ours
    finally:
        real.close()


def test_resp2_subscriber_cannot_publish_as_redis_server(
    resp: ServerProcess, clients: list[Raw], tmp_path: Path
) -> None:
    """A RESP2 subscriber's PUBLISH is refused in subscribed mode, Redis's bytes exactly, and
    publishes nothing (another subscriber gets no message)."""
    commands = [[b"PUBLISH", b"ch", b"x"], [b"SPUBLISH", b"ch", b"x"], [b"PING"]]
    refusal = b"-" + SUBSCRIBED_ERROR.encode() + b"\r\n"
    expected = (
        refusal.replace(b"{}", b"publish") + refusal.replace(b"{}", b"spublish")
        + b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
    )  # fmt: skip
    real = RedisServer(tmp_path)
    try:
        assert resp.resp_port is not None
        outputs = []
        for conn, watcher in (
            (raw(resp, clients), raw(resp, clients)),
            (Raw(0, path=real.path), Raw(0, path=real.path)),
        ):
            clients += [conn, watcher]
            watcher.call("SUBSCRIBE", "ch")
            conn.call("SUBSCRIBE", "ch")
            conn.sock.sendall(b"".join(encode_command(argv) for argv in commands))
            outputs.append(conn.raw(len(expected)))
            watcher.sock.sendall(encode_command([b"PING"]))
            assert watcher.replies(1) == [[b"pong", b""]]  # no message came before it
        assert outputs == [expected, expected]
    finally:
        real.close()
