"""The ambiguous-write rule, as a pure decision.

A compare-and-set on ``status.json`` can end without an answer that says what happened: a 412
or 409 after the client library retried a request whose first try was applied, a 5xx after the
store applied the write, a timeout, a dropped connection. The status code alone cannot tell
"my write landed" from "someone else's did", so it is never used to decide. The writer re-reads
the record and looks for its own ``write_id``:

- ``ours``: the record's ``write_id`` is ours, or ours is among ``recent_write_ids`` (another
  writer, for instance a heartbeat of the same worker or a cancel from the API, has already
  written on top of ours). Our transition happened exactly once; continue from the re-read
  record, which is the current truth.
- ``lost``: our write id is nowhere (or the object is gone). Our write did not happen; the
  transition must be re-evaluated from the re-read record (which may make it illegal, e.g. a
  claim that another worker won).

Write ids are 128 random bits, fresh per write, so "ours" is never a coincidence. The window is
``RECENT_WRITE_IDS`` writes: more than that many writes by others between our write and our
re-read would make a landed write look lost, which is safe for every transition we make (the
re-evaluation sees the state our write produced and acts on it) but not expected in practice:
tasks see a few writes a minute.
"""

from __future__ import annotations

from typing import Literal

from minidb.batch._model import TaskRecord

Verdict = Literal["ours", "lost"]


def reconcile(write_id: str, reread: TaskRecord | None) -> Verdict:
    """Whether the write that carried ``write_id`` is in the re-read record (None: no object)."""
    if reread is None:
        return "lost"
    if reread.write_id == write_id or write_id in reread.recent_write_ids:
        return "ours"
    return "lost"
