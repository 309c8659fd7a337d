"""Random sequences of sorted-set commands against a simple model (a dict of member -> score,
ordered by ``sorted()``): the same replies and the same OBJECT ENCODING whatever the set's
representation (packed in one ``bytes``, or a dict and a ``SortedList``), with members
crossing 64 bytes, counts crossing ``PACKED_MAX_MEMBERS`` and 128 both ways, equal scores
ordered by member bytes, -0.0 and inf; and a replay of the log gives the same sets."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import event, given, settings
from hypothesis import strategies as st

from minidb.protocol._results import NULL_ARRAY
from minidb.store._encodings import ZSET_MAX_LISTPACK_ENTRIES, ZSET_MAX_LISTPACK_VALUE
from minidb.store._results import ErrorReply, Result
from minidb.store._zsets import format_score
from tests.store.test_hashes import Client

KEYS = [b"z1", b"z2"]
DEST = b"dst"
SHORT = [b"", b"a", b"ab", b"b", b"ba", b"c", b"\x00", b"\xff"]
EDGE = [b"m" * ZSET_MAX_LISTPACK_VALUE, b"L" * (ZSET_MAX_LISTPACK_VALUE + 1)]
"""A member as long as a listpack takes, and one byte longer (a skiplist from then on)."""
SCORES = [-math.inf, -2.5, -1.0, -0.0, 0.0, 1.0, 1.5, 3.0, math.inf]
BULK_MAX = ZSET_MAX_LISTPACK_ENTRIES + 12


def _bulk_member(n: int) -> bytes:
    return b"n%03d" % n


Pair = tuple[float, bytes]


@dataclass
class Model:
    """The sorted sets as plain dicts, and the encoding Redis 7.2 would report for each."""

    sets: dict[bytes, dict[bytes, float]] = field(default_factory=dict)
    encodings: dict[bytes, bytes] = field(default_factory=dict)

    def ranked(self, key: bytes) -> list[Pair]:
        return sorted((score, member) for member, score in self.sets.get(key, {}).items())

    def put(self, key: bytes, changes: list[tuple[bytes, float]]) -> None:
        """Scores set by a ZADD (Redis's ``zsetTypeCreate`` then ``zsetAdd`` conversions)."""
        if not changes:
            return
        longest = max(len(member) for member, _ in changes)
        if key not in self.sets:
            small = len(changes) <= ZSET_MAX_LISTPACK_ENTRIES and longest <= 64
            self.sets[key], self.encodings[key] = {}, b"listpack" if small else b"skiplist"
        scores = self.sets[key]
        for member, score in changes:
            if scores.get(member) != score:
                scores[member] = score
        if (
            len(changes) > ZSET_MAX_LISTPACK_ENTRIES
            or len(scores) > ZSET_MAX_LISTPACK_ENTRIES
            or longest > ZSET_MAX_LISTPACK_VALUE
        ):
            self.encodings[key] = b"skiplist"

    def remove(self, key: bytes, members: list[bytes]) -> int:
        scores = self.sets.get(key, {})
        gone = [m for m in dict.fromkeys(members) if m in scores]
        for member in gone:
            del scores[member]
        if key in self.sets and not scores:
            del self.sets[key], self.encodings[key]
        return len(gone)

    def store(self, key: bytes, scores: dict[bytes, float]) -> int:
        self.sets.pop(key, None)
        self.encodings.pop(key, None)
        if scores:
            small = len(scores) <= ZSET_MAX_LISTPACK_ENTRIES and all(
                len(m) <= ZSET_MAX_LISTPACK_VALUE for m in scores
            )
            self.sets[key] = dict(scores)
            self.encodings[key] = b"listpack" if small else b"skiplist"
        return len(scores)


def _text(score: float) -> bytes:
    return repr(score).encode()


def _flat(pairs: list[Pair], with_scores: bool) -> list[Result]:
    out: list[Result] = []
    for score, member in pairs:
        out += (member, format_score(score)) if with_scores else (member,)
    return out


def _rank_range(size: int, start: int, stop: int) -> range:
    """Redis's start/stop of a rank range, clamped."""
    start, stop = start + size if start < 0 else start, stop + size if stop < 0 else stop
    start = max(start, 0)
    if start > stop or start >= size:
        return range(0)
    return range(start, min(stop, size - 1) + 1)


def _in_score(score: float, bound: tuple[float, bool], low: bool) -> bool:
    value, exclusive = bound
    if low:
        return score > value if exclusive else score >= value
    return score < value if exclusive else score <= value


def _in_lex(member: bytes, bound: bytes, low: bool) -> bool:
    if bound == b"-":
        return low
    if bound == b"+":
        return not low
    inner, exclusive = bound[1:], bound[:1] == b"("
    if low:
        return member > inner if exclusive else member >= inner
    return member < inner if exclusive else member <= inner


def _limited(items: list[Pair], limit: tuple[int, int] | None) -> list[Pair]:
    if limit is None:
        return items
    offset, count = limit
    return items[offset:] if count < 0 else items[offset : offset + count]


# -- the commands, each run on the server and on the model -----------------------------------

Step = Callable[[Client, Model], tuple[Result, Result]]
"""One command: (the server's reply, the model's)."""


def _zadd(key: bytes, flags: tuple[bytes, ...], pairs: list[tuple[float, bytes]]) -> Step:
    def step(c: Client, m: Model) -> tuple[Result, Result]:
        argv = [b"ZADD", key, *flags]
        for score, member in pairs:
            argv += (_text(score), member)
        got = c(*argv)
        nx, xx, gt, lt, ch, incr = (
            f in flags for f in (b"NX", b"XX", b"GT", b"LT", b"CH", b"INCR")
        )
        held = m.sets.get(key, {})
        now: dict[bytes, float] = {}
        changes: list[tuple[bytes, float]] = []
        added = updated = 0
        result: float | None = None
        for score, member in pairs:
            current = now.get(member, held.get(member))
            if current is not None:
                if nx:
                    continue
                if incr:
                    score += current
                    if math.isnan(score):
                        return got, ErrorReply("ERR resulting score is not a number (NaN)")
                if (lt and score >= current) or (gt and score <= current):
                    continue
                result = score
                if score != current:
                    now[member] = score
                    changes.append((member, score))
                    updated += 1
            elif not xx:
                now[member] = score
                changes.append((member, score))
                added += 1
                result = score
        m.put(key, changes)
        if incr:
            return got, None if result is None else format_score(result)
        return got, added + updated if ch else added

    return step


def _zrem(key: bytes, members: list[bytes]) -> Step:
    return lambda c, m: (c(b"ZREM", key, *members), m.remove(key, members))


def _pop(key: bytes, highest: bool, count: int) -> Step:
    def step(c: Client, m: Model) -> tuple[Result, Result]:
        got = c(b"ZPOPMAX" if highest else b"ZPOPMIN", key, b"%d" % count)
        ranked = m.ranked(key)
        taken = (ranked[::-1] if highest else ranked)[:count]
        m.remove(key, [member for _, member in taken])
        return got, _flat(taken, True)

    return step


def _remrange_by_rank(key: bytes, start: int, stop: int) -> Step:
    def step(c: Client, m: Model) -> tuple[Result, Result]:
        got = c(b"ZREMRANGEBYRANK", key, b"%d" % start, b"%d" % stop)
        ranked = m.ranked(key)
        members = [ranked[n][1] for n in _rank_range(len(ranked), start, stop)]
        return got, m.remove(key, members)

    return step


def _range_by_rank(key: bytes, start: int, stop: int, rev: bool, scores: bool) -> Step:
    def step(c: Client, m: Model) -> tuple[Result, Result]:
        words = [b"REV"] * rev + [b"WITHSCORES"] * scores
        got = c(b"ZRANGE", key, b"%d" % start, b"%d" % stop, *words)
        ranked = m.ranked(key)
        ordered = ranked[::-1] if rev else ranked
        return got, _flat([ordered[n] for n in _rank_range(len(ranked), start, stop)], scores)

    return step


def _bound_text(bound: tuple[float, bool]) -> bytes:
    return (b"(" if bound[1] else b"") + _text(bound[0])


def _range_by_score(
    key: bytes, low: tuple[float, bool], high: tuple[float, bool], rev: bool,
    limit: tuple[int, int] | None, scores: bool,
) -> Step:  # fmt: skip
    """ZRANGE BYSCORE (REV: max first), and ZCOUNT of the same range."""

    def step(c: Client, m: Model) -> tuple[Result, Result]:
        ends = (high, low) if rev else (low, high)
        words = [b"BYSCORE"] + [b"REV"] * rev + [b"WITHSCORES"] * scores
        if limit is not None:
            words += (b"LIMIT", b"%d" % limit[0], b"%d" % limit[1])
        got = c(b"ZRANGE", key, *map(_bound_text, ends), *words)
        inside = [
            pair for pair in m.ranked(key)
            if _in_score(pair[0], low, True) and _in_score(pair[0], high, False)
        ]  # fmt: skip
        assert c(b"ZCOUNT", key, _bound_text(low), _bound_text(high)) == len(inside)
        return got, _flat(_limited(inside[::-1] if rev else inside, limit), scores)

    return step


def _range_by_lex(
    key: bytes, low: bytes, high: bytes, rev: bool, limit: tuple[int, int] | None
) -> Step:
    """ZRANGE BYLEX, compared only while every member has one score (the case Redis defines;
    the listpack walk over mixed scores has its own test)."""

    def step(c: Client, m: Model) -> tuple[Result, Result]:
        ranked = m.ranked(key)
        if len({score for score, _ in ranked}) > 1:
            return None, None
        words = [b"BYLEX"] + [b"REV"] * rev
        if limit is not None:
            words += (b"LIMIT", b"%d" % limit[0], b"%d" % limit[1])
        got = c(b"ZRANGE", key, *((high, low) if rev else (low, high)), *words)
        inside = [p for p in ranked if _in_lex(p[1], low, True) and _in_lex(p[1], high, False)]
        assert c(b"ZLEXCOUNT", key, low, high) == len(inside)
        return got, _flat(_limited(inside[::-1] if rev else inside, limit), False)

    return step


def _reads(key: bytes, member: bytes) -> Step:
    """ZSCORE, ZMSCORE, ZRANK and ZREVRANK (WITHSCORE), ZCARD of one member."""

    def step(c: Client, m: Model) -> tuple[Result, Result]:
        got = [
            c(b"ZSCORE", key, member), c(b"ZMSCORE", key, member, b"absent"),
            c(b"ZRANK", key, member), c(b"ZREVRANK", key, member, b"WITHSCORE"),
            c(b"ZCARD", key),
        ]  # fmt: skip
        ranked = m.ranked(key)
        score = m.sets.get(key, {}).get(member)
        if score is None:
            return got, [None, [None, None], None, NULL_ARRAY, len(ranked)]
        rank = ranked.index((score, member))
        text = format_score(score)
        return got, [text, [text, None], rank, [len(ranked) - 1 - rank, text], len(ranked)]

    return step


def _scan(key: bytes) -> Step:
    """A whole ZSCAN: every member once with its score (a listpack in one step, by rank)."""

    def step(c: Client, m: Model) -> tuple[Result, Result]:
        cursor, seen = b"0", []
        for _ in range(1000):
            reply = c(b"ZSCAN", key, cursor, b"COUNT", b"7")
            assert isinstance(reply, list)
            cursor, page = reply
            seen += zip(page[::2], page[1::2], strict=True)
            if cursor == b"0":
                break
        scores = m.sets.get(key, {})
        if m.encodings.get(key) == b"listpack":
            want = [(member, format_score(score)) for score, member in m.ranked(key)]
            return seen, want
        return sorted(seen), sorted((k, format_score(v)) for k, v in scores.items())

    return step


def _randmember(key: bytes, count: int) -> Step:
    """ZRANDMEMBER: random, so its properties: how many, distinct if positive, each held with
    its own score."""

    def step(c: Client, m: Model) -> tuple[Result, Result]:
        reply = c(b"ZRANDMEMBER", key, b"%d" % count, b"WITHSCORES")
        assert isinstance(reply, list)
        scores = m.sets.get(key, {})
        pairs = list(zip(reply[::2], reply[1::2], strict=True))
        for member, score in pairs:
            assert format_score(scores[member]) == score  # type: ignore[index]
        expected = min(count, len(scores)) if count >= 0 else (-count if scores else 0)
        assert len(pairs) == expected
        if count > 0:
            assert len({member for member, _ in pairs}) == len(pairs)
        return None, None

    return step


def _store(op: bytes, aggregate: bytes) -> Step:
    """ZUNIONSTORE / ZINTERSTORE / ZDIFFSTORE of both keys into ``DEST``."""

    def step(c: Client, m: Model) -> tuple[Result, Result]:
        words = [] if op == b"ZDIFFSTORE" else [b"AGGREGATE", aggregate]
        got = c(op, DEST, b"2", *KEYS, *words)
        first, second = (m.sets.get(key, {}) for key in KEYS)

        def combine(a: float, b: float) -> float:
            if aggregate == b"SUM":
                total = a + b
                return 0.0 if math.isnan(total) else total
            return min(a, b) if aggregate == b"MIN" else max(a, b)

        if op == b"ZUNIONSTORE":
            result = dict(first)
            for member, score in second.items():
                result[member] = score if member not in result else combine(result[member], score)
        elif op == b"ZINTERSTORE":
            result = {k: combine(v, second[k]) for k, v in first.items() if k in second}
        else:
            result = {k: v for k, v in first.items() if k not in second}
        count = m.store(DEST, result)
        assert c(b"ZRANGE", DEST, b"0", b"-1", b"WITHSCORES") == _flat(m.ranked(DEST), True)
        return got, count

    return step


def _bulk(key: bytes, count: int, offset: int, score: float) -> Step:
    """One ZADD of ``count`` members (scores by threes, so ties are common)."""
    pairs = [(score + (n % 3), _bulk_member(n)) for n in range(offset, offset + count)]
    return _zadd(key, (), pairs)


# -- strategies --------------------------------------------------------------------------------

keys = st.sampled_from(KEYS)
members = st.one_of(
    st.sampled_from(SHORT), st.sampled_from(EDGE), st.integers(0, 40).map(_bulk_member)
)
scores = st.sampled_from(SCORES)
bounds = st.tuples(scores, st.booleans())
ranks = st.integers(-140, 140)
limits = st.none() | st.tuples(st.integers(0, 5), st.integers(-1, 6))
lex_bounds = st.one_of(
    st.sampled_from([b"-", b"+"]),
    st.tuples(st.sampled_from([b"[", b"("]), st.sampled_from(SHORT)).map(lambda t: t[0] + t[1]),
)
flag_sets = st.sampled_from(
    [(), (b"NX",), (b"XX",), (b"GT",), (b"LT",), (b"CH",), (b"XX", b"GT", b"CH"), (b"NX", b"CH")]
)
steps = st.one_of(
    st.builds(_zadd, keys, flag_sets, st.lists(st.tuples(scores, members), min_size=1, max_size=4)),
    st.builds(
        _zadd, keys, st.sampled_from([(b"INCR",), (b"INCR", b"XX"), (b"INCR", b"GT")]),
        st.tuples(scores, members).map(lambda p: [p]),
    ),
    st.builds(_bulk, keys, st.integers(1, BULK_MAX), st.integers(0, 20), scores),
    st.builds(_zrem, keys, st.lists(members, min_size=1, max_size=4)),
    st.builds(_pop, keys, st.booleans(), st.integers(0, 40)),
    st.builds(_remrange_by_rank, keys, ranks, ranks),
    st.builds(_range_by_rank, keys, ranks, ranks, st.booleans(), st.booleans()),
    st.builds(_range_by_score, keys, bounds, bounds, st.booleans(), limits, st.booleans()),
    st.builds(_range_by_lex, keys, lex_bounds, lex_bounds, st.booleans(), limits),
    st.builds(_reads, keys, members),
    st.builds(_scan, keys),
    st.builds(_randmember, keys, st.integers(-6, 6)),
    st.builds(_store, st.sampled_from([b"ZUNIONSTORE", b"ZINTERSTORE", b"ZDIFFSTORE"]),
              st.sampled_from([b"SUM", b"MIN", b"MAX"])),
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.lists(steps, min_size=1, max_size=25))
def test_sorted_set_commands_answer_as_the_model(run: list[Step]) -> None:
    """Each command's reply is the model's, every key's OBJECT ENCODING is the model's after
    each, and the log replays to the same sets."""
    c, m = Client(), Model()
    for n, step in enumerate(run):
        got, want = step(c, m)
        assert got == want, n
        for key in (*KEYS, DEST):
            size = len(m.sets.get(key, {}))
            event(f"a set of {'> 128' if size > 128 else '33-128' if size > 32 else '<= 32'}")
            encoding = c(b"OBJECT", b"ENCODING", key)
            assert encoding == m.encodings.get(key), (n, key)
            assert c(b"ZRANGE", key, b"0", b"-1", b"WITHSCORES") == _flat(m.ranked(key), True)
    replayed = Client(c.replayed())
    for key in (*KEYS, DEST):
        want_all = _flat(m.ranked(key), True)
        assert replayed(b"ZRANGE", key, b"0", b"-1", b"WITHSCORES") == want_all
        assert replayed(b"OBJECT", b"ENCODING", key) == m.encodings.get(key)
    assert sorted(replayed.ks.items()) == sorted(c.ks.items())
