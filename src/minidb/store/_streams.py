"""The stream commands: XADD, XRANGE, XREVRANGE, XLEN, XREAD, XDEL, XTRIM (no consumer groups).

Each handler follows its original in Redis 7.2's ``t_stream.c``: the same order of checks
(XADD and XTRIM parse their options before they look at the key, XDEL looks at the key before
it parses its ids, XREAD checks each key's type before its id), the same replies and the same
error texts. A stream is a ``StreamValue`` (``_streamvalue``); a change goes through the
keyspace (``for_change``) and is journaled as its effect (``docs/wal-format.md``, "Streams"):
XADD an ``AddElements`` of the entry, with the id it resolved, and the metadata it left; XDEL a
``RemoveElements`` of the ids it deleted and the metadata; a trim one TRIM element naming the
last entry it removed. A ``StreamUndo`` holds what the change replaced. XREAD BLOCK with
nothing to answer raises ``_blocking.WouldBlock`` on its streams, as BLPOP does.

Ids are parsed as Redis's ``streamGenericParseIDOrReply`` reads them (``parse_id``): at most
127 bytes, ``<ms>`` or ``<ms>-<seq>``, each part as ``string2ull`` takes it (a canonical
decimal, or what ``strtoull`` accepts: spaces and a sign before the digits), ``-`` and ``+``
where a range allows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from minidb.protocol._results import NULL_ARRAY
from minidb.store._args import Command, Session, check_write, command, int_arg
from minidb.store._blocking import WouldBlock
from minidb.store._journal import ContainerUndo, OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._numbers import INT64_MAX, parse_int
from minidb.store._results import SYNTAX_ERROR, CommandError, Result, wrong_arity
from minidb.store._streamvalue import (
    STREAM,
    Entry,
    Meta,
    Read,
    StreamValue,
    count_below,
    new_stream,
    nth_id,
    stream_append,
    stream_delete,
    stream_range,
    stream_restore,
    stream_trim_through,
)
from minidb.wal._ops import (
    KIND_STREAM,
    STREAM_DELETE,
    STREAM_ID_MAX,
    STREAM_TRIM,
    AddElements,
    RemoveElements,
    encode_stream_id,
    encode_stream_meta,
    encode_stream_pairs,
    format_stream_id,
    stream_entry_element,
)

UINT64_MAX = (1 << 64) - 1
MAX_ID_BYTES = 127
"""The longest id argument Redis parses (its ``char buf[128]``); a longer one is invalid."""
NODE_ENTRIES = 100
"""Redis's ``stream-node-max-entries``: the entries of one radix-tree node, the step in which
an approximate trim (``~``) removes entries (``_trim_bound``)."""
APPROX_TRIM_LIMIT = 100 * NODE_ENTRIES
"""Entries an approximate trim removes at most without LIMIT: Redis's ``100 *
stream-node-max-entries``."""

INVALID_ID = "ERR Invalid stream ID specified as stream command argument"
ID_TOO_SMALL = "ERR The ID specified in XADD is equal or smaller than the target stream top item"
ID_ZERO = "ERR The ID specified in XADD must be greater than 0-0"
ID_EXHAUSTED = "ERR The stream has exhausted the last possible ID, unable to add more items"
BOTH_STRATEGIES = (
    "ERR syntax error, MAXLEN and MINID options at the same time are not compatible"
)
_SPACES = b" \t\n\v\f\r"


class StreamUndo(ContainerUndo):
    """A change to a stream: its metadata before, how many entries it appended (the newest),
    the entries it removed (id, packed fields), to put back."""

    __slots__ = ("added", "meta", "removed")

    def __init__(
        self, bucket: bytes, key: bytes, meta: Meta, added: int, removed: list[Entry]
    ) -> None:
        super().__init__(bucket, key, STREAM)
        self.meta = meta
        self.added = added
        self.removed = removed

    def revert(self, container: Any) -> None:
        stream_restore(container, self.meta, self.added, self.removed)


# -- ids -------------------------------------------------------------------------------------


def _strtoull(text: bytes) -> int | None:
    # C's strtoull in base 10 over the whole text: leading spaces, a sign (a minus negates
    # modulo 2**64), at least one digit, nothing after, no overflow.
    body = text.lstrip(_SPACES)
    negative = body[:1] == b"-"
    if body[:1] in (b"+", b"-"):
        body = body[1:]
    if not body.isdigit():
        return None
    value = int(body)
    if value > UINT64_MAX:
        return None
    return -value & UINT64_MAX if negative else value


def _string2ull(text: bytes) -> int | None:
    """Redis's ``string2ull``: a canonical decimal (negative refused), else ``strtoull``."""
    value = parse_int(text)
    if value is not None:
        return None if value < 0 else value
    return _strtoull(text)


def parse_id(
    arg: bytes, missing_seq: int, *, strict: bool, auto_seq: bool = False
) -> tuple[int, bool]:
    """(id, whether its sequence was given) of an id argument; ``strict`` refuses ``-`` and
    ``+``, ``auto_seq`` takes ``<ms>-*`` (XADD: sequence not given). ``INVALID_ID`` else."""
    if len(arg) > MAX_ID_BYTES:
        raise CommandError(INVALID_ID)
    text = arg.split(b"\0", 1)[0]  # Redis reads it as a C string
    if text == b"-" or text == b"+":
        if strict:
            raise CommandError(INVALID_ID)
        return (0 if text == b"-" else STREAM_ID_MAX), True
    ms_text, dash, seq_text = text.partition(b"-")
    ms = _string2ull(ms_text)
    if ms is None:
        raise CommandError(INVALID_ID)
    if not dash:
        return ms << 64 | missing_seq, True
    if auto_seq and seq_text == b"*":
        return ms << 64, False
    seq = _string2ull(seq_text)
    if seq is None:
        raise CommandError(INVALID_ID)
    return ms << 64 | seq, True


def _interval_id(arg: bytes, missing_seq: int) -> tuple[int, bool]:
    """(id, exclusive) of a range bound: ``(`` before an id excludes it (not ``-`` or ``+``)."""
    if len(arg) > 1 and arg[:1] == b"(":
        return parse_id(arg[1:], missing_seq, strict=True)[0], True
    return parse_id(arg, missing_seq, strict=False)[0], False


def _reply(entries: list[Read]) -> list[Result]:
    return [[format_stream_id(entry_id), list(pairs)] for entry_id, pairs in entries]


# -- XADD and XTRIM --------------------------------------------------------------------------


@dataclass(slots=True)
class _AddTrimArgs:
    """Redis's ``streamAddTrimArgs``: what XADD and XTRIM parse before the key."""

    strategy: bytes = b""
    """``maxlen``, ``minid``, or empty: no trim."""
    approx: bool = False
    maxlen: int = 0
    minid: int = 0
    limit: int = 0
    """Entries a trim removes at most; 0: no limit."""
    nomkstream: bool = False
    entry_id: int | None = None
    """XADD's id; None for ``*``."""
    seq_given: bool = True
    id_pos: int = 0
    """Where XADD's id is (its fields follow)."""


def _parse_add_trim(argv: list[bytes], xadd: bool) -> _AddTrimArgs:
    """Redis's ``streamParseAddOrTrimArgsOrReply``, its checks in its order."""
    args = _AddTrimArgs()
    limit_given = False
    at = 2
    while at < len(argv):
        more = len(argv) - 1 - at
        option = argv[at].lower()
        if xadd and argv[at] == b"*":
            break
        if option in (b"maxlen", b"minid") and more:
            if args.strategy:
                raise CommandError(BOTH_STRATEGIES)
            args.approx = False
            if more >= 2 and argv[at + 1] in (b"~", b"="):
                args.approx = argv[at + 1] == b"~"
                at += 1
            if option == b"maxlen":
                args.maxlen = int_arg(argv[at + 1])
                if args.maxlen < 0:
                    raise CommandError("ERR The MAXLEN argument must be >= 0.")
            else:
                args.minid = parse_id(argv[at + 1], 0, strict=True)[0]
            at += 1
            args.strategy = option
        elif option == b"limit" and more:
            args.limit = int_arg(argv[at + 1])
            if args.limit < 0:
                raise CommandError("ERR The LIMIT argument must be >= 0.")
            limit_given = True
            at += 1
        elif xadd and option == b"nomkstream":
            args.nomkstream = True
        elif xadd:
            args.entry_id, args.seq_given = parse_id(argv[at], 0, strict=True, auto_seq=True)
            break
        else:
            raise CommandError(SYNTAX_ERROR)
        at += 1
    args.id_pos = at
    if args.limit and not args.strategy:
        raise CommandError(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"
        )
    if not xadd and not args.strategy:
        raise CommandError("ERR syntax error, XTRIM must be called with a trimming strategy")
    if limit_given:
        if not args.approx:
            raise CommandError(
                "ERR syntax error, LIMIT cannot be used without the special ~ option"
            )
    else:
        args.limit = APPROX_TRIM_LIMIT if args.approx else 0
    return args


def _trim_bound(s: StreamValue, args: _AddTrimArgs) -> int | None:
    """The id of the last entry a trim removes (it removes a prefix), or None: nothing.

    An exact trim removes all it may. An approximate one (``~``) removes whole nodes only, as
    Redis does, counting the oldest ``NODE_ENTRIES`` entries as a node, the next as another,
    and the newest (fewer) as the last: the stream keeps fewer than ``NODE_ENTRIES`` entries
    more than asked, a trim that may remove everything removes everything, and a trim costs
    one memmove of the id list per node rather than per XADD. A node is removed only if it
    fits within LIMIT whole. (Redis's nodes also close at 4 KiB, and XDEL leaves holes in
    them; minidb counts entries only, so its nodes are Redis's for a stream of small entries
    that only grows and is trimmed, RQ's.)
    """
    # MAXLEN: all but the newest maxlen; MINID: the entries below it.
    cut = len(s) - args.maxlen if args.strategy == b"maxlen" else count_below(s, args.minid)
    if args.approx and cut > 0:
        if cut < len(s):
            cut -= cut % NODE_ENTRIES  # the nodes wholly below the cut
        if args.limit and cut > args.limit:
            cut = args.limit - args.limit % NODE_ENTRIES
    return nth_id(s, cut - 1) if cut > 0 else None


def _trim(
    ks: Keyspace, s: Session, key: bytes, found: StreamValue, args: _AddTrimArgs, j: OpJournal
) -> int:
    """Trim the stream at ``key`` as ``args`` say; how many entries went. Journaled as one
    TRIM up to the last entry removed."""
    bound = _trim_bound(found, args)
    if bound is None:
        return 0
    stream = ks.for_change(s.bucket, key, found, new_stream, j)
    removed = stream_trim_through(stream, bound)
    j.undo.append(StreamUndo(s.bucket, key, stream.meta, 0, removed))
    j.add(RemoveElements(s.bucket, key, KIND_STREAM, (encode_stream_id(STREAM_TRIM, bound),)))
    return len(removed)


def _next_id(last_id: int, args: _AddTrimArgs, now_ms: int) -> int:
    """The id XADD adds (Redis's ``streamAppendItem``); ``ID_TOO_SMALL`` if not above the
    stream's last id. The caller refused a stream whose last id is the greatest."""
    last_ms = last_id >> 64
    if args.entry_id is None:  # *: the command's time, or the last id's successor
        return now_ms << 64 if now_ms > last_ms else last_id + 1
    entry_id = args.entry_id
    if not args.seq_given and last_ms == entry_id >> 64:  # <ms>-* at the last id's ms
        if last_id & UINT64_MAX == UINT64_MAX:
            raise CommandError(ID_TOO_SMALL)
        entry_id = last_id + 1
    if entry_id <= last_id:
        raise CommandError(ID_TOO_SMALL)
    return entry_id


@command("xadd", -5, "write", "fast")
def xadd(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    args = _parse_add_trim(argv, xadd=True)
    field_pos = args.id_pos + 1
    fields = len(argv) - field_pos
    if fields < 2 or fields % 2:
        raise CommandError(wrong_arity("xadd"))
    if args.entry_id == 0 and args.seq_given:
        raise CommandError(ID_ZERO)
    key = argv[1]
    pairs = tuple(argv[field_pos:])
    check_write(ks, key, b"")
    for item in pairs:
        check_write(ks, key, item)
    found = ks.container(s.bucket, key, StreamValue, now_ms, j)
    if found is None and args.nomkstream:
        return None
    last_id = 0 if found is None else found.last_id
    if last_id == STREAM_ID_MAX:
        raise CommandError(ID_EXHAUSTED)
    entry_id = _next_id(last_id, args, now_ms)
    stream = ks.for_change(s.bucket, key, found, new_stream, j)
    j.undo.append(StreamUndo(s.bucket, key, stream.meta, 1, []))
    packed = encode_stream_pairs(pairs)
    stream_append(stream, entry_id, packed)
    stream.last_id = entry_id
    stream.entries_added += 1
    logged = (stream_entry_element(entry_id, packed), encode_stream_meta(*stream.meta))
    j.add(AddElements(s.bucket, key, KIND_STREAM, logged))
    if args.strategy:
        _trim(ks, s, key, stream, args, j)
    return format_stream_id(entry_id)


@command("xtrim", -4, "write")
def xtrim(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    args = _parse_add_trim(argv, xadd=False)
    found = ks.container(s.bucket, argv[1], StreamValue, now_ms, j)
    if found is None:
        return 0
    return _trim(ks, s, argv[1], found, args, j)


@command("xdel", -3, "write", "fast")
def xdel(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = ks.container(s.bucket, argv[1], StreamValue, now_ms, j)
    if found is None:
        return 0
    ids = [parse_id(arg, 0, strict=True)[0] for arg in argv[2:]]
    if not any(entry_id in found for entry_id in ids):
        return 0
    stream = ks.for_change(s.bucket, argv[1], found, new_stream, j)
    meta = stream.meta
    removed: list[Entry] = []
    for entry_id in ids:
        packed = stream_delete(stream, entry_id)
        if packed is not None:
            removed.append((entry_id, packed))
            stream.max_deleted_id = max(stream.max_deleted_id, entry_id)
    j.undo.append(StreamUndo(s.bucket, argv[1], meta, 0, removed))
    logged = [encode_stream_id(STREAM_DELETE, entry_id) for entry_id, _ in removed]
    logged.append(encode_stream_meta(*stream.meta))
    j.add(RemoveElements(s.bucket, argv[1], KIND_STREAM, tuple(logged)))
    return len(removed)


# -- reads -----------------------------------------------------------------------------------


@command("xlen", 2, "readonly", "fast")
def xlen(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    found = ks.container(s.bucket, argv[1], StreamValue, now_ms, j)
    return 0 if found is None else len(found)


def _xrange(
    ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int, reverse: bool
) -> Result:
    """Redis's ``xrangeGenericCommand``: bounds (``(`` exclusive), COUNT, then the key."""
    start, exclusive = _interval_id(argv[3] if reverse else argv[2], 0)
    if exclusive:
        if start == STREAM_ID_MAX:
            raise CommandError("ERR invalid start ID for the interval")
        start += 1
    end, exclusive = _interval_id(argv[2] if reverse else argv[3], UINT64_MAX)
    if exclusive:
        if end == 0:
            raise CommandError("ERR invalid end ID for the interval")
        end -= 1
    count = -1
    at = 4
    while at < len(argv):
        if argv[at].lower() == b"count" and at + 1 < len(argv):
            count = max(int_arg(argv[at + 1]), 0)
            at += 2
        else:
            raise CommandError(SYNTAX_ERROR)
    found = ks.container(s.bucket, argv[1], StreamValue, now_ms, j)
    if found is None:
        return []
    if count == 0:
        return NULL_ARRAY
    return _reply(stream_range(found, start, end, max(count, 0), reverse))


@command("xrange", -4, "readonly")
def xrange(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _xrange(ks, s, argv, j, now_ms, reverse=False)


@command("xrevrange", -4, "readonly")
def xrevrange(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    return _xrange(ks, s, argv, j, now_ms, reverse=True)


def _block_timeout(arg: bytes, now_ms: int) -> int:
    """XREAD's BLOCK in milliseconds (0: forever), checked as Redis's
    ``getTimeoutFromObjectOrReply`` checks it in milliseconds."""
    timeout = parse_int(arg)
    if timeout is None:
        raise CommandError("ERR timeout is not an integer or out of range")
    if timeout < 0:
        raise CommandError("ERR timeout is negative")
    if timeout > 0 and timeout > INT64_MAX - now_ms:
        raise CommandError("ERR timeout is out of range")
    return timeout


@command("xread", -4, "readonly", "blocking")
def xread(ks: Keyspace, s: Session, argv: list[bytes], j: OpJournal, now_ms: int) -> Result:
    """Redis's ``xreadCommand`` without groups: the entries above each id (``$``: the
    stream's last id), COUNT per stream; null when no stream has any, or with BLOCK a wait
    (``_blocking``) on the streams until an XADD gives one of them entries above its id."""
    block: int | None = None
    count = 0
    streams_at = 0
    at = 1
    while at < len(argv):
        more = len(argv) - at - 1
        option = argv[at].lower()
        if option == b"block" and more:
            at += 1
            block = _block_timeout(argv[at], now_ms)
        elif option == b"count" and more:
            at += 1
            count = max(int_arg(argv[at]), 0)
        elif option == b"streams" and more:
            streams_at = at + 1
            if (len(argv) - streams_at) % 2:
                raise CommandError(
                    "ERR Unbalanced 'xread' list of streams: for each stream key an ID or "
                    "'$' must be specified."
                )
            break
        elif option == b"group" and more >= 2:
            raise CommandError(
                "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead."
            )
        elif option == b"noack":
            raise CommandError(
                "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead."
            )
        else:
            raise CommandError(SYNTAX_ERROR)
        at += 1
    if not streams_at:
        raise CommandError(SYNTAX_ERROR)
    half = (len(argv) - streams_at) // 2
    keys = argv[streams_at : streams_at + half]
    after: list[int] = []
    for key, arg in zip(keys, argv[streams_at + half :], strict=True):
        found = ks.container(s.bucket, key, StreamValue, now_ms, j)
        if arg == b"$":
            after.append(0 if found is None else found.last_id)
        elif arg == b">":
            raise CommandError(
                "ERR The > ID can be specified only when calling XREADGROUP using the GROUP "
                "<group> <consumer> option."
            )
        else:
            after.append(parse_id(arg, 0, strict=True)[0])
    served: list[tuple[bytes, list[Result]]] = []
    for key, last in zip(keys, after, strict=True):
        found = ks.container(s.bucket, key, StreamValue, now_ms, j)
        top = None if found is None else found.last_entry_id
        if found is not None and top is not None and top > last:
            served.append((key, _reply(stream_range(found, last + 1, STREAM_ID_MAX, count))))
    if served:
        if s.protocol == 3:
            return dict(served)
        return [[key, entries] for key, entries in served]
    if block is None:
        return NULL_ARRAY
    # The waiter runs this command again whenever one of its keys is touched. As Redis does
    # (``rewriteClientCommandArgument``), ``$`` becomes the id it stood for now, so that the
    # run again waits for entries above it rather than above the last id of that moment.
    ids_at = streams_at + half
    for at, last in enumerate(after):
        if argv[ids_at + at] == b"$":
            argv[ids_at + at] = format_stream_id(last)
    raise WouldBlock(tuple(keys), block / 1000, StreamValue, NULL_ARRAY)


COMMANDS: list[Command] = [xadd, xtrim, xdel, xlen, xrange, xrevrange, xread]
