"""The log reader's C twin (``_creader.c``) held to the Python reader: the same records, the same
operations, the same stopping point and the same refusal, for random logs and random damage."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.errors import CorruptionError
from minidb.replication import DamagedObject, chunk_for
from minidb.replication._restore import chunk_span
from minidb.store._keyspace import Keyspace
from minidb.wal import PayloadError, _inspect, _reader, decode_ops, encode_ops
from minidb.wal._checkpoint import snapshot_chunks, snapshot_count, snapshot_records
from minidb.wal._files import MANIFEST_NAME, segment_name, snapshot_name
from minidb.wal._format import (
    FILE_HEADER_SIZE,
    FORMAT_VERSION,
    LEGACY_VERSION,
    RECORD_HEADER_SIZE,
    STRINGS_VERSION,
    FileKind,
    Malformed,
    RecordType,
    encode_end,
    encode_header,
    encode_record,
)
from minidb.wal._manifest import Manifest
from minidb.wal._ops import (
    KIND_SET,
    AddElements,
    Copy,
    Expire,
    Flush,
    ListPop,
    ListPush,
    ListRemove,
    Op,
    Put,
    Remove,
    Rename,
)
from minidb.wal._reader import RecordReader, segment_records
from minidb.wal._recovery import Entry, Recovery, _decode_spec
from minidb.wal._seed import segment_copy_offsets

pytestmark = pytest.mark.accelerator  # tests/sanitizers/run.py runs these under ASan and UBSan

C_BUILT = _reader.ACCELERATED
needs_c = pytest.mark.skipif(not C_BUILT, reason="the C reader is not built")
if C_BUILT:
    from minidb.wal import _creader  # type: ignore[attr-defined]

NAMES = st.binary(max_size=6)
EXPIRY = st.none() | st.integers(min_value=-(1 << 63) + 1, max_value=(1 << 63) - 1)
STRING_OPS: st.SearchStrategy[Op] = st.one_of(
    st.builds(Put, NAMES, NAMES, st.binary(max_size=40), EXPIRY),
    st.builds(Put, st.just(b"0"), NAMES, st.binary(max_size=40), st.none()),
    st.builds(Remove, NAMES, NAMES),
    st.builds(Expire, NAMES, NAMES, EXPIRY),
    st.builds(Flush, st.none() | NAMES),
)
# Operations of version 3 that the C decoder does not know: it hands them to decode_ops.
TYPED_OPS: st.SearchStrategy[Op] = st.one_of(
    st.builds(Rename, NAMES, NAMES, NAMES),
    st.builds(Copy, NAMES, NAMES, NAMES, NAMES),
    st.builds(AddElements, NAMES, NAMES, st.just(KIND_SET), st.tuples(NAMES)),
    st.builds(ListPush, NAMES, NAMES, st.booleans(), st.tuples(NAMES)),
    st.builds(ListPop, NAMES, NAMES, st.booleans(), st.integers(1, 9)),
    st.builds(ListRemove, NAMES, NAMES, st.sampled_from([-2, 1]), NAMES),
)
PAYLOADS = st.lists(
    st.lists(STRING_OPS, min_size=1, max_size=3).map(encode_ops)
    | st.lists(STRING_OPS | TYPED_OPS, min_size=1, max_size=3).map(encode_ops)
    # Payloads that pass their checksum and do not decode: damage C must leave to Python (some
    # with lengths of 4 GiB - 1, which must not wrap around).
    | st.sampled_from([b"", b"\x00", b"\x01\x00", b"\x63abc", b"\x02\x05\x00\x00\x00\x00"])
    | st.sampled_from([b"\x01" + bytes(8) + b"\xff" * 12, b"\x02" + b"\xff" * 8 + b"ab",
                       b"\x03" + bytes(12) + b"\xff" * 4, b"\x04\xff\xff\xff\xffab"])
    | st.binary(max_size=30),
    max_size=12,
)
BASES = st.sampled_from([0, 1, 7, 1 << 32, (1 << 63) + 5])


@contextlib.contextmanager
def reading(c: bool) -> Iterator[None]:
    """The reader with its C twin (when built) or pure Python (the reference)."""
    saved = _reader._creader
    if not c:
        _reader._creader = None
    try:
        yield
    finally:
        _reader._creader = saved


@st.composite
def damaged(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` as it is, cut, with a byte changed, a range zeroed, or bytes added or inserted."""
    how = draw(st.sampled_from(["none", "cut", "flip", "zero", "append", "insert"]))
    at = draw(st.integers(min_value=0, max_value=len(data)))
    if how == "cut":
        return data[:at]
    if how == "flip" and at < len(data):
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
    if how == "zero":
        span = draw(st.integers(1, 40))
        return data[:at] + bytes(len(data[at : at + span])) + data[at + span :]
    if how in ("append", "insert"):
        extra = draw(st.binary(min_size=1, max_size=30))
        return data + extra if how == "append" else data[:at] + extra + data[at:]
    return data


def framed(base: int, payloads: list[bytes], *, end: bool, version: int = FORMAT_VERSION) -> bytes:
    """A segment holding ``payloads`` from record ``base``, closed by END if ``end``."""
    out = [encode_header(FileKind.SEGMENT, base, version)]
    out += [encode_record(base + i, p, version=version) for i, p in enumerate(payloads)]
    if end:
        out.append(encode_end(base + len(payloads), len(payloads), version))
    return b"".join(out)


def typed(ops: list[Op]) -> list[tuple[type, Op]]:
    # Named tuples compare as tuples: compare their types too.
    return [(type(op), op) for op in ops]


# -- the checksum ---------------------------------------------------------------------------


@needs_c
@settings(deadline=None)
@given(st.binary(max_size=300), st.integers(0, (1 << 32) - 1), st.integers(0, 7))
def test_creader_crc32c_matches_google_crc32c(data: bytes, initial: int, shift: int) -> None:
    """Both of C's CRC32C (the CPU's instruction when it has one, and the table) agree with
    google-crc32c, from any starting value and at any alignment."""
    view = memoryview(data)[min(shift, len(data)) :]
    expected = google_crc32c.extend(initial, bytes(view))
    assert _creader.crc32c(view, initial) == expected
    assert _creader.crc32c(view, initial, portable=True) == expected


# -- one file: the C run against the reference reader ---------------------------------------


def reference_run(buf: bytes, base: int, version: int) -> tuple[list[Any], int, int]:
    """What the C walks should take, by the Python reader: the DATA records before the first
    END or problem (``scan_run``: their count and where they end), and of those the ones
    before the first payload that does not decode (``decode_run``: entries, where they end)."""
    entries: list[Any] = []
    decoding = True
    scanned = stop = FILE_HEADER_SIZE
    with contextlib.suppress(Malformed):
        for record in RecordReader(buf, base, version=version):
            if record.type is not RecordType.DATA:
                break
            end = record.offset + RECORD_HEADER_SIZE + len(record.payload)
            scanned = end
            if decoding:
                try:
                    ops = decode_ops(record.payload, version)
                except PayloadError:
                    decoding = False
                    continue
                entries.append((record.number, record.offset, typed(ops)))
                stop = end
    return entries, stop, scanned


@needs_c
@settings(deadline=None)
@given(PAYLOADS, BASES, st.sampled_from([FORMAT_VERSION, STRINGS_VERSION]), st.data())
def test_creader_runs_stop_where_the_reference_stops(
    payloads: list[bytes], base: int, version: int, data: st.DataObject
) -> None:
    """On any segment, damaged anyhow, C takes exactly the records the Python reader yields
    before its first END or problem, decoded as ``decode_ops`` decodes them, and stops before
    the first whose payload does not decode (or, only checking, before the first END or
    problem), in runs of any length; it hands Python only payloads that hold other ops or do
    not decode."""
    buf = data.draw(damaged(framed(base, payloads, end=data.draw(st.booleans()), version=version)))
    if len(buf) < FILE_HEADER_SIZE:
        return
    entries, stop, scanned = reference_run(buf, base, version)
    limit = data.draw(st.integers(1, 5))
    handed: list[bytes] = []

    def fallback(payload: bytes) -> list[Op]:
        handed.append(payload)
        return decode_ops(payload, version)

    spec = (Entry, Put, Remove, Expire, Flush, fallback, PayloadError)
    reader = RecordReader(buf, base, version=version)
    got: list[Any] = []
    while run := reader.decode_plain(limit, spec):
        assert len(run) <= limit
        got += [(e.number, e.offset, typed(e.ops)) for e in run]
        assert all(type(e) is Entry for e in run)
    assert got == entries
    assert (reader.good_offset, reader.count) == (stop, len(entries))
    for payload in handed:  # C decodes every payload of string ops itself
        with contextlib.suppress(PayloadError):
            ops = decode_ops(payload, version)
            assert not all(type(op) in (Put, Remove, Expire, Flush) for op in ops), payload
    skipper = RecordReader(buf, base, version=version)
    taken = 0
    while step := skipper.skip_plain(limit):
        taken += step
    assert skipper.good_offset == scanned
    assert skipper.count == taken


@needs_c
def test_creader_hands_unknown_tags_to_the_fallback() -> None:
    """An operation tag C does not know (one added in Python later) goes to the fallback, whose
    ops are taken as they are; if the fallback refuses it, the run stops before that record."""
    known = encode_ops([Put(b"b", b"k", b"v")])
    buf = framed(0, [known, b"\x63new", known], end=False)

    def fallback(payload: bytes) -> list[Any]:
        if payload == b"\x63new":
            return ["a new op"]
        raise PayloadError("unknown", 0)

    spec = (Entry, Put, Remove, Expire, Flush, fallback, PayloadError)
    entries, pos = _creader.decode_run(buf, FILE_HEADER_SIZE, 0, 10, spec)
    put = [Put(b"b", b"k", b"v")]
    assert [e.ops for e in entries] == [put, ["a new op"], put]
    assert pos == len(buf)
    refused = framed(0, [known, b"\x64", known], end=False)
    entries, pos = _creader.decode_run(refused, FILE_HEADER_SIZE, 0, 10, spec)
    assert len(entries) == 1 and pos == entries[0].offset + RECORD_HEADER_SIZE + len(known)


@needs_c
def test_creader_other_fallback_errors_propagate() -> None:
    """An exception from the fallback other than its decode error is not swallowed."""

    def broken(payload: bytes) -> list[Any]:
        raise KeyError("bug")

    spec = (Entry, Put, Remove, Expire, Flush, broken, PayloadError)
    with pytest.raises(KeyError):
        _creader.decode_run(framed(0, [b"\x63"], end=False), FILE_HEADER_SIZE, 0, 10, spec)


@needs_c
def test_creader_refuses_bad_arguments() -> None:
    """A position outside the buffer, a negative limit, or a spec that is not named tuples
    and a decoder is a TypeError or ValueError, never a read out of bounds."""
    buf = framed(0, [encode_ops([Remove(b"b", b"k")])], end=False)
    spec = _decode_spec(FORMAT_VERSION)
    for pos, limit in ((len(buf) + 1, 1), (-1, 1), (FILE_HEADER_SIZE, -1)):
        with pytest.raises(ValueError):
            _creader.scan_run(buf, pos, 0, limit)
        with pytest.raises(ValueError):
            _creader.decode_run(buf, pos, 0, limit, spec)
    with pytest.raises(TypeError):
        _creader.decode_run(buf, FILE_HEADER_SIZE, 0, 1, (Entry, dict, Remove, Expire, Flush))
    with pytest.raises(TypeError):
        _creader.decode_run(buf, FILE_HEADER_SIZE, 0, 1, (*spec[:5], None, PayloadError))
    assert _creader.scan_run(buf, len(buf), 0, 5) == (len(buf), 0)


def test_creader_version1_files_are_read_by_python_alone() -> None:
    """Version 1 is framed differently: C takes nothing there."""
    buf = framed(0, [b"SET b k v"], end=False, version=LEGACY_VERSION)
    reader = RecordReader(buf, 0, version=LEGACY_VERSION)
    assert not reader.reads_plain()
    assert reader.skip_plain() == 0
    assert reader.decode_plain(10, _decode_spec(LEGACY_VERSION)) == []
    assert [r.payload for r in reader] == [b"SET b k v"]


# -- a data directory: replay, wal check and wal dump, both ways ----------------------------


@st.composite
def data_dirs(draw: st.DrawFn) -> dict[str, bytes]:
    """The files of a data directory: a manifest, maybe a snapshot, one or two segments (the
    older closed by END), one file damaged at random."""
    base = draw(st.sampled_from([0, 3, 1 << 40]))
    version = draw(st.sampled_from([FORMAT_VERSION, STRINGS_VERSION]))
    files: dict[str, bytes] = {}
    snapshot = base if base else None
    if snapshot is not None:
        payloads = draw(PAYLOADS)
        snap = [encode_header(FileKind.SNAPSHOT, base, version)]
        snap += [encode_record(i, p, version=version) for i, p in enumerate(payloads)]
        snap.append(encode_end(len(payloads), len(payloads), version))
        files[snapshot_name(base)] = b"".join(snap)
    files[MANIFEST_NAME] = Manifest(snapshot, base).encode()
    first = draw(PAYLOADS)
    if draw(st.booleans()):
        files[segment_name(base)] = framed(base, first, end=True, version=version)
        after = base + len(first)
        files[segment_name(after)] = framed(after, draw(PAYLOADS), end=False, version=version)
    else:
        files[segment_name(base)] = framed(base, first, end=draw(st.booleans()), version=version)
    victim = draw(st.sampled_from(sorted(n for n in files if n != MANIFEST_NAME)))
    files[victim] = draw(damaged(files[victim]))
    return files


def appliable(op: Op) -> bool:
    """A string op with a deadline the keyspace's wheel takes (the keyspace's own tests cover
    the rest): what the keyspace comparison applies."""
    if type(op) in (Put, Expire):
        return op[-1] is None or 0 <= op[-1] < 1 << 40
    return type(op) in (Remove, Flush)


def replay(directory: str) -> tuple[Any, ...]:
    """Everything a replay shows: the entries, the refusal, the reports and the tail, the
    keyspace the string ops make, and what ``wal check`` and ``wal dump`` print."""
    recovery = Recovery(directory)
    entries = []
    refusal = None
    keyspace = Keyspace(now_ms=0)
    try:
        for entry in recovery.records():
            entries.append((type(entry), entry.number, entry.offset, typed(entry.ops)))
            if all(map(appliable, entry.ops)):
                keyspace.apply_ops(entry.ops, 0)
    except CorruptionError as exc:
        refusal = (str(exc), exc.path, exc.offset)
    printed = []
    for tool in (_inspect.check, _inspect.dump):
        out, err = io.StringIO(), io.StringIO()
        printed.append((tool(directory, out, err), out.getvalue(), err.getvalue()))
    state = sorted(keyspace.items()), len(keyspace)
    return entries, refusal, recovery.reports, recovery.tail, recovery.log_bytes, state, printed


@settings(deadline=None, max_examples=150)
@given(data_dirs())
def test_creader_replay_matches_pure_python(files: dict[str, bytes]) -> None:
    """Replaying a data directory, intact or damaged, yields the same records and operations,
    stops at the same place with the same refusal (file, offset, message), leaves the same
    keyspace, and ``minidb wal check`` / ``wal dump`` print the same, with C as without."""
    with tempfile.TemporaryDirectory() as directory:
        for name, content in files.items():
            with open(os.path.join(directory, name), "wb") as f:
                f.write(content)
        with reading(c=True):
            fast = replay(directory)
        with reading(c=False):
            pure = replay(directory)
    assert fast == pure


# -- restore: snapshot counts and chunk offsets ----------------------------------------------


def outcome(call: Any) -> Any:
    try:
        return call()
    except Malformed as exc:
        return ("Malformed", exc.reason, exc.offset, exc.torn)
    except CorruptionError as exc:
        return ("CorruptionError", str(exc), exc.offset)


@settings(deadline=None)
@given(PAYLOADS, BASES, st.data())
def test_creader_snapshot_count_matches_the_reader(
    payloads: list[bytes], base: int, data: st.DataObject
) -> None:
    """A restore's check of a snapshot counts what the reader counts and refuses what it
    refuses, with C as without."""
    buf = data.draw(damaged(b"".join(snapshot_chunks(base, payloads))))
    with reading(c=False):
        expected = outcome(lambda: sum(1 for _ in snapshot_records(buf, base)))
        assert outcome(lambda: snapshot_count(buf, base)) == expected
    with reading(c=True):
        assert outcome(lambda: snapshot_count(buf, base)) == expected


@settings(deadline=None)
@given(PAYLOADS, BASES, st.data())
def test_creader_segment_copy_offsets_agree_with_the_reader(
    payloads: list[bytes], base: int, data: st.DataObject
) -> None:
    """``segment_copy_offsets`` answers exactly when a copy of a segment is whole DATA records
    throughout and holds the records asked for (with C; never without), and its offsets are
    where the reader finds them."""
    buf = data.draw(damaged(framed(base, payloads, end=data.draw(st.booleans()))))
    numbers = sorted(set(data.draw(st.lists(st.integers(base, base + 14), max_size=3))))
    with reading(c=False):
        assert segment_copy_offsets(buf, base, numbers) is None
        try:
            reader, records = segment_records(buf, base)
            starts = {r.number: r.offset for r in records}
        except Malformed:
            starts = None
    with reading(c=True):
        offsets = segment_copy_offsets(buf, base, numbers)
    if starts is None:
        assert offsets is None
        return
    starts[base + len(starts)] = reader.good_offset
    plain = not reader.sealed and all(n in starts for n in numbers)
    expected = [starts[n] for n in numbers] if plain else None
    assert offsets == (expected if C_BUILT else None)


@settings(deadline=None)
@given(st.integers(1, 8), st.data())
def test_creader_restore_chunk_span_matches_pure_python(count: int, data: st.DataObject) -> None:
    """A restore locates the records it applies in a chunk, and refuses a damaged chunk, the
    same with C as without: the same offsets, or the same ``DamagedObject`` message."""
    first = data.draw(st.sampled_from([1, 1000, 1 << 40]))
    payloads = [encode_ops([Put(b"0", b"k%d" % i, b"v" * i)]) for i in range(count)]
    chunk_data = data.draw(damaged(framed(first, payloads, end=False)))
    named = data.draw(st.integers(0, count + 1))  # the records its name says (maybe wrong)
    chunk = chunk_for("0000000000000-00000000", first, first + max(named, 1) - 1, 0, chunk_data)
    apply_from = data.draw(st.integers(chunk.first, chunk.last))
    apply_to = data.draw(st.integers(apply_from, chunk.last))

    def span() -> Any:
        try:
            return chunk_span(chunk, chunk_data, apply_from, apply_to)
        except DamagedObject as exc:
            return str(exc)

    with reading(c=False):
        expected = span()
    with reading(c=True):
        assert span() == expected


def test_creader_pure_python_switch() -> None:
    """``MINIDB_PURE_PYTHON=1`` keeps the reader pure even when the C twin is built."""
    code = "from minidb.wal import _reader; print(_reader.ACCELERATED)"
    env = {**os.environ, "MINIDB_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
