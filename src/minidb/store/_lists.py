"""The list commands: pushes, pops, LRANGE and friends, LMOVE, LMPOP and their blocking forms.

Each handler follows its original in Redis's ``t_list.c``: the same order of checks (an
argument that does not parse is refused before the key is looked at where Redis does so, a key
of another type answers ``WRONGTYPE``), the same replies and the same error texts. A list is a
``ListValue`` (``_values``); every change is the log op that is its effect (``ListPush``,
``ListPop``, ``ListSet``, ``ListInsert``, ``ListRemove``: by position, never a command),
applied through ``Keyspace.change_list`` exactly as replay applies it, so the encoding
converts alike in both and a list it empties is deleted. ``LMOVE`` is a pop and a push in one
record; ``LTRIM`` pops from each side.

Every push goes through ``push``. Blocked clients (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP)
are woken by the keyspace's touch of the key (``_blocking``), whatever wrote it; their handlers
here are the non-blocking forms that raise ``WouldBlock`` when every key is empty, after
checking their arguments in Redis's order (the timeout first).

Known difference: Redis converts a listpack to a quicklist before LINSERT looks for its pivot
and before LSET checks its index, so a LINSERT of a long element that finds no pivot (or an
LSET out of range) can leave Redis's list a quicklist, unchanged otherwise; minidb changes
nothing then (nothing is logged for a command that changes no element).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice

from minidb.protocol._results import NULL_ARRAY
from minidb.store._args import Command, Session, check_write, command, int_arg
from minidb.store._blocking import WouldBlock, parse_timeout, pop_first
from minidb.store._elementscan import LONG_MAX
from minidb.store._journal import OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._results import (
    NO_SUCH_KEY,
    OK,
    SYNTAX_ERROR,
    CommandError,
    Result,
    wrong_arity,
)
from minidb.store._values import ListValue, list_find
from minidb.wal._ops import ListInsert, ListPop, ListPush, ListRemove, ListSet

OUT_OF_RANGE = "ERR index out of range"
MUST_BE_POSITIVE = "ERR value is out of range, must be positive"
RANK_ZERO = (
    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... "
    "or use negative to start from the end of the list"
)
_LONG_RANGE = f"ERR value is out of range, value must between {-LONG_MAX} and {LONG_MAX}"


def _get(ks: Keyspace, s: Session, key: bytes, j: OpJournal, now_ms: int) -> ListValue | None:
    return ks.container(s.bucket, key, ListValue, now_ms, j)


def _long(text: bytes, low: int, message: str | None = None) -> int:
    """Redis's ``getRangeLongFromObjectOrReply`` from ``low`` to LONG_MAX: ``message`` (else
    the generic wording) for a number out of range, and for no number at all if given."""
    try:
        value = int_arg(text)
    except CommandError:
        if message is None:
            raise
        raise CommandError(message) from None
    if not low <= value <= LONG_MAX:
        raise CommandError(message or _LONG_RANGE)
    return value


def _side(text: bytes) -> bool:
    """LEFT (True) or RIGHT (False), Redis's ``getListPositionFromObjectOrReply``."""
    word = text.lower()
    if word == b"left":
        return True
    if word == b"right":
        return False
    raise CommandError(SYNTAX_ERROR)


def push(
    ks: Keyspace,
    s: Session,
    key: bytes,
    found: ListValue | None,
    left: bool,
    elements: tuple[bytes, ...],
    j: OpJournal,
) -> int:
    """Push ``elements`` at one end of the list at ``key`` (created if ``found`` is None);
    journaled. The list's length after. Every push of every command comes here."""
    return len(ks.change_list(s.bucket, key, found, ListPush(s.bucket, key, left, elements), j))


def _pop(
    ks: Keyspace, s: Session, key: bytes, found: ListValue, left: bool, n: int, j: OpJournal
) -> list[Result]:
    """Take ``n`` (1 to the length) elements off one end, in the order taken; journaled."""
    items = found.items
    taken: list[Result] = list(islice(items if left else reversed(items), n))
    ks.change_list(s.bucket, key, found, ListPop(s.bucket, key, left, n), j)
    return taken


def _push_command(
    ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int, left: bool, xx: bool
) -> Result:
    """Redis's ``pushGenericCommand``."""
    key = argv[1]
    check_write(ks, key, b"")
    for element in argv[2:]:
        check_write(ks, key, element)
    found = _get(ks, s, key, j, now_ms)
    if found is None and xx:
        return 0
    return push(ks, s, key, found, left, tuple(argv[2:]), j)


def _pusher(name: str, left: bool, xx: bool) -> Command:
    """LPUSH, RPUSH and their X forms (only onto an existing list)."""

    def handler(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
        return _push_command(ks, s, argv, j, now_ms, left, xx)

    return command(name, -3, "write", "fast")(handler)


lpush, rpush = _pusher("lpush", True, False), _pusher("rpush", False, False)
lpushx, rpushx = _pusher("lpushx", True, True), _pusher("rpushx", False, True)


def _pop_command(
    ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int, left: bool
) -> Result:
    """Redis's ``popGenericCommand``: one element (null for a missing key), or with a count
    up to that many as an array (a null array for a missing key, empty for a count of 0)."""
    if len(argv) > 3:
        raise CommandError(wrong_arity(argv[0].decode().lower()))
    count = _long(argv[2], 0, MUST_BE_POSITIVE) if len(argv) == 3 else None
    found = _get(ks, s, argv[1], j, now_ms)
    if found is None:
        return None if count is None else NULL_ARRAY
    if count is None:
        return _pop(ks, s, argv[1], found, left, 1, j)[0]
    if count == 0:
        return []
    return _pop(ks, s, argv[1], found, left, min(count, len(found)), j)


def _popper(name: str, left: bool) -> Command:
    def handler(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
        return _pop_command(ks, s, argv, j, now_ms, left)

    return command(name, -2, "write", "fast")(handler)


lpop, rpop = _popper("lpop", True), _popper("rpop", False)


@command("llen", 2, "readonly", "fast")
def llen(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = _get(ks, s, argv[1], j, now_ms)
    return 0 if found is None else len(found)


def _range(size: int, start: int, end: int) -> tuple[int, int]:
    """Redis's ``addListRangeReply`` / ``ltrimCommand`` bounds: (first, count), count 0 for
    an empty range."""
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = max(start, 0)
    if start > end or start >= size:
        return 0, 0
    return start, min(end, size - 1) - start + 1


@command("lrange", 4, "readonly")
def lrange(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    start, end = int_arg(argv[2]), int_arg(argv[3])
    found = _get(ks, s, argv[1], j, now_ms)
    if found is None:
        return []
    items = found.items
    first, count = _range(len(items), start, end)
    if type(items) is list:  # a listpack: a slice
        return items[first : first + count]  # type: ignore[return-value]
    if first > len(items) // 2:  # a deque walks from the nearer end
        tail = len(items) - first - count
        taken: list[Result] = list(islice(reversed(items), tail, tail + count))
        return taken[::-1]
    return list(islice(items, first, first + count))


@command("lindex", 3, "readonly")
def lindex(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = _get(ks, s, argv[1], j, now_ms)
    if found is None:
        return None
    index = int_arg(argv[2])
    if index < 0:
        index += len(found)
    return found.items[index] if 0 <= index < len(found.items) else None


@command("lset", 4, "write")
def lset(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = _get(ks, s, argv[1], j, now_ms)
    if found is None:
        raise CommandError(NO_SUCH_KEY)
    index = int_arg(argv[2])
    check_write(ks, argv[1], argv[3])
    if index < 0:
        index += len(found)
    if not 0 <= index < len(found):
        raise CommandError(OUT_OF_RANGE)
    ks.change_list(s.bucket, argv[1], found, ListSet(s.bucket, argv[1], index, argv[3]), j)
    return OK


@command("linsert", 5, "write")
def linsert(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    where = argv[2].lower()
    if where not in (b"before", b"after"):
        raise CommandError(SYNTAX_ERROR)
    found = _get(ks, s, argv[1], j, now_ms)
    if found is None:
        return 0
    check_write(ks, argv[1], argv[4])
    at = list_find(found, argv[3], 1)
    if not at:
        return -1
    position = at[0] + (where == b"after")
    op = ListInsert(s.bucket, argv[1], position, argv[4])
    return len(ks.change_list(s.bucket, argv[1], found, op, j))


@command("lrem", 4, "write")
def lrem(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``lremCommand`` (7.2: any long; 7.4 refuses LONG_MIN): logged as the
    occurrences it really removed, from its end."""
    count = int_arg(argv[2])
    found = _get(ks, s, argv[1], j, now_ms)
    if found is None:
        return 0
    removed = len(list_find(found, argv[3], count))
    if removed:
        n = -removed if count < 0 else removed
        ks.change_list(s.bucket, argv[1], found, ListRemove(s.bucket, argv[1], n, argv[3]), j)
    return removed


@command("ltrim", 4, "write")
def ltrim(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``ltrimCommand``: a pop from each side it trims; a trim to nothing deletes
    the key (one ``Remove``)."""
    start, end = int_arg(argv[2]), int_arg(argv[3])
    found = _get(ks, s, argv[1], j, now_ms)
    if found is None:
        return OK
    size = len(found)
    first, count = _range(size, start, end)
    if count == 0:
        ks.remove(s.bucket, argv[1], j)
        return OK
    if first:
        _pop(ks, s, argv[1], found, True, first, j)
    if size - first - count:
        found = _get(ks, s, argv[1], j, now_ms)
        assert found is not None
        _pop(ks, s, argv[1], found, False, size - first - count, j)
    return OK


@command("lpos", -3, "readonly")
def lpos(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``lposCommand``: options parsed before the key is looked at."""
    rank, count, maxlen = 1, -1, 0
    at = 3
    while at < len(argv):
        option = argv[at].lower()
        more = at + 1 < len(argv)
        if option == b"rank" and more:
            rank = _long(argv[at + 1], -LONG_MAX)
            if rank == 0:
                raise CommandError(RANK_ZERO)
        elif option == b"count" and more:
            count = _long(argv[at + 1], 0, "ERR COUNT can't be negative")
        elif option == b"maxlen" and more:
            maxlen = _long(argv[at + 1], 0, "ERR MAXLEN can't be negative")
        else:
            raise CommandError(SYNTAX_ERROR)
        at += 2
    found = _get(ks, s, argv[1], j, now_ms)
    if found is None:
        return None if count == -1 else []
    element, size = argv[2], len(found.items)
    items = reversed(found.items) if rank < 0 else iter(found.items)
    if maxlen:
        items = islice(items, maxlen)
    skip, matches = abs(rank) - 1, list[Result]()
    for index, item in enumerate(items):
        if item == element:
            if skip:
                skip -= 1
                continue
            matches.append(size - index - 1 if rank < 0 else index)
            if len(matches) == count or count == -1:
                break
    if count == -1:
        return matches[0] if matches else None
    return matches


def _move(
    ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int, left: bool, to: bool
) -> Result:
    """Redis's ``lmoveGenericCommand``: one record of a pop and a push."""
    source_key, target_key = argv[1], argv[2]
    source = _get(ks, s, source_key, j, now_ms)
    if source is None:
        return None
    target = _get(ks, s, target_key, j, now_ms)
    element = source.items[0] if left else source.items[-1]
    if source_key == target_key:
        if len(source.items) == 1:
            return element  # a rotation of one element changes nothing
        _pop(ks, s, source_key, source, left, 1, j)
        push(ks, s, target_key, source, to, (element,), j)
        return element
    _pop(ks, s, source_key, source, left, 1, j)
    push(ks, s, target_key, target, to, (element,), j)
    return element


@command("lmove", 5, "write")
def lmove(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    left, to = _side(argv[3]), _side(argv[4])
    return _move(ks, s, argv, j, now_ms, left, to)


@command("rpoplpush", 3, "write")
def rpoplpush(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _move(ks, s, argv, j, now_ms, False, True)


_LIST_SIDES = (b"left", b"right")


def mpop_args(
    argv: list[bytes], sides: tuple[bytes, bytes] = _LIST_SIDES
) -> tuple[list[bytes], bool, int]:
    """LMPOP's ``numkeys key... LEFT|RIGHT [COUNT n]`` (from ``argv[1]``), checked in Redis's
    order: keys, whether the side is the first of ``sides``, count. ZMPOP's is the same with
    ``MIN|MAX``."""
    numkeys = _long(argv[1], 1, "ERR numkeys should be greater than 0")
    where_at = 1 + numkeys + 1
    if where_at >= len(argv):
        raise CommandError(SYNTAX_ERROR)
    where = argv[where_at].lower()
    if where not in sides:
        raise CommandError(SYNTAX_ERROR)
    count = -1
    at = where_at + 1
    while at < len(argv):
        if count == -1 and argv[at].lower() == b"count" and at + 1 < len(argv):
            count = _long(argv[at + 1], 1, "ERR count should be greater than 0")
            at += 2
        else:
            raise CommandError(SYNTAX_ERROR)
    return argv[2:where_at], where == sides[0], max(count, 1)


def blocking_mpop(
    argv: list[bytes],
    now_ms: int,
    sides: tuple[bytes, bytes],
    kind: type,
    pop_from: Callable[[list[bytes], bool, int], Result],
) -> Result:
    """BLMPOP's and BZMPOP's ``timeout numkeys key... <side> [COUNT n]`` (Redis's
    ``blmpopCommand``, ``bzmpopCommand``): the arguments after the timeout checked first, by
    ``mpop_args`` (its errors win over the timeout's), then the timeout; then what
    ``pop_from(keys, first side, count)`` pops, or block on the keys while it finds nothing
    (its null array)."""
    keys, first, count = mpop_args(argv[1:], sides)
    timeout = parse_timeout(argv[1], now_ms)
    result = pop_from(keys, first, count)
    if result is NULL_ARRAY:
        raise WouldBlock(tuple(keys), timeout, kind, NULL_ARRAY)
    return result


def _lmpop_from(
    ks: Keyspace, s: Session, j: OpJournal, now_ms: int, keys: list[bytes], left: bool, count: int
) -> Result:
    for key in keys:
        found = _get(ks, s, key, j, now_ms)
        if found is not None:
            return [key, _pop(ks, s, key, found, left, min(count, len(found)), j)]
    return NULL_ARRAY


@command("lmpop", -4, "write")
def lmpop(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``lmpopGenericCommand``: the first non-empty list of the keys, popped from one
    side, as [key, elements]; a null array if every key is missing."""
    keys, left, count = mpop_args(argv)
    return _lmpop_from(ks, s, j, now_ms, keys, left, count)


def _blocking_pop(
    ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int, left: bool
) -> Result:
    """Redis's ``blockingPopGenericCommand``: [key, element] of the first non-empty list."""
    return pop_first(
        argv, now_ms, ListValue, lambda key: _get(ks, s, key, j, now_ms),
        lambda key, found: _pop(ks, s, key, found, left, 1, j),
    )


@command("blpop", -3, "write", "blocking")
def blpop(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _blocking_pop(ks, s, argv, j, now_ms, True)


@command("brpop", -3, "write", "blocking")
def brpop(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _blocking_pop(ks, s, argv, j, now_ms, False)


def _blocking_move(
    ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int, left: bool, to: bool
) -> Result:
    """Redis's ``blmoveGenericCommand``: LMOVE, or block on the source (its null where it may
    not block)."""
    timeout = parse_timeout(argv[-1], now_ms)
    if _get(ks, s, argv[1], j, now_ms) is None:
        raise WouldBlock((argv[1],), timeout, ListValue, None)
    return _move(ks, s, argv, j, now_ms, left, to)


@command("blmove", 6, "write", "denyoom", "blocking")
def blmove(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    left, to = _side(argv[3]), _side(argv[4])
    return _blocking_move(ks, s, argv, j, now_ms, left, to)


@command("brpoplpush", 4, "write", "denyoom", "blocking")
def brpoplpush(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _blocking_move(ks, s, argv, j, now_ms, False, True)


@command("blmpop", -5, "write", "blocking")
def blmpop(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``blmpopCommand``: LMPOP, or block (see ``blocking_mpop``)."""
    return blocking_mpop(
        argv, now_ms, _LIST_SIDES, ListValue,
        lambda keys, left, count: _lmpop_from(ks, s, j, now_ms, keys, left, count),
    )  # fmt: skip


COMMANDS: list[Command] = [
    lpush, rpush, lpushx, rpushx, lpop, rpop, llen, lrange, lindex, lset, linsert, lrem, ltrim,
    lpos, lmove, rpoplpush, lmpop, blpop, brpop, blmove, brpoplpush, blmpop,
]  # fmt: skip
