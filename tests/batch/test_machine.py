"""The task state machine: every (phase, action) pair against the table, each branch, and
random action sequences that must keep the invariants."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidb.batch import _machine as m
from minidb.batch._errors import IllegalTransition, LeaseLost
from minidb.batch._keys import parse_marker_key
from minidb.batch._model import (
    Progress,
    TaskError,
    TaskRecord,
    check_invariants,
    decode,
    encode,
)
from tests.batch.conftest import LEASE, NONCE, T0, created, in_phase, queued, running

ERROR = TaskError("boom", "it broke")
NOW = T0 + 5000


def _lease_of(record: TaskRecord) -> str:
    return record.lease.lease_id if record.lease is not None else LEASE


def _expiry_now(record: TaskRecord) -> int:
    if record.lease is None:
        return NOW + 3_600_000
    return record.lease.expires_at + round(m.DEFAULT_GRACE_S * 1000) + 1


ACTION_CALLS: dict[str, Callable[[TaskRecord], TaskRecord]] = {
    "submit": lambda r: m.submit(r, NOW),
    "claim": lambda r: m.claim(r, NOW, worker="w-2", lease_id="b" * 32),
    "heartbeat": lambda r: m.heartbeat(r, NOW, lease_id=_lease_of(r)),
    "complete": lambda r: m.complete(r, NOW, lease_id=_lease_of(r), result={"ok": 1}),
    "fail": lambda r: m.fail(r, NOW, lease_id=_lease_of(r), error=ERROR, retryable=True),
    "release": lambda r: m.release(r, NOW, lease_id=_lease_of(r)),
    "expire_lease": lambda r: m.expire_lease(r, _expiry_now(r)),
    "request_cancel": lambda r: m.request_cancel(r, NOW),
    "retry": lambda r: m.retry(r, NOW),
}


def test_action_calls_cover_every_action() -> None:
    """The test drives every action the machine declares."""
    assert set(ACTION_CALLS) == set(m.ACTIONS)


@pytest.mark.parametrize("phase, action", list(itertools.product(m.PHASES, m.ACTIONS)))
def test_every_phase_action_pair_matches_the_table(phase: str, action: str) -> None:
    """A legal pair leads to a phase the table allows; an illegal one raises IllegalTransition
    naming the phase and the action."""
    record = in_phase(phase)
    assert m.phase(record) == phase
    allowed = m.TABLE.get((phase, action))
    if allowed is None:
        with pytest.raises(IllegalTransition) as info:
            ACTION_CALLS[action](record)
        assert info.value.state == phase and info.value.action == action
        return
    after = ACTION_CALLS[action](record)
    assert m.phase(after) in allowed
    check_invariants(after)
    if after is not record:
        assert after.rev == record.rev + 1
        assert after.write_id != record.write_id


def test_submit_enqueues_with_its_own_marker() -> None:
    """submit makes the task queued, due now, naming a fresh marker."""
    record = m.submit(created(), NOW, nonce=NONCE)
    assert record.state == "queued" and record.not_before is None
    assert record.queue_marker is not None
    assert parse_marker_key(record.queue_marker) == (NOW, record.id, NONCE)


def test_claim_opens_the_next_attempt() -> None:
    """claim sets the lease and opens attempt n + 1."""
    record = m.claim(queued(), NOW, worker="w-9", lease_id="c" * 32, lease_s=10)
    assert record.state == "running" and record.attempt == 1
    assert record.lease is not None and record.lease.expires_at == NOW + 10_000
    assert record.attempts[-1].worker == "w-9" and record.attempts[-1].outcome is None


def test_claim_before_not_before_is_illegal() -> None:
    """A task deferred by backoff cannot be claimed before it is due."""
    deferred = m.fail(running(), NOW, lease_id=LEASE, error=ERROR, retryable=True, backoff_s=60)
    assert deferred.not_before == NOW + 60_000
    with pytest.raises(IllegalTransition):
        m.claim(deferred, NOW + 59_999, worker="w-2", lease_id="b" * 32)
    assert m.claim(deferred, NOW + 60_000, worker="w-2", lease_id="b" * 32).attempt == 2


def test_fail_retryable_requeues_with_a_new_marker_at_the_due_time() -> None:
    """A retryable failure with budget left goes back to queued under a new marker key."""
    before = running()
    after = m.fail(before, NOW, lease_id=LEASE, error=ERROR, retryable=True, backoff_s=2)
    assert after.state == "queued" and after.error == ERROR
    assert after.attempts[-1].outcome == "failed"
    assert after.queue_marker != before.queue_marker
    assert after.queue_marker is not None
    assert parse_marker_key(after.queue_marker).due_ms == NOW + 2000


def test_fail_permanent_or_budget_spent_is_failed() -> None:
    """A permanent failure, or a retryable one on the last attempt, ends failed."""
    permanent = m.fail(running(), NOW, lease_id=LEASE, error=ERROR, retryable=False)
    assert permanent.state == "failed"
    last = m.fail(running(max_attempts=1), NOW, lease_id=LEASE, error=ERROR, retryable=True)
    assert last.state == "failed" and last.spent() == 1


def test_max_attempts_bounds_failures_exactly() -> None:
    """An always-failing task runs exactly max_attempts times, then stays failed."""
    record = queued(max_attempts=4)
    runs = 0
    now = NOW
    while record.state == "queued":
        now += 100_000
        lease = f"{runs:032x}"
        record = m.claim(record, now, worker="w-1", lease_id=lease)
        runs += 1
        record = m.fail(record, now, lease_id=lease, error=ERROR, retryable=True, backoff_s=1)
    assert (record.state, runs, record.attempt) == ("failed", 4, 4)


def test_complete_records_the_authoritative_attempt() -> None:
    """complete names the attempt whose outputs count."""
    record = m.complete(running(), NOW, lease_id=LEASE, result={"rows": 2})
    assert record.state == "succeeded" and record.output is not None
    assert record.output.attempt == 1 and record.attempts[-1].outcome == "succeeded"


def test_release_does_not_spend_the_attempt_nor_reuse_its_number() -> None:
    """A released attempt keeps its number, costs nothing, and the next claim takes n + 1."""
    record = running(max_attempts=1)
    record = m.release(record, NOW, lease_id=LEASE)
    assert record.state == "queued" and record.spent() == 0
    assert record.attempts[-1].outcome == "released"
    again = m.claim(record, NOW + 1, worker="w-2", lease_id="b" * 32)
    assert again.attempt == 2 and [a.n for a in again.attempts] == [1, 2]


def test_fenced_actions_refuse_a_foreign_or_expired_lease() -> None:
    """heartbeat, complete, fail and release by a stale lease holder raise LeaseLost."""
    record = running()
    expired_now = record.lease.expires_at + 1 if record.lease else 0
    calls = [
        lambda r, now, lid: m.heartbeat(r, now, lease_id=lid),
        lambda r, now, lid: m.complete(r, now, lease_id=lid),
        lambda r, now, lid: m.fail(r, now, lease_id=lid, error=ERROR, retryable=True),
        lambda r, now, lid: m.release(r, now, lease_id=lid),
    ]
    for call in calls:
        with pytest.raises(LeaseLost):
            call(record, NOW, "f" * 32)
        with pytest.raises(LeaseLost):
            call(record, expired_now, LEASE)


def test_heartbeat_extends_and_reports_progress() -> None:
    """A heartbeat moves the expiry forward and stores the progress."""
    progress = Progress(rows_done=10, rows_ok=9, rows_failed=1, bytes_done=100, bytes_total=1000)
    record = m.heartbeat(running(), NOW, lease_id=LEASE, lease_s=30, progress=progress)
    assert record.lease is not None and record.lease.expires_at == NOW + 30_000
    assert record.progress == progress


def test_expire_lease_waits_for_the_grace() -> None:
    """Nobody can take over before expiry + grace; in the gap, the owner is fenced too."""
    record = running()
    assert record.lease is not None
    expiry = record.lease.expires_at
    with pytest.raises(IllegalTransition):
        m.expire_lease(record, expiry + 5000, grace_s=5)
    with pytest.raises(LeaseLost):
        m.heartbeat(record, expiry + 1, lease_id=LEASE)
    taken = m.expire_lease(record, expiry + 5001, grace_s=5)
    assert taken.state == "queued" and taken.attempts[-1].outcome == "lease_expired"
    assert taken.spent() == 1 and taken.queue_marker == record.queue_marker


def test_expire_lease_on_the_last_attempt_fails() -> None:
    """A crash loop ends failed: lease expiry spends the attempt."""
    record = running(max_attempts=1)
    taken = m.expire_lease(record, _expiry_now(record))
    assert taken.state == "failed" and taken.error is not None
    assert taken.error.code == "lease_expired"


@pytest.mark.parametrize("action", ["complete", "fail", "release", "expire_lease"])
def test_cancelling_ends_cancelled_whatever_the_worker_does(action: str) -> None:
    """Once cancel_requested, every way out of running ends cancelled (outcome cancelled)."""
    record = m.request_cancel(running(), NOW)
    after = ACTION_CALLS[action](record)
    assert after.state == "cancelled" and after.attempts[-1].outcome == "cancelled"
    assert after.output is None and after.lease is None


def test_heartbeat_tells_the_worker_of_a_cancel() -> None:
    """The record a heartbeat returns carries cancel_requested."""
    record = m.request_cancel(running(), NOW)
    assert m.heartbeat(record, NOW + 1, lease_id=LEASE).cancel_requested


def test_request_cancel_is_idempotent_without_a_write() -> None:
    """Cancelling a cancelled or cancelling task returns the same record (nothing to write)."""
    for phase in ("cancelled", "cancelling"):
        record = in_phase(phase)
        assert m.request_cancel(record, NOW) is record


def test_retry_gives_a_fresh_budget_and_continues_numbering() -> None:
    """retry from failed starts a new budget; attempts keep their numbers."""
    record = running(max_attempts=1)
    record = m.fail(record, NOW, lease_id=LEASE, error=ERROR, retryable=True)
    assert record.state == "failed"
    record = m.retry(record, NOW + 1, nonce=NONCE)
    assert record.state == "queued" and record.spent() == 0 and record.budget_from == 1
    assert record.error is None
    record = m.claim(record, NOW + 2, worker="w-2", lease_id="b" * 32)
    assert record.attempt == 2


def test_retry_after_cancel_clears_cancel_requested() -> None:
    """A retried cancelled task runs normally again."""
    record = m.release(m.request_cancel(running(), NOW), NOW, lease_id=LEASE)
    record = m.retry(record, NOW + 1)
    assert record.state == "queued" and not record.cancel_requested


def test_transitions_reject_out_of_range_durations() -> None:
    """Negative or huge lease and backoff durations are programming errors."""
    with pytest.raises(ValueError):
        m.claim(queued(), NOW, worker="w", lease_id=LEASE, lease_s=-1)
    with pytest.raises(ValueError):
        m.fail(running(), NOW, lease_id=LEASE, error=ERROR, retryable=True, backoff_s=1e9)


# --- random sequences -----------------------------------------------------------------------

steps = st.lists(
    st.tuples(
        st.sampled_from(m.ACTIONS),
        st.integers(0, 2),  # which lease id to use: 0 = the live one, else a stale/foreign one
        # How far the clock moves before the action (ms): mostly within a 20 s lease, now
        # and then past it and its grace, so take-overs and fenced refusals both happen.
        st.sampled_from([0, 1, 500, 5_000, 15_000, 25_000]),
        st.booleans(),  # retryable
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(steps, st.integers(1, 4))
def test_random_sequences_keep_the_invariants(
    sequence: list[tuple[str, int, int, bool]], max_attempts: int
) -> None:
    """Whatever is tried in whatever order: one live lease accepted, rev strictly increasing,
    cancel_requested ends only in cancelled, attempts 1..n never reused, budget respected, and
    every record survives its JSON form."""
    record = created(max_attempts)
    now = T0 + 10_000
    leases_seen: set[str] = set()
    cancel_seen = False
    counter = itertools.count()
    for action, which, advance, retryable in sequence:
        now += advance
        live = record.lease.lease_id if record.lease else None
        stale = [lid for lid in leases_seen if lid != live]
        other = stale[which % len(stale)] if stale else "e" * 32
        lease_id = live if which == 0 and live else other
        before = record
        try:
            if action == "claim":
                new_lease = f"{next(counter):032x}"
                leases_seen.add(new_lease)
                record = m.claim(record, now, worker="w-1", lease_id=new_lease, lease_s=20)
            elif action == "fail":
                record = m.fail(record, now, lease_id=lease_id, error=ERROR,
                                retryable=retryable, backoff_s=1)
            elif action == "heartbeat":
                record = m.heartbeat(record, now, lease_id=lease_id, lease_s=20)
            elif action == "complete":
                record = m.complete(record, now, lease_id=lease_id)
            elif action == "release":
                record = m.release(record, now, lease_id=lease_id)
            elif action == "expire_lease":
                record = m.expire_lease(record, now, grace_s=2)
            elif action == "request_cancel":
                record = m.request_cancel(record, now)
            elif action == "retry":
                record = m.retry(record, now)
            else:
                record = m.submit(record, now)
        except LeaseLost:
            # Only a lease that is not the live one, or one past its expiry, is refused.
            assert lease_id != live or (before.lease and now > before.lease.expires_at)
            continue
        except IllegalTransition:
            continue
        if action in ("heartbeat", "complete", "fail", "release"):
            assert lease_id == live, "a write by a non-holder was accepted"
        check_invariants(record)
        assert decode(encode(record)) == record
        if record is not before:
            assert record.rev == before.rev + 1
        assert record.attempts[: len(before.attempts) - 1] == before.attempts[:-1]
        assert [a.n for a in record.attempts] == list(range(1, record.attempt + 1))
        assert record.spent() <= record.max_attempts
        if action == "retry":
            cancel_seen = False
        if record.cancel_requested:
            cancel_seen = True
        if cancel_seen and record.state in ("succeeded", "failed", "queued"):
            raise AssertionError(f"cancel requested but the task became {record.state}")
        if record.state == "running":
            assert record.lease is not None and record.lease.lease_id in leases_seen


def test_replace_does_not_bypass_validation() -> None:
    """A hand-made record with two open attempts is refused by check_invariants."""
    record = running()
    broken = replace(record, attempts=(*record.attempts, record.attempts[-1]))
    with pytest.raises(Exception, match="attempt"):
        check_invariants(broken)
