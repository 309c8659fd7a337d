"""The rig itself: serialised moto makes large racing creates atomic (bare moto does not)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from .conftest import S3Rig
from .s3rig import boto_client

RACERS = 8
ROUNDS = 3
BODY_BYTES = 10 << 20
"""Large bodies widen moto's check-then-write window (bare moto: 1 of 5 rounds had 2 winners)."""


@pytest.mark.slow
def test_serialised_moto_has_one_winner_per_racing_create(s3rig: S3Rig) -> None:
    """8 threads creating one key with 10 MiB bodies, directly against moto: one winner a round."""
    bucket = s3rig.server.new_bucket()
    clients = [boto_client(s3rig.server.endpoint) for _ in range(RACERS)]
    for round_ in range(ROUNDS):
        outcomes = _race(clients, bucket, f"race-{round_}")
        assert sorted(outcomes) == ["PreconditionFailed"] * (RACERS - 1) + ["won"], outcomes
    assert s3rig.server.app.serialised > 0


def _race(clients: list[Any], bucket: str, key: str) -> list[str]:
    """Every client creates ``key`` at once; returns "won" or the S3 error code per client."""
    outcomes: list[str] = []
    barrier = threading.Barrier(len(clients), timeout=30)

    def create(i: int) -> None:
        barrier.wait()
        try:
            clients[i].put_object(Bucket=bucket, Key=key, Body=bytes([i]) * BODY_BYTES,
                                  IfNoneMatch="*")
            outcomes.append("won")
        except Exception as exc:  # the client's error, e.g. 412 PreconditionFailed
            outcomes.append(getattr(exc, "response", {}).get("Error", {}).get("Code", "?"))

    threads = [threading.Thread(target=create, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


def test_fault_proxy_refuses_a_presigned_url_with_a_malformed_date() -> None:
    """A tampered X-Amz-Date is a refusal the client sees, not an exception in the proxy."""
    from .faultproxy import verify_presigned_url

    query = ("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=key%2F20261201%2Fus-east-1%2Fs3"
             "%2Faws4_request&X-Amz-Date=2026-12-01T00%3A00&X-Amz-Expires=60"
             "&X-Amz-SignedHeaders=host&X-Amz-Signature=00")
    refusal = verify_presigned_url("GET", "127.0.0.1:1", "/b/k", query, 0.0, {"key": "secret"})
    assert refusal is not None and refusal[0] == "AuthorizationQueryParametersError", refusal
