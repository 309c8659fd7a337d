"""The operation payload: round trips of any bytes and expiries, version-1 text, refusals."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.wal import (
    Expire,
    Flush,
    Op,
    Put,
    Remove,
    _payload,
    decode_ops,
    encode_ops,
    encode_put,
    pack_payloads,
    pack_puts,
)
from minidb.wal._format import LEGACY_VERSION
from minidb.wal._payload import NO_EXPIRY, PayloadError, describe, encode_remove, escape

pytestmark = pytest.mark.accelerator  # its C twin is driven by every test

NAMES = st.binary(max_size=70)
EXPIRY = st.none() | st.integers(min_value=NO_EXPIRY + 1, max_value=2**63 - 1)
OPS: st.SearchStrategy[Op] = st.one_of(
    st.builds(Put, NAMES, NAMES, st.binary(max_size=300), EXPIRY),
    st.builds(Remove, NAMES, NAMES),
    st.builds(Expire, NAMES, NAMES, EXPIRY),
    st.builds(Flush, st.none() | NAMES),
)


@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(st.lists(OPS, min_size=1, max_size=12))
def test_payload_any_ops_round_trip(ops: list[Op]) -> None:
    """Any operations, with any bytes and any expiry, decode to exactly what was encoded."""
    assert decode_ops(encode_ops(ops)) == ops


@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(NAMES, NAMES, st.binary(max_size=300))
def test_payload_fast_encoders_match_encode_ops(bucket: bytes, key: bytes, value: bytes) -> None:
    """The store's one-op encoders produce the canonical encoding."""
    assert encode_put(bucket, key, value) == encode_ops([Put(bucket, key, value)])
    assert encode_remove(bucket, key) == encode_ops([Remove(bucket, key)])


def test_payload_large_key_and_value_round_trip() -> None:
    """A 64 KiB key and a 16 MiB value are carried whole (u32 lengths)."""
    op = Put(b"b", b"k" * 65536, b"\x00\r\n" * (16 * 1024 * 1024 // 3), 5)
    assert decode_ops(encode_ops([op, Remove(b"b", b"x")])) == [op, Remove(b"b", b"x")]


@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(st.lists(OPS, min_size=1, max_size=6), st.data())
def test_payload_cut_or_extended_payload_is_refused(ops: list[Op], data: st.DataObject) -> None:
    """A payload cut anywhere inside an op, or with bytes after the last op, never decodes
    silently into something else: it raises ``PayloadError`` or decodes to a prefix of ops."""
    payload = encode_ops(ops)
    cut = data.draw(st.integers(min_value=0, max_value=len(payload) - 1))
    try:
        got = decode_ops(payload[:cut])
    except PayloadError:
        pass
    else:
        assert got == ops[: len(got)] and len(got) < len(ops)
    with pytest.raises(PayloadError):
        decode_ops(payload + b"\x07")


@pytest.mark.parametrize(
    "payload",
    [b"", b"\x00", b"\x09abc", b"\x01" + b"\x00" * 8, b"\x02\x05\x00\x00\x00\x00\x00\x00\x00ab"],
)
def test_payload_malformed_v2_is_refused(payload: bytes) -> None:
    """Empty payloads, unknown tags and lengths past the end raise ``PayloadError``."""
    with pytest.raises(PayloadError):
        decode_ops(payload)


def test_payload_refuses_to_encode_nothing_or_the_sentinel() -> None:
    """A record holds at least one op, and the no-expiry sentinel is not a time."""
    with pytest.raises(ValueError):
        encode_ops([])
    with pytest.raises(ValueError):
        encode_ops([Expire(b"b", b"k", NO_EXPIRY)])
    with pytest.raises(ValueError):
        encode_ops([Put(b"b", b"k", b"v", 2**63)])


@pytest.mark.parametrize(
    "text, op",
    [
        (b"SET b k abc\r", Put(b"b", b"k", b"abc\r")),
        (b"SET b k  two  spaces ", Put(b"b", b"k", b" two  spaces ")),
        (b"SET b k ", Put(b"b", b"k", b"")),
        (b"SET b k caf\xc3\xa9\r\r", Put(b"b", b"k", b"caf\xc3\xa9\r\r")),
        (b"DEL users alice", Remove(b"users", b"alice")),
    ],
)
def test_payload_v1_text_decodes_byte_for_byte(text: bytes, op: Op) -> None:
    """Version-1 SET keeps the value after the third space exactly; nothing is stripped."""
    assert decode_ops(text, LEGACY_VERSION) == [op]


@pytest.mark.parametrize(
    "text", [b"GET b k", b"SET b k", b"DEL b", b"DEL b k extra", b"set b k v", b"SET  k v", b""]
)
def test_payload_v1_non_writes_are_refused(text: bytes) -> None:
    """Version-1 payloads other than a well-formed SET or DEL raise ``PayloadError``."""
    with pytest.raises(PayloadError):
        decode_ops(text, LEGACY_VERSION)


@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(st.binary(max_size=100))
def test_payload_escape_is_printable_and_unambiguous(raw: bytes) -> None:
    """Escaped fields hold no space or control character and decode back to the bytes."""
    text = escape(raw)
    assert text.isprintable() and " " not in text and ";" not in text
    decoded = b"" if text == '""' else text.encode().decode("unicode_escape").encode("latin-1")
    assert decoded == raw


def test_payload_describe_prints_each_kind() -> None:
    """Every op kind has its word form; ops of one record are separated by ' ; '."""
    ops: list[Op] = [
        Put(b"b", b"k", b"v w"), Put(b"b", b"k", b"", 7), Remove(b"b", b"k"),
        Expire(b"b", b"k", 9), Expire(b"b", b"k", None), Flush(b"b"), Flush(None),
    ]
    assert describe(ops) == (
        'PUT b k v\\x20w ; PUT b k "" PXAT 7 ; DEL b k ; EXPIRE b k 9 ; PERSIST b k ; '
        "FLUSH b ; FLUSHALL"
    )


def test_pack_payloads_concatenates_into_records_of_about_the_limit() -> None:
    """Packed payloads decode to exactly the operations given, in order; each packed payload
    reaches the limit except the last, and one larger than the limit stays whole."""
    puts = [Put(b"b", b"k%d" % i, b"v" * (i % 50)) for i in range(500)]
    payloads = [encode_put(p.bucket, p.key, p.value) for p in puts]
    big = encode_put(b"b", b"big", b"x" * 5000)
    packed = list(pack_payloads([*payloads[:250], big, *payloads[250:]], limit=1000))
    ops = [op for payload in packed for op in decode_ops(payload)]
    assert ops == [*puts[:250], Put(b"b", b"big", b"x" * 5000), *puts[250:]]
    assert all(len(p) >= 1000 for p in packed[:-1])
    assert all(len(p) < 1000 + 5100 for p in packed)
    assert list(pack_payloads([])) == []


def _pure_pack_puts(bucket: bytes, mapping: dict[bytes, object], limit: int) -> list[bytes]:
    """What ``pack_puts`` must return: the pure definition, one payload per key, coalesced."""
    singles = [encode_put(bucket, k, v) for k, v in mapping.items() if type(v) is bytes]
    return list(pack_payloads(singles, limit))


class _NotBytes:
    """A value that is not bytes: stands for a key's expiry record, which pack_puts skips."""


class _BytesSubclass(bytes):
    pass


@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(
    st.binary(max_size=40),
    st.dictionaries(
        st.binary(max_size=40),
        st.binary(max_size=400) | st.builds(_NotBytes) | st.builds(_BytesSubclass, st.binary()),
        max_size=60,
    ),
    st.integers(min_value=1, max_value=2000),
)
def test_pack_puts_is_the_coalesced_puts_of_the_bytes_values(
    bucket: bytes, mapping: dict[bytes, object], limit: int
) -> None:
    """Packed in C or in Python, the payloads are exactly the coalesced one-key PUTs of the
    values that are exactly bytes, in the dict's order (other values are skipped)."""
    expected = _pure_pack_puts(bucket, mapping, limit)
    assert list(pack_puts(bucket, mapping, limit)) == expected
    assert list(pack_puts(bucket, dict(mapping) | {}, limit)) == expected


def test_pack_puts_decodes_to_every_key_of_a_large_bucket() -> None:
    """100,000 keys in 64 KiB payloads decode to the same Puts; no payload is empty."""
    mapping: dict[bytes, object] = {b"key-%d" % i: b"v" * (i % 300) for i in range(100_000)}
    payloads = list(pack_puts(b"bucket", mapping))
    assert [op for p in payloads for op in decode_ops(p)] == [
        Put(b"bucket", k, v) for k, v in mapping.items()  # type: ignore[arg-type]
    ]
    assert all(len(p) >= _payload.PACKED_RECORD_BYTES for p in payloads[:-1])
    assert list(pack_puts(b"bucket", {})) == []


def test_pack_puts_refuses_a_key_that_is_not_bytes() -> None:
    """A key of another type is a TypeError (the C packer cannot encode it), not a bad record."""
    with pytest.raises(TypeError):
        list(pack_puts(b"b", {"text": b"v"}))  # type: ignore[dict-item]


def test_pack_puts_refuses_a_map_that_changes_size_while_packed() -> None:
    """A dict that grows between two payloads is refused: its positions no longer hold."""
    mapping: dict[bytes, object] = {b"k%d" % i: b"v" * 100 for i in range(100)}
    packed = pack_puts(b"b", mapping, limit=500)
    next(packed)
    mapping[b"new"] = b"v"
    with pytest.raises(RuntimeError, match="changed size"):
        list(packed)


@pytest.mark.skipif(not _payload.ACCELERATED, reason="the C packer is not built")
def test_pack_puts_in_c_checks_its_arguments() -> None:
    """The C function refuses wrong types and argument counts with TypeError."""
    pack_from = _payload._pack_puts_from
    assert pack_from is not None
    with pytest.raises(TypeError):
        pack_from("b", {}, 0, 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pack_from(b"b", [], 0, 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pack_from(b"b", {})  # type: ignore[call-arg]
    assert pack_from(b"b", {b"k": object()}, 0, 10) == (None, 1)


PLAIN_PUTS = st.lists(
    st.builds(Put, NAMES, NAMES, st.binary(max_size=300), st.none()), max_size=40
)


@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(PLAIN_PUTS, st.lists(OPS, max_size=3))
def test_encode_ops_of_a_list_is_the_general_encoding(puts: list[Op], others: list[Op]) -> None:
    """A list of puts without expiry (encoded in C when built) encodes to the same bytes as
    the general loop gives for the same operations; a list with any other operation too."""
    for ops in (puts, [*puts, *others], [*others, *puts]):
        if ops:
            assert encode_ops(ops) == encode_ops(iter(ops))
            assert decode_ops(encode_ops(ops)) == ops


def test_encode_ops_of_a_list_refuses_what_the_general_encoder_refuses() -> None:
    """Fields that are not bytes and an empty list get the general encoder's errors."""
    with pytest.raises(ValueError, match="at least one"):
        encode_ops([])
    with pytest.raises(TypeError):
        encode_ops([Put(b"b", "text", b"v")])  # type: ignore[arg-type]


# -- hostile arguments to the C packer (``_cpayload``), which the sanitizer run also drives ----

_needs_c = pytest.mark.skipif(not _payload.ACCELERATED, reason="C packer off or not built")
_POSITIONS = st.integers(-3, 70) | st.sampled_from([2**62, -(2**62), 2**63 - 1, -(2**63)])


def _model_pack_from(
    bucket: bytes, mapping: dict[object, object], pos: int, limit: int
) -> tuple[bytes | None, int]:
    """What ``pack_puts_from`` returns, for a dict without holes (a position is then the index
    of the next item): the PUTs of the bytes values from ``pos`` until ``limit`` is reached."""
    items = list(mapping.items())
    if not 0 <= pos < len(items):
        return None, pos
    payload, end = b"", pos
    for key, value in items[pos:]:
        end += 1
        if type(value) is not bytes:
            continue
        if type(key) is not bytes:
            raise TypeError("a key is not bytes")
        payload += encode_put(bucket, key, value)
        if len(payload) >= limit:
            break
    return payload or None, end


@_needs_c
@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(
    st.binary(max_size=10),
    st.dictionaries(
        st.binary(max_size=12) | st.sampled_from(["text", 7]),
        st.binary(max_size=60) | st.builds(_NotBytes) | st.builds(_BytesSubclass, st.binary()),
        max_size=30,
    ),
    _POSITIONS,
    st.integers(-5, 600),
)
def test_pack_puts_from_any_position_and_limit(
    bucket: bytes, mapping: dict[object, object], pos: int, limit: int
) -> None:
    """From any position (before the first item, past the last, far outside) and any limit
    (zero and negative included), the C packer returns what the model says, or refuses a key
    that is not bytes with TypeError as the model does."""
    mapping = dict(mapping)  # a fresh copy has no holes
    pack_from = _payload._pack_puts_from
    assert pack_from is not None
    try:
        expected: object = _model_pack_from(bucket, mapping, pos, limit)
    except TypeError:
        expected = TypeError
    try:
        got: object = pack_from(bucket, mapping, pos, limit)  # type: ignore[arg-type]
    except TypeError:
        got = TypeError
    assert got == expected


class _PutSubclass(Put):
    """A Put of another type: the C encoder must hand it to the general one."""


_FIELDS = (
    st.binary(max_size=20)
    | st.builds(_BytesSubclass, st.binary(max_size=5))
    | st.sampled_from(["text", bytearray(b"ba"), memoryview(b"mv"), 7, None])
)
_OP_LIKE = st.one_of(
    OPS,
    st.builds(Put, _FIELDS, _FIELDS, _FIELDS, st.none() | EXPIRY),
    st.builds(_PutSubclass, NAMES, NAMES, NAMES),
    st.tuples(NAMES, NAMES, NAMES, st.none()),
    st.sampled_from([None, b"PUT", (b"b",), ()]),
)


def _outcome(encode: Callable[[], bytes]) -> object:
    try:
        return encode()
    except (TypeError, ValueError) as exc:
        return type(exc)


@_needs_c
@settings(deadline=None)  # a loaded shared machine must not fail a property
@given(st.lists(_OP_LIKE, max_size=8))
def test_encode_plain_puts_of_any_list_is_none_or_the_general_encoding(ops: list[Any]) -> None:
    """Given any list (puts with fields of any type, Put subclasses, plain tuples, other
    objects), the C encoder answers None or exactly the general encoder's bytes, and
    ``encode_ops`` of the list ends as that of the same items one by one."""
    encode_plain_puts = _payload._encode_plain_puts
    assert encode_plain_puts is not None
    general = _outcome(lambda: encode_ops(iter(ops)))
    fast = encode_plain_puts(ops, Put)
    assert fast is None or fast == general
    assert _outcome(lambda: encode_ops(ops)) == general


@_needs_c
def test_encode_plain_puts_refuses_a_put_type_that_is_not_a_tuple() -> None:
    """Its ops' fields are read as a tuple's: any other type is refused, not read past."""
    encode_plain_puts = _payload._encode_plain_puts
    assert encode_plain_puts is not None

    class NotATuple:
        pass

    with pytest.raises(TypeError):
        encode_plain_puts([NotATuple()], NotATuple)
