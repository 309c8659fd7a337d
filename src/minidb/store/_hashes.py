"""The hash commands: HSET and HGET and their variants, counters, HRANDFIELD, HSCAN.

Each handler follows its original in Redis's ``t_hash.c``: the same order of checks (an
argument that does not parse is refused before the key is looked at where Redis does so, a key
of another type answers ``WRONGTYPE``), the same replies (HGETALL a map in RESP3, HRANDFIELD
WITHVALUES pairs in RESP3) and the same error texts. A hash is a ``HashValue`` (``_hashvalue``); a
change goes through the keyspace (``for_change``, then ``drop_empty`` if it emptied the hash)
and is journaled as its effect on the fields it touched: ``AddElements`` of each field with the
value it now has (HINCRBY logs the sum, never the increment), ``RemoveElements`` of the fields
deleted, with a ``FieldsUndo`` holding what they were.
"""

from __future__ import annotations

from fractions import Fraction

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
from minidb.store._hashvalue import HashValue, hash_delete, hash_prepare, hash_set, new_hash
from minidb.store._journal import FieldsUndo, OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._numbers import (
    INT64_MAX,
    INT64_MIN,
    add_long_double,
    format_long_double,
    parse_int,
    parse_long_double,
)
from minidb.store._results import (
    NOT_A_FLOAT,
    OK,
    OVERFLOW,
    SYNTAX_ERROR,
    CommandError,
    Result,
    wrong_arity,
)
from minidb.wal._ops import KIND_HASH, AddElements, RemoveElements


def _get(ks: Keyspace, s: Session, key: bytes, j: OpJournal, now_ms: int) -> HashValue | None:
    return ks.container(s.bucket, key, HashValue, now_ms, j)


def _set_fields(
    ks: Keyspace,
    s: Session,
    key: bytes,
    found: HashValue | None,
    pairs: list[bytes],
    j: OpJournal,
) -> list[tuple[bytes, bytes | None]]:
    """Set the fields of ``pairs`` (field, value, ...), creating the hash if ``found`` is None;
    journaled. A field or value past 64 bytes converts a listpack first: HSET's
    ``hashTypeTryConversion``, and for HINCRBY(FLOAT) the same check in ``hashTypeSet`` (a long
    field, or a float sum printed past 64 bytes, makes a hashtable in Redis 7.0 too)."""
    h = ks.for_change(s.bucket, key, found, new_hash, j)
    encoding = h.encoding
    hash_prepare(h, pairs)
    olds = hash_set(h, pairs)
    j.undo.append(FieldsUndo(s.bucket, key, encoding, olds))
    j.add(AddElements(s.bucket, key, KIND_HASH, tuple(pairs)))
    return olds


def _check_pairs(ks: Keyspace, key: bytes, pairs: list[bytes]) -> None:
    check_write(ks, key, b"")
    for item in pairs:
        check_write(ks, key, item)


@command("hset", -4, "write", "fast")
def hset(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    if len(argv) % 2 == 1:
        raise CommandError(wrong_arity("hset"))
    pairs = argv[2:]
    _check_pairs(ks, argv[1], pairs)
    found = _get(ks, s, argv[1], j, now_ms)
    olds = _set_fields(ks, s, argv[1], found, pairs, j)
    return sum(old is None for _, old in olds)  # a field repeated counts once, as in Redis


@command("hmset", -4, "write", "fast")
def hmset(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    if len(argv) % 2 == 1:
        raise CommandError(wrong_arity("hmset"))
    pairs = argv[2:]
    _check_pairs(ks, argv[1], pairs)
    _set_fields(ks, s, argv[1], _get(ks, s, argv[1], j, now_ms), pairs, j)
    return OK


@command("hsetnx", 4, "write", "fast")
def hsetnx(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    pairs = argv[2:]
    _check_pairs(ks, argv[1], pairs)
    found = _get(ks, s, argv[1], j, now_ms)
    if found is not None and argv[2] in found:
        return 0
    _set_fields(ks, s, argv[1], found, pairs, j)
    return 1


@command("hget", 3, "readonly", "fast")
def hget(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    h = _get(ks, s, argv[1], j, now_ms)
    return None if h is None else h.get(argv[2])


@command("hmget", -3, "readonly", "fast")
def hmget(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    h = _get(ks, s, argv[1], j, now_ms)
    if h is None:
        return [None] * (len(argv) - 2)
    return [h.get(field) for field in argv[2:]]


@command("hdel", -3, "write", "fast")
def hdel(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = _get(ks, s, argv[1], j, now_ms)
    if found is None or not any(field in found for field in argv[2:]):
        return 0
    h = ks.for_change(s.bucket, argv[1], found, new_hash, j)
    encoding = h.encoding
    olds = hash_delete(h, argv[2:])
    j.undo.append(FieldsUndo(s.bucket, argv[1], encoding, olds))
    j.add(RemoveElements(s.bucket, argv[1], KIND_HASH, tuple(field for field, _ in olds)))
    if not h:
        ks.drop_empty(s.bucket, argv[1], j)
    return len(olds)


@command("hlen", 2, "readonly", "fast")
def hlen(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    h = _get(ks, s, argv[1], j, now_ms)
    return 0 if h is None else len(h)


@command("hstrlen", 3, "readonly", "fast")
def hstrlen(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    h = _get(ks, s, argv[1], j, now_ms)
    value = None if h is None else h.get(argv[2])
    return 0 if value is None else len(value)


@command("hexists", 3, "readonly", "fast")
def hexists(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    h = _get(ks, s, argv[1], j, now_ms)
    return int(h is not None and argv[2] in h)


@command("hgetall", 2, "readonly")
def hgetall(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    h = _get(ks, s, argv[1], j, now_ms)
    return {} if h is None else dict(h.items())  # a map in RESP3, an empty one for a missing key


@command("hkeys", 2, "readonly")
def hkeys(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    h = _get(ks, s, argv[1], j, now_ms)
    return [] if h is None else list(h)


@command("hvals", 2, "readonly")
def hvals(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    h = _get(ks, s, argv[1], j, now_ms)
    return [] if h is None else list(h.values())


@command("hincrby", 4, "write", "fast")
def hincrby(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    delta = int_arg(argv[3])
    found = _get(ks, s, argv[1], j, now_ms)
    current = 0
    old = None if found is None else found.get(argv[2])
    if old is not None:
        parsed = parse_int(old)
        if parsed is None:
            raise CommandError("ERR hash value is not an integer")
        current = parsed
    result = current + delta
    if not INT64_MIN <= result <= INT64_MAX:
        raise CommandError(OVERFLOW)
    check_write(ks, argv[1], argv[2])
    text = b"%d" % result
    _set_fields(ks, s, argv[1], found, [argv[2], text], j)
    return result


@command("hincrbyfloat", 4, "write", "fast")
def hincrbyfloat(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    delta = parse_long_double(argv[3])
    if delta is None:
        raise CommandError(NOT_A_FLOAT)
    if isinstance(delta, float):  # an infinity (strtold reads NaN, which Redis refuses above)
        raise CommandError("ERR value is NaN or Infinity")
    found = _get(ks, s, argv[1], j, now_ms)
    current: Fraction | float | None = Fraction(0)
    old = None if found is None else found.get(argv[2])
    if old is not None:
        current = parse_long_double(old)
        if current is None:
            raise CommandError("ERR hash value is not a float")
    result = add_long_double(current, delta)  # type: ignore[arg-type]
    if isinstance(result, float):
        raise CommandError("ERR increment would produce NaN or Infinity")
    text = format_long_double(result)
    check_write(ks, argv[1], argv[2])
    _set_fields(ks, s, argv[1], found, [argv[2], text], j)
    return text


@command("hrandfield", -2, "readonly")
def hrandfield(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``hrandfieldCommand``: one field (null for a missing key), or with a count that
    many distinct fields (at most all), or with a negative count that many with repeats;
    WITHVALUES adds each value (RESP3: [field, value] pairs)."""
    if len(argv) >= 3:
        count = random_count(argv[2])
        if len(argv) > 4 or (len(argv) == 4 and argv[3].lower() != b"withvalues"):
            raise CommandError(SYNTAX_ERROR)
        with_values = len(argv) == 4
        if with_values and not -(LONG_MAX // 2) <= count <= LONG_MAX // 2:
            raise CommandError("ERR value is out of range")
        h = _get(ks, s, argv[1], j, now_ms)
        if h is None or count == 0:
            return []
        if count < 0:
            fields = pick_repeated(h, -count, ks.rng)
        elif count >= len(h):
            fields = list(h)
        else:
            fields = pick_distinct(h, count, ks.rng)
        if not with_values:
            return list(fields)
        values = h.mapping()  # decoded once, not per field, for a packed hash
        if s.protocol == 3:
            return [[field, values[field]] for field in fields]
        return [x for field in fields for x in (field, values[field])]
    h = _get(ks, s, argv[1], j, now_ms)
    if h is None:
        return None
    return pick_repeated(h, 1, ks.rng)[0]


@command("hscan", -3, "readonly")
def hscan(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    cursor = scan_cursor(argv[2])
    h = _get(ks, s, argv[1], j, now_ms)
    if h is None:
        return [b"0", []]
    count, pattern, no_values = scan_options(argv, 3, hash_=True)
    return scan_elements(h, cursor, count, pattern, no_values)


COMMANDS: list[Command] = [
    hset, hmset, hsetnx, hget, hmget, hdel, hlen, hstrlen, hexists, hgetall, hkeys, hvals,
    hincrby, hincrbyfloat, hrandfield, hscan,
]  # fmt: skip
