"""The task state machine: every transition a pure function ``(record, now_ms, ...) -> record``.

::

    created   --submit-->          queued
    created   --request_cancel-->  cancelled
    queued    --claim-->           running        (attempt n+1 opens, lease set)
    queued    --request_cancel-->  cancelled
    running   --heartbeat-->       running        (fenced; lease extended, progress)
    running   --complete-->        succeeded      (fenced; output names attempt n)
    running   --fail-->            queued         (fenced; retryable, budget left: not_before)
    running   --fail-->            failed         (fenced; permanent, or budget spent)
    running   --release-->         queued         (fenced; graceful shutdown: attempt not spent)
    running   --expire_lease-->    queued | failed   (another worker, after expiry + grace;
                                                      the attempt is spent: lease_expired)
    running   --request_cancel-->  cancelling     (running with cancel_requested)
    cancelling --complete/fail/release/expire_lease-->  cancelled   (outcome cancelled)
    cancelling --heartbeat-->      cancelling     (the worker learns of the cancel and stops)
    cancelling/cancelled --request_cancel-->  unchanged (the same object: nothing to write)
    failed | cancelled --retry-->  queued         (fresh budget; attempt numbers continue)
    succeeded: terminal; every action is illegal (retry and cancel answer 409)

``TABLE`` holds exactly this, keyed by *phase* (the state, with ``cancelling`` for running +
``cancel_requested``); the tests check every (phase, action) pair against it, so the code and
the table cannot drift apart.

Attempts: ``claim`` opens attempt ``attempt + 1`` and every ending names its outcome
(``succeeded``, ``failed``, ``lease_expired``, ``released``, ``cancelled``). Numbers are never
reused: a released attempt keeps its number and the next claim takes the next one, so
``outputs/<id>/attempt-<n>/`` keys never collide. ``max_attempts`` bounds the attempts *spent*
in the current budget (all outcomes but ``released``); ``retry`` starts a new budget at the
current attempt number (``budget_from``).

Fencing: heartbeat, complete, fail and release carry the caller's ``lease_id`` and raise
``LeaseLost`` unless it is the live lease and ``now_ms`` has not passed its expiry. A take-over
(``expire_lease``) is only legal ``grace_s`` after the expiry, so between the two instants
nobody may write: that gap absorbs clock skew between workers. The storage layer adds the other
half of the fence: every write is a compare-and-set on the ETag of the record it was computed
from.

Each result is validated (``check_invariants``) before it is returned, so a bug here raises
instead of being written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Final

from minidb.batch._errors import IllegalTransition, LeaseLost
from minidb.batch._keys import MAX_ATTEMPT_NUMBER, marker_key, new_nonce
from minidb.batch._model import (
    MAX_ATTEMPTS_LIMIT,
    MAX_RESULT_BYTES,
    Attempt,
    Lease,
    Outcome,
    Output,
    OutputFile,
    Progress,
    TaskError,
    TaskRecord,
    check_invariants,
    check_json_size,
)

DEFAULT_LEASE_S = 30.0
"""How long a claim or heartbeat keeps the task, in seconds."""
DEFAULT_GRACE_S = 5.0
"""How long after a lease's expiry another worker waits before taking over, in seconds: at
least the clock skew expected between workers."""
MAX_LEASE_S = 3600.0
"""No lease is longer than this, in seconds (a dead worker blocks its task at most this long)."""
MAX_BACKOFF_S = 86400.0
"""No retry is deferred by more than this, in seconds."""

ACTIONS: Final = (
    "submit", "claim", "heartbeat", "complete", "fail", "release", "expire_lease",
    "request_cancel", "retry",
)
PHASES: Final = ("created", "queued", "running", "cancelling", "succeeded", "failed", "cancelled")

TABLE: Final[Mapping[tuple[str, str], frozenset[str]]] = {
    ("created", "submit"): frozenset({"queued"}),
    ("created", "request_cancel"): frozenset({"cancelled"}),
    ("queued", "claim"): frozenset({"running"}),
    ("queued", "request_cancel"): frozenset({"cancelled"}),
    ("running", "heartbeat"): frozenset({"running"}),
    ("running", "complete"): frozenset({"succeeded"}),
    ("running", "fail"): frozenset({"queued", "failed"}),
    ("running", "release"): frozenset({"queued"}),
    ("running", "expire_lease"): frozenset({"queued", "failed"}),
    ("running", "request_cancel"): frozenset({"cancelling"}),
    ("cancelling", "heartbeat"): frozenset({"cancelling"}),
    ("cancelling", "complete"): frozenset({"cancelled"}),
    ("cancelling", "fail"): frozenset({"cancelled"}),
    ("cancelling", "release"): frozenset({"cancelled"}),
    ("cancelling", "expire_lease"): frozenset({"cancelled"}),
    ("cancelling", "request_cancel"): frozenset({"cancelling"}),
    ("cancelled", "request_cancel"): frozenset({"cancelled"}),
    ("failed", "retry"): frozenset({"queued"}),
    ("cancelled", "retry"): frozenset({"queued"}),
}
"""Every legal (phase, action) and the phases it can lead to; any other pair is illegal."""


def phase(record: TaskRecord) -> str:
    """The record's state, with running + ``cancel_requested`` shown as ``cancelling``."""
    if record.state == "running" and record.cancel_requested:
        return "cancelling"
    return record.state


def _ms(seconds: float, limit: float, what: str) -> int:
    if not 0 <= seconds <= limit:
        raise ValueError(f"{what} must be in 0..{limit} seconds, not {seconds!r}")
    return round(seconds * 1000)


def _require(record: TaskRecord, action: str, *phases: str) -> None:
    if phase(record) not in phases:
        raise IllegalTransition(phase(record), action)


def _done(record: TaskRecord) -> TaskRecord:
    check_invariants(record)
    return record


def _fence(record: TaskRecord, now_ms: int, action: str, lease_id: str) -> Lease:
    """The live lease if it is ``lease_id`` and unexpired, else ``LeaseLost``."""
    lease = record.lease
    if record.state != "running" or lease is None:
        raise LeaseLost(phase(record), action, "the task is not running", lease_id=lease_id)
    if lease.lease_id != lease_id:
        raise LeaseLost(phase(record), action, "the lease is another worker's", lease_id=lease_id)
    if now_ms > lease.expires_at:
        raise LeaseLost(phase(record), action, "the lease has expired", lease_id=lease_id)
    return lease


def _end(record: TaskRecord, now_ms: int, outcome: Outcome) -> tuple[Attempt, ...]:
    last = record.attempts[-1]
    ended = replace(last, ended_at=max(now_ms, last.started_at), outcome=outcome)
    return (*record.attempts[:-1], ended)


def _enqueue(record: TaskRecord, due_ms: int, nonce: str | None) -> str:
    return marker_key(due_ms, record.id, nonce if nonce is not None else new_nonce())


# --- API side -------------------------------------------------------------------------------


def submit(
    record: TaskRecord, now_ms: int, *, nonce: str | None = None, write_id: str | None = None
) -> TaskRecord:
    """``created`` -> ``queued`` (the input is in place), due now, with a new queue marker."""
    _require(record, "submit", "created")
    return _done(record.with_write(
        now_ms, write_id, state="queued", not_before=None,
        queue_marker=_enqueue(record, now_ms, nonce),
    ))


def request_cancel(
    record: TaskRecord, now_ms: int, *, write_id: str | None = None
) -> TaskRecord:
    """Cancel: at once if not running; running ones get ``cancel_requested`` for the worker.

    Returns ``record`` itself when there is nothing to change (already cancelled or
    cancelling), so the caller knows not to write.
    """
    current = phase(record)
    if current in ("cancelled", "cancelling"):
        return record
    if current in ("created", "queued"):
        return _done(record.with_write(now_ms, write_id, state="cancelled", not_before=None))
    _require(record, "request_cancel", "running")
    return _done(record.with_write(now_ms, write_id, cancel_requested=True))


def retry(
    record: TaskRecord,
    now_ms: int,
    *,
    max_attempts: int | None = None,
    nonce: str | None = None,
    write_id: str | None = None,
) -> TaskRecord:
    """``failed``/``cancelled`` -> ``queued`` with a fresh budget; attempt numbers continue."""
    _require(record, "retry", "failed", "cancelled")
    if record.attempt >= MAX_ATTEMPT_NUMBER:
        raise IllegalTransition(record.state, "retry", "attempt numbers are exhausted")
    budget = record.max_attempts if max_attempts is None else max_attempts
    if not 1 <= budget <= MAX_ATTEMPTS_LIMIT:
        raise ValueError(f"max_attempts must be in 1..{MAX_ATTEMPTS_LIMIT}")
    return _done(record.with_write(
        now_ms, write_id, state="queued", cancel_requested=False, budget_from=record.attempt,
        max_attempts=budget, not_before=None, result=None, error=None, progress=Progress(),
        queue_marker=_enqueue(record, now_ms, nonce),
    ))


# --- worker side ----------------------------------------------------------------------------


def claim(
    record: TaskRecord,
    now_ms: int,
    *,
    worker: str,
    lease_id: str,
    lease_s: float = DEFAULT_LEASE_S,
    write_id: str | None = None,
) -> TaskRecord:
    """``queued`` (and due) -> ``running``: attempt ``n + 1`` opens under a new lease."""
    _require(record, "claim", "queued")
    if record.not_before is not None and now_ms < record.not_before:
        raise IllegalTransition("queued", "claim", "not due yet")
    if record.attempt >= MAX_ATTEMPT_NUMBER:
        raise IllegalTransition("queued", "claim", "attempt numbers are exhausted")
    n = record.attempt + 1
    return _done(record.with_write(
        now_ms, write_id, state="running", attempt=n, not_before=None, progress=Progress(),
        attempts=(*record.attempts, Attempt(n=n, worker=worker, started_at=now_ms)),
        lease=Lease(worker, lease_id, now_ms + _ms(lease_s, MAX_LEASE_S, "lease_s")),
    ))


def heartbeat(
    record: TaskRecord,
    now_ms: int,
    *,
    lease_id: str,
    lease_s: float = DEFAULT_LEASE_S,
    progress: Progress | None = None,
    write_id: str | None = None,
) -> TaskRecord:
    """Extend our lease to ``now + lease_s`` and record progress (fenced).

    The result carries ``cancel_requested``: a worker that sees it set stops and releases.
    """
    lease = _fence(record, now_ms, "heartbeat", lease_id)
    expires = max(lease.expires_at, now_ms + _ms(lease_s, MAX_LEASE_S, "lease_s"))
    return _done(record.with_write(
        now_ms, write_id, lease=replace(lease, expires_at=expires),
        progress=record.progress if progress is None else progress,
    ))


def _finish_cancelled(
    record: TaskRecord, now_ms: int, write_id: str | None, **changes: Any
) -> TaskRecord:
    return _done(record.with_write(
        now_ms, write_id, state="cancelled", lease=None, not_before=None,
        attempts=_end(record, now_ms, "cancelled"), **changes,
    ))


def complete(
    record: TaskRecord,
    now_ms: int,
    *,
    lease_id: str,
    result: Mapping[str, Any] | None = None,
    files: Iterable[OutputFile] = (),
    progress: Progress | None = None,
    write_id: str | None = None,
) -> TaskRecord:
    """The attempt succeeded: ``succeeded`` with its output (or ``cancelled`` if cancelling)."""
    _fence(record, now_ms, "complete", lease_id)
    if result is not None:
        check_json_size(result, MAX_RESULT_BYTES, "result")
    changes: dict[str, Any] = {
        "result": None if result is None else dict(result),
        "progress": record.progress if progress is None else progress,
    }
    if record.cancel_requested:
        return _finish_cancelled(record, now_ms, write_id, **changes)
    return _done(record.with_write(
        now_ms, write_id, state="succeeded", lease=None, error=None,
        attempts=_end(record, now_ms, "succeeded"),
        output=Output(record.attempt, tuple(files)), **changes,
    ))


def fail(
    record: TaskRecord,
    now_ms: int,
    *,
    lease_id: str,
    error: TaskError,
    retryable: bool,
    backoff_s: float = 0.0,
    progress: Progress | None = None,
    nonce: str | None = None,
    write_id: str | None = None,
) -> TaskRecord:
    """The attempt failed: back to ``queued`` after ``backoff_s`` if retryable with budget
    left, else ``failed`` (``cancelled`` if cancelling)."""
    _fence(record, now_ms, "fail", lease_id)
    changes: dict[str, Any] = {
        "error": error, "progress": record.progress if progress is None else progress,
    }
    if record.cancel_requested:
        return _finish_cancelled(record, now_ms, write_id, **changes)
    attempts = _end(record, now_ms, "failed")
    spent = replace(record, attempts=attempts).spent()
    if retryable and spent < record.max_attempts:
        due = now_ms + _ms(backoff_s, MAX_BACKOFF_S, "backoff_s")
        return _done(record.with_write(
            now_ms, write_id, state="queued", lease=None, attempts=attempts, not_before=due,
            queue_marker=_enqueue(record, due, nonce), **changes,
        ))
    return _done(record.with_write(
        now_ms, write_id, state="failed", lease=None, attempts=attempts, **changes,
    ))


def release(
    record: TaskRecord,
    now_ms: int,
    *,
    lease_id: str,
    progress: Progress | None = None,
    write_id: str | None = None,
) -> TaskRecord:
    """Graceful shutdown: back to ``queued`` without spending the attempt (fenced).

    A cancelling task is the exception: the worker stopped because of the cancel, so it ends
    ``cancelled``. The queue marker stays (it is due now), so any worker can claim at once.
    """
    _fence(record, now_ms, "release", lease_id)
    changes: dict[str, Any] = {"progress": record.progress if progress is None else progress}
    if record.cancel_requested:
        return _finish_cancelled(record, now_ms, write_id, **changes)
    return _done(record.with_write(
        now_ms, write_id, state="queued", lease=None, not_before=None,
        attempts=_end(record, now_ms, "released"), **changes,
    ))


def lease_expired(record: TaskRecord, now_ms: int, *, grace_s: float = DEFAULT_GRACE_S) -> bool:
    """Whether another worker may take over: running, and ``grace_s`` past the lease's expiry."""
    if record.lease is None:
        return False
    return now_ms > record.lease.expires_at + _ms(grace_s, MAX_LEASE_S, "grace_s")


def expire_lease(
    record: TaskRecord,
    now_ms: int,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    write_id: str | None = None,
) -> TaskRecord:
    """Take over a task whose lease has lapsed (plus grace): the attempt is spent
    (``lease_expired``); then ``queued``, ``failed`` if the budget is gone, or ``cancelled``."""
    _require(record, "expire_lease", "running", "cancelling")
    if not lease_expired(record, now_ms, grace_s=grace_s):
        raise IllegalTransition(phase(record), "expire_lease", "the lease is still live")
    if record.cancel_requested:
        return _finish_cancelled(record, now_ms, write_id)
    attempts = _end(record, now_ms, "lease_expired")
    if replace(record, attempts=attempts).spent() < record.max_attempts:
        return _done(record.with_write(
            now_ms, write_id, state="queued", lease=None, attempts=attempts, not_before=None,
        ))
    error = TaskError.of(
        "lease_expired",
        f"the lease of attempt {record.attempt} expired and no attempts are left",
    )
    return _done(record.with_write(
        now_ms, write_id, state="failed", lease=None, attempts=attempts, error=error,
    ))
