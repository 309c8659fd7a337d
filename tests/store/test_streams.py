"""The stream commands (``store._streams``): Redis 7.2's replies, ids and their errors, trims,
what each change logs (the resolved id, a trim's bound), replay, rollback and snapshots."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.protocol._results import NULL_ARRAY
from minidb.store._blocking import WouldBlock
from minidb.store._commands import execute_blocking
from minidb.store._journal import OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._results import SYNTAX_ERROR, ErrorReply, Result, Simple
from minidb.store._state import StoreState
from minidb.store._streams import (
    ID_EXHAUSTED,
    ID_TOO_SMALL,
    ID_ZERO,
    INVALID_ID,
    parse_id,
)
from minidb.store._streamvalue import StreamValue, live_ids
from minidb.wal._checkpoint import snapshot_chunks, snapshot_records
from minidb.wal._ops import (
    KIND_STREAM,
    STREAM_DELETE,
    STREAM_TRIM,
    AddElements,
    Put,
    PutContainer,
    RemoveElements,
    decode_stream_element,
    encode_stream_entry,
    encode_stream_id,
    encode_stream_meta,
)
from minidb.wal._payload import decode_ops, describe, encode_ops
from tests.store.test_hashes import INT_ERR, NOW, WRONG, Client

E = ErrorReply
B = b"0"
MAX = "18446744073709551615-18446744073709551615"
ARITY = E("ERR wrong number of arguments for 'xadd' command")


def _state(ks: Keyspace) -> dict[bytes, tuple[object, ...]]:
    """Every stream: its entries in order and its metadata."""
    found = {}
    for key in ks.keys(B, NOW):
        value = ks.peek(B, key)
        if isinstance(value, StreamValue):
            found[key] = (
                [(i, value[i]) for i in live_ids(value)], value.meta, sorted(value),
                value.encoding,
            )
    return found


def _replays(c: Client) -> None:
    """The log replays to the same streams, and a snapshot (framed as the checkpoint frames it)
    reads back to them too."""
    assert _state(c.replayed()) == _state(c.ks)
    restored = Keyspace(now_ms=NOW)
    chunks = b"".join(snapshot_chunks(7, StoreState(c.ks).snapshot()))
    for record in snapshot_records(chunks, 7):
        restored.apply_ops(decode_ops(record.payload), NOW)
    assert _state(restored) == _state(c.ks)
    assert sorted(restored.items()) == sorted(c.ks.items())


def _ids(reply: Result) -> list[bytes]:
    assert isinstance(reply, list)
    return [entry[0] for entry in reply]  # type: ignore[index]


def test_streams_xadd_ids_and_reads() -> None:
    """XADD resolves ``*`` from the command time, ``<ms>-*`` from the last id, takes explicit
    ids above the top; XRANGE/XREVRANGE/XLEN read them back with COUNT and exclusive bounds."""
    c = Client()
    assert c("XADD", "s", "*", "a", "1") == b"%d-0" % NOW
    assert c("XADD", "s", "*", "b", "2") == b"%d-1" % NOW  # same ms: the sequence grows
    assert c("XADD", "s", f"{NOW + 5}-*", "c", "3") == b"%d-0" % (NOW + 5)
    assert c("XADD", "s", f"{NOW + 5}-*", "d", "4", "d", "5") == b"%d-1" % (NOW + 5)
    assert c("XADD", "s", f"{NOW + 9}", "e", "6") == b"%d-0" % (NOW + 9)
    assert c("XADD", "s", "*", "f", "7") == b"%d-1" % (NOW + 9)  # the clock is behind the top
    assert c("XLEN", "s") == 6 and c("XLEN", "nope") == 0
    assert c("XRANGE", "s", "-", "+", "COUNT", "2") == [
        [b"%d-0" % NOW, [b"a", b"1"]], [b"%d-1" % NOW, [b"b", b"2"]],
    ]  # fmt: skip
    assert c("XRANGE", "s", str(NOW + 5), str(NOW + 5))[1] == [  # type: ignore[index]
        b"%d-1" % (NOW + 5), [b"d", b"4", b"d", b"5"],
    ]  # a field repeated stays twice, as in Redis
    assert len(_ids(c("XRANGE", "s", f"({NOW}-0", f"({NOW + 9}-1"))) == 4
    assert _ids(c("XREVRANGE", "s", "+", "-", "COUNT", "2")) == [
        b"%d-1" % (NOW + 9), b"%d-0" % (NOW + 9),
    ]  # fmt: skip
    assert _ids(c("XREVRANGE", "s", f"({NOW + 9}-0", "-", "count", "1")) == [b"%d-1" % (NOW + 5)]
    # "(<ms>" as an end is <ms>-18446744073709551615 excluded: <ms>-1 is still in.
    assert _ids(c("XREVRANGE", "s", f"({NOW + 9}", "-", "COUNT", "1")) == [b"%d-1" % (NOW + 9)]
    assert c("XRANGE", "s", "+", "-") == [] and c("XRANGE", "nope", "-", "+") == []
    assert c("XRANGE", "s", "-", "+", "COUNT", "0") is NULL_ARRAY
    assert c("XRANGE", "nope", "-", "+", "COUNT", "0") == []  # the key before the count
    assert c("XRANGE", "s", "-", "+", "COUNT", "-5") is NULL_ARRAY  # negative: 0
    assert len(_ids(c("XRANGE", "s", "-", "+", "COUNT", "9223372036854775807"))) == 6
    assert c("TYPE", "s") == Simple("stream") and c("OBJECT", "ENCODING", "s") == b"stream"
    _replays(c)


def test_streams_xadd_errors_in_redis_order() -> None:
    """Options, the id, the arity, 0-0, the type, then the top: each error as Redis words it."""
    c = Client()
    c("SET", "str", "v")
    assert c("XADD", "s", "*", "a") == ARITY
    assert c("XADD", "s", "*", "a", "1", "b") == ARITY
    assert c("XADD", "s", "NOMKSTREAM", "MAXLEN", "1") == ARITY
    assert c("XADD", "s", "bad", "a", "1") == E(INVALID_ID)
    assert c("XADD", "s", "-", "a", "1") == E(INVALID_ID)  # strict: not - or +
    assert c("XADD", "s", "+", "a", "1") == E(INVALID_ID)
    assert c("XADD", "s", "1-2-3", "a", "1") == E(INVALID_ID)
    assert c("XADD", "s", "x" * 128, "a", "1") == E(INVALID_ID)
    assert c("XADD", "s", "18446744073709551616-0", "a", "1") == E(INVALID_ID)
    assert c("XADD", "s", "0", "a", "1") == E(ID_ZERO)
    assert c("XADD", "s", "0-0", "a", "1") == E(ID_ZERO)
    assert c("XADD", "str", "0-0", "a", "1") == E(ID_ZERO)  # before the type
    assert c("XADD", "str", "*", "a", "1") == WRONG
    assert c("XADD", "s", "MAXLEN", "x", "*", "a", "1") == INT_ERR
    assert c("XADD", "s", "MAXLEN", "-1", "*", "a", "1") == E(
        "ERR The MAXLEN argument must be >= 0."
    )
    assert c("XADD", "s", "MAXLEN", "1", "MINID", "1", "*", "a", "1") == E(
        "ERR syntax error, MAXLEN and MINID options at the same time are not compatible"
    )
    assert c("XADD", "s", "MINID", "-", "*", "a", "1") == E(INVALID_ID)
    assert c("XADD", "s", "MAXLEN", "1", "LIMIT", "5", "*", "a", "1") == E(
        "ERR syntax error, LIMIT cannot be used without the special ~ option"
    )
    assert c("XADD", "s", "LIMIT", "5", "*", "a", "1") == E(
        "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"
    )
    assert c("XADD", "s", "MAXLEN", "~", "1", "LIMIT", "-1", "*", "a", "1") == E(
        "ERR The LIMIT argument must be >= 0."
    )
    assert c("EXISTS", "s") == 0  # nothing made a key
    assert c("XADD", "s", "NOMKSTREAM", "*", "a", "1") is None and c("EXISTS", "s") == 0
    assert c("XADD", "s", "5-5", "a", "1") == b"5-5"
    for same_or_less in ("5-5", "5-4", "4", "5"):
        assert c("XADD", "s", same_or_less, "a", "1") == E(ID_TOO_SMALL), same_or_less
    assert c("XADD", "s", "5-*", "a", "1") == b"5-6"
    assert c("XADD", "s", "nomkstream", "6-*", "a", "1") == b"6-0"
    assert c("XLEN", "s") == 3
    _replays(c)


def test_streams_ids_at_the_limits() -> None:
    """The greatest id is taken once; then ``*`` and every id are refused as exhausted, and
    ``<ms>-*`` at a full sequence as too small. Hostile ids parse as ``string2ull`` does."""
    c = Client()
    assert c("XADD", "s", MAX, "a", "1") == MAX.encode()
    assert c("XADD", "s", "*", "a", "1") == E(ID_EXHAUSTED)
    assert c("XADD", "s", "1-1", "a", "1") == E(ID_EXHAUSTED)
    assert c("XRANGE", "s", MAX, "+") == [[MAX.encode(), [b"a", b"1"]]]
    assert c("XRANGE", "s", f"({MAX}", "+") == E("ERR invalid start ID for the interval")
    assert c("XRANGE", "s", "-", "(0-0") == E("ERR invalid end ID for the interval")
    assert c("XADD", "t", "7-18446744073709551615", "a", "1") == b"7-18446744073709551615"
    assert c("XADD", "t", "7-*", "a", "1") == E(ID_TOO_SMALL)
    assert c("XADD", "t", "*", "a", "1") == b"%d-0" % NOW
    assert c("XADD", "u", f"{NOW + 1}-18446744073709551615", "a", "1")
    assert c("XADD", "u", "*", "a", "1") == b"%d-0" % (NOW + 2)  # the sequence carries over
    assert parse_id(b"+5- 7", 0, strict=True) == (5 << 64 | 7, True)  # strtoull's forms
    assert parse_id(b"007", 9, strict=True) == (7 << 64 | 9, True)
    assert parse_id(b"1-*", 0, strict=True, auto_seq=True) == (1 << 64, False)
    assert parse_id(b"-", 0, strict=False) == (0, True)
    for bad in (b"", b"-1", b"1-", b"1--1", b"a-1", b"1-*", b"0x10", b"1.5", b"(1"):
        try:
            parse_id(bad, 0, strict=True)
        except Exception as exc:
            assert str(exc) == INVALID_ID, bad
        else:
            raise AssertionError(bad)
    _replays(c)


def test_streams_trims_log_one_bound() -> None:
    """MAXLEN and MINID trim the oldest entries, each trim logged as one TRIM element however
    many entries it removed; ``~`` removes whole steps of 100 (Redis's node of small entries),
    within LIMIT (default 10000)."""
    c = Client()
    for i in range(1, 21):
        c("XADD", "s", f"{i}-0", "f", str(i))
    mark = len(c.journal.records)
    assert c("XTRIM", "s", "MAXLEN", "15") == 5 and c("XLEN", "s") == 15
    assert c.journal.records[mark] == [
        RemoveElements(B, b"s", KIND_STREAM, (encode_stream_id(STREAM_TRIM, 5 << 64),))
    ]
    assert c("XTRIM", "s", "MAXLEN", "15") == 0 and len(c.journal.records) == mark + 1
    assert c("XTRIM", "s", "MINID", "=", "10") == 4
    assert _ids(c("XRANGE", "s", "-", "+"))[0] == b"10-0"
    assert c("XTRIM", "s", "MINID", "~", "15") == 0  # less than a step
    assert c("XTRIM", "s", "MAXLEN", "~", "1") == 0
    assert c("XADD", "s", "MAXLEN", "~", "2", "*", "x", "y") == b"%d-0" % NOW
    assert c("XLEN", "s") == 12
    assert c("XTRIM", "s", "MAXLEN", "~", "0", "LIMIT", "11") == 0  # the node is 12 entries
    assert c("XTRIM", "s", "MINID", "~", str(NOW + 1), "LIMIT", "12") == 12  # ~ all: all
    assert c("XADD", "s", "MINID", "~", str(NOW), f"{NOW}-5", "x", "y") == b"%d-5" % NOW
    assert c("XADD", "s", "MINID", str(NOW), "21", "x", "y") == E(ID_TOO_SMALL)
    assert c("XADD", "s", "MINID", str(NOW + 1), f"{NOW + 1}", "x", "y") == b"%d-0" % (NOW + 1)
    assert c("XLEN", "s") == 1
    assert c("XADD", "s", "MAXLEN", "0", "*", "x", "y") == b"%d-1" % (NOW + 1)
    assert c("XLEN", "s") == 0 and c("EXISTS", "s") == 1  # an emptied stream is kept
    assert c("XADD", "new", "MAXLEN", "0", "1-1", "x", "y") == b"1-1"
    assert c("XLEN", "new") == 0 and c("TYPE", "new") == Simple("stream")
    assert c("XTRIM", "nope", "MAXLEN", "0") == 0
    for i in range(1, 351):
        c("XADD", "big", "MAXLEN", "~", "120", f"{i}-1", "f", "v")
    assert c("XLEN", "big") == 150  # 220 -> 120, 320 -> 220 -> 120: steps of 100
    assert _ids(c("XRANGE", "big", "-", "+", "COUNT", "1")) == [b"201-1"]
    assert c("XTRIM", "big", "MAXLEN", "~", "0", "LIMIT", "99") == 0  # less than one step
    assert c("XTRIM", "big", "MINID", "~", "350", "LIMIT", "0") == 100  # LIMIT 0: no limit
    assert c("XTRIM", "big", "MAXLEN", "=", "10") == 40
    _replays(c)


def test_streams_xtrim_and_xdel_errors() -> None:
    c = Client()
    c("SET", "str", "v")
    c("XADD", "s", "1-1", "a", "1")
    assert c("XTRIM", "s", "MAXLEN") == E("ERR wrong number of arguments for 'xtrim' command")
    assert c("XTRIM", "s", "LIMIT", "0") == E(
        "ERR syntax error, XTRIM must be called with a trimming strategy"
    )
    assert c("XTRIM", "s", "MAXLEN", "1", "NOMKSTREAM") == E(SYNTAX_ERROR)
    assert c("XTRIM", "s", "MAXLEN", "~") == INT_ERR
    assert c("XTRIM", "str", "MAXLEN", "1") == WRONG
    assert c("XTRIM", "str", "MAXLEN", "x") == INT_ERR  # options before the type
    assert c("XDEL", "str", "bad") == WRONG  # the type before the ids
    assert c("XDEL", "nope", "bad") == 0
    assert c("XDEL", "s", "1-1", "bad") == E(INVALID_ID) and c("XLEN", "s") == 1  # all or none
    assert c("XDEL", "s", "-") == E(INVALID_ID)
    assert c("XLEN", "str") == WRONG and c("XRANGE", "str", "-", "+") == WRONG
    assert c("XRANGE", "str", "bad", "+") == E(INVALID_ID)  # the bounds before the type
    assert c("XRANGE", "s", "-", "+", "COUNT") == E(SYNTAX_ERROR)
    assert c("XRANGE", "s", "-", "+", "LIMIT", "1") == E(SYNTAX_ERROR)
    assert c("XRANGE", "s", "-", "+", "COUNT", "x") == INT_ERR
    assert c("XRANGE", "s", "(-", "+") == E(INVALID_ID)
    for other in (("LPUSH", "s", "x"), ("HSET", "s", "f", "v"), ("GET", "s"), ("SADD", "s", "m")):
        assert c(*other) == WRONG


def test_streams_xdel_keeps_the_metadata() -> None:
    """XDEL deletes the ids present (a repeated id once), moves the greatest deleted id, and
    an emptied stream keeps its last id: XADD may not go back below it."""
    c = Client()
    for i in range(1, 5):
        c("XADD", "s", f"{i}-0", "f", str(i))
    assert c("XDEL", "s", "2-0", "2-0", "9-0", "1") == 2
    assert _ids(c("XRANGE", "s", "-", "+")) == [b"3-0", b"4-0"]
    assert c("XDEL", "s", "3-0", "4-0") == 2 and c("XLEN", "s") == 0 and c("EXISTS", "s") == 1
    assert c("XADD", "s", "4-0", "a", "b") == E(ID_TOO_SMALL)
    stream = c.ks.peek(B, b"s")
    assert isinstance(stream, StreamValue) and stream.meta == (4 << 64, 4, 4 << 64)
    assert c("XREAD", "STREAMS", "s", "0") is NULL_ARRAY
    assert c("RENAME", "s", "t") == Simple("OK") and c("COPY", "t", "u") == 1
    assert c("XADD", "u", "5-0", "a", "b") == b"5-0" and c("XLEN", "t") == 0
    _replays(c)


def test_streams_xread() -> None:
    """XREAD answers the entries above each id (``$``: none yet), COUNT per stream, a map in
    RESP3, null when none; BLOCK answers at once when there is data."""
    c = Client()
    for i in range(1, 4):
        c("XADD", "a", f"{i}-0", "f", str(i))
    c("XADD", "b", "5-0", "g", "x")
    assert c("XREAD", "COUNT", "2", "STREAMS", "a", "b", "nope", "1", "0", "0") == [
        [b"a", [[b"2-0", [b"f", b"2"]], [b"3-0", [b"f", b"3"]]]],
        [b"b", [[b"5-0", [b"g", b"x"]]]],
    ]
    assert c("XREAD", "STREAMS", "a", "b", "$", "$") is NULL_ARRAY
    assert c("XREAD", "STREAMS", "a", MAX) is NULL_ARRAY
    assert c("XREAD", "BLOCK", "0", "STREAMS", "a", "2") == [[b"a", [[b"3-0", [b"f", b"3"]]]]]
    assert c("XREAD", "COUNT", "-1", "STREAMS", "a", "0-0")[0][1][2][0] == b"3-0"  # type: ignore[index]
    r3 = Client(c.ks, protocol=3)
    assert r3("XREAD", "STREAMS", "b", "a", "4", "2-5") == {
        b"b": [[b"5-0", [b"g", b"x"]]], b"a": [[b"3-0", [b"f", b"3"]]],
    }  # fmt: skip
    assert r3("XREAD", "STREAMS", "a", "9") is NULL_ARRAY


def test_streams_xread_errors() -> None:
    c = Client()
    c("SET", "str", "v")
    c("XADD", "a", "1-0", "f", "v")
    assert c("XREAD", "STREAMS", "a") == E("ERR wrong number of arguments for 'xread' command")
    assert c("XREAD", "STREAMS", "a", "b", "0") == E(
        "ERR Unbalanced 'xread' list of streams: for each stream key an ID or '$' must be "
        "specified."
    )
    assert c("XREAD", "COUNT", "1", "a", "0") == E(SYNTAX_ERROR)
    assert c("XREAD", "COUNT", "x", "STREAMS", "a", "0") == INT_ERR
    assert c("XREAD", "BLOCK", "x", "STREAMS", "a", "0") == E(
        "ERR timeout is not an integer or out of range"
    )
    assert c("XREAD", "BLOCK", "-1", "STREAMS", "a", "0") == E("ERR timeout is negative")
    assert c("XREAD", "BLOCK", "9223372036854775807", "STREAMS", "a", "0") == E(
        "ERR timeout is out of range"
    )
    assert c("XREAD", "GROUP", "g", "c", "STREAMS", "a", "0") == E(
        "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead."
    )
    assert c("XREAD", "STREAMS", "a", ">") == E(
        "ERR The > ID can be specified only when calling XREADGROUP using the GROUP "
        "<group> <consumer> option."
    )
    assert c("XREAD", "STREAMS", "str", "a", "bad", "0") == WRONG  # the type before its id
    assert c("XREAD", "STREAMS", "a", "str", "bad", "0") == E(INVALID_ID)
    assert c("XREAD", "STREAMS", "a", "str", "0", "0") == WRONG
    assert c("XREAD", "BLOCK", "10", "STREAMS", "a", "$") is NULL_ARRAY  # may not block here


def test_streams_logged_as_resolved_ids_and_described() -> None:
    """XADD ``*`` logs the id it chose and the metadata it left, never ``*``; ``minidb wal
    dump`` prints stream elements as words; the decoder refuses a malformed element."""
    c = Client()
    c("XADD", "s", "*", "f", "v")
    (op,) = c.journal.records[0]
    assert isinstance(op, AddElements) and op.kind == KIND_STREAM
    assert [decode_stream_element(e) for e in op.elements] == [
        (1, NOW << 64, (b"f", b"v")), (0, NOW << 64, 1, 0),
    ]  # fmt: skip
    assert describe([op]) == f"XADD 0 s {NOW}-0 f v , META {NOW}-0 1 0-0"
    c("XDEL", "s", f"{NOW}")
    assert describe(c.journal.records[1]) == f"XDEL 0 s DEL {NOW}-0 , META {NOW}-0 1 {NOW}-0"
    snapshot = [o for p in StoreState(c.ks).snapshot() for o in decode_ops(p)]
    meta = encode_stream_meta(NOW << 64, 1, NOW << 64)
    assert snapshot == [PutContainer(B, b"s", KIND_STREAM, (meta,))]  # empty: the META alone
    for bad in (b"", b"\x09", b"\x00short", b"\x01" + bytes(16), b"\x01" + bytes(16) + b"\x05"):
        try:
            encode_ops([AddElements(B, b"s", KIND_STREAM, (bad,))])
        except ValueError:
            pass
        else:
            raise AssertionError(bad)
    trim = RemoveElements(B, b"s", KIND_STREAM, (encode_stream_id(STREAM_TRIM, 1),))
    assert decode_ops(encode_ops([trim])) == [trim]
    entry = AddElements(B, b"s", KIND_STREAM, op.elements[:1])
    try:  # an ENTRY cannot be removed, a TRIM cannot be added
        encode_ops([RemoveElements(B, b"s", KIND_STREAM, op.elements[:1])])
    except ValueError:
        pass
    else:
        raise AssertionError("an ENTRY in a RemoveElements")
    assert decode_ops(encode_ops([entry])) == [entry]


def test_streams_rollback_restores_entries_and_metadata() -> None:
    """A group taken back (the log failed) leaves every stream as it was: appends, trims and
    deletes undone, metadata included, a stream XADD created gone."""
    c = Client()
    ks = c.ks  # (an empty keyspace is falsy: Client(ks) would make its own)
    for i in range(1, 8):
        c("XADD", "s", f"{i}-0", "f", str(i))
    c("XDEL", "s", "3-0")
    assert c("XTRIM", "s", "MAXLEN", "5") == 1
    stream = ks.peek(B, b"s")
    assert isinstance(stream, StreamValue) and stream.head == 1  # a dead slot kept
    before = _state(ks)
    c.journal = OpJournal()
    c("XADD", "s", "MAXLEN", "2", "*", "g", "h")
    c("XDEL", "s", "7-0", f"{NOW}-0")
    c("XTRIM", "s", "MAXLEN", "0")
    c("XADD", "new", "1-1", "a", "b")
    ks.rollback(c.journal)
    assert _state(ks) == before


_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 4), st.integers(0, 2)),
        st.tuples(st.just("del"), st.integers(0, 30), st.integers(0, 2)),
        st.tuples(st.just("trim"), st.integers(0, 6), st.booleans()),
        st.tuples(st.just("rollback"), st.integers(0, 0), st.integers(0, 0)),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(_STEPS)
def test_streams_any_commands_replay_snapshot_and_roll_back_exactly(
    steps: list[tuple[str, int, int]],
) -> None:
    """Whatever XADD/XDEL/XTRIM run (some taken back as a failed log write would), the log
    replays to the same streams, metadata included, and a snapshot reads back to them."""
    c = Client()
    ks = c.ks
    kept = OpJournal()
    for what, a, b in steps:
        c.journal = OpJournal()
        if what == "add":
            c("XADD", "s", *(("MAXLEN", "~", str(a)) if b == 1 else ()), f"{a}-*", "f", str(a))
        elif what == "del":
            c("XDEL", "s", f"{a // 5}-{a % 5}", f"{b}-0")
        elif what == "trim":
            c("XTRIM", "s", *(("MAXLEN", str(a)) if b else ("MINID", f"{a}-1")))
        else:
            c("XADD", "s", "*", "x", "y")
            c("XTRIM", "s", "MAXLEN", "1")
            ks.rollback(c.journal)
            continue
        kept.records += c.journal.records
    c.journal = kept
    _replays(c)


def test_streams_key_commands_and_type_names() -> None:
    """Every key command takes a stream: SCAN TYPE stream finds it, EXPIRE/TTL/PERSIST, COPY
    to another bucket (a copy: changing one leaves the other), FLUSHDB; the other types'
    commands answer WRONGTYPE, and a stream command on another type too."""
    c = Client()
    c("XADD", "s", "1-1", "f", "v")
    c("SET", "str", "v")
    c("HSET", "h", "f", "v")
    assert c("SCAN", "0", "TYPE", "stream") == [b"0", [b"s"]]
    assert c("EXPIRE", "s", "100") == 1 and c("TTL", "s") == 100
    assert c("PERSIST", "s") == 1 and c("TTL", "s") == -1
    assert c("PEXPIREAT", "s", str(NOW + 5000)) == 1
    assert c("COPY", "s", "t", "DB", "other") == 1
    c.session.bucket = b"other"
    assert c("XADD", "t", "2-2", "g", "w") == b"2-2" and c("XLEN", "t") == 2
    assert c("PTTL", "t") == 5000
    c.session.bucket = B
    assert c("XLEN", "s") == 1 and c("OBJECT", "ENCODING", "s") == b"stream"
    for argv in (("XADD", "h", "*", "a", "b"), ("XLEN", "str"), ("XREAD", "STREAMS", "h", "0"),
                 ("HGET", "s", "f"), ("SMEMBERS", "s"), ("ZCARD", "s"), ("LLEN", "s"),
                 ("INCR", "s"), ("APPEND", "s", "x")):  # fmt: skip
        assert c(*argv) == WRONG, argv
    _replays(c)
    assert c("FLUSHDB") == Simple("OK") and c("XLEN", "s") == 0 and c("EXISTS", "s") == 0
    _replays(c)


def test_streams_a_frozen_snapshot_never_sees_later_changes() -> None:
    """A stream captured by a checkpoint is copied before its first change (copy-on-write):
    XADD, XDEL and a trim after the capture leave the snapshot as it was, and it reads back."""
    c = Client()
    for i in range(1, 6):
        c("XADD", "s", f"{i}-0", "f", str(i))
    captured = c.ks.peek(B, b"s")
    payloads = StoreState(c.ks).frozen_snapshot()
    c("XADD", "s", "MAXLEN", "2", "9-0", "g", "h")
    c("XDEL", "s", "5-0")
    assert c.ks.peek(B, b"s") is not captured
    assert isinstance(captured, StreamValue)
    assert live_ids(captured) == [i << 64 for i in range(1, 6)]
    restored = Keyspace(now_ms=NOW)
    restored.apply_ops([op for p in payloads for op in decode_ops(p)], NOW)
    stream = restored.peek(B, b"s")
    assert isinstance(stream, StreamValue) and live_ids(stream) == live_ids(captured)
    assert stream.meta == (5 << 64, 5, 0)
    assert _ids(c("XRANGE", "s", "-", "+")) == [b"9-0"]
    _replays(c)


def test_streams_a_big_stream_snapshots_in_chunks() -> None:
    """A stream of more than 64 KiB is written as a PutContainer and AddElements chunks and
    reads back whole; replaying any stream op on a missing key or the wrong type refuses."""
    c = Client()
    for i in range(1, 2001):
        c("XADD", "big", f"{i}", "payload", "x" * 100)
    ops = [op for p in StoreState(c.ks).snapshot() for op in decode_ops(p)]
    assert sum(type(op) is AddElements for op in ops) > 1
    _replays(c)
    empty = AddElements(B, b"e", KIND_STREAM, (encode_stream_meta(0, 0, 0),))
    for bad in (
        RemoveElements(B, b"e", KIND_STREAM, (encode_stream_id(STREAM_TRIM, 1),)),
        RemoveElements(B, b"e", KIND_STREAM, (encode_stream_id(STREAM_DELETE, 1),)),
        AddElements(B, b"str", KIND_STREAM, (encode_stream_meta(0, 0, 0),)),
    ):
        fresh = Keyspace(now_ms=NOW)
        fresh.apply_ops([Put(B, b"str", b"v"), empty], NOW)
        try:
            fresh.apply_ops([bad], NOW)
        except ValueError:
            continue
        raise AssertionError(bad)


_U64 = st.integers(0, (1 << 64) - 1)
_ID = st.builds(lambda ms, seq: ms << 64 | seq, _U64, _U64)
_FIELDS = st.lists(st.binary(max_size=8), min_size=1, max_size=4).map(
    lambda fs: tuple(x for f in fs for x in (f, f[::-1]))
)


@settings(max_examples=200, deadline=None)
@given(_ID, _FIELDS, st.integers(0, (1 << 64) - 1), _ID, _ID)
def test_streams_elements_round_trip_through_the_payload(
    entry_id: int, fields: tuple[bytes, ...], added: int, last: int, deleted: int
) -> None:
    """Every stream element, at any id and with any bytes, decodes to what was encoded, in an
    operation of every tag that takes it."""
    entry = encode_stream_entry(entry_id, fields)
    meta = encode_stream_meta(last, added, deleted)
    assert decode_stream_element(entry) == (1, entry_id, fields)
    assert decode_stream_element(meta) == (0, last, added, deleted)
    ops = [
        PutContainer(B, b"s", KIND_STREAM, (meta, entry), NOW),
        AddElements(B, b"s", KIND_STREAM, (entry, meta)),
        RemoveElements(B, b"s", KIND_STREAM, (
            encode_stream_id(STREAM_DELETE, entry_id), encode_stream_id(STREAM_TRIM, deleted),
            meta,
        )),
    ]  # fmt: skip
    assert decode_ops(encode_ops(ops)) == ops


def test_streams_xread_block_waits_above_what_dollar_stood_for() -> None:
    """XREAD BLOCK with nothing to answer would block (``WouldBlock``) on its streams, its
    ``$`` rewritten to the id it stood for, so that run again after an XADD it answers that
    entry; in a plain ``execute`` (MULTI) it answers null at once, as Redis does."""
    c = Client()
    c("XADD", "a", "1-0", "f", "v")
    argv = [b"XREAD", b"COUNT", b"5", b"BLOCK", b"1500", b"STREAMS", b"a", b"nope", b"$", b"$"]
    blocked = execute_blocking(c.ks, c.session, argv, OpJournal(), NOW)
    assert isinstance(blocked, WouldBlock)
    assert (blocked.keys, blocked.timeout, blocked.kind) == ((b"a", b"nope"), 1.5, StreamValue)
    assert blocked.reply is NULL_ARRAY and argv[-2:] == [b"1-0", b"0-0"]
    # Nothing above 1-0 yet: run again, it would block again.
    assert isinstance(execute_blocking(c.ks, c.session, argv, OpJournal(), NOW), WouldBlock)
    c("XADD", "nope", "7-7", "g", "w")
    assert execute_blocking(c.ks, c.session, argv, OpJournal(), NOW) == [
        [b"nope", [[b"7-7", [b"g", b"w"]]]]
    ]
    assert c("XREAD", "BLOCK", "0", "STREAMS", "a", "$") is NULL_ARRAY
    assert c("XREAD", "BLOCK", "0", "STREAMS", "a", "0") == [[b"a", [[b"1-0", [b"f", b"v"]]]]]
