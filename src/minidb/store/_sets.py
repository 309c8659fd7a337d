"""The set commands: SADD and SREM, membership, SPOP and SRANDMEMBER, the algebra (SINTER,
SUNION, SDIFF, their STORE forms, SINTERCARD), SMOVE, SSCAN.

Each handler follows its original in Redis's ``t_set.c``: the same order of checks, replies
and error texts. Replies that Redis sends as a set (SMEMBERS, SINTER, SUNION, SDIFF, SPOP with
a count) are a set in RESP3 and an array in RESP2, in Redis's order where it has one (an
intset's members sorted by value). A set is a ``SetValue`` (``_values``); a change is journaled
as its effect: ``AddElements`` of the members added, ``RemoveElements`` of those removed (an
emptied set is deleted by it), a ``PutContainer`` of a ``*STORE`` result, ``Remove`` when SPOP
takes the whole set.
"""

from __future__ import annotations

from collections.abc import Iterable

from minidb.store._args import Command, Session, check_write, command, int_arg
from minidb.store._elementscan import (
    LONG_MAX,
    pick_distinct,
    pick_repeated,
    random_count,
    scan_cursor,
    scan_elements,
    scan_options,
)
from minidb.store._journal import MembersUndo, OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._results import SYNTAX_ERROR, CommandError, Result
from minidb.store._values import SetValue, new_set, set_add, set_from, set_members, set_remove
from minidb.wal._ops import KIND_SET, AddElements, RemoveElements


def _get(ks: Keyspace, s: Session, key: bytes, j: OpJournal, now_ms: int) -> SetValue | None:
    return ks.container(s.bucket, key, SetValue, now_ms, j)


def _reply(s: Session, members: Iterable[bytes], ordered: bool = False) -> Result:
    """A reply Redis sends as a set: a set in RESP3, an array in RESP2 in Redis's order (an
    intset's members by value; ``ordered``: the members are already in it)."""
    if s.protocol == 3:
        return set(members)
    if ordered:
        return list(members)
    return list(set_members(set_from(members, 0)))


def _add(
    ks: Keyspace, s: Session, key: bytes, found: SetValue | None, members: list[bytes], j: OpJournal
) -> list[bytes]:
    """SADD's change: the members added (none if all were there), journaled."""
    if found is not None and all(member in found for member in members):
        return []
    hint = len(members)
    target = ks.for_change(s.bucket, key, found, lambda e: new_set(members[0], hint, e), j)
    encoding = target.encoding
    added = set_add(target, members, hint)
    j.undo.append(MembersUndo(s.bucket, key, encoding, added, []))
    j.add(AddElements(s.bucket, key, KIND_SET, tuple(added)))
    return added


def _remove(
    ks: Keyspace, s: Session, key: bytes, found: SetValue, members: Iterable[bytes], j: OpJournal
) -> list[bytes]:
    """Remove ``members`` from the set ``found`` at ``key`` (each present); journaled, and the
    key deleted if that emptied it."""
    target = ks.for_change(s.bucket, key, found, lambda e: new_set(b"", 0, e), j)
    encoding = target.encoding
    removed = set_remove(target, members)
    j.undo.append(MembersUndo(s.bucket, key, encoding, [], removed))
    j.add(RemoveElements(s.bucket, key, KIND_SET, tuple(removed)))
    if not target:
        ks.drop_empty(s.bucket, key, j)
    return removed


@command("sadd", -3, "write", "fast")
def sadd(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    check_write(ks, argv[1], b"")
    for member in argv[2:]:
        check_write(ks, argv[1], member)
    found = _get(ks, s, argv[1], j, now_ms)
    return len(_add(ks, s, argv[1], found, argv[2:], j))


@command("srem", -3, "write", "fast")
def srem(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = _get(ks, s, argv[1], j, now_ms)
    if found is None:
        return 0
    present = [member for member in dict.fromkeys(argv[2:]) if member in found]
    if not present:
        return 0
    return len(_remove(ks, s, argv[1], found, present, j))


@command("smembers", 2, "readonly")
def smembers(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = _get(ks, s, argv[1], j, now_ms)
    if found is None:
        return _reply(s, [], ordered=True)
    return _reply(s, set_members(found), ordered=True)


@command("sismember", 3, "readonly", "fast")
def sismember(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = _get(ks, s, argv[1], j, now_ms)
    return int(found is not None and argv[2] in found)


@command("smismember", -3, "readonly", "fast")
def smismember(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = _get(ks, s, argv[1], j, now_ms)
    return [int(found is not None and member in found) for member in argv[2:]]


@command("scard", 2, "readonly", "fast")
def scard(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = _get(ks, s, argv[1], j, now_ms)
    return 0 if found is None else len(found)


@command("spop", -2, "write", "fast")
def spop(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``spopCommand``: one random member (null for a missing key), or with a count
    that many distinct ones as a set; the whole set when the count reaches its size, which
    deletes the key (journaled as one ``Remove``, as Redis propagates a DEL)."""
    if len(argv) > 3:
        raise CommandError(SYNTAX_ERROR)
    if len(argv) == 3:
        count = int_arg(argv[2])
        if count < 0:
            raise CommandError("ERR value is out of range, must be positive")
        found = _get(ks, s, argv[1], j, now_ms)
        if found is None or count == 0:
            return _reply(s, [], ordered=True)
        if count >= len(found):
            members = set_members(found)
            ks.remove(s.bucket, argv[1], j)
            return _reply(s, members, ordered=True)
        popped = pick_distinct(found, count, ks.rng)
        return _reply(s, _remove(ks, s, argv[1], found, popped, j))
    found = _get(ks, s, argv[1], j, now_ms)
    if found is None:
        return None
    return _remove(ks, s, argv[1], found, pick_distinct(found, 1, ks.rng), j)[0]


@command("srandmember", -2, "readonly")
def srandmember(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    if len(argv) > 3:
        raise CommandError(SYNTAX_ERROR)
    if len(argv) == 3:
        count = random_count(argv[2])
        found = _get(ks, s, argv[1], j, now_ms)
        if found is None or count == 0:
            return []
        if count < 0:
            return list(pick_repeated(found, -count, ks.rng))
        if count >= len(found):
            return list(set_members(found))
        return list(pick_distinct(found, count, ks.rng))
    found = _get(ks, s, argv[1], j, now_ms)
    return None if found is None else pick_distinct(found, 1, ks.rng)[0]


def _sets(
    ks: Keyspace, s: Session, keys: list[bytes], j: OpJournal, now_ms: int
) -> list[SetValue | None]:
    """The sets at ``keys`` (None for a missing one), every key checked for its type first."""
    return [_get(ks, s, key, j, now_ms) for key in keys]


def _inter(sets: list[SetValue | None], limit: int = 0) -> list[bytes]:
    """The intersection, iterating the smallest set (Redis's order); stops at ``limit``."""
    if not sets or any(found is None for found in sets):
        return []
    ordered = sorted(sets, key=len)  # type: ignore[arg-type]
    first, rest = ordered[0], ordered[1:]
    result = []
    for member in set_members(first):  # type: ignore[arg-type]
        if all(member in other for other in rest):  # type: ignore[operator]
            result.append(member)
            if limit and len(result) >= limit:
                break
    return result


def _union(sets: list[SetValue | None]) -> list[bytes]:
    members: dict[bytes, None] = {}
    for found in sets:
        if found is not None:
            members.update(dict.fromkeys(found))
    return list(members)


def _diff(sets: list[SetValue | None]) -> list[bytes]:
    first = sets[0]
    if first is None:
        return []
    others = [other for other in sets[1:] if other is not None]
    if any(other is first for other in others):
        return []
    return [member for member in first if not any(member in other for other in others)]


def _store(
    ks: Keyspace, s: Session, target: bytes, members: list[bytes], j: OpJournal, now_ms: int
) -> int:
    """A ``*STORE`` result into ``target``, replacing whatever it held (Redis's ``setKey``); an
    empty result deletes it."""
    check_write(ks, target, b"")
    if not members:
        if ks.exists(s.bucket, target, now_ms, j):
            ks.remove(s.bucket, target, j)
        return 0
    ks.exists(s.bucket, target, now_ms, j)  # an expired target goes first, as its own removal
    ks.put_container(s.bucket, target, set_from(members, ks.epoch), None, j)
    return len(members)


@command("sinter", -2, "readonly")
def sinter(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _reply(s, _inter(_sets(ks, s, argv[1:], j, now_ms)), ordered=True)


@command("sinterstore", -3, "write", "denyoom")
def sinterstore(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _store(ks, s, argv[1], _inter(_sets(ks, s, argv[2:], j, now_ms)), j, now_ms)


@command("sunion", -2, "readonly")
def sunion(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _reply(s, _union(_sets(ks, s, argv[1:], j, now_ms)))


@command("sunionstore", -3, "write", "denyoom")
def sunionstore(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _store(ks, s, argv[1], _union(_sets(ks, s, argv[2:], j, now_ms)), j, now_ms)


@command("sdiff", -2, "readonly")
def sdiff(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _reply(s, _diff(_sets(ks, s, argv[1:], j, now_ms)))


@command("sdiffstore", -3, "write", "denyoom")
def sdiffstore(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _store(ks, s, argv[1], _diff(_sets(ks, s, argv[2:], j, now_ms)), j, now_ms)


@command("sintercard", -3, "readonly")
def sintercard(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``sinterCardCommand``: numkeys, then the keys, then LIMIT."""
    try:
        numkeys = int_arg(argv[1])
    except CommandError:
        numkeys = 0
    if not 1 <= numkeys <= LONG_MAX:
        raise CommandError("ERR numkeys should be greater than 0")
    if numkeys > len(argv) - 2:
        raise CommandError("ERR Number of keys can't be greater than number of args")
    limit = 0
    i = 2 + numkeys
    while i < len(argv):
        if argv[i].lower() == b"limit" and i + 1 < len(argv):
            try:
                limit = int_arg(argv[i + 1])
            except CommandError:
                limit = -1
            if limit < 0:
                raise CommandError("ERR LIMIT can't be negative")
            i += 2
        else:
            raise CommandError(SYNTAX_ERROR)
    return len(_inter(_sets(ks, s, argv[2 : 2 + numkeys], j, now_ms), limit))


@command("smove", 4, "write", "fast")
def smove(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``smoveCommand``: a missing source is 0 before any type is checked."""
    source_key, target_key, member = argv[1], argv[2], argv[3]
    source = ks.value(s.bucket, source_key, now_ms, j)
    target = ks.value(s.bucket, target_key, now_ms, j)
    if source is None:
        return 0
    if type(source) is not SetValue or (target is not None and type(target) is not SetValue):
        source = _get(ks, s, source_key, j, now_ms)  # raises WRONGTYPE
        _get(ks, s, target_key, j, now_ms)
    assert type(source) is SetValue
    if source_key == target_key:
        return int(member in source)
    if member not in source:
        return 0
    check_write(ks, target_key, member)
    _remove(ks, s, source_key, source, [member], j)
    _add(ks, s, target_key, _get(ks, s, target_key, j, now_ms), [member], j)
    return 1


@command("sscan", -3, "readonly")
def sscan(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    cursor = scan_cursor(argv[2])
    found = _get(ks, s, argv[1], j, now_ms)
    if found is None:
        return [b"0", []]
    count, pattern, _ = scan_options(argv, 3, hash_=False)
    return scan_elements(found, cursor, count, pattern, False)


COMMANDS: list[Command] = [
    sadd, srem, smembers, sismember, smismember, scard, spop, srandmember, sinter, sinterstore,
    sunion, sunionstore, sdiff, sdiffstore, sintercard, smove, sscan,
]  # fmt: skip
