"""``TaskRecord``: the whole of a task's ``status.json``, and its strict JSON form.

The record is the truth about a task; everything else in storage (markers, the user index) is a
hint derived from it. It is a frozen value: the state machine (``_machine``) makes a new one per
write. Times are Unix milliseconds in memory and RFC 3339 UTC with milliseconds on the wire
(``2026-12-01T10:30:41.123Z``), the only time format ``decode`` accepts.

Theory of operation: every write goes through ``with_write`` (``rev`` + 1, a fresh random
``write_id``, appended to ``recent_write_ids``, ``updated_at``), so no two writes ever produce the
same bytes. That matters twice: S3's ETag of a single-part object is the MD5 of its bytes, so
an A→B→A rewrite would make a stale ``If-Match`` succeed (ABA) if bytes could repeat; and after a
write whose outcome is unknown the writer re-reads and looks for its ``write_id`` in the record
or among the last ``RECENT_WRITE_IDS`` ones (another writer may already have written on top).

``decode`` validates everything, including the cross-field invariants (``check_invariants``);
a record that fails is an ``InvalidRecord`` naming the field, never half-trusted.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, cast

from minidb.batch._errors import InvalidRecord, InvalidTaskId
from minidb.batch._ids import parse_task_id
from minidb.batch._keys import (
    MAX_ATTEMPT_NUMBER,
    check_file_name,
    check_user,
    parse_marker_key,
)

SCHEMA_VERSION: Final = 1
"""``schema_version`` of the records this module writes; others are refused."""

# Bounds, so that one record stays small enough to read, CAS and list cheaply.
MAX_RECORD_BYTES = 256 * 1024
"""An encoded record larger than this is refused (1000 attempts of history fit)."""
MAX_TASK_NAME_CHARS = 200
"""A task's display name, in characters."""
MAX_PARAMS_BYTES = 4096
"""The params object, as compact UTF-8 JSON."""
MAX_RESULT_BYTES = 4096
"""The result object a task type reports, as compact UTF-8 JSON."""
MAX_ERROR_MESSAGE_CHARS = 1000
"""``error.message``; longer messages are cut by ``TaskError.of`` (the code is what matters)."""
MAX_ERROR_CODE_CHARS = 64
"""``error.code`` is a short stable token such as ``bad_header``."""
MAX_WORKER_CHARS = 128
"""A worker id (host name, pod name, pid...)."""
MAX_OUTPUT_FILES = 16
"""Files one attempt may declare as its output."""
MAX_ATTEMPTS_LIMIT = 100
"""The largest ``max_attempts`` (per budget) a task may ask for."""
RECENT_WRITE_IDS = 8
"""How many of the latest write ids a record remembers, for reconciliation."""

State = Literal["created", "queued", "running", "succeeded", "failed", "cancelled"]
STATES: Final[tuple[State, ...]] = (
    "created", "queued", "running", "succeeded", "failed", "cancelled",
)
TERMINAL: Final[frozenset[str]] = frozenset({"succeeded", "failed", "cancelled"})
Outcome = Literal["succeeded", "failed", "lease_expired", "released", "cancelled"]
OUTCOMES: Final[tuple[Outcome, ...]] = (
    "succeeded", "failed", "lease_expired", "released", "cancelled",
)

_HEX_ID = re.compile(r"[0-9a-f]{32}", re.ASCII)
_WORKER = re.compile(rf"[A-Za-z0-9_.:@-]{{1,{MAX_WORKER_CHARS}}}", re.ASCII)
_TYPE = re.compile(r"[a-z][a-z0-9_]{0,63}", re.ASCII)
_CODE = re.compile(rf"[a-z][a-z0-9_]{{0,{MAX_ERROR_CODE_CHARS - 1}}}", re.ASCII)
_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z", re.ASCII)
_MAX_INT = 2**63 - 1


def new_write_id() -> str:
    """A fresh random id for one write (also the form of lease ids): 32 hex digits."""
    return secrets.token_hex(16)


# --- time -----------------------------------------------------------------------------------


def format_time(ms: int) -> str:
    """Unix milliseconds as RFC 3339 UTC with milliseconds."""
    moment = _dt.datetime.fromtimestamp(ms // 1000, _dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


def parse_time(text: object, name: str = "time") -> int:
    """The Unix milliseconds of a ``format_time`` string; anything else is ``InvalidRecord``."""
    match = _TIME.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidRecord(f"not an RFC 3339 UTC time with milliseconds: {text!r:.60}", field=name)
    y, mo, d, h, mi, s, frac = (int(g) for g in match.groups())
    try:
        moment = _dt.datetime(y, mo, d, h, mi, s, tzinfo=_dt.UTC)
    except ValueError as exc:
        raise InvalidRecord(f"not a valid time: {text!r}", field=name) from exc
    if moment.year < 1970:
        raise InvalidRecord("time before 1970", field=name)
    return int(moment.timestamp()) * 1000 + frac


# --- parts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One claim of the task by a worker; ``outcome`` is None while it runs."""

    n: int
    worker: str
    started_at: int
    ended_at: int | None = None
    outcome: Outcome | None = None


@dataclass(frozen=True)
class Progress:
    """What the running (or last) attempt reported; ``bytes_total`` None when unknown."""

    rows_done: int = 0
    rows_ok: int = 0
    rows_failed: int = 0
    bytes_done: int = 0
    bytes_total: int | None = None


@dataclass(frozen=True)
class TaskError:
    """Why an attempt (or the task) failed: a stable ``code`` and a human ``message``."""

    code: str
    message: str

    @classmethod
    def of(cls, code: str, message: str) -> TaskError:
        """A ``TaskError`` with the message cut to ``MAX_ERROR_MESSAGE_CHARS``."""
        if len(message) > MAX_ERROR_MESSAGE_CHARS:
            message = message[: MAX_ERROR_MESSAGE_CHARS - 3] + "..."
        return cls(code, message)


@dataclass(frozen=True)
class OutputFile:
    """One file an attempt wrote under ``outputs/<id>/attempt-<n>/``."""

    name: str
    size: int


@dataclass(frozen=True)
class Output:
    """The authoritative output: which attempt's files, set in the CAS that marks success."""

    attempt: int
    files: tuple[OutputFile, ...]


@dataclass(frozen=True)
class Lease:
    """The live claim: ``lease_id`` is the fencing token, never shown by the API."""

    worker: str
    lease_id: str
    expires_at: int


@dataclass(frozen=True)
class TaskRecord:
    """The whole ``status.json``. Build with ``new_record``; change with ``_machine``."""

    id: str
    type: str
    name: str
    params: Mapping[str, Any]
    created_by: str
    created_at: int
    updated_at: int
    state: State = "created"
    cancel_requested: bool = False
    attempt: int = 0
    """The number of the latest attempt (0 before the first claim)."""
    budget_from: int = 0
    """Attempts numbered above this belong to the current budget (a retry moves it up)."""
    max_attempts: int = 3
    attempts: tuple[Attempt, ...] = ()
    progress: Progress = field(default_factory=Progress)
    result: Mapping[str, Any] | None = None
    error: TaskError | None = None
    output: Output | None = None
    not_before: int | None = None
    lease: Lease | None = None
    queue_marker: str | None = None
    """The key of the one queue marker that is live for this record; any other is stale."""
    rev: int = 1
    write_id: str = ""
    recent_write_ids: tuple[str, ...] = ()

    def spent(self) -> int:
        """Attempts of the current budget that count against ``max_attempts`` (not released)."""
        return sum(
            1 for a in self.attempts if a.n > self.budget_from and a.outcome != "released"
        )

    def with_write(self, now_ms: int, write_id: str | None = None, **changes: Any) -> TaskRecord:
        """This record changed by ``changes`` as one new write (rev, write id, updated_at)."""
        wid = write_id if write_id is not None else new_write_id()
        recent = (*self.recent_write_ids, wid)[-RECENT_WRITE_IDS:]
        updated = max(now_ms, self.updated_at)  # a clock stepped back never moves time backward
        return replace(
            self, **changes, rev=self.rev + 1, write_id=wid, recent_write_ids=recent,
            updated_at=updated,
        )

    def api_view(self) -> dict[str, Any]:
        """The record as the API shows it: everything but the lease id (the fencing token)."""
        view = to_json(self)
        if view["lease"] is not None:
            del view["lease"]["lease_id"]
        return view


def new_record(
    task_id: str,
    task_type: str,
    params: Mapping[str, Any],
    *,
    created_by: str,
    now_ms: int,
    name: str = "",
    max_attempts: int = 3,
    write_id: str | None = None,
) -> TaskRecord:
    """The first record of a task (state ``created``, rev 1), validated."""
    wid = write_id if write_id is not None else new_write_id()
    record = TaskRecord(
        id=task_id, type=task_type, name=name, params=dict(params), created_by=created_by,
        created_at=now_ms, updated_at=now_ms, max_attempts=max_attempts,
        write_id=wid, recent_write_ids=(wid,),
    )
    return decode(encode(record))


# --- JSON -----------------------------------------------------------------------------------


def to_json(record: TaskRecord) -> dict[str, Any]:
    """The record as the JSON object stored in ``status.json`` (a fresh dict)."""
    lease = record.lease
    output = record.output
    return {
        "schema_version": SCHEMA_VERSION,
        "id": record.id,
        "type": record.type,
        "name": record.name,
        "params": dict(record.params),
        "state": record.state,
        "cancel_requested": record.cancel_requested,
        "attempt": record.attempt,
        "budget_from": record.budget_from,
        "max_attempts": record.max_attempts,
        "attempts": [
            {
                "n": a.n, "worker": a.worker, "started_at": format_time(a.started_at),
                "ended_at": None if a.ended_at is None else format_time(a.ended_at),
                "outcome": a.outcome,
            }
            for a in record.attempts
        ],
        "progress": {
            "rows_done": record.progress.rows_done, "rows_ok": record.progress.rows_ok,
            "rows_failed": record.progress.rows_failed,
            "bytes_done": record.progress.bytes_done, "bytes_total": record.progress.bytes_total,
        },
        "result": None if record.result is None else dict(record.result),
        "error": None if record.error is None else {
            "code": record.error.code, "message": record.error.message,
        },
        "output": None if output is None else {
            "attempt": output.attempt,
            "files": [{"name": f.name, "size": f.size} for f in output.files],
        },
        "created_by": record.created_by,
        "created_at": format_time(record.created_at),
        "updated_at": format_time(record.updated_at),
        "not_before": None if record.not_before is None else format_time(record.not_before),
        "lease": None if lease is None else {
            "worker": lease.worker, "lease_id": lease.lease_id,
            "expires_at": format_time(lease.expires_at),
        },
        "queue_marker": record.queue_marker,
        "rev": record.rev,
        "write_id": record.write_id,
        "recent_write_ids": list(record.recent_write_ids),
    }


def encode(record: TaskRecord) -> bytes:
    """The bytes of ``status.json``: compact UTF-8 JSON, after validating the record."""
    check_invariants(record)
    data = json.dumps(to_json(record), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    raw = data.encode("utf-8")
    if len(raw) > MAX_RECORD_BYTES:
        raise InvalidRecord(f"record is {len(raw)} bytes, over {MAX_RECORD_BYTES}")
    return raw


def decode(raw: bytes) -> TaskRecord:
    """The record in ``raw``, fully validated; anything else raises ``InvalidRecord``."""
    if len(raw) > MAX_RECORD_BYTES:
        raise InvalidRecord(f"record is {len(raw)} bytes, over {MAX_RECORD_BYTES}")
    try:
        data = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constant
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidRecord(f"not UTF-8 JSON: {exc}") from exc
    record = from_json(data)
    check_invariants(record)
    return record


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate key in object")
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _Reader:
    """Reads one JSON object with exactly the expected keys, naming the field on failure."""

    def __init__(self, data: object, where: str, keys: frozenset[str]) -> None:
        if not isinstance(data, dict):
            raise InvalidRecord("must be an object", field=where)
        extra, missing = set(data) - keys, keys - set(data)
        if extra or missing:
            raise InvalidRecord(
                f"unexpected {sorted(extra)} / missing {sorted(missing)}", field=where
            )
        self.data: dict[str, Any] = data
        self.where = where

    def name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def integer(self, key: str, low: int = 0, high: int = _MAX_INT) -> int:
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidRecord(f"must be an integer in {low}..{high}", field=self.name(key))
        return value

    def opt_integer(self, key: str) -> int | None:
        return None if self.data[key] is None else self.integer(key)

    def text(self, key: str, pattern: re.Pattern[str] | None = None, limit: int = 1000) -> str:
        value = self.data[key]
        if not isinstance(value, str) or len(value) > limit:
            raise InvalidRecord(f"must be a string of at most {limit} chars", field=self.name(key))
        if pattern is not None and pattern.fullmatch(value) is None:
            raise InvalidRecord(f"malformed value {value!r:.60}", field=self.name(key))
        return value

    def boolean(self, key: str) -> bool:
        value = self.data[key]
        if not isinstance(value, bool):
            raise InvalidRecord("must be a boolean", field=self.name(key))
        return value

    def time(self, key: str) -> int:
        return parse_time(self.data[key], self.name(key))

    def opt_time(self, key: str) -> int | None:
        return None if self.data[key] is None else self.time(key)

    def choice(self, key: str, options: tuple[str, ...]) -> str:
        value = self.data[key]
        if value not in options:
            raise InvalidRecord(f"must be one of {list(options)}", field=self.name(key))
        return cast(str, value)

    def obj(self, key: str, limit: int) -> dict[str, Any]:
        value = self.data[key]
        if not isinstance(value, dict):
            raise InvalidRecord("must be an object", field=self.name(key))
        check_json_size(value, limit, self.name(key))
        return value


def check_json_size(value: object, limit: int, name: str) -> None:
    """Raise ``InvalidRecord`` if ``value`` is not JSON or is over ``limit`` bytes compact."""
    try:
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
                   .encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError) as exc:
        raise InvalidRecord(f"not JSON: {exc}", field=name) from exc
    if size > limit:
        raise InvalidRecord(f"is {size} bytes of JSON, over {limit}", field=name)


_RECORD_KEYS = frozenset({
    "schema_version", "id", "type", "name", "params", "state", "cancel_requested", "attempt",
    "budget_from", "max_attempts", "attempts", "progress", "result", "error", "output",
    "created_by", "created_at", "updated_at", "not_before", "lease", "queue_marker", "rev",
    "write_id", "recent_write_ids",
})
_ATTEMPT_KEYS = frozenset({"n", "worker", "started_at", "ended_at", "outcome"})
_PROGRESS_KEYS = frozenset({"rows_done", "rows_ok", "rows_failed", "bytes_done", "bytes_total"})
_LEASE_KEYS = frozenset({"worker", "lease_id", "expires_at"})


def from_json(data: object) -> TaskRecord:
    """The record of a decoded JSON object; field-level validation only (see ``decode``)."""
    r = _Reader(data, "", _RECORD_KEYS)
    if r.data["schema_version"] != SCHEMA_VERSION:
        raise InvalidRecord(f"unsupported schema version {r.data['schema_version']!r:.20}")
    try:
        task_id = parse_task_id(r.data["id"])
        created_by = check_user(r.data["created_by"])
    except InvalidTaskId as exc:
        raise InvalidRecord(str(exc), field="id/created_by") from exc
    attempts_data = r.data["attempts"]
    if not isinstance(attempts_data, list) or len(attempts_data) > MAX_ATTEMPT_NUMBER:
        raise InvalidRecord(f"must be a list of at most {MAX_ATTEMPT_NUMBER}", field="attempts")
    attempts = []
    for i, item in enumerate(attempts_data):
        a = _Reader(item, f"attempts[{i}]", _ATTEMPT_KEYS)
        outcome = None if a.data["outcome"] is None else a.choice("outcome", OUTCOMES)
        attempts.append(Attempt(
            n=a.integer("n", 1, MAX_ATTEMPT_NUMBER), worker=a.text("worker", _WORKER),
            started_at=a.time("started_at"), ended_at=a.opt_time("ended_at"),
            outcome=cast("Outcome | None", outcome),
        ))
    p = _Reader(r.data["progress"], "progress", _PROGRESS_KEYS)
    progress = Progress(
        p.integer("rows_done"), p.integer("rows_ok"), p.integer("rows_failed"),
        p.integer("bytes_done"),
        p.opt_integer("bytes_total"),
    )
    error = None
    if r.data["error"] is not None:
        e = _Reader(r.data["error"], "error", frozenset({"code", "message"}))
        error = TaskError(e.text("code", _CODE), e.text("message", limit=MAX_ERROR_MESSAGE_CHARS))
    output = None
    if r.data["output"] is not None:
        o = _Reader(r.data["output"], "output", frozenset({"attempt", "files"}))
        files_data = o.data["files"]
        if not isinstance(files_data, list) or len(files_data) > MAX_OUTPUT_FILES:
            raise InvalidRecord(
                f"must be a list of at most {MAX_OUTPUT_FILES}", field="output.files"
            )
        files = []
        for i, item in enumerate(files_data):
            f = _Reader(item, f"output.files[{i}]", frozenset({"name", "size"}))
            try:
                fname = check_file_name(f.data["name"])
            except InvalidTaskId as exc:
                raise InvalidRecord(str(exc), field=f.name("name")) from exc
            files.append(OutputFile(fname, f.integer("size")))
        output = Output(o.integer("attempt", 1, MAX_ATTEMPT_NUMBER), tuple(files))
    lease = None
    if r.data["lease"] is not None:
        le = _Reader(r.data["lease"], "lease", _LEASE_KEYS)
        lease = Lease(
            le.text("worker", _WORKER), le.text("lease_id", _HEX_ID), le.time("expires_at")
        )
    recent = r.data["recent_write_ids"]
    if not isinstance(recent, list) or not 1 <= len(recent) <= RECENT_WRITE_IDS or not all(
        isinstance(w, str) and _HEX_ID.fullmatch(w) for w in recent
    ):
        raise InvalidRecord(f"must be 1..{RECENT_WRITE_IDS} write ids", field="recent_write_ids")
    marker = None if r.data["queue_marker"] is None else r.text("queue_marker", limit=256)
    return TaskRecord(
        id=task_id, type=r.text("type", _TYPE), name=r.text("name", limit=MAX_TASK_NAME_CHARS),
        params=r.obj("params", MAX_PARAMS_BYTES), created_by=created_by,
        created_at=r.time("created_at"), updated_at=r.time("updated_at"),
        state=cast(State, r.choice("state", STATES)),
        cancel_requested=r.boolean("cancel_requested"),
        attempt=r.integer("attempt", 0, MAX_ATTEMPT_NUMBER),
        budget_from=r.integer("budget_from", 0, MAX_ATTEMPT_NUMBER),
        max_attempts=r.integer("max_attempts", 1, MAX_ATTEMPTS_LIMIT), attempts=tuple(attempts),
        progress=progress,
        result=None if r.data["result"] is None else r.obj("result", MAX_RESULT_BYTES),
        error=error, output=output, not_before=r.opt_time("not_before"), lease=lease,
        queue_marker=marker, rev=r.integer("rev", 1), write_id=r.text("write_id", _HEX_ID),
        recent_write_ids=tuple(recent),
    )


def check_invariants(record: TaskRecord) -> None:
    """Raise ``InvalidRecord`` unless the cross-field rules of a task record hold."""

    def fail(message: str, name: str) -> None:
        raise InvalidRecord(f"{message} (state {record.state}, rev {record.rev})", field=name)

    # Field-level rules first, so a record built in memory is held to what decode requires.
    try:
        data = json.loads(json.dumps(to_json(record), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidRecord(f"not JSON: {exc}") from exc
    from_json(data)
    if record.updated_at < record.created_at:
        fail("updated_at is before created_at", "updated_at")
    if [a.n for a in record.attempts] != list(range(1, len(record.attempts) + 1)):
        fail("attempts must be numbered 1..n in order", "attempts")
    if record.attempt != len(record.attempts):
        fail("attempt must be the number of the latest attempt", "attempt")
    for a in record.attempts[:-1]:
        if a.outcome is None or a.ended_at is None:
            fail(f"attempt {a.n} is not the latest but has not ended", "attempts")
    for a in record.attempts:
        if (a.outcome is None) != (a.ended_at is None):
            fail(f"attempt {a.n} must have both or neither of outcome and ended_at", "attempts")
        if a.ended_at is not None and a.ended_at < a.started_at:
            fail(f"attempt {a.n} ended before it started", "attempts")
    running = record.state == "running"
    if running != (record.lease is not None):
        fail("a lease exists exactly while running", "lease")
    live = record.attempts[-1] if record.attempts and record.attempts[-1].outcome is None else None
    if running != (live is not None):
        fail("an attempt is open exactly while running", "attempts")
    if record.lease is not None and live is not None and record.lease.worker != live.worker:
        fail("the lease holder must be the worker of the open attempt", "lease.worker")
    if record.cancel_requested and record.state not in ("running", "cancelled"):
        fail("cancel_requested only while running or once cancelled", "cancel_requested")
    if (record.output is not None) != (record.state == "succeeded"):
        fail("output is set exactly when succeeded", "output")
    if record.output is not None and record.output.attempt != record.attempt:
        fail("output must name the attempt that succeeded", "output.attempt")
    if not record.budget_from <= record.attempt:
        fail("budget_from is after the latest attempt", "budget_from")
    if record.spent() > record.max_attempts:
        fail("more attempts spent than max_attempts", "attempts")
    if record.state in ("queued", "running") and record.queue_marker is None:
        # The marker stays while running: it is how other workers find an expired lease.
        fail("a queued or running task must name its queue marker", "queue_marker")
    if record.queue_marker is not None:
        try:
            marker = parse_marker_key(record.queue_marker)
        except InvalidTaskId as exc:
            raise InvalidRecord(str(exc), field="queue_marker") from exc
        if marker.task_id != record.id:
            fail("queue_marker names another task", "queue_marker")
    if not record.recent_write_ids or record.recent_write_ids[-1] != record.write_id:
        fail("write_id must be the last of recent_write_ids", "recent_write_ids")
    if record.rev < len(record.recent_write_ids):
        fail("more recent write ids than writes", "rev")
