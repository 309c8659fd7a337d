"""The string commands: GET and SET and their variants, counters, APPEND and ranges.

Each handler follows its original in Redis's ``t_string.c``: the same order of checks (so the
same error wins when several apply), the same replies, and the same treatment of an existing
expiry: a write that replaces the value (SET, GETSET, MSET) drops it unless asked to keep it
(KEEPTTL); a write that edits the value (INCR*, APPEND, SETRANGE) keeps it. What gets
journaled is always the resulting state as a ``Put`` carrying the deadline, never the command.

On a key holding a hash or a set, a command that reads the value answers ``WRONGTYPE`` (the
keyspace's ``get`` and ``lookup_string`` raise it) and changes nothing; SET without GET
replaces the key whatever it held, and MGET answers nil for it, as Redis does.
"""

from __future__ import annotations

from fractions import Fraction

from minidb.store._args import (
    Command,
    Session,
    check_write,
    command,
    deadline_arg,
    int_arg,
)
from minidb.store._journal import OpJournal
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
    NAN_OR_INFINITY,
    NOT_A_FLOAT,
    NOT_AN_INTEGER,
    OK,
    OVERFLOW,
    STRING_TOO_LONG,
    SYNTAX_ERROR,
    CommandError,
    Result,
    wrong_arity,
)

# Flags of SET and GETEX options (Redis's OBJ_SET_NX ...).
_NX, _XX, _GET, _KEEPTTL, _PERSIST = 1, 2, 4, 8, 16
_UNITS = {
    b"EX": (True, True),
    b"PX": (False, True),
    b"EXAT": (True, False),
    b"PXAT": (False, False),
}
"""Expiry option -> (in seconds, relative to now)."""


def _string_options(
    argv: list[bytes], start: int, for_set: bool
) -> tuple[int, bytes | None, bytes]:
    """(flags, expiry option or None, its argument) of SET (``for_set``) or GETEX options.

    Redis's ``parseExtendedStringArgumentsOrReply``: an option that conflicts with one already
    seen (NX with XX, KEEPTTL or PERSIST with an expiry, two different expiry units) or that
    does not apply to the command is a syntax error; repeating the same one is allowed.
    """
    flags = 0
    unit: bytes | None = None
    value = b""
    j = start
    n = len(argv)
    while j < n:
        opt = argv[j].upper()
        if opt == b"NX" and for_set and not flags & _XX:
            flags |= _NX
        elif opt == b"XX" and for_set and not flags & _NX:
            flags |= _XX
        elif opt == b"GET" and for_set:
            flags |= _GET
        elif opt == b"KEEPTTL" and for_set and unit is None and not flags & _PERSIST:
            flags |= _KEEPTTL
        elif opt == b"PERSIST" and not for_set and unit is None and not flags & _KEEPTTL:
            flags |= _PERSIST
        elif (
            opt in _UNITS
            and unit in (None, opt)
            and not flags & (_KEEPTTL | _PERSIST)
            and j + 1 < n
        ):
            unit = opt
            value = argv[j + 1]
            j += 1
        else:
            raise CommandError(SYNTAX_ERROR)
        j += 1
    return flags, unit, value


def _deadline(name: str, unit: bytes, value: bytes, now_ms: int) -> int:
    seconds, relative = _UNITS[unit]
    return deadline_arg(
        name, value, seconds=seconds, relative=relative, now_ms=now_ms, positive=True
    )


def _set(
    ks: Keyspace,
    s: Session,
    key: bytes,
    value: bytes,
    flags: int,
    deadline: int | None,
    j: OpJournal,
    now_ms: int,
) -> tuple[bool, bytes | None]:
    """Redis's ``setGenericCommand``: (whether it was set, the old value). With GET the old
    value must be a string (``WRONGTYPE`` otherwise); without, any type is replaced."""
    check_write(ks, key, value)
    if flags & _GET:
        old = ks.lookup_string(s.bucket, key, now_ms, j)
    else:
        found = ks.lookup(s.bucket, key, now_ms, j)
        old = None if found is None else (b"", found[1])  # the old value itself is not needed
    if (flags & _NX and old is not None) or (flags & _XX and old is None):
        return False, old[0] if old else None
    if deadline is None and flags & _KEEPTTL and old is not None:
        deadline = old[1]
    ks.put(s.bucket, key, value, deadline, j)
    return True, old[0] if old else None


@command("get", 2, "readonly", "fast")
def get(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return ks.get(s.bucket, argv[1], now_ms, j)


@command("set", -3, "write")
def set_(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    if len(argv) == 3:  # the common plain SET: nothing to parse, the old value is not needed
        check_write(ks, argv[1], argv[2])
        ks.put(s.bucket, argv[1], argv[2], None, j)
        return OK
    flags, unit, value = _string_options(argv, 3, for_set=True)
    deadline = _deadline("set", unit, value, now_ms) if unit else None
    done, old = _set(ks, s, argv[1], argv[2], flags, deadline, j, now_ms)
    if flags & _GET:
        return old
    return OK if done else None


@command("setnx", 3, "write", "fast")
def setnx(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return int(_set(ks, s, argv[1], argv[2], _NX, None, j, now_ms)[0])


@command("setex", 4, "write")
def setex(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    _set(ks, s, argv[1], argv[3], 0, _deadline("setex", b"EX", argv[2], now_ms), j, now_ms)
    return OK


@command("psetex", 4, "write")
def psetex(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    _set(ks, s, argv[1], argv[3], 0, _deadline("psetex", b"PX", argv[2], now_ms), j, now_ms)
    return OK


@command("getset", 3, "write", "fast")
def getset(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _set(ks, s, argv[1], argv[2], _GET, None, j, now_ms)[1]


@command("getdel", 2, "write", "fast")
def getdel(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    old = ks.get(s.bucket, argv[1], now_ms, j)
    if old is not None:
        ks.remove(s.bucket, argv[1], j)
    return old


@command("getex", -2, "write", "fast")
def getex(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    flags, unit, value = _string_options(argv, 2, for_set=False)
    found = ks.lookup_string(s.bucket, argv[1], now_ms, j)
    if found is None:
        return None
    # As in Redis, the expiry is validated only once the key is known to exist.
    deadline = _deadline("getex", unit, value, now_ms) if unit else None
    if deadline is not None and deadline <= now_ms:
        ks.remove(s.bucket, argv[1], j)  # EXAT/PXAT in the past
    elif deadline is not None:
        ks.set_expiry(s.bucket, argv[1], deadline, j)
    elif flags & _PERSIST and found[1] is not None:
        ks.set_expiry(s.bucket, argv[1], None, j)
    return found[0]


@command("mget", -2, "readonly", "fast")
def mget(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    values = [ks.value(s.bucket, key, now_ms, j) for key in argv[1:]]
    return [value if type(value) is bytes else None for value in values]


def _pairs(ks: Keyspace, name: str, argv: list[bytes]) -> list[tuple[bytes, bytes]]:
    if len(argv) % 2 == 0:
        raise CommandError(wrong_arity(name))
    pairs = list(zip(argv[1::2], argv[2::2], strict=True))
    for key, value in pairs:
        check_write(ks, key, value)
    return pairs


@command("mset", -3, "write")
def mset(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    for key, value in _pairs(ks, "mset", argv):
        ks.put(s.bucket, key, value, None, j)
    return OK


@command("msetnx", -3, "write")
def msetnx(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    pairs = _pairs(ks, "msetnx", argv)
    if any(ks.exists(s.bucket, key, now_ms, j) for key, _ in pairs):
        return 0
    for key, value in pairs:
        ks.put(s.bucket, key, value, None, j)
    return 1


def _incr_by(ks: Keyspace, s: Session, key: bytes, delta: int, j: OpJournal, now_ms: int) -> int:
    found = ks.lookup_string(s.bucket, key, now_ms, j)
    current, deadline = 0, None
    if found is not None:
        parsed = parse_int(found[0])
        if parsed is None:
            raise CommandError(NOT_AN_INTEGER)
        current, deadline = parsed, found[1]
    result = current + delta
    if not INT64_MIN <= result <= INT64_MAX:
        raise CommandError(OVERFLOW)
    check_write(ks, key, b"")
    ks.put(s.bucket, key, b"%d" % result, deadline, j)
    return result


@command("incr", 2, "write", "fast")
def incr(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _incr_by(ks, s, argv[1], 1, j, now_ms)


@command("decr", 2, "write", "fast")
def decr(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _incr_by(ks, s, argv[1], -1, j, now_ms)


@command("incrby", 3, "write", "fast")
def incrby(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _incr_by(ks, s, argv[1], int_arg(argv[2]), j, now_ms)


@command("decrby", 3, "write", "fast")
def decrby(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    delta = int_arg(argv[2])
    if delta == INT64_MIN:
        raise CommandError("ERR decrement would overflow")
    return _incr_by(ks, s, argv[1], -delta, j, now_ms)


@command("incrbyfloat", 3, "write", "fast")
def incrbyfloat(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = ks.lookup_string(s.bucket, argv[1], now_ms, j)
    current = parse_long_double(found[0]) if found is not None else Fraction(0)
    delta = parse_long_double(argv[2])
    if current is None or delta is None:
        raise CommandError(NOT_A_FLOAT)
    result = add_long_double(current, delta)
    if isinstance(result, float):  # an infinity or NaN
        raise CommandError(NAN_OR_INFINITY)
    text = format_long_double(result)
    check_write(ks, argv[1], text)
    ks.put(s.bucket, argv[1], text, found[1] if found else None, j)
    return text


@command("append", 3, "write", "fast")
def append(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = ks.lookup_string(s.bucket, argv[1], now_ms, j)
    if found is not None and len(found[0]) + len(argv[2]) > ks.max_value_bytes:
        raise CommandError(STRING_TOO_LONG)  # before building the long string
    value = found[0] + argv[2] if found is not None else argv[2]
    check_write(ks, argv[1], value)
    ks.put(s.bucket, argv[1], value, found[1] if found else None, j)
    return len(value)


@command("strlen", 2, "readonly", "fast")
def strlen(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    value = ks.get(s.bucket, argv[1], now_ms, j)
    return len(value) if value is not None else 0


@command("getrange", 4, "readonly")
def getrange(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    start, end = int_arg(argv[2]), int_arg(argv[3])
    value = ks.get(s.bucket, argv[1], now_ms, j)
    if value is None:
        return b""
    n = len(value)
    if start < 0:
        start += n
    if end < 0:
        end += n
    if n == 0 or start >= n or end < 0 or start > end:
        return b""
    return value[max(start, 0) : min(end, n - 1) + 1]


@command("setrange", 4, "write")
def setrange(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    offset = int_arg(argv[2])
    if offset < 0:
        raise CommandError("ERR offset is out of range")
    patch = argv[3]
    found = ks.lookup_string(s.bucket, argv[1], now_ms, j)
    if not patch:
        return len(found[0]) if found is not None else 0
    # Checked before building anything: ``SETRANGE k 4611686018427387904 x`` must not allocate.
    if offset + len(patch) > ks.max_value_bytes:
        raise CommandError(STRING_TOO_LONG)
    old = found[0] if found is not None else b""
    value = old[:offset].ljust(offset, b"\0") + patch + old[offset + len(patch) :]
    check_write(ks, argv[1], value)
    ks.put(s.bucket, argv[1], value, found[1] if found else None, j)
    return len(value)


COMMANDS: list[Command] = [
    get, set_, setnx, setex, psetex, getset, getdel, getex, mget, mset, msetnx,
    incr, decr, incrby, decrby, incrbyfloat, append, strlen, getrange, setrange,
]  # fmt: skip
