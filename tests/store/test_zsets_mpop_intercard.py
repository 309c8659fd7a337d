"""ZMPOP and ZINTERCARD (``store._zsets``), found missing by redis-py's own suite
(tests/compat/redis_py): replies, error wording and order as redis-server 7.0 answers them."""

from __future__ import annotations

from minidb.protocol._results import NULL_ARRAY
from minidb.store._results import SYNTAX_ERROR, ErrorReply
from tests.store.test_hashes import INT_ERR, WRONG, Client
from tests.store.test_zsets import _replays, _scores

E = ErrorReply


def _filled() -> Client:
    c = Client()
    c("ZADD", "a", "1", "x", "2", "y", "3", "z")
    c("ZADD", "b", "1", "x", "2", "y")
    c("SET", "s", "str")
    return c


def test_zsets_zmpop_pops_the_first_existing_sorted_set() -> None:
    """ZMPOP skips missing keys, pops COUNT members from the MIN or MAX end of the first that
    exists as [key, [[member, score], ...]], and deletes the emptied set (logged: replayed)."""
    c = _filled()
    assert c("ZMPOP", "2", "nokey", "a", "MAX", "COUNT", "2") == [
        b"a", [[b"z", b"3"], [b"y", b"2"]]
    ]
    assert c("ZMPOP", "2", "a", "b", "min") == [b"a", [[b"x", b"1"]]]
    assert c("EXISTS", "a") == 0
    assert c("ZMPOP", "1", "b", "MIN", "COUNT", "10") == [b"b", [[b"x", b"1"], [b"y", b"2"]]]
    assert c("ZMPOP", "1", "nokey", "MIN") == NULL_ARRAY
    _replays(c)


def test_zsets_zmpop_resp3_scores_are_doubles() -> None:
    """In RESP3 the pairs carry doubles, and the reply is nested with or without COUNT."""
    c = _filled()
    r3 = Client(c.ks, protocol=3)
    assert r3("ZMPOP", "1", "a", "MIN") == [b"a", [[b"x", 1.0]]]


def test_zsets_zmpop_errors_in_redis_order() -> None:
    """numkeys and COUNT have their own wording; a missing or unknown MIN/MAX, a second COUNT
    or a stray word is a syntax error; the first existing key of another type is WRONGTYPE."""
    c = _filled()
    assert c("ZMPOP", "0", "a", "MIN") == E("ERR numkeys should be greater than 0")
    assert c("ZMPOP", "x", "a", "MIN") == E("ERR numkeys should be greater than 0")
    assert c("ZMPOP", "3", "a", "MIN") == E(SYNTAX_ERROR)
    assert c("ZMPOP", "1", "a", "foo") == E(SYNTAX_ERROR)
    assert c("ZMPOP", "1", "a", "MIN", "bar") == E(SYNTAX_ERROR)
    assert c("ZMPOP", "1", "a", "MIN", "COUNT", "0") == E("ERR count should be greater than 0")
    assert c("ZMPOP", "1", "a", "MIN", "COUNT", "x") == E("ERR count should be greater than 0")
    assert c("ZMPOP", "1", "a", "MIN", "COUNT", "-1") == E("ERR count should be greater than 0")
    assert c("ZMPOP", "1", "a", "MIN", "COUNT", "1", "COUNT", "1") == E(SYNTAX_ERROR)
    assert c("ZMPOP", "2", "nokey", "s", "MIN") == WRONG
    assert c("ZMPOP", "1", "a") == E("ERR wrong number of arguments for 'zmpop' command")
    assert _scores(c, "a") == [(b"x", 1.0), (b"y", 2.0), (b"z", 3.0)]


def test_zsets_zintercard_counts_the_intersection_up_to_limit() -> None:
    """ZINTERCARD counts ZINTER's members (a plain set counts as a sorted set), at most LIMIT
    (0: no limit); a missing key makes it 0."""
    c = _filled()
    c("SADD", "set", "x", "q")
    assert c("ZINTERCARD", "2", "a", "b") == 2
    assert c("ZINTERCARD", "2", "a", "b", "LIMIT", "1") == 1
    assert c("ZINTERCARD", "2", "a", "b", "limit", "0") == 2
    assert c("ZINTERCARD", "2", "a", "set") == 1
    assert c("ZINTERCARD", "2", "a", "nokey") == 0


def test_zsets_zintercard_errors_in_redis_order() -> None:
    """Redis's wording: numkeys as ZINTER's, LIMIT's own, no WEIGHTS/AGGREGATE/WITHSCORES, and
    a key of another type is WRONGTYPE before the options are read."""
    c = _filled()
    no_keys = E("ERR at least 1 input key is needed for 'zintercard' command")
    assert c("ZINTERCARD", "0", "a") == no_keys
    assert c("ZINTERCARD", "x", "a") == INT_ERR
    assert c("ZINTERCARD", "3", "a", "b") == E(SYNTAX_ERROR)
    assert c("ZINTERCARD", "2", "a", "b", "LIMIT") == E(SYNTAX_ERROR)
    assert c("ZINTERCARD", "2", "a", "b", "LIMIT", "-1") == E("ERR LIMIT can't be negative")
    assert c("ZINTERCARD", "2", "a", "b", "LIMIT", "x") == E("ERR LIMIT can't be negative")
    assert c("ZINTERCARD", "2", "a", "b", "WEIGHTS", "1", "2") == E(SYNTAX_ERROR)
    assert c("ZINTERCARD", "2", "a", "b", "WITHSCORES") == E(SYNTAX_ERROR)
    assert c("ZINTERCARD", "2", "a", "s") == WRONG
    assert c("ZINTERCARD", "1", "s", "LIMIT", "x") == WRONG
