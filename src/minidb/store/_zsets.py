"""The sorted-set commands.

Each handler follows its original in Redis's ``t_zset.c``: the same order of checks, replies
and error texts. A sorted set is a ``ZSetValue`` (``_values``); a change is journaled as its
effect: ``AddElements`` of kind 4 with each changed member's resulting score (never an
increment), ``RemoveElements`` of the members removed (an emptied sorted set is deleted by
it), a ``PutContainer`` of a ``*STORE`` result.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from minidb.store._args import Session
from minidb.store._journal import OpJournal, ScoresUndo
from minidb.store._keyspace import Keyspace
from minidb.store._values import ZSetValue, new_zset, zset_add, zset_remove
from minidb.wal._ops import KIND_ZSET, AddElements, RemoveElements, encode_score


def get_zset(
    ks: Keyspace, s: Session, key: bytes, j: OpJournal, now_ms: int
) -> ZSetValue | None:
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
    and the key deleted if that emptied it. (member, score) of each removed."""
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
