"""The sorted-set commands (``store._zsets``): Redis 7's replies, errors and their order, how
each change is logged (the resulting scores, the members removed), RESP3 doubles."""

from __future__ import annotations

import math

from minidb.protocol._results import NULL_ARRAY
from minidb.store._results import SYNTAX_ERROR, ErrorReply, Simple
from minidb.store._zsets import format_score
from minidb.wal import KIND_ZSET, AddElements, Remove, RemoveElements, encode_score
from tests.store.test_hashes import INT_ERR, NOW, WRONG, Client

E = ErrorReply
B = b"0"
NOT_FLOAT = E("ERR value is not a valid float")
RANGE_ERR = E("ERR min or max is not a float")
LEX_ERR = E("ERR min or max not valid string range item")


def _scores(c: Client, key: str) -> list[tuple[bytes, float]]:
    flat = c("ZRANGE", key, "0", "-1", "WITHSCORES")
    assert isinstance(flat, list)
    return [(m, float(s)) for m, s in zip(flat[::2], flat[1::2], strict=True)]


def _replays(c: Client) -> None:
    replayed = Client(c.replayed())
    for key in c.ks.keys(B, NOW):
        if c("TYPE", key) == Simple("zset"):
            assert _scores(replayed, key.decode()) == _scores(c, key.decode())
    assert sorted(replayed.ks.keys(B, NOW)) == sorted(c.ks.keys(B, NOW))


def test_zsets_zadd_flags_and_replies() -> None:
    """ZADD counts added members (CH: changed too), NX/XX/GT/LT select which change, INCR
    answers the new score (null when a flag stopped it); repeated members apply in order."""
    c = Client()
    assert c("ZADD", "z", "1", "a", "2", "b", "3", "a") == 2
    assert _scores(c, "z") == [(b"b", 2.0), (b"a", 3.0)]
    assert c("ZADD", "z", "CH", "5", "a", "1", "c") == 2
    assert c("ZADD", "z", "NX", "9", "a", "4", "d") == 1 and c("ZSCORE", "z", "a") == b"5"
    assert c("ZADD", "z", "XX", "CH", "6", "a", "7", "e") == 1 and c("ZSCORE", "z", "e") is None
    assert c("ZADD", "z", "GT", "CH", "1", "a", "8", "b") == 1
    assert c("ZADD", "z", "LT", "CH", "9", "a", "0", "b") == 1
    assert c("ZSCORE", "z", "a") == b"6" and c("ZSCORE", "z", "b") == b"0"
    assert c("ZADD", "z", "INCR", "2.5", "a") == b"8.5"
    assert c("ZADD", "z", "INCR", "NX", "1", "a") is None
    assert c("ZADD", "z", "INCR", "GT", "-1", "a") is None
    assert (
        c("ZADD", "nope", "XX", "1", "a") == 0 and c("ZADD", "nope", "XX", "INCR", "1", "a") is None
    )
    assert c("EXISTS", "nope") == 0
    assert c("ZINCRBY", "z", "0.1", "new") == b"0.10000000000000001"
    assert c("ZINCRBY", "z", "inf", "a") == b"inf"
    assert c("ZINCRBY", "z", "-inf", "a") == E("ERR resulting score is not a number (NaN)")
    assert c("ZSCORE", "z", "a") == b"inf"
    _replays(c)


def test_zsets_zadd_errors_in_redis_order() -> None:
    c = Client()
    c("SET", "s", "v")
    assert c("ZADD", "z", "1", "a", "2") == E(SYNTAX_ERROR)
    assert c("ZADD", "z", "NX", "XX") == E(SYNTAX_ERROR)  # no pair: before the flags' check
    assert c("ZADD", "z", "NX", "XX", "1", "a") == E(
        "ERR XX and NX options at the same time are not compatible"
    )
    assert c("ZADD", "z", "GT", "LT", "1", "a") == E(
        "ERR GT, LT, and/or NX options at the same time are not compatible"
    )
    assert c("ZADD", "z", "INCR", "1", "a", "2", "b") == E(
        "ERR INCR option supports a single increment-element pair"
    )
    for bad in ("x", "nan", " 1", "1 ", "1e999", "1_0", ""):
        assert c("ZADD", "z", bad, "a") == NOT_FLOAT, bad
    assert c("ZADD", "s", "x", "a") == NOT_FLOAT  # the scores before the type
    assert c("ZADD", "s", "1", "a") == WRONG and c("ZINCRBY", "s", "1", "a") == WRONG
    assert c("ZADD", "z", "0x10", "a", "+inf", "b", "-1E2", "c") == 3  # strtod's forms
    assert _scores(c, "z") == [(b"c", -100.0), (b"a", 16.0), (b"b", math.inf)]
    assert c("ZADD", "z", "wrong") == E("ERR wrong number of arguments for 'zadd' command")


def test_zsets_pop_of_zero_checks_the_type_first() -> None:
    """Redis 7's ``genericZpopCommand`` looks the key up before it answers a count of 0."""
    c = Client()
    c("SET", "s", "v")
    assert c("ZPOPMIN", "s", "0") == WRONG and c("ZPOPMAX", "s", "0") == WRONG
    assert c("ZPOPMIN", "missing", "0") == [] and c("ZPOPMIN", "s", "-1") == E(
        "ERR value is out of range, must be positive"
    )


def test_zsets_reads() -> None:
    c = Client()
    c("ZADD", "z", "1", "a", "2", "b", "2", "c", "-inf", "m", "inf", "n")
    assert c("ZCARD", "z") == 5 and c("ZCARD", "nope") == 0
    assert c("ZSCORE", "z", "m") == b"-inf" and c("ZSCORE", "nope", "a") is None
    assert c("ZMSCORE", "z", "a", "x", "n") == [b"1", None, b"inf"]
    assert c("ZMSCORE", "nope", "a") == [None]
    assert c("ZRANK", "z", "c") == 3 and c("ZREVRANK", "z", "c") == 1
    assert c("ZRANK", "z", "x") is None and c("ZRANK", "nope", "a") is None
    assert c("ZRANK", "z", "b", "WITHSCORE") == [2, b"2"]
    assert c("ZRANK", "z", "x", "WITHSCORE") is NULL_ARRAY
    assert c("ZRANK", "z", "b", "WITHSCORES") == E(SYNTAX_ERROR)
    assert c("ZCOUNT", "z", "(1", "2") == 2 and c("ZCOUNT", "z", "-inf", "+inf") == 5
    assert c("ZCOUNT", "z", "(2", "(2") == 0 and c("ZCOUNT", "z", "3", "1") == 0
    assert c("ZCOUNT", "z", "x", "1") == RANGE_ERR and c("ZCOUNT", "nope", "(nan", "1") == RANGE_ERR
    assert c("ZCOUNT", "z", "(inf", "+inf") == 0 and c("ZCOUNT", "z", "inf", "inf") == 1


def test_zsets_ranges() -> None:
    """ZRANGE by rank, score and lex, REV (bounds given high first), LIMIT, WITHSCORES, and
    the older commands that are its special cases."""
    c = Client()
    c("ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d")
    assert c("ZRANGE", "z", "1", "-2") == [b"b", b"c"]
    assert c("ZRANGE", "z", "-100", "100", "REV") == [b"d", b"c", b"b", b"a"]
    assert c("ZRANGE", "z", "0", "1", "REV", "WITHSCORES") == [b"d", b"4", b"c", b"3"]
    assert c("ZREVRANGE", "z", "0", "0") == [b"d"] and c("ZRANGE", "z", "3", "1") == []
    assert c("ZRANGE", "z", "(1", "3", "BYSCORE") == [b"b", b"c"]
    assert c("ZRANGE", "z", "3", "(1", "BYSCORE", "REV", "LIMIT", "1", "5") == [b"b"]
    assert c("ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "1", "2") == [b"b", b"c"]
    assert c("ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "-1", "2") == []
    assert c("ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "2", "-1") == [b"c", b"d"]
    assert c("ZRANGEBYSCORE", "z", "2", "3", "WITHSCORES") == [b"b", b"2", b"c", b"3"]
    assert c("ZREVRANGEBYSCORE", "z", "+inf", "2", "LIMIT", "0", "2") == [b"d", b"c"]
    assert c("ZRANGE", "z", "0", "1", "LIMIT", "0", "1") == E(
        "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
    )
    assert c("ZRANGE", "z", "-", "+", "BYLEX", "WITHSCORES") == E(
        "ERR syntax error, WITHSCORES not supported in combination with BYLEX"
    )
    assert c("ZRANGEBYSCORE", "z", "0", "1", "REV") == E(SYNTAX_ERROR)
    assert (
        c("ZRANGE", "z", "x", "1") == INT_ERR and c("ZRANGE", "z", "x", "1", "BYSCORE") == RANGE_ERR
    )
    c("ZADD", "l", "0", "a", "0", "b", "0", "c", "0", "d")
    assert c("ZRANGE", "l", "[b", "(d", "BYLEX") == [b"b", b"c"]
    assert c("ZRANGE", "l", "+", "(b", "BYLEX", "REV", "LIMIT", "0", "1") == [b"d"]
    assert c("ZRANGEBYLEX", "l", "-", "+", "LIMIT", "1", "1") == [b"b"]
    assert c("ZREVRANGEBYLEX", "l", "[c", "-") == [b"c", b"b", b"a"]
    assert c("ZLEXCOUNT", "l", "(a", "+") == 3 and c("ZLEXCOUNT", "l", "+", "-") == 0
    assert c("ZRANGEBYLEX", "l", "a", "+") == LEX_ERR
    assert c("ZRANGE", "nope", "0", "-1") == [] and c("ZRANGE", "s", "x", "1", "BYLEX") == LEX_ERR


def test_zsets_removals_are_logged_as_members() -> None:
    """ZREM, ZPOPMIN/MAX and ZREMRANGEBY* log the members they removed; taking every member
    logs one Remove; a score change logs the resulting score."""
    c = Client()
    c("ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e")
    assert c.journal.records[-1] == [
        AddElements(B, b"z", KIND_ZSET, tuple(
            x for m, s in ((b"a", 1), (b"b", 2), (b"c", 3), (b"d", 4), (b"e", 5))
            for x in (m, encode_score(s))
        ))
    ]  # fmt: skip
    c.journal.close_group()
    c("ZINCRBY", "z", "10", "a")
    c.journal.close_group()
    assert c.journal.records[-1] == [AddElements(B, b"z", KIND_ZSET, (b"a", encode_score(11)))]
    assert c("ZADD", "z", "11", "a") == 0
    c.journal.close_group()
    assert len(c.journal.records) == 2  # nothing changed: nothing logged
    assert c("ZREM", "z", "x", "b", "b") == 1
    c.journal.close_group()
    assert c.journal.records[-1] == [RemoveElements(B, b"z", KIND_ZSET, (b"b",))]
    assert c("ZPOPMIN", "z") == [b"c", b"3"] and c("ZPOPMAX", "z", "1") == [b"a", b"11"]
    assert c("ZPOPMIN", "z", "0") == [] and c("ZPOPMIN", "nope") == []
    assert c("ZPOPMIN", "z", "-1") == E("ERR value is out of range, must be positive")
    assert c("ZPOPMIN", "z", "1", "2") == E(SYNTAX_ERROR)
    c("ZADD", "z", "6", "f", "7", "g")
    assert c("ZREMRANGEBYRANK", "z", "1", "-2") == 2 and _scores(c, "z") == [(b"d", 4), (b"g", 7)]
    assert c("ZREMRANGEBYSCORE", "z", "(4", "+inf") == 1
    c.journal.close_group()
    assert c("ZREMRANGEBYSCORE", "z", "x", "1") == RANGE_ERR
    assert c("ZREMRANGEBYLEX", "z", "-", "+") == 1 and c("EXISTS", "z") == 0
    c.journal.close_group()
    assert c.journal.records[-1] == [Remove(B, b"z")]
    assert c("ZREMRANGEBYRANK", "nope", "0", "-1") == 0
    _replays(c)


def test_zsets_rangestore_type_encoding_and_resp3() -> None:
    """ZRANGESTORE replaces the destination (an empty result deletes it); TYPE and OBJECT
    ENCODING; RESP3 answers scores as doubles and pairs for WITHSCORES and counted pops."""
    c = Client()
    c("ZADD", "z", "1", "a", "2", "b", "3", "c")
    c("SET", "d", "v")
    assert c("ZRANGESTORE", "d", "z", "(1", "+inf", "BYSCORE") == 2
    assert _scores(c, "d") == [(b"b", 2.0), (b"c", 3.0)]
    assert c("ZRANGESTORE", "d", "z", "5", "9") == 0 and c("EXISTS", "d") == 0
    assert c("ZRANGESTORE", "d", "z", "0", "-1", "WITHSCORES") == E(SYNTAX_ERROR)
    assert c("TYPE", "z") == Simple("zset") and c("OBJECT", "ENCODING", "z") == b"listpack"
    c("ZADD", "z", "4", "m" * 65)
    assert c("OBJECT", "ENCODING", "z") == b"skiplist"
    assert c("LPUSH", "z", "x") == WRONG and c("ZCARD", "d") == 0
    c("SET", "s", "v")
    for cmd in (
        ("ZCARD", "s"),
        ("ZSCORE", "s", "a"),
        ("ZRANGE", "s", "0", "1"),
        ("ZREM", "s", "a"),
        ("ZPOPMIN", "s"),
        ("ZCOUNT", "s", "0", "1"),
        ("ZRANK", "s", "a"),
    ):
        assert c(*cmd) == WRONG, cmd
    _replays(c)
    r3 = Client(c.ks, protocol=3)
    assert r3("ZSCORE", "z", "a") == 1.0 and r3("ZINCRBY", "z", "0.5", "a") == 1.5
    assert r3("ZMSCORE", "z", "a", "x") == [1.5, None]
    assert r3("ZRANGE", "z", "0", "1", "WITHSCORES") == [[b"a", 1.5], [b"b", 2.0]]
    assert r3("ZPOPMIN", "z") == [b"a", 1.5] and r3("ZPOPMIN", "z", "1") == [[b"b", 2.0]]
    assert r3("ZRANK", "z", "c", "WITHSCORE") == [0, 3.0]


def test_zsets_score_format() -> None:
    assert [format_score(x) for x in (1.0, 0.1, -0.0, math.inf, -math.inf, 1e300, 1.5e-7)] == [
        b"1", b"0.10000000000000001", b"-0", b"inf", b"-inf", b"1.0000000000000001e+300",
        b"1.4999999999999999e-07",
    ]  # fmt: skip


def test_zsets_large_ranks_are_right() -> None:
    """Rank, range and counts on a sorted set past the listpack limit agree with a sorted
    list."""
    c = Client()
    pairs = [(b"m%04d" % i, float((i * 7919) % 1000)) for i in range(1000)]
    c("ZADD", "z", *[x for m, s in pairs for x in (b"%r" % s, m)])
    model = sorted((s, m) for m, s in pairs)
    assert c("ZRANK", "z", model[500][1]) == 500
    assert c("ZRANGE", "z", "100", "102") == [m for _, m in model[100:103]]
    assert c("ZCOUNT", "z", "(100", "200") == sum(100 < s <= 200 for s, _ in model)
    assert c("ZREMRANGEBYSCORE", "z", "-inf", "(500") == sum(s < 500 for s, _ in model)
    assert c("ZCARD", "z") == sum(s >= 500 for s, _ in model)
    _replays(c)


def test_zsets_union_inter_diff() -> None:
    """WEIGHTS and AGGREGATE, sets as sorted sets of score 1, a NaN sum counted as 0, an
    empty result deleting the destination, Redis's errors."""
    c = Client()
    c("ZADD", "z1", "1", "a", "2", "b", "3", "c")
    c("ZADD", "z2", "10", "b", "20", "d", "inf", "c")
    c("SADD", "st", "b", "x")
    c("SET", "str", "v")
    assert c("ZUNIONSTORE", "out", "3", "z1", "z2", "st", "WEIGHTS", "1", "2", "3") == 5
    assert _scores(c, "out") == [(b"a", 1), (b"x", 3), (b"b", 25), (b"d", 40), (b"c", math.inf)]
    assert c("ZINTERSTORE", "out", "2", "z1", "z2", "AGGREGATE", "MAX") == 2
    assert _scores(c, "out") == [(b"b", 10), (b"c", math.inf)]
    assert c("ZUNIONSTORE", "out", "2", "z1", "z2", "WEIGHTS", "1", "-1") == 4
    assert c("ZSCORE", "out", "c") == b"-inf"
    c("ZADD", "neg", "-inf", "c")
    assert c("ZUNIONSTORE", "out", "2", "z2", "neg") == 3 and c("ZSCORE", "out", "c") == b"0"
    assert c("ZDIFFSTORE", "out", "2", "z1", "z2") == 1 and _scores(c, "out") == [(b"a", 1)]
    assert c("ZDIFFSTORE", "out", "2", "z1", "z1") == 0 and c("EXISTS", "out") == 0
    assert c("ZUNION", "2", "z1", "nope", "WITHSCORES") == [b"a", b"1", b"b", b"2", b"c", b"3"]
    assert c("ZINTER", "2", "z1", "nope") == [] and c("ZDIFF", "1", "z1") == [b"a", b"b", b"c"]
    assert c("ZINTER", "0", "z1") == E("ERR at least 1 input key is needed for 'zinter' command")
    assert c("ZUNIONSTORE", "out", "3", "z1", "z2") == E(SYNTAX_ERROR)
    assert c("ZUNIONSTORE", "out", "1", "z1", "WEIGHTS", "x") == E(
        "ERR weight value is not a float"
    )
    assert c("ZDIFF", "2", "z1", "z2", "WEIGHTS", "1", "2") == E(SYNTAX_ERROR)
    assert c("ZUNIONSTORE", "out", "1", "z1", "WITHSCORES") == E(SYNTAX_ERROR)
    assert c("ZUNIONSTORE", "out", "1", "z1", "AGGREGATE", "avg") == E(SYNTAX_ERROR)
    assert c("ZUNION", "2", "z1", "str") == WRONG
    _replays(c)


def test_zsets_randmember_and_scan() -> None:
    c = Client()
    assert c("ZRANDMEMBER", "nope") is None and c("ZRANDMEMBER", "nope", "3") == []
    c("ZADD", "z", "1", "a", "2", "b", "3", "c")
    assert c("ZRANDMEMBER", "z") in (b"a", b"b", b"c")
    assert c("ZRANDMEMBER", "z", "5", "WITHSCORES") == [b"c", b"3", b"b", b"2", b"a", b"1"]
    picked = c("ZRANDMEMBER", "z", "2")
    assert isinstance(picked, list) and len(set(picked)) == 2
    repeated = c("ZRANDMEMBER", "z", "-7", "WITHSCORES")
    assert isinstance(repeated, list) and len(repeated) == 14
    assert c("ZRANDMEMBER", "z", "1", "x") == E(SYNTAX_ERROR)
    assert c("ZRANDMEMBER", "z", "x") == INT_ERR
    assert c("ZSCAN", "z", "0", "MATCH", "[ab]") == [b"0", [b"a", b"1", b"b", b"2"]]
    big = [x for i in range(300) for x in (b"%d" % i, b"m%03d" % i)]
    c("ZADD", "big", *big)
    seen: dict[bytes, bytes] = {}
    cursor = b"0"
    while True:
        reply = c("ZSCAN", "big", cursor, "COUNT", "50")
        assert isinstance(reply, list)
        cursor, page = reply
        seen.update(zip(page[::2], page[1::2], strict=True))
        if cursor == b"0":
            break
    assert seen == {b"m%03d" % i: b"%d" % i for i in range(300)}
    assert Client(c.ks, protocol=3)("ZSCAN", "z", "0")[1][1] == b"1"  # type: ignore[index]


def test_zsets_lex_range_over_mixed_scores_walks_as_a_listpack() -> None:
    """Redis defines lex ranges for one score only; over several, a small sorted set answers
    what Redis's listpack walk finds (checked against redis-server by the differential
    test): nothing if the highest-ranked member is below min, else the run from the first
    member at or above min."""
    c = Client()
    c("ZADD", "z", "1", "b", "2", "a", "3", "c")
    assert c("ZLEXCOUNT", "z", "(b", "+") == 1  # the walk from the head meets c first
    assert c("ZLEXCOUNT", "z", "(c", "+") == 0  # c, the last, is not above (c
    assert c("ZRANGEBYLEX", "z", "[b", "+") == [b"b", b"a", b"c"]
    assert c("ZRANGEBYLEX", "z", "-", "[b") == [b"b", b"a"]
    assert c("ZREVRANGEBYLEX", "z", "[b", "-") == [b"a", b"b"]
    assert c("ZLEXCOUNT", "z", "[c", "[a") == 0
