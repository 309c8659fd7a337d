"""TaskRecord: strict JSON encode/decode, invariants, bounded sizes, the API view."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from minidb.batch import _machine as m
from minidb.batch._errors import InvalidRecord
from minidb.batch._model import (
    MAX_ERROR_MESSAGE_CHARS,
    MAX_PARAMS_BYTES,
    MAX_RECORD_BYTES,
    MAX_TASK_NAME_CHARS,
    RECENT_WRITE_IDS,
    OutputFile,
    Progress,
    TaskError,
    decode,
    encode,
    format_time,
    new_record,
    parse_time,
)
from tests.batch.conftest import LEASE, PHASES_ALL, T0, TASK_ID, in_phase, running


@pytest.mark.parametrize("phase", PHASES_ALL)
def test_record_round_trips_in_every_phase(phase: str) -> None:
    """decode(encode(r)) == r for a record in each phase of the machine."""
    record = in_phase(phase)
    assert decode(encode(record)) == record


def test_record_with_output_and_progress_round_trips() -> None:
    """Output files, progress and result survive the JSON form."""
    record = m.complete(
        running(), T0 + 5000, lease_id=LEASE, result={"rows_ok": 3, "nested": [1, None]},
        files=[OutputFile("errors.csv", 12)],
        progress=Progress(rows_done=4, rows_ok=3, rows_failed=1, bytes_done=80, bytes_total=80),
    )
    back = decode(encode(record))
    assert back == record and back.output is not None
    assert back.output.files == (OutputFile("errors.csv", 12),)


def test_times_are_rfc3339_utc_with_milliseconds() -> None:
    """Times are written as RFC 3339 UTC with milliseconds, and only that form is read."""
    assert format_time(T0 + 7) == "2025-12-01T10:30:00.007Z"
    assert parse_time("2025-12-01T10:30:00.007Z") == T0 + 7
    for bad in ["2025-12-01T10:30:00Z", "2025-12-01T10:30:00.007+00:00", "2025-13-01T10:30:00.000Z",
                "2025-02-30T10:30:00.000Z", 5, None]:
        with pytest.raises(InvalidRecord):
            parse_time(bad)


def test_api_view_hides_only_the_lease_id() -> None:
    """The API view is the record without lease.lease_id (the fencing token)."""
    record = running()
    view = record.api_view()
    assert view["lease"] == {"worker": "w-1", "expires_at": format_time(T0 + 32_000)}
    stored = json.loads(encode(record))
    del stored["lease"]["lease_id"]
    assert view == stored
    assert LEASE not in json.dumps(view)


def _mutated(change: Any) -> bytes:
    data = json.loads(encode(running()))
    change(data)
    return json.dumps(data).encode()


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.pop("rev"),
        lambda d: d.update(extra=1),
        lambda d: d.update(schema_version=2),
        lambda d: d.update(id="../../etc/passwd"),
        lambda d: d.update(state="paused"),
        lambda d: d.update(rev=0),
        lambda d: d.update(rev=True),
        lambda d: d.update(attempt=2),
        lambda d: d.update(lease=None),
        lambda d: d["lease"].update(lease_id="short"),
        lambda d: d["lease"].update(expires_at="yesterday"),
        lambda d: d["attempts"][0].update(n=2),
        lambda d: d["attempts"][0].update(outcome="succeeded"),
        lambda d: d["attempts"][0].update(worker="w 1"),
        lambda d: d["progress"].update(rows_done=-1),
        lambda d: d["progress"].pop("rows_ok"),
        lambda d: d.update(cancel_requested="yes"),
        lambda d: d.update(write_id="f" * 32),
        lambda d: d.update(recent_write_ids=[]),
        lambda d: d.update(queue_marker=None),
        lambda d: d.update(queue_marker="queue/0000000000001_01KBCQCK21JZ7R9YTJGD1AH5T3_"
                           "0123456789abcdef"),
        lambda d: d.update(created_by="../root"),
        lambda d: d.update(name="x" * (MAX_TASK_NAME_CHARS + 1)),
        lambda d: d.update(params={"p": "x" * MAX_PARAMS_BYTES}),
        lambda d: d.update(params=[]),
        lambda d: d.update(error={"code": "Bad Code", "message": "m"}),
        lambda d: d.update(error={"code": "x", "message": "m" * (MAX_ERROR_MESSAGE_CHARS + 1)}),
        lambda d: d.update(max_attempts=0),
        lambda d: d.update(budget_from=5),
        lambda d: d.update(output={"attempt": 1, "files": []}),
        lambda d: d.update(updated_at="1999-01-01T00:00:00.000Z"),
        lambda d: d.update(type="CSV Import"),
    ],
)
def test_decode_refuses_invalid_records(change: Any) -> None:
    """A record that breaks a field rule or a cross-field invariant is an InvalidRecord."""
    with pytest.raises(InvalidRecord):
        decode(_mutated(change))


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xff\xfe",
        b"[]",
        b"null",
        b'{"rev": NaN}',
        b"{" + b" " * MAX_RECORD_BYTES + b"}",
    ],
)
def test_decode_refuses_non_records(raw: bytes) -> None:
    """Bytes that are not a JSON object of the right size are refused."""
    with pytest.raises(InvalidRecord):
        decode(raw)


def test_decode_refuses_duplicate_keys() -> None:
    """A JSON object with a key twice is ambiguous and refused."""
    raw = encode(running())
    with pytest.raises(InvalidRecord):
        decode(raw[:-1] + b',"rev":99}')


def test_invalid_record_names_the_field() -> None:
    """The error says which field failed."""
    with pytest.raises(InvalidRecord) as info:
        decode(_mutated(lambda d: d["progress"].update(rows_done=-1)))
    assert info.value.field == "progress.rows_done"


def test_encode_refuses_an_invalid_record() -> None:
    """A record built wrongly in memory is refused before it is written."""
    with pytest.raises(InvalidRecord):
        encode(replace(running(), lease=None))
    with pytest.raises(InvalidRecord):
        encode(replace(running(), params={"x": float("nan")}))


def test_new_record_validates() -> None:
    """new_record refuses bad ids, users and oversized params."""
    for kwargs in [
        {"task_id": "nope"},
        {"created_by": "a/b"},
        {"params": {"p": "x" * MAX_PARAMS_BYTES}},
        {"max_attempts": 0},
    ]:
        args: dict[str, Any] = {
            "task_id": TASK_ID, "task_type": "sleep", "params": {}, "created_by": "alice",
            "now_ms": T0,
        }
        args.update(kwargs)
        with pytest.raises(InvalidRecord):
            new_record(**args)


def test_every_write_is_unique_and_remembered() -> None:
    """Each write bumps rev, has a fresh write_id, and the last 8 are remembered."""
    record = running()
    seen = [record.write_id]
    for i in range(20):
        record = m.heartbeat(record, T0 + 3000 + i, lease_id=LEASE)
        assert record.write_id not in seen
        seen.append(record.write_id)
    assert record.recent_write_ids == tuple(seen[-RECENT_WRITE_IDS:])
    assert len({encode(record)} | {encode(m.heartbeat(record, T0 + 4000, lease_id=LEASE))}) == 2


def test_identical_transitions_give_different_bytes() -> None:
    """The same transition applied twice yields different bytes (no ABA via equal ETags)."""
    record = running()
    a = m.heartbeat(record, T0 + 5000, lease_id=LEASE)
    b = m.heartbeat(record, T0 + 5000, lease_id=LEASE)
    assert encode(a) != encode(b)


def test_task_error_of_cuts_long_messages() -> None:
    """TaskError.of keeps messages within the bound."""
    error = TaskError.of("x", "m" * 5000)
    assert len(error.message) == MAX_ERROR_MESSAGE_CHARS
