"""Every fault the proxy injects maps to the error the caller must act on (S3 backend only).

The rule that matters: a conditional write whose outcome the client did not see is an
AmbiguousWrite (never a PreconditionFailed produced by a hidden retry), and only a failure
that S3 defines as "not applied" (503 SlowDown, no connection) is a TransientError.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from minidb.objstore import (
    AmbiguousWrite,
    ConditionalWritesNotEnforced,
    NotFound,
    ObjectStoreError,
    PreconditionFailed,
    S3Store,
    TransientError,
    self_test,
)

from .conftest import S3_TEST_READ_TIMEOUT_S, S3Rig
from .faultproxy import Action, FaultProxy, Rule

pytestmark = pytest.mark.minidb_loop


def _puts(proxy: FaultProxy, key: str) -> int:
    return sum(1 for seen in proxy.seen if seen.method == "PUT" and seen.key.endswith(key))


@pytest.mark.parametrize(
    ("action", "status", "applied"),
    [
        (Action.ERROR_AFTER, 500, True),
        (Action.ERROR_BEFORE, 500, False),
        (Action.DROP_AFTER, 500, True),
        (Action.DROP_BEFORE, 500, False),
        (Action.CONFLICT, 409, False),
    ],
    ids=lambda v: getattr(v, "value", str(v)),
)
async def test_unseen_create_outcome_is_ambiguous(
    s3_store: S3Store, proxy: FaultProxy, action: Action, status: int, applied: bool
) -> None:
    """A create answered 500/409 or cut off is AmbiguousWrite, sent once; re-reading tells."""
    proxy.add(Rule(action, method="PUT", key="k$", status=status))
    with pytest.raises(AmbiguousWrite) as caught:
        await s3_store.put_if_absent("k", b"mine")
    assert _puts(proxy, "k") == 1, "a conditional write must never be retried by the client"
    if action is Action.CONFLICT:
        assert (caught.value.status, caught.value.code) == (409, "ConditionalRequestConflict")
    proxy.clear()
    if applied:
        assert (await s3_store.get("k")).data == b"mine"
    else:
        with pytest.raises(NotFound):
            await s3_store.get("k")


async def test_applied_then_500_cas_is_ambiguous_not_a_loss(
    s3_store: S3Store, proxy: FaultProxy
) -> None:
    """The ambiguous-CAS trap: a landed CAS answered 500 is AmbiguousWrite, not a 412 "loss"."""
    etag = await s3_store.put_if_absent("status.json", b'{"rev":1}')
    proxy.add(Rule(Action.ERROR_AFTER, method="PUT", key="status.json$", status=500))
    with pytest.raises(AmbiguousWrite):
        await s3_store.compare_and_set("status.json", b'{"rev":2}', etag)
    assert _puts(proxy, "status.json") == 2  # the create and the one CAS attempt
    assert s3_store.statistics().ambiguous_writes == 1
    proxy.clear()
    assert (await s3_store.get("status.json")).data == b'{"rev":2}'


async def test_delay_past_read_timeout_is_ambiguous(s3_store: S3Store, proxy: FaultProxy) -> None:
    """A write whose answer outlasts the read timeout is AmbiguousWrite."""
    proxy.add(Rule(Action.DELAY, method="PUT", key="slow$", delay_s=S3_TEST_READ_TIMEOUT_S * 2))
    with pytest.raises(AmbiguousWrite):
        await s3_store.put_if_absent("slow", b"x")


async def test_503_before_apply_is_transient_and_not_applied(
    s3_store: S3Store, proxy: FaultProxy
) -> None:
    """503 SlowDown on a conditional write is a retryable TransientError and nothing landed."""
    proxy.add(Rule(Action.ERROR_BEFORE, method="PUT", key="k$", status=503))
    with pytest.raises(TransientError) as caught:
        await s3_store.put_if_absent("k", b"x")
    assert caught.value.retryable and caught.value.status == 503
    assert _puts(proxy, "k") == 1
    proxy.clear()
    with pytest.raises(NotFound):
        await s3_store.get("k")
    await s3_store.put_if_absent("k", b"x")  # the retry the caller makes succeeds


async def test_reads_retry_a_503_automatically(s3_store: S3Store, proxy: FaultProxy) -> None:
    """Idempotent reads keep botocore's retries: one 503 on a GET is invisible to the caller."""
    await s3_store.put("k", b"x")
    proxy.add(Rule(Action.ERROR_BEFORE, method="GET", key="k$", status=503, nth=1))
    assert (await s3_store.get("k")).data == b"x"
    assert sum(1 for s in proxy.seen if s.method == "GET") == 2


async def test_truncated_get_body_is_transient(s3_store: S3Store, proxy: FaultProxy) -> None:
    """A whole-object GET whose body is cut short fails as a TransientError (its caller
    retries it: nothing of it was handed out)."""
    await s3_store.put("big", b"z" * 100_000)
    proxy.add(Rule(Action.TRUNCATE, method="GET", key="big$", truncate_at=1000))
    with pytest.raises(TransientError):
        await s3_store.get("big")


async def _read_all(store: S3Store, key: str) -> bytes:
    reader = await store.open_read(key)
    async with reader:
        return b"".join([chunk async for chunk in reader])


@pytest.mark.parametrize("cut_at", [0, 300_000, (1 << 20) + 5])
async def test_streamed_read_cut_short_resumes_where_it_stopped(
    s3_store: S3Store, proxy: FaultProxy, cut_at: int
) -> None:
    """A streamed read whose connection closes after the headers, mid-chunk or just past a
    chunk resumes with a ranged GET If-Match its ETag: the caller sees every byte once, in
    order, and no error."""
    data = bytes(range(256)) * 8192  # 2 MiB: more than one read chunk
    await s3_store.put("big", data)
    proxy.add(Rule(Action.TRUNCATE, method="GET", key="big$", nth=1, truncate_at=cut_at))
    assert await _read_all(s3_store, "big") == data
    gets = [seen for seen in proxy.seen if seen.method == "GET" and seen.key.endswith("big")]
    assert [seen.action for seen in gets] == [Action.TRUNCATE, None]
    assert s3_store.statistics().bytes_read == len(data)


async def test_streamed_read_that_never_gets_further_is_transient(
    s3_store: S3Store, proxy: FaultProxy
) -> None:
    """A read cut before any byte on every resume fails as a TransientError after the
    store's retry tries, not forever."""
    await s3_store.put("big", b"z" * 100_000)
    proxy.add(Rule(Action.TRUNCATE, method="GET", key="big$", truncate_at=0))
    with pytest.raises(TransientError):
        await _read_all(s3_store, "big")


async def test_streamed_read_of_a_replaced_object_is_refused(
    s3_store: S3Store, proxy: FaultProxy
) -> None:
    """A read cut short after the object was replaced does not splice the new object into
    the old one: the resume is If-Match the first ETag, so it is PreconditionFailed."""
    await s3_store.put("big", b"a" * 100_000)
    proxy.add(Rule(Action.TRUNCATE, method="GET", key="big$", nth=1, truncate_at=1000))
    reader = await s3_store.open_read("big")
    await s3_store.put("big", b"b" * 100_000)
    with pytest.raises(PreconditionFailed):
        async with reader:
            async for _ in reader:
                pass


async def test_500_on_a_read_is_transient(s3_store: S3Store, proxy: FaultProxy) -> None:
    """A read failing with 500 on every attempt is a TransientError, never AmbiguousWrite."""
    proxy.add(Rule(Action.ERROR_BEFORE, method="GET", key="k$", status=500))
    with pytest.raises(TransientError):
        await s3_store.get("k")


async def test_403_is_a_plain_object_store_error(s3_store: S3Store, proxy: FaultProxy) -> None:
    """A status with no special meaning is an ObjectStoreError carrying status and endpoint."""
    proxy.add(Rule(Action.ERROR_BEFORE, method="PUT", key="k$", status=403))
    with pytest.raises(ObjectStoreError) as caught:
        await s3_store.put("k", b"x")
    assert type(caught.value) is ObjectStoreError
    assert (caught.value.status, caught.value.code) == (403, "AccessDenied")
    assert caught.value.endpoint == s3_store.endpoint and caught.value.key == "k"


async def test_unreachable_endpoint_is_transient(s3rig: S3Rig) -> None:
    """A write to an endpoint that refuses connections is a TransientError (nothing was sent)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = s3rig.store("nobucket", endpoint_url=f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(TransientError):
            await store.put_if_absent("k", b"x")
    finally:
        await store.close()


async def test_stripped_conditions_fail_the_self_test(
    s3_store: S3Store, proxy: FaultProxy
) -> None:
    """A store that ignores If-None-Match/If-Match fails the self-test with the exact message."""
    proxy.add(Rule(Action.STRIP_CONDITIONS, method="PUT"))
    with pytest.raises(ConditionalWritesNotEnforced) as caught:
        await self_test(s3_store)
    assert str(caught.value) == f"conditional writes not enforced by {s3_store.endpoint}"
    assert caught.value.step == "create twice"
    proxy.clear()
    assert (await s3_store.list("_probe/")).entries == ()


async def test_stripped_if_match_alone_fails_the_self_test(
    s3_store: S3Store, proxy: FaultProxy
) -> None:
    """Stripping If-Match only from the stale CAS (the 3rd PUT) is caught at that step."""
    proxy.add(Rule(Action.STRIP_CONDITIONS, method="PUT", nth=3))
    with pytest.raises(ConditionalWritesNotEnforced) as caught:
        await self_test(s3_store)
    assert caught.value.step == "stale compare-and-set"


async def _chunks(count: int, size: int = 1 << 20):  # type: ignore[no-untyped-def]
    for _ in range(count):
        yield b"m" * size


async def test_multipart_completion_answered_500_after_landing_is_settled(
    s3_store: S3Store, proxy: FaultProxy
) -> None:
    """A 500 after CompleteMultipartUpload landed is settled by the upload itself: the stored
    ETag is the one S3 gives the parts sent (MD5 of the part MD5s, -N), so it is ours."""
    proxy.add(Rule(Action.ERROR_AFTER, method="POST", key="mpu$", status=500, nth=2))
    etag = await s3_store.upload("mpu", _chunks(6))
    assert etag.endswith('-2"')
    proxy.clear()
    stored = await s3_store.get("mpu")
    assert len(stored.data) == 6 << 20 and stored.etag == etag
    with pytest.raises(PreconditionFailed):
        await s3_store.upload("mpu", _chunks(6))


# --- the classification, request by request (docs/objstore.md, "Errors") ----------------------

CLASSIFIED = [
    # (fault, status, code, what a read meets, what a write meets)
    (Action.ERROR_BEFORE, 503, "SlowDown", TransientError, TransientError),
    (Action.ERROR_BEFORE, 503, "ServiceUnavailable", TransientError, TransientError),
    (Action.ERROR_BEFORE, 429, "TooManyRequests", TransientError, TransientError),
    (Action.ERROR_BEFORE, 400, "RequestTimeout", TransientError, TransientError),
    (Action.ERROR_BEFORE, 500, "InternalError", TransientError, AmbiguousWrite),
    (Action.ERROR_BEFORE, 502, "BadGateway", TransientError, AmbiguousWrite),
    (Action.ERROR_BEFORE, 504, "GatewayTimeout", TransientError, AmbiguousWrite),
    (Action.ERROR_BEFORE, 501, "NotImplemented", ObjectStoreError, ObjectStoreError),
    (Action.DROP_BEFORE, None, None, TransientError, AmbiguousWrite),
    (Action.RESET_BEFORE, None, None, TransientError, AmbiguousWrite),
    (Action.DROP_AFTER, None, None, TransientError, AmbiguousWrite),
    (Action.RESET_AFTER, None, None, TransientError, AmbiguousWrite),
]


@pytest.fixture(scope="module")
def single_try_store(s3rig: S3Rig) -> Iterator[S3Store]:
    """An S3 store through the proxy whose reads make one try (no botocore retry), so a
    fault is met once and its class is seen as translated."""
    store = s3rig.store(s3rig.server.new_bucket(), read_attempts=1)
    yield store
    asyncio.run(store.close())


def _fault_id(case: tuple[object, ...]) -> str:
    action, status, code = case[:3]
    return f"{action.value}-{status}-{code}" if status else action.value  # type: ignore[attr-defined]


@pytest.mark.parametrize("case", CLASSIFIED, ids=[_fault_id(c) for c in CLASSIFIED])
@pytest.mark.parametrize("request_kind", ["get", "list", "open_read", "put_if_absent",
                                          "compare_and_set", "delete"])
async def test_every_failure_is_classified_for_every_request(
    single_try_store: S3Store, proxy: FaultProxy, case: tuple[Action, int | None, str | None,
                                                      type[Exception], type[Exception]],
    request_kind: str,
) -> None:
    """Each fault the proxy makes, on each kind of request, is the one error class the
    table in docs/objstore.md gives it: refused (throttled, never connected) is transient
    for any request; no answer or a server failure is transient for a read and ambiguous for
    a write; anything else is permanent. (Reads meet the fault on every botocore retry.)"""
    action, status, code, on_read, on_write = case
    s3_store = single_try_store
    etag = await s3_store.put("k", b"x")
    method = {"get": "GET", "list": "GET", "open_read": "GET", "put_if_absent": "PUT",
              "compare_and_set": "PUT", "delete": "DELETE"}[request_kind]
    proxy.add(Rule(action, method=method, key="k$", status=status or 500, code=code))
    calls = {
        "get": lambda: s3_store.get("k"),
        "list": lambda: s3_store.list("k"),
        "open_read": lambda: s3_store.open_read("k"),
        "put_if_absent": lambda: s3_store.put_if_absent("k", b"y"),
        "compare_and_set": lambda: s3_store.compare_and_set("k", b"y", etag),
        "delete": lambda: s3_store.delete("k", etag),
    }
    expected = on_read if method == "GET" else on_write
    with pytest.raises(ObjectStoreError) as caught:
        await calls[request_kind]()
    assert type(caught.value) is expected, caught.value
    assert caught.value.retryable == (expected is TransientError)
