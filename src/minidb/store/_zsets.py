"""The sorted-set commands.

Each handler follows its original in Redis's ``t_zset.c``: the same order of checks, replies
and error texts. A sorted set is a ``ZSetValue`` (``_zsetvalue``); a change is journaled as its
effect: ``AddElements`` of kind 4 with each changed member's resulting score (never an
increment), ``RemoveElements`` of the members removed (an emptied sorted set is deleted by
it), a ``PutContainer`` of a ``*STORE`` result.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence

from minidb.protocol._results import NULL_ARRAY
from minidb.store._args import Command, Session, check_write, command, int_arg
from minidb.store._blocking import pop_first
from minidb.store._elementscan import (
    LONG_MAX,
    index_of,
    pick_distinct,
    pick_repeated,
    random_count,
    scan_cursor,
    scan_options,
)
from minidb.store._encodings import SKIPLIST
from minidb.store._glob import compile_glob
from minidb.store._journal import OpJournal, ScoresUndo
from minidb.store._keyspace import Keyspace
from minidb.store._lists import _range as list_range
from minidb.store._lists import blocking_mpop, mpop_args
from minidb.store._results import (
    NOT_A_FLOAT,
    SYNTAX_ERROR,
    CommandError,
    Result,
    WrongTypeError,
)
from minidb.store._values import SetValue
from minidb.store._zsetvalue import (
    Order,
    ZSetValue,
    new_zset,
    zset_add,
    zset_from,
    zset_remove,
)
from minidb.wal._ops import KIND_ZSET, AddElements, RemoveElements, encode_score


def get_zset(ks: Keyspace, s: Session, key: bytes, j: OpJournal, now_ms: int) -> ZSetValue | None:
    """The sorted set at ``key``, None if missing; ``WrongTypeError`` for another type."""
    return ks.container(s.bucket, key, ZSetValue, now_ms, j)


def set_scores(
    ks: Keyspace,
    bucket: bytes,
    key: bytes,
    found: ZSetValue | None,
    pairs: Sequence[tuple[bytes, float]],
    j: OpJournal,
) -> ZSetValue:
    """Set each member's score (``pairs``: the resulting scores, at least one) in the sorted
    set at ``key``, created if ``found`` is None; journaled."""
    longest = max(len(member) for member, _ in pairs)
    hint = len(pairs)
    target = ks.for_change(bucket, key, found, lambda e: new_zset(hint, longest, e), j)
    encoding = target.encoding
    olds = zset_add(target, pairs)
    j.undo.append(ScoresUndo(bucket, key, encoding, olds))
    elements: list[bytes] = []
    for member, score in pairs:
        elements += (member, encode_score(score))
    j.add(AddElements(bucket, key, KIND_ZSET, tuple(elements)))
    return target


def remove_members(
    ks: Keyspace,
    bucket: bytes,
    key: bytes,
    found: ZSetValue,
    members: Iterable[bytes],
    j: OpJournal,
) -> list[tuple[bytes, float | None]]:
    """Remove ``members`` (each present) from the sorted set ``found`` at ``key``; journaled,
    and the key deleted if that emptied it (one ``Remove`` when they are all its members, so
    the record stays small). (member, score) of each removed."""
    members = list(dict.fromkeys(members))
    scores = found.scores()
    if len(members) == len(scores) and all(m in scores for m in members):
        olds: list[tuple[bytes, float | None]] = [(m, scores[m]) for m in members]
        ks.remove(bucket, key, j)
        return olds
    target = ks.for_change(bucket, key, found, lambda e: new_zset(0, 0, e), j)
    encoding = target.encoding
    olds = zset_remove(target, members)
    if not olds:
        return olds
    j.undo.append(ScoresUndo(bucket, key, encoding, olds))
    j.add(RemoveElements(bucket, key, KIND_ZSET, tuple(member for member, _ in olds)))
    if not target:
        ks.drop_empty(bucket, key, j)
    return olds


# -- arguments -----------------------------------------------------------------------------

_DIGITS = re.compile(r"[1-9]")
_C_SPACE = " \t\n\v\f\r"
"""C's ``isspace`` in the C locale."""


def _strtod(text: bytes, *, space: bool) -> float | None:
    """C's ``strtod`` of the whole of ``text`` as Redis uses it, None where Redis refuses:
    no NaN, no overflow to infinity (``ERANGE``) and, unless ``space``, no leading space
    (``getDoubleFromObject``; ``zslParseRange`` lets strtod skip it). Hex floats are C's."""
    try:
        word = text.decode("ascii")
    except UnicodeDecodeError:
        return None
    body = word.lstrip(_C_SPACE) if space else word
    if not body or "_" in body or body != body.strip() or body[0].isspace():
        return None
    try:
        value = float(body)
    except ValueError:
        unsigned = body.lstrip("+-")
        if not unsigned.lower().startswith("0x") or body[:1] not in "+-0":
            return None
        try:
            value = float.fromhex(body)
        except (ValueError, OverflowError):
            return None
    if math.isnan(value):
        return None
    if math.isinf(value) and "inf" not in body.lower():
        return None  # 1e999: ERANGE
    if value == 0 and "x" not in body.lower() and _DIGITS.search(body.lower().split("e")[0]):
        return None  # 1e-999: ERANGE to zero
    return value


def score_arg(text: bytes) -> float:
    """A score argument (``getDoubleFromObjectOrReply``)."""
    value = _strtod(text, space=False)
    if value is None:
        raise CommandError(NOT_A_FLOAT)
    return value


def format_score(score: float) -> bytes:
    """A score as Redis 7.0 writes it in a bulk string: ``%.17g``, ``inf``, ``-inf``."""
    return b"%.17g" % score


def _reply_score(s: Session, score: float) -> Result:
    """A score reply: a double in RESP3, a bulk string of ``%.17g`` in RESP2."""
    return score if s.protocol == 3 else format_score(score)


class _Top:
    """Greater than any member, for bisecting past every (score, member) of one score."""

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return True


_TOP = _Top()
_RANGE_ERROR = "ERR min or max is not a float"
_LEX_ERROR = "ERR min or max not valid string range item"


def _score_bound(text: bytes) -> tuple[float, bool]:
    """One end of a score range (``zslParseRange``): the score and whether it is exclusive."""
    exclusive = text[:1] == b"("
    value = _strtod(text[1:] if exclusive else text, space=True)
    if value is None:
        raise CommandError(_RANGE_ERROR)
    return value, exclusive


def _score_span(z: ZSetValue, low: tuple[float, bool], high: tuple[float, bool]) -> tuple[int, int]:
    """Ranks [start, stop) of the members whose scores are in the range, O(log n)."""
    order = z.order
    (lo, lo_ex), (hi, hi_ex) = low, high
    start = order.bisect_right((lo, _TOP)) if lo_ex else order.bisect_left((lo,))
    stop = order.bisect_left((hi,)) if hi_ex else order.bisect_right((hi, _TOP))
    return start, max(start, stop)


_Lex = tuple[int, bytes, bool]
"""One end of a lex range: (-1 ``-``, 0 a member, 1 ``+``), the member, exclusive."""


def _lex_bound(text: bytes) -> _Lex:
    """``zslParseLexRangeItem``."""
    first = text[:1]
    if text == b"+":
        return 1, b"", False
    if text == b"-":
        return -1, b"", False
    if first == b"(" or first == b"[":
        return 0, text[1:], first == b"("
    raise CommandError(_LEX_ERROR)


def _lex_span(z: ZSetValue, low: _Lex, high: _Lex, reverse: bool = False) -> tuple[int, int]:
    """Ranks [start, stop) of the members in the lex range. With one score (the case Redis
    defines) a bisection; with several, Redis's listpack walk (``zzlFirstInLexRange``, or
    ``zzlLastInLexRange`` for ``reverse``, then on while in range), which is what a small
    sorted set answers."""
    order = z.order
    if not order or low[0] == 1 or high[0] == -1:
        return 0, 0
    if (
        low[0] == 0
        and high[0] == 0
        and (low[1] > high[1] or (low[1] == high[1] and (low[2] or high[2])))
    ):
        return 0, 0
    if order[0][0] == order[-1][0]:
        return _lex_bisect(order, order[0][0], low, high)
    if not _gte_min(order[-1][1], low) or not _lte_max(order[0][1], high):
        return 0, 0
    size = len(order)
    if reverse:
        stop = next((n + 1 for n in range(size - 1, -1, -1) if _lte_max(order[n][1], high)), 0)
        if not stop or not _gte_min(order[stop - 1][1], low):
            return 0, 0
        start = stop - 1
        while start > 0 and _gte_min(order[start - 1][1], low):
            start -= 1
        return start, stop
    start = next((n for n in range(size) if _gte_min(order[n][1], low)), size)
    if start == size or not _lte_max(order[start][1], high):
        return 0, 0
    stop = start + 1
    while stop < size and _lte_max(order[stop][1], high):
        stop += 1
    return start, stop


def _gte_min(member: bytes, low: _Lex) -> bool:
    return low[0] == -1 or (member > low[1] if low[2] else member >= low[1])


def _lte_max(member: bytes, high: _Lex) -> bool:
    return high[0] == 1 or (member < high[1] if high[2] else member <= high[1])


def _lex_bisect(order: Order, score: float, low: _Lex, high: _Lex) -> tuple[int, int]:
    """``_lex_span`` of a sorted set whose members all have ``score``: O(log n)."""
    if low[0] == -1:
        start = 0
    elif low[2]:
        start = order.bisect_right((score, low[1]))
    else:
        start = order.bisect_left((score, low[1]))
    if high[0] == 1:
        stop = len(order)
    elif high[2]:
        stop = order.bisect_left((score, high[1]))
    else:
        stop = order.bisect_right((score, high[1]))
    return start, max(start, stop)


def _rank_span(z: ZSetValue, start: int, end: int) -> tuple[int, int]:
    """Ranks [start, stop) of Redis's start/end (negative from the end), clamped as a list
    range is."""
    first, count = list_range(len(z), start, end)
    return first, first + count


def _members_at(z: ZSetValue, start: int, stop: int, reverse: bool) -> list[tuple[float, bytes]]:
    """The (score, member) of ranks [start, stop), lowest first unless ``reverse``."""
    return list(z.order.islice(start, stop, reverse=reverse))


def _with_scores(s: Session, items: Iterable[tuple[float, bytes]], scores: bool) -> Result:
    """A range reply: members, or with scores member/score pairs (flat in RESP2, pairs of
    member and double in RESP3)."""
    if not scores:
        return [member for _, member in items]
    if s.protocol == 3:
        return [[member, score] for score, member in items]
    out: list[Result] = []
    for score, member in items:
        out += (member, format_score(score))
    return out


# -- ZADD and ZINCRBY ----------------------------------------------------------------------


def _zadd(
    ks: Keyspace,
    s: Session,
    argv: list[bytes],
    j: OpJournal,
    now_ms: int,
    flags: set[bytes],
    at: int,
) -> Result:
    """Redis's ``zaddGenericCommand`` from the first score at ``argv[at]``."""
    key = argv[1]
    rest = argv[at:]
    if not rest or len(rest) % 2:
        raise CommandError(SYNTAX_ERROR)
    nx, xx, gt, lt = (f in flags for f in (b"nx", b"xx", b"gt", b"lt"))
    incr, ch = b"incr" in flags, b"ch" in flags
    if nx and xx:
        raise CommandError("ERR XX and NX options at the same time are not compatible")
    if (gt and nx) or (lt and nx) or (gt and lt):
        raise CommandError("ERR GT, LT, and/or NX options at the same time are not compatible")
    if incr and len(rest) > 2:
        raise CommandError("ERR INCR option supports a single increment-element pair")
    scores = [score_arg(text) for text in rest[::2]]
    members = rest[1::2]
    check_write(ks, key, b"")
    for member in members:
        check_write(ks, key, member)
    found = get_zset(ks, s, key, j, now_ms)
    if found is None and xx:
        return None if incr else 0
    held = {} if found is None else found.scores()
    now: dict[bytes, float] = {}
    changes: list[tuple[bytes, float]] = []
    added = updated = 0
    result: float | None = None
    for score, member in zip(scores, members, strict=True):
        current = now.get(member, held.get(member))
        if current is not None:
            if nx:
                continue
            if incr:
                score += current
                if math.isnan(score):
                    raise CommandError("ERR resulting score is not a number (NaN)")
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
    if changes:
        set_scores(ks, s.bucket, key, found, changes, j)
    if incr:
        return None if result is None else _reply_score(s, result)
    return added + updated if ch else added


@command("zadd", -4, "write", "denyoom", "fast")
def zadd(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    flags: set[bytes] = set()
    at = 2
    while at < len(argv) and (word := argv[at].lower()) in _ZADD_FLAGS:
        flags.add(word)
        at += 1
    return _zadd(ks, s, argv, j, now_ms, flags, at)


_ZADD_FLAGS = frozenset((b"nx", b"xx", b"gt", b"lt", b"ch", b"incr"))


@command("zincrby", 4, "write", "denyoom", "fast")
def zincrby(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _zadd(ks, s, argv, j, now_ms, {b"incr"}, 2)


# -- reads ---------------------------------------------------------------------------------


@command("zcard", 2, "readonly", "fast")
def zcard(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = get_zset(ks, s, argv[1], j, now_ms)
    return 0 if found is None else len(found)


@command("zscore", 3, "readonly", "fast")
def zscore(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = get_zset(ks, s, argv[1], j, now_ms)
    score = None if found is None else found.get(argv[2])
    return None if score is None else _reply_score(s, score)


@command("zmscore", -3, "readonly", "fast")
def zmscore(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = get_zset(ks, s, argv[1], j, now_ms)
    scores = {} if found is None else found.scores()
    out: list[Result] = []
    for member in argv[2:]:
        score = scores.get(member)
        out.append(None if score is None else _reply_score(s, score))
    return out


def _rank(
    ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int, reverse: bool
) -> Result:
    """Redis's ``zrankGenericCommand`` (with 7.2's WITHSCORE)."""
    if len(argv) > 4:
        raise CommandError(SYNTAX_ERROR)
    with_score = len(argv) == 4
    if with_score and argv[3].lower() != b"withscore":
        raise CommandError(SYNTAX_ERROR)
    found = get_zset(ks, s, argv[1], j, now_ms)
    score = None if found is None else found.get(argv[2])
    if found is None or score is None:
        return NULL_ARRAY if with_score else None
    rank = found.order.index((score, argv[2]))
    if reverse:
        rank = len(found) - 1 - rank
    return [rank, _reply_score(s, score)] if with_score else rank


@command("zrank", -3, "readonly", "fast")
def zrank(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _rank(ks, s, argv, j, now_ms, False)


@command("zrevrank", -3, "readonly", "fast")
def zrevrank(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _rank(ks, s, argv, j, now_ms, True)


@command("zcount", 4, "readonly", "fast")
def zcount(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    low, high = _score_bound(argv[2]), _score_bound(argv[3])
    found = get_zset(ks, s, argv[1], j, now_ms)
    if found is None:
        return 0
    start, stop = _score_span(found, low, high)
    return stop - start


@command("zlexcount", 4, "readonly", "fast")
def zlexcount(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    low, high = _lex_bound(argv[2]), _lex_bound(argv[3])
    found = get_zset(ks, s, argv[1], j, now_ms)
    if found is None:
        return 0
    start, stop = _lex_span(found, low, high)
    return stop - start


# -- ZRANGE and its family -------------------------------------------------------------------

RANK, SCORE, LEX = "rank", "score", "lex"


def _range(
    ks: Keyspace,
    s: Session,
    argv: list[bytes],
    j: OpJournal,
    now_ms: int,
    *,
    at: int,
    store: bool,
    by: str | None,
    reverse: bool | None,
) -> tuple[list[tuple[float, bytes]], bool]:
    """Redis's ``zrangeGenericCommand`` from the key at ``argv[at]`` (``by``/``reverse``
    None: chosen by the arguments): the (score, member) items in reply order, and whether
    WITHSCORES was given."""
    key = argv[at]
    scores = limited = False
    offset, limit = 0, -1
    i = at + 3
    while i < len(argv):
        word = argv[i].lower()
        left = len(argv) - i - 1
        if not store and word == b"withscores":
            scores = True
        elif word == b"limit" and left >= 2:
            offset, limit = int_arg(argv[i + 1]), int_arg(argv[i + 2])
            limited = True
            i += 2
        elif reverse is None and word == b"rev":
            reverse = True
        elif by is None and word == b"bylex":
            by = LEX
        elif by is None and word == b"byscore":
            by = SCORE
        else:
            raise CommandError(SYNTAX_ERROR)
        i += 1
    reverse = bool(reverse)
    by = by or RANK
    if limited and by == RANK:
        raise CommandError(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
        )
    if scores and by == LEX:
        raise CommandError("ERR syntax error, WITHSCORES not supported in combination with BYLEX")
    lo_text, hi_text = argv[at + 1], argv[at + 2]
    if reverse and by != RANK:
        lo_text, hi_text = hi_text, lo_text
    if by == RANK:
        first, last = int_arg(lo_text), int_arg(hi_text)
    elif by == SCORE:
        low_score, high_score = _score_bound(lo_text), _score_bound(hi_text)
    else:
        low_lex, high_lex = _lex_bound(lo_text), _lex_bound(hi_text)
    found = get_zset(ks, s, key, j, now_ms)
    if found is None:
        return [], scores
    size = len(found)
    if by == RANK:
        start, stop = _rank_span(found, first, last)
        if reverse:
            start, stop = size - stop, size - start
        return _members_at(found, start, stop, reverse), scores
    if by == SCORE:
        start, stop = _score_span(found, low_score, high_score)
    else:
        start, stop = _lex_span(found, low_lex, high_lex, reverse)
    if offset < 0 or (offset > 0 and offset >= size):
        return [], scores
    if reverse:
        stop -= offset
    else:
        start += offset
    if limit >= 0:
        if reverse:
            start = max(start, stop - limit)
        else:
            stop = min(stop, start + limit)
    if start >= stop:
        return [], scores
    return _members_at(found, start, stop, reverse), scores


def _ranger(name: str, by: str | None, reverse: bool | None) -> Command:
    def handler(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
        items, scores = _range(ks, s, argv, j, now_ms, at=1, store=False, by=by, reverse=reverse)
        return _with_scores(s, items, scores)

    return Command(name, -4, frozenset(("readonly",)), handler)


zrange = _ranger("zrange", None, None)
zrevrange = _ranger("zrevrange", RANK, True)
zrangebyscore = _ranger("zrangebyscore", SCORE, False)
zrevrangebyscore = _ranger("zrevrangebyscore", SCORE, True)
zrangebylex = _ranger("zrangebylex", LEX, False)
zrevrangebylex = _ranger("zrevrangebylex", LEX, True)


def _store(
    ks: Keyspace,
    s: Session,
    target: bytes,
    items: Iterable[tuple[float, bytes]],
    j: OpJournal,
    now_ms: int,
) -> int:
    """A ``*STORE`` result into ``target``, replacing whatever it held; an empty result
    deletes it."""
    check_write(ks, target, b"")
    result = zset_from(((member, score) for score, member in items), ks.epoch)
    if not result:
        if ks.exists(s.bucket, target, now_ms, j):
            ks.remove(s.bucket, target, j)
        return 0
    ks.exists(s.bucket, target, now_ms, j)  # an expired target goes first, as its own removal
    ks.put_container(s.bucket, target, result, None, j)
    return len(result)


@command("zrangestore", -5, "write", "denyoom")
def zrangestore(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    items, _ = _range(ks, s, argv, j, now_ms, at=2, store=True, by=None, reverse=None)
    return _store(ks, s, argv[1], items, j, now_ms)


# -- removals --------------------------------------------------------------------------------


@command("zrem", -3, "write", "fast")
def zrem(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = get_zset(ks, s, argv[1], j, now_ms)
    if found is None:
        return 0
    scores = found.scores()
    present = [member for member in dict.fromkeys(argv[2:]) if member in scores]
    if not present:
        return 0
    return len(remove_members(ks, s.bucket, argv[1], found, present, j))


def _remrange(
    ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int, by: str
) -> Result:
    """Redis's ``zremrangeGenericCommand``: the range parsed before the key is looked at."""
    if by == RANK:
        first, last = int_arg(argv[2]), int_arg(argv[3])
    elif by == SCORE:
        low_score, high_score = _score_bound(argv[2]), _score_bound(argv[3])
    else:
        low_lex, high_lex = _lex_bound(argv[2]), _lex_bound(argv[3])
    found = get_zset(ks, s, argv[1], j, now_ms)
    if found is None:
        return 0
    if by == RANK:
        start, stop = _rank_span(found, first, last)
    elif by == SCORE:
        start, stop = _score_span(found, low_score, high_score)
    else:
        start, stop = _lex_span(found, low_lex, high_lex)
    if start >= stop:
        return 0
    members = [member for _, member in found.order.islice(start, stop)]
    return len(remove_members(ks, s.bucket, argv[1], found, members, j))


@command("zremrangebyrank", 4, "write")
def zremrangebyrank(
    ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int
) -> Result:
    return _remrange(ks, s, argv, j, now_ms, RANK)


@command("zremrangebyscore", 4, "write")
def zremrangebyscore(
    ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int
) -> Result:
    return _remrange(ks, s, argv, j, now_ms, SCORE)


@command("zremrangebylex", 4, "write")
def zremrangebylex(
    ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int
) -> Result:
    return _remrange(ks, s, argv, j, now_ms, LEX)


def _pop(
    ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int, highest: bool
) -> Result:
    """Redis's ``genericZpopCommand``: a flat member/score array, or with a count in RESP3
    an array of pairs."""
    if len(argv) > 3:
        raise CommandError(SYNTAX_ERROR)
    counted = len(argv) == 3
    count = 1
    if counted:
        count = _positive(argv[2])
    found = get_zset(ks, s, argv[1], j, now_ms)  # a count of 0 still checks the type first
    if found is None or count == 0:
        return []
    items = _pop_items(ks, s, argv[1], found, count, highest, j)
    if s.protocol == 3 and counted:
        return [[member, score] for score, member in items]
    out: list[Result] = []
    for score, member in items:
        out += (member, _reply_score(s, score))
    return out


def _pop_items(
    ks: Keyspace, s: Session, key: bytes, found: ZSetValue, count: int, highest: bool,
    j: OpJournal,
) -> list[tuple[float, bytes]]:
    """Remove up to ``count`` of the lowest (or ``highest``) members; their (score, member)."""
    size = len(found)
    take = min(count, size)
    items = (
        _members_at(found, size - take, size, True)
        if highest
        else _members_at(found, 0, take, False)
    )
    remove_members(ks, s.bucket, key, found, [member for _, member in items], j)
    return items


_ZSET_SIDES = (b"min", b"max")
"""ZMPOP's and BZMPOP's ``MIN|MAX``, for ``mpop_args``."""


@command("zmpop", -4, "write")
def zmpop(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``zmpopGenericCommand``: the first sorted set of the keys that exists (one of
    another type is WRONGTYPE), popped from its MIN or MAX end, as [key, [[member, score],
    ...]] in both protocols; a null array if every key is missing."""
    keys, lowest, count = mpop_args(argv, _ZSET_SIDES)
    return _zmpop_from(ks, s, j, now_ms, keys, lowest, count)


def _zmpop_from(
    ks: Keyspace, s: Session, j: OpJournal, now_ms: int, keys: list[bytes], lowest: bool,
    count: int,
) -> Result:
    """ZMPOP's pop once its arguments are parsed (BZMPOP's too, and its wake-ups')."""
    for key in keys:
        found = get_zset(ks, s, key, j, now_ms)
        if found is not None:
            items = _pop_items(ks, s, key, found, count, not lowest, j)
            return [key, [[member, _reply_score(s, score)] for score, member in items]]
    return NULL_ARRAY


def _positive(text: bytes) -> int:
    """``getPositiveLongFromObjectOrReply``."""
    try:
        value = int_arg(text)
    except CommandError:
        raise CommandError("ERR value is out of range, must be positive") from None
    if value < 0:
        raise CommandError("ERR value is out of range, must be positive")
    return value


@command("zpopmin", -2, "write", "fast")
def zpopmin(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _pop(ks, s, argv, j, now_ms, False)


@command("zpopmax", -2, "write", "fast")
def zpopmax(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _pop(ks, s, argv, j, now_ms, True)


def _blocking_pop(
    ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int, highest: bool
) -> Result:
    """Redis's ``bzpopMinMaxCommand``: [key, member, score] of the first non-empty sorted
    set."""
    return pop_first(
        argv, now_ms, ZSetValue, lambda key: get_zset(ks, s, key, j, now_ms),
        lambda key, _: _pop(ks, s, [argv[0], key], j, now_ms, highest),  # type: ignore[arg-type,return-value]
    )


@command("bzmpop", -5, "write", "blocking")
def bzmpop(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``bzmpopCommand``: ZMPOP, or block (see ``blocking_mpop``)."""
    return blocking_mpop(
        argv, now_ms, _ZSET_SIDES, ZSetValue,
        lambda keys, lowest, count: _zmpop_from(ks, s, j, now_ms, keys, lowest, count),
    )  # fmt: skip


@command("bzpopmin", -3, "write", "fast", "blocking")
def bzpopmin(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _blocking_pop(ks, s, argv, j, now_ms, False)


@command("bzpopmax", -3, "write", "fast", "blocking")
def bzpopmax(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _blocking_pop(ks, s, argv, j, now_ms, True)


# -- random picks and scans -------------------------------------------------------------------


@command("zrandmember", -2, "readonly")
def zrandmember(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``zrandmemberCommand``: the count parsed before the WITHSCORES word."""
    if len(argv) >= 3:
        count = random_count(argv[2])
        scores = len(argv) == 4
        if len(argv) > 4 or (scores and argv[3].lower() != b"withscores"):
            raise CommandError(SYNTAX_ERROR)
        if scores and not -(LONG_MAX // 2) <= count <= LONG_MAX // 2:
            raise CommandError("ERR value is out of range")
        found = get_zset(ks, s, argv[1], j, now_ms)
        if found is None or count == 0:
            return []
        if count < 0:
            members = pick_repeated(found, -count, ks.rng)
        elif count >= len(found):  # the whole set, highest first as Redis 7.0 answers it
            members = [member for _, member in found.order.islice(reverse=True)]
        else:
            members = pick_distinct(found, count, ks.rng)
        held = found.scores()
        return _with_scores(s, [(held[m], m) for m in members], scores)
    found = get_zset(ks, s, argv[1], j, now_ms)
    return None if found is None else pick_distinct(found, 1, ks.rng)[0]


@command("zscan", -3, "readonly")
def zscan(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """ZSCAN: a listpack whole in one step (in rank order, as Redis walks it), a skiplist by
    the container's ``ScanIndex``; scores as bulk strings in either protocol, as Redis."""
    cursor = scan_cursor(argv[2])
    found = get_zset(ks, s, argv[1], j, now_ms)
    if found is None:
        return [b"0", []]
    count, pattern, _ = scan_options(argv, 3, hash_=False)
    if found.encoding is SKIPLIST:
        next_cursor, page = index_of(found).page(cursor, count)
    else:
        next_cursor, page = 0, [member for _, member in found.order]
    if pattern is not None:
        matches = compile_glob(pattern)
        page = [member for member in page if matches(member)]
    scores = found.scores()
    out: list[Result] = []
    for member in page:
        out += (member, format_score(scores[member]))
    return [b"%d" % next_cursor, out]


# -- ZUNIONSTORE, ZINTERSTORE, ZDIFFSTORE and their reply forms ---------------------------------

UNION, INTER, DIFF = "union", "inter", "diff"


def _aggregate(how: bytes, old: float, new: float) -> float:
    """``zunionInterAggregate``: a NaN sum (inf + -inf) is 0."""
    if how == b"sum":
        total = old + new
        return 0.0 if math.isnan(total) else total
    return min(old, new) if how == b"min" else max(old, new)


def _combine(
    ks: Keyspace,
    s: Session,
    argv: list[bytes],
    j: OpJournal,
    now_ms: int,
    op: str,
    store: bool,
    card: bool = False,
) -> tuple[list[tuple[float, bytes]], bool, int]:
    """Redis's ``zunionInterDiffGenericCommand``: the result in rank order, whether
    WITHSCORES was given, and ZINTERCARD's LIMIT (``card``: 0 is none). Sets count as sorted
    sets of score 1."""
    at = 2 if store else 1
    name = argv[0].decode("utf-8", "replace").lower()
    setnum = int_arg(argv[at])
    if setnum < 1:
        raise CommandError(f"ERR at least 1 input key is needed for '{name}' command")
    if setnum > len(argv) - (at + 1):
        raise CommandError(SYNTAX_ERROR)
    keys = argv[at + 1 : at + 1 + setnum]
    sources: list[Mapping[bytes, float] | None] = []
    for key in keys:
        value = ks.value(s.bucket, key, now_ms, j)
        if value is None:
            sources.append(None)
        elif type(value) is ZSetValue:
            sources.append(value.scores())
        elif type(value) is SetValue:
            sources.append(dict.fromkeys(value, 1.0))
        else:
            raise WrongTypeError
    weights = [1.0] * setnum
    how, scores, limit = b"sum", False, 0
    i = at + 1 + setnum
    while i < len(argv):
        word, left = argv[i].lower(), len(argv) - i
        if op != DIFF and not card and left >= setnum + 1 and word == b"weights":
            for n in range(setnum):
                weight = _strtod(argv[i + 1 + n], space=False)
                if weight is None:
                    raise CommandError("ERR weight value is not a float")
                weights[n] = weight
            i += setnum + 1
        elif op != DIFF and not card and left >= 2 and word == b"aggregate":
            how = argv[i + 1].lower()
            if how not in (b"sum", b"min", b"max"):
                raise CommandError(SYNTAX_ERROR)
            i += 2
        elif not store and not card and word == b"withscores":
            scores = True
            i += 1
        elif card and left >= 2 and word == b"limit":
            limit = _limit(argv[i + 1])
            i += 2
        else:
            raise CommandError(SYNTAX_ERROR)
    result: dict[bytes, float] = {}
    if op == DIFF:
        first = sources[0]
        if first is not None:
            others = [other for other in sources[1:] if other is not None]
            result = {m: sc for m, sc in first.items() if not any(m in o for o in others)}
    elif op == INTER:
        if all(src is not None for src in sources):
            ordered = sorted(range(setnum), key=lambda n: len(sources[n]))  # type: ignore[arg-type]
            smallest = ordered[0]
            for member, score in sources[smallest].items():  # type: ignore[union-attr]
                total = _weighted(score, weights[smallest])
                for n in ordered[1:]:
                    other = sources[n].get(member)  # type: ignore[union-attr]
                    if other is None:
                        break
                    total = _aggregate(how, total, _weighted(other, weights[n]))
                else:
                    result[member] = total
    else:
        for n, src in enumerate(sources):
            if src is None:
                continue
            for member, score in src.items():
                weighted = _weighted(score, weights[n])
                old = result.get(member)
                result[member] = weighted if old is None else _aggregate(how, old, weighted)
    return sorted((score, member) for member, score in result.items()), scores, limit


def _limit(text: bytes) -> int:
    """ZINTERCARD's LIMIT: ``getPositiveLongFromObjectOrReply`` with its own wording."""
    try:
        value = int_arg(text)
    except CommandError:
        value = -1
    if value < 0:
        raise CommandError("ERR LIMIT can't be negative")
    return value


def _weighted(score: float, weight: float) -> float:
    value = score * weight
    return 0.0 if math.isnan(value) else value


def _combiner(name: str, op: str, store: bool) -> Command:
    def handler(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
        items, scores, _ = _combine(ks, s, argv, j, now_ms, op, store)
        if store:
            return _store(ks, s, argv[1], items, j, now_ms)
        return _with_scores(s, items, scores)

    flags = ("write", "denyoom") if store else ("readonly",)
    return Command(name, -4 if store else -3, frozenset(flags), handler)


zunionstore = _combiner("zunionstore", UNION, True)
zinterstore = _combiner("zinterstore", INTER, True)
zdiffstore = _combiner("zdiffstore", DIFF, True)
zunion = _combiner("zunion", UNION, False)
zinter = _combiner("zinter", INTER, False)
zdiff = _combiner("zdiff", DIFF, False)


@command("zintercard", -3, "readonly")
def zintercard(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``zinterCardCommand``: ZINTER's count, at most LIMIT (0: no limit)."""
    items, _, limit = _combine(ks, s, argv, j, now_ms, INTER, False, card=True)
    return min(len(items), limit) if limit else len(items)


COMMANDS: list[Command] = [
    zrandmember, zscan, zunionstore, zinterstore, zdiffstore, zunion, zinter, zdiff,
    zadd, zincrby, zcard, zscore, zmscore, zrank, zrevrank, zcount, zlexcount, zrange,
    zrevrange, zrangebyscore, zrevrangebyscore, zrangebylex, zrevrangebylex, zrangestore,
    zrem, zremrangebyrank, zremrangebyscore, zremrangebylex, zpopmin, zpopmax, zmpop, bzpopmin,
    bzpopmax, zintercard, bzmpop,
]  # fmt: skip
