"""The stream commands diffed against a real ``redis-server``: random command sequences
(hypothesis) sent to both, replies compared byte for byte in RESP2 and RESP3.

minidb runs in process, as in ``test_containers_vs_redis`` (whose Redis fixture this reuses).
Ids are explicit or ``<ms>-*`` (``*`` takes each server's clock: compared by shape only, in
its own test). Approximate trims (``~``) remove whole nodes in both: a sequence here is too
short to fill a node of 100 entries, and RQ's pattern (a stream that grows, trimmed by
``MAXLEN ~``) has its own test over several nodes. XREAD BLOCK is tested on a real server
below. OBJECT
ENCODING of a list differs (the installed Redis may be 7.0): a stream's is checked alone.
Skipped without ``redis-server``. Last, streams through a real ``minidb serve`` killed with
SIGKILL and restarted (snapshots and the log).
"""

from __future__ import annotations

import re
import socket
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minidb.protocol import encode_command
from minidb.protocol._resp_client import RespReplyDecoder
from minidb.protocol._results import NULL_ARRAY, ErrorReply, Simple
from tests.server.conftest import IO_TIMEOUT_S, ServeFactory
from tests.server.test_containers_vs_redis import Minidb, RedisServer, redis_server

__all__ = ["redis_server"]  # the fixture, shared

KEYS = [b"x1", b"x2", b"str"]
key = st.sampled_from(KEYS)
ms = st.integers(0, 6).map(lambda n: b"%d" % n)
seq = st.sampled_from([b"0", b"1", b"2", b"18446744073709551615"])
entry_id = st.one_of(
    st.builds(lambda m, s: m + b"-" + s, ms, seq),
    ms,
    st.builds(lambda m: m + b"-*", ms),
    st.sampled_from([b"0-0", b"0", b"18446744073709551615-18446744073709551615", b"-1",
                     b"1-x", b"18446744073709551616", b" 1", b"+2", b"007-1"]),
)  # fmt: skip
bound = st.one_of(
    entry_id.filter(lambda i: not i.endswith(b"*")),
    st.sampled_from([b"-", b"+", b"(-", b"(0-0", b"(3", b"(6-18446744073709551615"]),
    st.builds(lambda i: b"(" + i, st.builds(lambda m, s: m + b"-" + s, ms, seq)),
)
pairs = st.lists(st.sampled_from([b"f", b"g", b"1", b""]), min_size=1, max_size=3).map(
    lambda fs: [x for f in fs for x in (f, f + b"v")]
)
count = st.sampled_from([b"0", b"1", b"2", b"-1", b"x", b"9223372036854775807"])
trim = st.one_of(
    st.just([]),
    st.builds(lambda n: [b"MAXLEN", n], st.sampled_from([b"0", b"1", b"3", b"-1", b"x"])),
    st.builds(lambda n: [b"MAXLEN", b"=", n], st.sampled_from([b"2", b"5"])),
    st.builds(lambda i: [b"MINID", i], st.sampled_from([b"2", b"3-1", b"-", b"9"])),
    st.builds(lambda i: [b"MINID", b"=", i], st.sampled_from([b"4", b"0"])),
    st.builds(lambda n: [b"MAXLEN", b"~", n], st.sampled_from([b"0", b"1", b"3"])),
    st.builds(lambda i: [b"MINID", b"~", i], st.sampled_from([b"2", b"7", b"9"])),
    st.builds(lambda n: [b"MAXLEN", b"~", b"0", b"LIMIT", n], st.sampled_from([b"0", b"2"])),
    st.just([b"MAXLEN", b"1", b"LIMIT", b"5"]),
    st.just([b"LIMIT", b"5"]),
    st.just([b"MAXLEN", b"1", b"MINID", b"1"]),
)

STREAM_COMMAND = st.one_of(
    st.builds(lambda k, t, nm, i, p: [b"XADD", k, *t, *nm, i, *p], key, trim,
              st.sampled_from([[], [b"NOMKSTREAM"]]), entry_id, pairs),
    st.builds(lambda k, t, i: [b"XADD", k, *t, i, b"f"], key, trim, entry_id),  # odd: arity
    st.builds(lambda k, a, b: [b"XRANGE", k, a, b], key, bound, bound),
    st.builds(lambda k, a, b, n: [b"XRANGE", k, a, b, b"COUNT", n], key, bound, bound, count),
    st.builds(lambda k, a, b: [b"XREVRANGE", k, a, b], key, bound, bound),
    st.builds(lambda k, a, b, n: [b"XREVRANGE", k, a, b, b"COUNT", n], key, bound, bound,
              count),
    st.builds(lambda k: [b"XLEN", k], key),
    st.builds(lambda k, ids: [b"XDEL", k, *ids], key,
              st.lists(entry_id.filter(lambda i: not i.endswith(b"*")), min_size=1,
                       max_size=3)),
    st.builds(lambda k, t: [b"XTRIM", k, *t], key, trim),
    st.builds(lambda ks, ids, n: [b"XREAD", *([b"COUNT", n] if n else []), b"STREAMS", *ks,
                                  *ids[: len(ks)]],
              st.lists(key, min_size=1, max_size=2, unique=True),  # RESP3: a map, see docs
              st.lists(st.sampled_from([b"0", b"$", b"2-1", b"5", b"x"]), min_size=2,
                       max_size=2),
              st.sampled_from([None, b"1", b"0"])),
    st.builds(lambda k: [b"TYPE", k], key),
    st.builds(lambda k: [b"EXISTS", k], key),
    st.builds(lambda k: [b"DEL", k], key),
    st.builds(lambda k: [b"SET", k, b"v"], key),
    st.builds(lambda a, b: [b"RENAME", a, b], key, key),
    st.builds(lambda a, b: [b"COPY", a, b, b"REPLACE"], key, key),
    st.builds(lambda k: [b"LPUSH", k, b"e"], key),
)  # fmt: skip


_REDIS_70_SEQ_OVERFLOW = b"-ERR Elements are too large to be stored\r\n"
"""What Redis 7.0 answers ``XADD k <ms>-*`` at a full sequence (its errno left as ERANGE)."""
_ID_TOO_SMALL = (
    b"-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n"
)


def _run(redis_server: RedisServer, protocol: int, commands: list[list[bytes]]) -> None:
    redis_server.raw([b"HELLO", b"%d" % protocol])
    redis_server.raw([b"FLUSHALL"])
    ours = Minidb(protocol)
    for argv in commands:
        mine, theirs = ours.raw(argv), redis_server.raw(argv)
        if theirs == _REDIS_70_SEQ_OVERFLOW:  # 7.2's streamAppendItem answers EDOM here
            theirs = _ID_TOO_SMALL
        assert mine == theirs, (argv, mine, theirs)


@pytest.mark.parametrize("protocol", [2, 3])
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(STREAM_COMMAND, min_size=1, max_size=30))
def test_streams_vs_redis_same_replies(
    redis_server: RedisServer, protocol: int, commands: list[list[bytes]]
) -> None:
    """Every reply of a random sequence of stream and key commands equals Redis's, errors
    and their order included."""
    _run(redis_server, protocol, commands)


def test_streams_vs_redis_auto_ids_have_the_same_shape(redis_server: RedisServer) -> None:
    """``*`` takes each server's clock: both answer ``<ms>-<seq>`` ids that grow, and RQ's
    pattern (XADD MAXLEN ~, XREVRANGE COUNT 1) answers the newest entry in both."""
    redis_server.raw([b"HELLO", b"2"])
    redis_server.raw([b"FLUSHALL"])
    ours = Minidb(2)
    shape = re.compile(rb"\$\d+\r\n\d+-\d+\r\n")
    for n in range(5):
        argv = [b"XADD", b"results", b"MAXLEN", b"~", b"10", b"*", b"n", b"%d" % n]
        mine, theirs = ours.raw(argv), redis_server.raw(argv)
        assert shape.fullmatch(mine) and shape.fullmatch(theirs), (mine, theirs)
    for server in (ours, redis_server):
        (newest,) = RespReplyDecoder().feed(
            server.raw([b"XREVRANGE", b"results", b"+", b"-", b"COUNT", b"1"])
        )
        assert newest[0][1] == [b"n", b"4"]
        assert server.raw([b"XLEN", b"results"]) == b":5\r\n"
        assert server.raw([b"OBJECT", b"ENCODING", b"results"]) == b"$6\r\nstream\r\n"


def test_streams_vs_redis_approximate_trims_remove_the_same_nodes(
    redis_server: RedisServer,
) -> None:
    """XADD MAXLEN ~ and MINID ~ on streams of small entries that grow over several nodes
    leave the same entries as Redis's node-granular trims, LIMIT included."""
    redis_server.raw([b"HELLO", b"2"])
    redis_server.raw([b"FLUSHALL"])
    ours = Minidb(2)
    script = [[b"XADD", b"q", b"MAXLEN", b"~", b"120", b"%d-1" % n, b"f", b"v"]
              for n in range(1, 351)]  # fmt: skip
    script += [[b"XADD", b"m", b"MINID", b"~", b"%d" % (n - 150), b"%d" % n, b"f", b"v"]
               for n in range(1, 401)]  # fmt: skip
    script += [[b"XLEN", b"q"], [b"XRANGE", b"q", b"-", b"+", b"COUNT", b"1"], [b"XLEN", b"m"],
               [b"XTRIM", b"m", b"MAXLEN", b"~", b"10", b"LIMIT", b"150"], [b"XLEN", b"m"],
               [b"XTRIM", b"q", b"MAXLEN", b"~", b"0"], [b"XLEN", b"q"]]  # fmt: skip
    for argv in script:
        mine, theirs = ours.raw(argv), redis_server.raw(argv)
        assert mine == theirs, (argv, mine, theirs)


class _Resp:
    """One RESP2 connection to a ``minidb serve``, a command at a time, with a deadline."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)

    def __call__(self, *argv: str | bytes) -> Any:
        args = [a.encode() if isinstance(a, str) else a for a in argv]
        self.sock.sendall(encode_command(args))
        decoder = RespReplyDecoder()
        while True:
            chunk = self.sock.recv(1 << 16)
            assert chunk, "minidb closed the connection"
            replies = decoder.feed(chunk)
            if replies:
                return replies[0]

    def close(self) -> None:
        self.sock.close()


def test_streams_survive_kill_9_through_snapshots_and_the_log(serve: ServeFactory) -> None:
    """A server killed with SIGKILL, after enough stream writes to checkpoint several times,
    comes back with every stream as acknowledged: entries, trims, deletes, and the metadata
    (the last id XADD must exceed, an emptied stream that still exists)."""
    server = serve("--resp-port", "0", "--checkpoint-bytes", "4096", "--checkpoint-growth", "0")
    assert server.resp_port is not None
    c = _Resp(server.resp_port)
    for n in range(1, 301):
        assert c("XADD", "jobs", "MAXLEN", "~", "100", f"{n}-*", "result", "x" * 40) == b"%d-0" % n
    assert c("XDEL", "jobs", "300-0", "250-0") == 2
    assert c("XTRIM", "jobs", "MINID", "210") == 9
    c("XADD", "gone", "5-5", "f", "v")
    assert c("XDEL", "gone", "5-5") == 1
    before = (c("XRANGE", "jobs", "-", "+"), c("XLEN", "jobs"), c("XLEN", "gone"))
    assert before[1] == 89
    c.close()
    server.kill()
    assert any(p.name.startswith("snapshot-") for p in server.data_dir.iterdir())
    again = serve("--resp-port", "0", data_dir=server.data_dir)
    assert again.resp_port is not None
    c = _Resp(again.resp_port)
    assert (c("XRANGE", "jobs", "-", "+"), c("XLEN", "jobs"), c("XLEN", "gone")) == before
    assert c("TYPE", "gone") == Simple("stream")
    assert b"db0:keys=2,expires=0" in c("INFO", "keyspace")
    assert c("SCAN", "0", "TYPE", "stream", "COUNT", "100")[1] in ([b"jobs", b"gone"],
                                                                   [b"gone", b"jobs"])
    for key, top in (("jobs", "300-0"), ("gone", "5-5")):  # deleted, yet still the top
        assert c("XADD", key, top, "f", "v") == ErrorReply(_ID_TOO_SMALL[1:-2].decode())
    assert c("XADD", "jobs", "300-*", "f", "v") == b"300-1"
    assert c("XREVRANGE", "jobs", "+", "-", "COUNT", "1") == [[b"300-1", [b"f", b"v"]]]
    c.close()


def _read_reply(sock: socket.socket) -> Any:
    decoder = RespReplyDecoder()
    while True:
        chunk = sock.recv(1 << 16)
        assert chunk, "minidb closed the connection"
        replies = decoder.feed(chunk)
        if replies:
            return replies[0]


def _nothing_within(sock: socket.socket, wait: float) -> bool:
    """True if no byte arrives within ``wait`` seconds (the client is still blocked)."""
    sock.settimeout(wait)
    try:
        return not sock.recv(1, socket.MSG_PEEK)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(IO_TIMEOUT_S)


def test_streams_xread_block_is_woken_by_xadd(serve: ServeFactory) -> None:
    """XREAD BLOCK 0 on ``$`` waits until another client's XADD, then answers that entry
    alone; BLOCK with a timeout answers null when it passes; inside MULTI it answers null at
    once, as Redis does."""
    server = serve("--resp-port", "0")
    assert server.resp_port is not None
    writer = _Resp(server.resp_port)
    writer("XADD", "s", "1-1", "old", "entry")
    reader = socket.create_connection(("127.0.0.1", server.resp_port), timeout=IO_TIMEOUT_S)
    reader.sendall(encode_command([b"XREAD", b"BLOCK", b"0", b"STREAMS", b"s", b"other", b"$",
                                   b"$"]))  # fmt: skip
    assert _nothing_within(reader, 0.3)
    writer("XADD", "other", "5-5", "not", "this")  # "other" was missing: $ was 0-0
    assert _read_reply(reader) == [[b"other", [[b"5-5", [b"not", b"this"]]]]]
    reader.sendall(encode_command([b"XREAD", b"BLOCK", b"0", b"STREAMS", b"s", b"$"]))
    assert _nothing_within(reader, 0.3)
    writer("XDEL", "s", "1-1")  # a touch with nothing above $: still waiting
    assert _nothing_within(reader, 0.3)
    writer("XADD", "s", "2-2", "new", "entry")
    assert _read_reply(reader) == [[b"s", [[b"2-2", [b"new", b"entry"]]]]]
    reader.sendall(encode_command([b"XREAD", b"BLOCK", b"50", b"STREAMS", b"s", b"$"]))
    assert _read_reply(reader) is NULL_ARRAY  # the server's timer, within the socket deadline
    for argv in ([b"MULTI"], [b"XREAD", b"BLOCK", b"0", b"STREAMS", b"s", b"$"], [b"EXEC"]):
        reader.sendall(encode_command(argv))
        last = _read_reply(reader)
    assert last == [NULL_ARRAY]
    reader.close()
    writer.close()


@pytest.mark.parametrize("protocol", [2, 3])
def test_streams_through_redis_py_as_rq_uses_them(serve: ServeFactory, protocol: int) -> None:
    """redis-py's stream calls against a real server, RESP2 and RESP3: RQ's job results
    (XADD with an approximate MAXLEN, XREVRANGE COUNT 1 for the latest, XRANGE for all),
    XREAD with and without BLOCK, XTRIM, XDEL, XLEN, TYPE."""
    redis = pytest.importorskip("redis", reason="redis-py is not installed")
    server = serve("--resp-port", "0")
    r = redis.Redis(port=server.resp_port, protocol=protocol, socket_timeout=IO_TIMEOUT_S)
    key = "rq:results:job-1"
    ids = [r.xadd(key, {"type": "1", "return_value": f"v{n}"}, maxlen=10, approximate=True)
           for n in range(15)]  # fmt: skip
    assert all(re.fullmatch(rb"\d+-\d+", i) for i in ids) and ids == sorted(ids, key=_id_key)
    assert r.xlen(key) == 15  # ~: less than a node, nothing trimmed (as Redis)
    (latest,) = r.xrevrange(key, "+", "-", count=1)
    assert latest == (ids[-1], {b"type": b"1", b"return_value": b"v14"})
    assert [i for i, _ in r.xrange(key)] == ids
    assert r.xtrim(key, maxlen=10, approximate=False) == 5 and r.xlen(key) == 10
    assert r.xdel(key, ids[-1]) == 1 and r.type(key) == b"stream"
    read = r.xread({key: ids[-3]}, count=5)
    entries = read[key.encode()][0] if protocol == 3 else read[0][1]
    assert [i for i, _ in entries] == [ids[-2]]
    assert r.xread({key: "$"}, block=50) in (None, [], {})  # the timeout: null
    r.close()


def _id_key(entry_id: bytes) -> tuple[int, int]:
    ms, seq = entry_id.split(b"-")
    return int(ms), int(seq)
