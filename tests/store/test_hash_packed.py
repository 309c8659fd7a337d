"""Small hashes packed in one ``bytes`` (``_hashvalue``): any sequence of hash commands answers
as a plain dict model says, in the same order, with Redis's encodings, while the representation
switches between packed and dict both ways; undo, copies and the packed header hold too."""

from __future__ import annotations

import random
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.store._args import Session
from minidb.store._commands import execute, execute_transaction
from minidb.store._encodings import HASH_MAX_LISTPACK_ENTRIES, HASHTABLE, LISTPACK
from minidb.store._hashvalue import (
    PACKED_MAX_ENTRIES,
    HashValue,
    _pack,
    _packed_len,
    hash_copy,
    hash_delete,
    hash_elements,
    hash_from,
    hash_set,
)
from minidb.store._journal import OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._results import ErrorReply, Result
from minidb.store._state import StoreState
from minidb.wal import decode_ops, encode_groups

NOW = 1_700_000_000_000
B = b"0"
LONG = b"x" * 65  # one byte past hash-max-listpack-value
EDGE = b"y" * 64  # exactly hash-max-listpack-value: stays a listpack
FIELDS = [b"f%d" % i for i in range(48)] + [b"F" * 65]
GROW_TO = [
    PACKED_MAX_ENTRIES - 1, PACKED_MAX_ENTRIES, PACKED_MAX_ENTRIES + 1, 64,
    HASH_MAX_LISTPACK_ENTRIES, HASH_MAX_LISTPACK_ENTRIES + 2,
]  # fmt: skip
"""Fields a GROW step sets: each side of the packing threshold and of listpack's 128."""
VALUES = [b"1", b"-3", b"10", b"v", b"", b"2.5", EDGE, LONG]


class Model:
    """What a hash must answer: fields in insertion order, and its encoding as Redis 7.2's
    ``t_hash.c`` decides it (None: no key)."""

    def __init__(self) -> None:
        self.fields: dict[bytes, bytes] = {}
        self.encoding: str | None = None

    def set(self, pairs: list[bytes]) -> int:
        if self.encoding is None:
            self.encoding = LISTPACK
        if len(pairs) // 2 > HASH_MAX_LISTPACK_ENTRIES or any(len(x) > 64 for x in pairs):
            self.encoding = HASHTABLE
        new = set()
        for at in range(0, len(pairs), 2):
            if pairs[at] not in self.fields:
                new.add(pairs[at])
            self.fields[pairs[at]] = pairs[at + 1]
        if len(self.fields) > HASH_MAX_LISTPACK_ENTRIES:
            self.encoding = HASHTABLE
        return len(new)

    def delete(self, fields: list[bytes]) -> int:
        gone = sum(self.fields.pop(f, None) is not None for f in fields)
        if not self.fields:
            self.encoding = None
        return gone


class Client:
    def __init__(self) -> None:
        self.ks = Keyspace(now_ms=NOW, rng=random.Random(3))
        self.session = Session()
        self.journal = OpJournal()

    def __call__(self, *argv: bytes) -> Result:
        return execute(self.ks, self.session, list(argv), self.journal, NOW)

    def hash(self) -> HashValue | None:
        return self.ks.container(B, b"h", HashValue, NOW, None)


def _int_of(value: bytes) -> int | None:
    try:
        return int(value) if value.strip() == value and value else None
    except ValueError:
        return None


def _float_text(value: Fraction) -> bytes:
    return str(int(value) if value.denominator == 1 else float(value)).encode()


def _check_representation(h: HashValue | None, model: Model) -> None:
    """Packed only as a small listpack; a listpack at half the threshold is always packed."""
    if h is None:
        assert model.encoding is None
        return
    assert h.encoding == model.encoding and len(h) == len(model.fields)
    if h.packed:
        assert h.encoding == LISTPACK and len(h) <= PACKED_MAX_ENTRIES
    elif h.encoding == LISTPACK:
        assert len(h) > PACKED_MAX_ENTRIES // 2


def _step(c: Client, model: Model, op: tuple[str, int, int, int]) -> None:
    name, a, b, n = op
    field, value = FIELDS[a], VALUES[b]
    m = model.fields
    if name == "HSET":
        pairs = [
            x for i in range(n % 6 + 1) for x in (FIELDS[(a + i * 7) % 48], VALUES[(b + i) % 8])
        ]
        assert c(b"HSET", b"h", *pairs) == model.set(pairs)
    elif name == "GROW":  # many fields at once: across the packing threshold, maybe past 128
        count = GROW_TO[n % len(GROW_TO)]
        pairs = [x for i in range(count) for x in (b"f%d" % i, b"%d" % i)]  # f48 on: new
        assert c(b"HSET", b"h", *pairs) == model.set(pairs)
    elif name == "SHRINK":  # many fields at once: back under half the threshold, or to none
        doomed = list(m)[: max(1, len(m) - n)]
        assert c(b"HDEL", b"h", *doomed, b"missing") == model.delete(doomed)
    elif name == "HSETNX":
        expected = 0 if field in m else model.set([field, value])
        assert c(b"HSETNX", b"h", field, value) == expected
    elif name == "HDEL":
        fields = [FIELDS[(a + i) % len(FIELDS)] for i in range(n % 4 + 1)]
        assert c(b"HDEL", b"h", *fields) == model.delete(fields)
    elif name == "HINCRBY":
        current = _int_of(m.get(field, b"0"))
        reply = c(b"HINCRBY", b"h", field, b"%d" % (n - 10))
        if current is None:
            assert reply == ErrorReply("ERR hash value is not an integer")
        else:
            model.set([field, b"%d" % (current + n - 10)])
            assert reply == current + n - 10
    elif name == "HINCRBYFLOAT":
        try:
            current: Fraction | None = Fraction(m.get(field, b"0").decode())
        except ValueError:
            current = None
        delta = Fraction(n - 10, 2)
        reply = c(b"HINCRBYFLOAT", b"h", field, str(float(delta)).encode())
        if current is None:
            assert reply == ErrorReply("ERR hash value is not a float")
        else:
            text = _float_text(current + delta)
            model.set([field, text])
            assert reply == text
    elif name == "READ":
        assert c(b"HGET", b"h", field) == m.get(field)
        assert c(b"HMGET", b"h", field, FIELDS[b], b"nope") == [
            m.get(field),
            m.get(FIELDS[b]),
            None,
        ]
        assert c(b"HEXISTS", b"h", field) == int(field in m)
        assert c(b"HSTRLEN", b"h", field) == len(m.get(field, b""))
        assert c(b"HLEN", b"h") == len(m)
    elif name == "ALL":
        assert list(c(b"HGETALL", b"h").items()) == list(m.items())  # type: ignore[union-attr]
        assert c(b"HKEYS", b"h") == list(m)
        assert c(b"HVALS", b"h") == list(m.values())
    elif name == "HSCAN":
        _check_scan(c, model, with_match=bool(n % 2), no_values=bool(n % 3 == 0))
    elif name == "HRANDFIELD":
        _check_random(c, model, n - 10)
    elif name == "UNDO":  # a change rolled back, as when the log fails
        before, encoding = dict(m), model.encoding
        journal = OpJournal()
        queued = [[b"HSET", b"h", field, LONG], [b"HDEL", b"h", *list(m)[:n]]]
        execute_transaction(c.ks, c.session, queued, journal, NOW)
        c.ks.rollback(journal)
        h = c.hash()
        assert (h is None and not before) or (h is not None and h.mapping() == before)
        if h is not None:
            assert h.encoding == encoding
            model.fields = dict(h.items())  # undo puts a deleted field back at the end
    _check_representation(c.hash(), model)
    assert c(b"OBJECT", b"ENCODING", b"h") == (
        None if model.encoding is None else model.encoding.encode()
    )


def _check_scan(c: Client, model: Model, *, with_match: bool, no_values: bool) -> None:
    m = model.fields
    options = [b"MATCH", b"f1*"] if with_match else []
    options += [b"NOVALUES"] if no_values else []
    wanted = [f for f in m if not with_match or f.startswith(b"f1")]
    if model.encoding != HASHTABLE:  # a listpack: all at once, in order
        flat = wanted if no_values else [x for f in wanted for x in (f, m[f])]
        assert c(b"HSCAN", b"h", b"0", *options) == [b"0", flat]
        return
    seen: list[bytes] = []
    cursor = b"0"
    for _ in range(len(m) + 1):
        cursor, page = c(b"HSCAN", b"h", cursor, b"COUNT", b"7", *options)  # type: ignore[misc]
        seen += page
        if cursor == b"0":
            break
    assert cursor == b"0"
    if no_values:
        assert sorted(seen) == sorted(wanted)
    else:
        assert sorted(zip(seen[0::2], seen[1::2], strict=True)) == sorted((f, m[f]) for f in wanted)


def _check_random(c: Client, model: Model, count: int) -> None:
    m = model.fields
    reply = c(b"HRANDFIELD", b"h", b"%d" % count, b"WITHVALUES")
    assert isinstance(reply, list)
    if not m:
        assert reply == [] and c(b"HRANDFIELD", b"h") is None
        return
    pairs = list(zip(reply[0::2], reply[1::2], strict=True))
    assert all(m[f] == v for f, v in pairs)
    if count >= len(m):
        assert pairs == list(m.items())
    elif count >= 0:
        assert len(pairs) == count and len(set(pairs)) == count
    else:
        assert len(pairs) == -count
    assert c(b"HRANDFIELD", b"h") in m


OPS = st.tuples(
    st.sampled_from(
        [
            "HSET",
            "GROW",
            "SHRINK",
            "HSETNX",
            "HDEL",
            "HINCRBY",
            "HINCRBYFLOAT",
            "READ",
            "ALL",
            "HSCAN",
            "HRANDFIELD",
            "UNDO",
        ]
    ),
    st.integers(0, len(FIELDS) - 1),
    st.integers(0, len(VALUES) - 1),
    st.integers(0, 20),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(OPS, max_size=40))
def test_hash_packed_any_sequence_answers_as_a_dict_model(
    ops: list[tuple[str, int, int, int]],
) -> None:
    """Random hash commands (fields across the packing threshold both ways, values across
    64 bytes, past 128 fields) answer as the model does, in its order, with its encoding; the
    log replays to the same keyspace."""
    c, model = Client(), Model()
    for op in ops:
        _step(c, model, op)
    fresh = Keyspace(now_ms=NOW)
    for payload in encode_groups(c.journal.records):
        fresh.apply_ops(decode_ops(payload), NOW)
    assert sorted(fresh.items()) == sorted(c.ks.items())
    replayed = fresh.container(B, b"h", HashValue, NOW, None)
    assert (replayed is None) == (model.encoding is None)
    if replayed is not None:
        assert replayed.encoding == model.encoding and replayed == model.fields
        if not any(name == "UNDO" for name, *_ in ops):  # undo re-adds a field at the end
            assert list(replayed.items()) == list(model.fields.items())


def test_hash_packed_small_hash_is_one_bytes_and_converts_both_ways() -> None:
    """Up to the threshold a listpack hash is one bytes; one more field makes it a dict, and
    deleting down to half the threshold packs it again; a hashtable is never packed."""
    pairs = [x for i in range(PACKED_MAX_ENTRIES) for x in (b"f%d" % i, b"v")]
    h = hash_from(pairs, 0)
    assert h.packed and type(h.data) is bytes and len(h) == PACKED_MAX_ENTRIES
    hash_set(h, [b"one", b"more"])
    assert not h.packed and h.encoding == LISTPACK
    hash_delete(h, [b"one"])
    assert not h.packed  # not at the threshold itself: the gap
    hash_delete(h, [b"f%d" % i for i in range(PACKED_MAX_ENTRIES // 2)])
    assert h.packed and list(h) == [
        b"f%d" % i for i in range(PACKED_MAX_ENTRIES // 2, PACKED_MAX_ENTRIES)
    ]
    hash_set(h, [b"long", LONG])
    assert h.packed and h.encoding == LISTPACK  # hash_set alone does not check lengths
    h.encoding = HASHTABLE
    assert not h.packed
    hash_delete(h, list(h)[1:])
    assert not h.packed and h.encoding == HASHTABLE and len(h) == 1


def test_hash_packed_copy_shares_the_bytes_and_stays_apart() -> None:
    """A packed hash's copy shares its immutable bytes; changing either leaves the other."""
    h = hash_from([b"a", b"1", b"b", b"2"], 0)
    copy = hash_copy(h, 5)
    assert copy.data is h.data and copy.epoch == 5 and copy == h
    hash_set(copy, [b"a", b"changed"])
    assert h.get(b"a") == b"1" and copy.get(b"a") == b"changed"
    big = hash_from([x for i in range(40) for x in (b"f%d" % i, b"v")], 0)
    big_copy = hash_copy(big, 1)
    assert big_copy.data is not big.data and big_copy == big
    hash_delete(big_copy, [b"f0"])
    assert b"f0" in big and b"f0" not in big_copy


def test_hash_packed_mapping_reads() -> None:
    """The mapping methods read a packed hash as a dict would, missing fields included."""
    h = hash_from([b"a", b"1", b"b", b"a", b"c", b"b"], 0)
    assert h.packed
    assert h.get(b"a") == b"1" and h.get(b"b") == b"a" and h.get(b"1") is None
    assert b"c" in h and b"1" not in h and b"b" in h  # values are never taken for fields
    assert h[b"c"] == b"b"
    assert list(h) == list(h.keys()) == [b"a", b"b", b"c"] and list(h.values()) == [
        b"1",
        b"a",
        b"b",
    ]
    assert list(hash_elements(h)) == [b"a", b"1", b"b", b"a", b"c", b"b"]
    assert h == {b"a": b"1", b"b": b"a", b"c": b"b"} and h != {b"a": b"1"}
    try:
        h[b"zz"]
    except KeyError:
        pass
    else:
        raise AssertionError("a missing field reads as KeyError")


def test_hash_packed_length_read_from_the_header() -> None:
    """``len`` of a packed hash, read from marshal's header, is its field count at every size
    and when every value is one repeated object (the cached ``b"1"``; format 2 writes no
    back-references, so it is written out each time)."""
    for n in range(HASH_MAX_LISTPACK_ENTRIES + 1):
        same = hash_from([x for i in range(n) for x in (b"f%d" % i, b"1")], 0)
        if same.packed:
            assert len(same) == n, n
        table = {b"f%d" % i: b"1" for i in range(n)}
        assert _packed_len(_pack(table)) == n, n


def test_hash_packed_snapshot_loads_the_same_hashes_in_order() -> None:
    """A snapshot of packed, dict-listpack and hashtable hashes (one expiring) loads into a
    fresh keyspace with the same fields in the same order and the same encodings; a frozen
    snapshot taken before a change to a packed hash still holds the hash as it was."""
    state = StoreState()
    session, journal = Session(), OpJournal()
    sizes = {b"packed": 5, b"wide": PACKED_MAX_ENTRIES + 3, b"table": 3}
    for key, n in sizes.items():
        pairs = [x for i in range(n, 0, -1) for x in (b"f%d" % i, b"v%d" % i)]
        execute(state.keyspace, session, [b"HSET", key, *pairs], journal, NOW)
    execute(state.keyspace, session, [b"HSET", b"table", b"long", LONG], journal, NOW)
    execute(state.keyspace, session, [b"PEXPIREAT", b"packed", b"%d" % (NOW + 5000)], journal, NOW)
    frozen = state.frozen_snapshot()
    execute(state.keyspace, session, [b"HSET", b"packed", b"f1", b"changed"], journal, NOW)
    loaded, later = Keyspace(now_ms=NOW), Keyspace(now_ms=NOW)
    for payload in frozen:
        loaded.apply_ops(decode_ops(payload), NOW)
    for payload in state.snapshot():
        later.apply_ops(decode_ops(payload), NOW)
    assert loaded.container(B, b"packed", HashValue, NOW, None).get(b"f1") == b"v1"  # type: ignore[union-attr]
    assert later.container(B, b"packed", HashValue, NOW, None).get(b"f1") == b"changed"  # type: ignore[union-attr]
    for key in sizes:
        original = state.keyspace.container(B, key, HashValue, NOW, None)
        copy = later.container(B, key, HashValue, NOW, None)
        assert original is not None and copy is not None
        assert list(copy.items()) == list(original.items()), key
        assert copy.encoding == original.encoding and copy.packed == original.packed, key
    assert [h.packed for h in (later.container(B, k, HashValue, NOW, None) for k in sizes)] == [  # type: ignore[union-attr]
        True, False, False,
    ]  # fmt: skip
    assert later.lookup(B, b"packed", NOW, None)[1] == NOW + 5000
