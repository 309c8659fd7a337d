"""Idempotency-Key rules and the stored key record (pure)."""

from __future__ import annotations

import pytest

from minidb.batch.api import _idempotency as idem

TASK = "01KBCQCK20JZ7R9YTJGD1AH5T3"


def test_body_hash_ignores_key_order() -> None:
    """Two spellings of one request hash alike; a different request does not."""
    a = idem.body_hash({"type": "sleep", "params": {"seconds": 1, "fail": None}})
    b = idem.body_hash({"params": {"fail": None, "seconds": 1}, "type": "sleep"})
    assert a == b
    assert a != idem.body_hash({"type": "sleep", "params": {"seconds": 2, "fail": None}})


@pytest.mark.parametrize("key", ["", "x" * 256, "tab\there", "ünï", "nul\x00"])
def test_check_key_refuses_bad_keys(key: str) -> None:
    """Empty, over-long, control or non-ASCII keys are refused."""
    with pytest.raises(idem.InvalidIdempotencyKey):
        idem.check_key(key)


def test_record_round_trips_and_mismatch_is_detected() -> None:
    """A record decodes to itself; check_same refuses another body's hash."""
    record = idem.new_record(TASK, "ab" * 32)
    assert idem.decode_record(idem.encode_record(record)) == record
    assert idem.check_same(record, "ab" * 32) is record
    with pytest.raises(idem.IdempotencyMismatch):
        idem.check_same(record, "cd" * 32)


@pytest.mark.parametrize("raw", [b"", b"[]", b'{"task_id": "../x"}', b"x" * 2000])
def test_decode_record_refuses_what_is_not_ours(raw: bytes) -> None:
    """Garbage under an idem/ key is InvalidIdempotencyKey, not a crash."""
    with pytest.raises(idem.InvalidIdempotencyKey):
        idem.decode_record(raw)
