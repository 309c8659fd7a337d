"""The ambiguous-write rule: decided by the write id in the re-read record, never by status."""

from __future__ import annotations

from minidb.batch import _machine as m
from minidb.batch._model import RECENT_WRITE_IDS
from minidb.batch._reconcile import reconcile
from tests.batch.conftest import LEASE, T0, queued, running

NOW = T0 + 5000


def test_our_write_is_the_record() -> None:
    """The re-read record is our write: ours."""
    ours = m.claim(queued(), NOW, worker="w-1", lease_id=LEASE)
    assert reconcile(ours.write_id, ours) == "ours"


def test_another_writer_wrote_on_top_of_ours() -> None:
    """Our write landed and another writer (a cancel) wrote after it: still ours."""
    ours = m.heartbeat(running(), NOW, lease_id=LEASE)
    on_top = m.request_cancel(ours, NOW + 1)
    assert on_top.write_id != ours.write_id
    assert reconcile(ours.write_id, on_top) == "ours"


def test_a_rival_won_the_race() -> None:
    """Two workers computed a claim from the same record; the rival's landed: lost."""
    base = queued()
    mine = m.claim(base, NOW, worker="w-1", lease_id=LEASE)
    rival = m.claim(base, NOW, worker="w-2", lease_id="b" * 32)
    assert reconcile(mine.write_id, rival) == "lost"


def test_our_write_never_landed() -> None:
    """The record is unchanged since we read it: lost (nothing happened)."""
    base = running()
    mine = m.heartbeat(base, NOW, lease_id=LEASE)
    assert reconcile(mine.write_id, base) == "lost"


def test_object_gone_is_lost() -> None:
    """No object on re-read: lost."""
    assert reconcile("a" * 32, None) == "lost"


def test_window_is_recent_write_ids() -> None:
    """Ours is recognised under up to RECENT_WRITE_IDS - 1 later writes, not beyond."""
    ours = m.heartbeat(running(), NOW, lease_id=LEASE)
    record = ours
    for i in range(RECENT_WRITE_IDS - 1):
        record = m.heartbeat(record, NOW + i + 1, lease_id=LEASE)
    assert reconcile(ours.write_id, record) == "ours"
    record = m.heartbeat(record, NOW + 100, lease_id=LEASE)
    assert reconcile(ours.write_id, record) == "lost"
