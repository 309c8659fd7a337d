"""The commands on keys whatever their value: DEL, EXISTS, expiry, RENAME, COPY, SCAN, ...

Each follows its Redis original (``db.c``, ``expire.c``, ``object.c``) in the order of checks
and the wording of errors, and works on a key of any type (string, hash, set). Relative times are
journaled as absolute deadlines (``Expire``), and a deadline already past deletes the key
(journaled as ``Remove``), as Redis does. RENAME and COPY are journaled as ``Rename`` and
``Copy``, whatever the size of the value they move.
"""

from __future__ import annotations

from minidb.store._args import (
    Command,
    Session,
    bucket_arg,
    check_write,
    command,
    deadline_arg,
    int_arg,
    text_of,
)
from minidb.store._glob import compile_glob
from minidb.store._journal import OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._numbers import parse_uint
from minidb.store._results import (
    INVALID_CURSOR,
    NO_SUCH_KEY,
    OK,
    SAME_OBJECT,
    SYNTAX_ERROR,
    CommandError,
    Result,
    Simple,
    wrong_arity,
)
from minidb.store._values import TYPE_NAMES, encoding_of, type_name

DEFAULT_SCAN_COUNT = 10
"""Keys a SCAN step examines when no COUNT is given (Redis's default)."""

_TYPE_NAMES = frozenset(name.encode() for name in TYPE_NAMES)
"""Types ``SCAN ... TYPE`` accepts (those minidb does not have yet match no key)."""


def _delete(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> int:
    removed = 0
    for key in argv[1:]:
        # A key past its deadline is expired (journaled) by the lookup and not counted.
        if ks.exists(s.bucket, key, now_ms, j):
            ks.remove(s.bucket, key, j)
            removed += 1
    return removed


@command("del", -2, "write")
def del_(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _delete(ks, s, argv, j, now_ms)


@command("unlink", -2, "write", "fast")
def unlink(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _delete(ks, s, argv, j, now_ms)


@command("exists", -2, "readonly", "fast")
def exists(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return sum(ks.exists(s.bucket, key, now_ms, j) for key in argv[1:])


@command("touch", -2, "readonly", "fast")
def touch(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    # Redis's TOUCH updates the keys' LRU clocks, which minidb does not keep: what is left is
    # EXISTS's answer (a key past its deadline expired by the lookup, repeats counted).
    return sum(ks.exists(s.bucket, key, now_ms, j) for key in argv[1:])


_EXPIRE_FLAGS = (b"NX", b"XX", b"GT", b"LT")


def _expire_generic(
    ks: Keyspace,
    s: Session,
    argv: list[bytes],
    j: OpJournal,
    now_ms: int,
    *,
    name: str,
    seconds: bool,
    relative: bool,
) -> int:
    """Redis's ``expireGenericCommand``."""
    flags = set()
    for opt in argv[3:]:
        upper = opt.upper()
        if upper not in _EXPIRE_FLAGS:
            raise CommandError(f"ERR Unsupported option {text_of(opt)}")
        flags.add(upper)
    if b"NX" in flags and flags & {b"XX", b"GT", b"LT"}:
        raise CommandError("ERR NX and XX, GT or LT options at the same time are not compatible")
    if {b"GT", b"LT"} <= flags:
        raise CommandError("ERR GT and LT options at the same time are not compatible")
    when = deadline_arg(
        name, argv[2], seconds=seconds, relative=relative, now_ms=now_ms, positive=False
    )
    found = ks.lookup(s.bucket, argv[1], now_ms, j)
    if found is None:
        return 0
    current = found[1]
    if b"NX" in flags and current is not None:
        return 0
    if b"XX" in flags and current is None:
        return 0
    # No expiry counts as an infinite one: never smaller (GT fails), always larger (LT holds).
    if b"GT" in flags and (current is None or when <= current):
        return 0
    if b"LT" in flags and current is not None and when >= current:
        return 0
    if when <= now_ms:
        ks.remove(s.bucket, argv[1], j)
    else:
        ks.set_expiry(s.bucket, argv[1], when, j)
    return 1


@command("expire", -3, "write", "fast")
def expire(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _expire_generic(ks, s, argv, j, now_ms, name="expire", seconds=True, relative=True)


@command("pexpire", -3, "write", "fast")
def pexpire(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _expire_generic(ks, s, argv, j, now_ms, name="pexpire", seconds=False, relative=True)


@command("expireat", -3, "write", "fast")
def expireat(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _expire_generic(ks, s, argv, j, now_ms, name="expireat", seconds=True, relative=False)


@command("pexpireat", -3, "write", "fast")
def pexpireat(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _expire_generic(ks, s, argv, j, now_ms, name="pexpireat", seconds=False, relative=False)


def _ttl(
    ks: Keyspace, s: Session, key: bytes, j: OpJournal, now_ms: int, *, ms: bool, absolute: bool
) -> int:
    """Redis's ``ttlGenericCommand``: -2 no key, -1 no expiry."""
    found = ks.lookup(s.bucket, key, now_ms, j)
    if found is None:
        return -2
    if found[1] is None:
        return -1
    left = max(found[1] if absolute else found[1] - now_ms, 0)
    return left if ms else (left + 500) // 1000


@command("ttl", 2, "readonly", "fast")
def ttl(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _ttl(ks, s, argv[1], j, now_ms, ms=False, absolute=False)


@command("pttl", 2, "readonly", "fast")
def pttl(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _ttl(ks, s, argv[1], j, now_ms, ms=True, absolute=False)


@command("expiretime", 2, "readonly", "fast")
def expiretime(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _ttl(ks, s, argv[1], j, now_ms, ms=False, absolute=True)


@command("pexpiretime", 2, "readonly", "fast")
def pexpiretime(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _ttl(ks, s, argv[1], j, now_ms, ms=True, absolute=True)


@command("persist", 2, "write", "fast")
def persist(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = ks.lookup(s.bucket, argv[1], now_ms, j)
    if found is None or found[1] is None:
        return 0
    ks.set_expiry(s.bucket, argv[1], None, j)
    return 1


@command("type", 2, "readonly", "fast")
def type_(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    value = ks.value(s.bucket, argv[1], now_ms, j)
    return Simple("none" if value is None else type_name(value))


_OBJECT_HELP = (
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
)
_NO_LFU = (
    "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note "
    "that when switching between policies at runtime LRU and LFU data will take some time to "
    "adjust."
)


@command("object", -2, "readonly")
def object_(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``objectCommand``: ENCODING as Redis names it, REFCOUNT 1 (values are never
    shared), IDLETIME 0 (minidb keeps no access times), FREQ refused as without an LFU policy."""
    sub = argv[1].lower()
    if sub == b"help":
        if len(argv) != 2:
            raise CommandError(wrong_arity("object|help"))
        lines = ["OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"]
        return [Simple(line) for line in (*lines, *_OBJECT_HELP, "HELP", "    Print this help.")]
    if sub not in (b"encoding", b"refcount", b"idletime", b"freq"):
        raise CommandError(
            f"ERR unknown subcommand '{text_of(argv[1][:128])}'. Try OBJECT HELP."
        )
    if len(argv) != 3:
        raise CommandError(wrong_arity("object|" + sub.decode()))
    value = ks.value(s.bucket, argv[2], now_ms, j)
    if value is None:
        return None
    if sub == b"encoding":
        return encoding_of(value).encode()
    if sub == b"refcount":
        return 1
    if sub == b"idletime":
        return 0
    raise CommandError(_NO_LFU)


def _rename(
    ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int, nx: bool
) -> Result:
    source, target = argv[1], argv[2]
    if not ks.exists(s.bucket, source, now_ms, j):
        raise CommandError(NO_SUCH_KEY)
    if source == target:
        return 0 if nx else OK
    if nx and ks.exists(s.bucket, target, now_ms, j):
        return 0
    check_write(ks, target, b"")
    ks.exists(s.bucket, target, now_ms, j)  # an expired target goes first, as its own removal
    ks.rename(s.bucket, source, target, j)  # replaces any old target
    return 1 if nx else OK


@command("rename", 3, "write")
def rename(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _rename(ks, s, argv, j, now_ms, nx=False)


@command("renamenx", 3, "write", "fast")
def renamenx(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _rename(ks, s, argv, j, now_ms, nx=True)


@command("copy", -3, "write")
def copy(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    target_bucket = s.bucket
    replace = False
    i = 3
    while i < len(argv):
        opt = argv[i].upper()
        if opt == b"REPLACE":
            replace = True
        elif opt == b"DB" and i + 1 < len(argv):
            target_bucket = bucket_arg(argv[i + 1])
            i += 1
        else:
            raise CommandError(SYNTAX_ERROR)
        i += 1
    source, target = argv[1], argv[2]
    if target_bucket == s.bucket and source == target:
        raise CommandError(SAME_OBJECT)
    if not ks.exists(s.bucket, source, now_ms, j):
        return 0
    if not replace and ks.exists(target_bucket, target, now_ms, j):
        return 0
    check_write(ks, target, b"")
    ks.exists(target_bucket, target, now_ms, j)  # an expired target goes first
    ks.copy(s.bucket, source, target_bucket, target, j)
    return 1


@command("randomkey", 1, "readonly")
def randomkey(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return ks.random_key(s.bucket, now_ms, j)


@command("scan", -2, "readonly")
def scan(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    cursor = parse_uint(argv[1])
    if cursor is None:
        raise CommandError(INVALID_CURSOR)
    count = DEFAULT_SCAN_COUNT
    pattern: bytes | None = None
    wanted: bytes | None = None
    i = 2
    while i < len(argv):
        opt = argv[i].upper()
        if i + 1 >= len(argv):
            raise CommandError(SYNTAX_ERROR)
        if opt == b"COUNT":
            count = int_arg(argv[i + 1])
            if count < 1:
                raise CommandError(SYNTAX_ERROR)
        elif opt == b"MATCH":
            pattern = argv[i + 1]
        elif opt == b"TYPE":
            wanted = argv[i + 1].lower()
            if wanted not in _TYPE_NAMES:
                raise CommandError(f"ERR unknown type name '{text_of(argv[i + 1])}'")
        else:
            raise CommandError(SYNTAX_ERROR)
        i += 2
    next_cursor, keys = ks.scan(s.bucket, cursor, count, now_ms, j)
    if pattern is not None and pattern != b"*":
        matches = compile_glob(pattern)
        keys = [key for key in keys if matches(key)]
    if wanted is not None:
        name = wanted.decode()
        keys = [key for key in keys if type_name(ks.peek(s.bucket, key)) == name]  # type: ignore[arg-type]
    return [b"%d" % next_cursor, list(keys)]


@command("keys", 2, "readonly")
def keys(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    if argv[1] == b"*":
        return list(ks.keys(s.bucket, now_ms))
    matches = compile_glob(argv[1])
    return [key for key in ks.keys(s.bucket, now_ms) if matches(key)]


@command("dbsize", 1, "readonly", "fast")
def dbsize(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return ks.size(s.bucket)


def _flush_mode(argv: list[bytes]) -> None:
    """FLUSHDB/FLUSHALL take an optional SYNC or ASYNC; both mean the same here."""
    if len(argv) > 2 or (len(argv) == 2 and argv[1].upper() not in (b"SYNC", b"ASYNC")):
        raise CommandError(SYNTAX_ERROR)


@command("flushdb", -1, "write")
def flushdb(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    _flush_mode(argv)
    ks.flush(s.bucket, j)
    return OK


@command("flushall", -1, "write")
def flushall(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    _flush_mode(argv)
    ks.flush(None, j)
    return OK


@command("time", 1, "readonly", "fast")
def time(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    seconds, ms = divmod(now_ms, 1000)
    return [b"%d" % seconds, b"%d" % (ms * 1000)]


@command("select", 2, "fast")
def select(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    s.bucket = bucket_arg(argv[1])
    return OK


@command("watch", -2, "fast")
def watch(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    for key in argv[1:]:
        # Expire a key past its deadline now, so its removal does not count as a change later.
        ks.exists(s.bucket, key, now_ms, j)
    s.watch = ks.watch(s.bucket, argv[1:], into=s.watch)
    return OK


@command("unwatch", 1, "fast")
def unwatch(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    if s.watch is not None:
        ks.unwatch(s.watch)
        s.watch = None
    return OK


COMMANDS: list[Command] = [
    del_, unlink, exists, touch, expire, pexpire, expireat, pexpireat, ttl, pttl, expiretime,
    pexpiretime, persist, type_, object_, rename, renamenx, copy, randomkey, scan, keys, dbsize,
    flushdb, flushall, time, select, watch, unwatch,
]  # fmt: skip
