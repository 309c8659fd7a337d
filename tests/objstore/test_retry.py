"""The store's own retries, on both backends: an upload's create whose answer was lost or
refused settles by the stored ETag, the self-test tries a step again after a transient fault, and
the file backend's transient errors are ``TransientError`` like S3's (docs/objstore.md,
"Errors")."""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from minidb.objstore import (
    AmbiguousWrite,
    FileStore,
    ObjectStore,
    ObjectStoreError,
    PreconditionFailed,
    S3Store,
    TransientError,
    _filecore,
    self_test,
)
from minidb.objstore._retry import RETRY_TRIES, settle_create

from .faultproxy import Action, FaultProxy, Rule
from .filefaults import FileFaults, lose_answer, refuse

pytestmark = pytest.mark.minidb_loop

OUTPUT = "outputs/t/attempt-1/errors.csv"


async def _chunks(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start:start + size]


@pytest.fixture
def file_faults(monkeypatch: pytest.MonkeyPatch, file_store: FileStore) -> FileFaults:
    """Faults to arm on the file store's core for one test."""
    return FileFaults(monkeypatch, file_store)


UPLOAD_FAULTS = {
    # name: (S3 proxy rule on the create, file core fault on commit_create)
    "refused-503": (Rule(Action.ERROR_BEFORE, status=503), refuse(errno.EAGAIN)),
    "dropped-before": (Rule(Action.DROP_BEFORE), refuse(errno.ETIMEDOUT)),
    "reset-before": (Rule(Action.RESET_BEFORE), refuse(errno.ESTALE)),
    "applied-then-500": (Rule(Action.ERROR_AFTER, status=500), lose_answer),
    "applied-then-503": (Rule(Action.ERROR_AFTER, status=503), lose_answer),
    "applied-then-dropped": (Rule(Action.DROP_AFTER), lose_answer),
    "applied-then-reset": (Rule(Action.RESET_AFTER), lose_answer),
}


def _arm(store: ObjectStore, request: pytest.FixtureRequest, fault: str, times: int = 1,
         key: str = "errors\\.csv$") -> None:
    rule, core_fault = UPLOAD_FAULTS[fault]
    if isinstance(store, S3Store):
        proxy: FaultProxy = request.getfixturevalue("proxy")
        proxy.add(Rule(rule.action, method="PUT", key=key, status=rule.status, times=times))
    else:
        request.getfixturevalue("file_faults").on("commit_create", core_fault, times)


@pytest.mark.parametrize("fault", UPLOAD_FAULTS)
async def test_upload_settles_a_create_refused_or_unanswered(
    store: ObjectStore, request: pytest.FixtureRequest, fault: str
) -> None:
    """An upload whose create was refused, or applied with its answer lost, returns the ETag
    of what it wrote and the object holds it: the store tried again or found its own ETag.
    A second upload of the key is still refused."""
    data = b"line,reason,bucket,key\r\n" * 100
    _arm(store, request, fault)
    etag = await store.upload(OUTPUT, _chunks(data))
    stored = await store.get(OUTPUT)
    assert (stored.data, stored.etag) == (data, etag)
    with pytest.raises(PreconditionFailed):
        await store.upload(OUTPUT, _chunks(b"other"))


async def test_upload_that_finds_another_object_is_refused(
    store: ObjectStore, request: pytest.FixtureRequest
) -> None:
    """A create that failed without an answer, where the key now holds other bytes, is
    PreconditionFailed: the store never takes someone else's object for its own."""
    await store.put_if_absent(OUTPUT, b"someone else's")

    async def unanswered() -> str:
        raise AmbiguousWrite("injected: no answer", key=OUTPUT)
    with pytest.raises(PreconditionFailed):
        await settle_create(store, OUTPUT, '"not-the-stored-etag"', unanswered)


@pytest.mark.minidb_paused
async def test_upload_that_never_lands_gives_up(tmp_path: Any) -> None:
    """A create refused on every try raises its last error after RETRY_TRIES tries, having
    waited the retry waits (virtual clock)."""
    store = FileStore(str(tmp_path / "objects"))
    tries = 0

    async def refused() -> str:
        nonlocal tries
        tries += 1
        raise TransientError("injected: slow down", key=OUTPUT)
    try:
        with pytest.raises(TransientError):
            await settle_create(store, OUTPUT, '"x"', refused)
    finally:
        await store.close()
    assert tries == RETRY_TRIES


@pytest.mark.parametrize("action", [Action.DROP_BEFORE, Action.DROP_AFTER],
                         ids=lambda a: a.value)
@pytest.mark.parametrize("nth", range(1, 8))
async def test_self_test_survives_a_dropped_connection_at_any_step(
    s3_store: S3Store, proxy: FaultProxy, nth: int, action: Action
) -> None:
    """A connection dropped at any of the self-test's seven requests, before or after the
    store applied it, does not fail it: the step is tried again (the worker of issue 17
    exited 1 here), and leaves no probe."""
    proxy.add(Rule(action, key="_probe/", nth=nth))
    await self_test(s3_store)
    assert sum(1 for seen in proxy.seen if seen.action is action) == 1
    proxy.clear()
    assert (await s3_store.list("_probe/")).entries == ()


@pytest.mark.parametrize("fault", ["refused-503", "applied-then-dropped"])
async def test_self_test_survives_a_transient_fault_on_both_backends(
    store: ObjectStore, request: pytest.FixtureRequest, fault: str
) -> None:
    """The self-test's first create refused, or applied with its answer lost: it passes
    (a 412 on the retry is found to be its own create by the probe's bytes)."""
    _arm(store, request, fault, key="_probe/")
    await self_test(store)
    assert (await store.list("_probe/")).entries == ()


@pytest.mark.parametrize(
    ("err", "kind"),
    [(errno.EAGAIN, TransientError), (errno.EBUSY, TransientError),
     (errno.ETIMEDOUT, TransientError), (errno.ESTALE, TransientError),
     (errno.EMFILE, TransientError), (errno.ENFILE, TransientError),
     (errno.ENOLCK, TransientError), (errno.EIO, ObjectStoreError),
     (errno.ENOSPC, ObjectStoreError), (errno.EACCES, ObjectStoreError)],
    ids=lambda v: errno.errorcode.get(v, "") if isinstance(v, int) else v.__name__,
)
@pytest.mark.parametrize("method", ["get", "list", "commit_create", "commit_replace", "delete"])
async def test_file_errors_are_classified_like_s3s(
    file_store: FileStore, file_faults: FileFaults, err: int, kind: type[Exception],
    method: str,
) -> None:
    """An OSError of the file backend is TransientError when a later try can get past it
    (a resource briefly short, a timed-out or stale network file system), else a permanent
    ObjectStoreError, for reads and writes alike (writes fail before their commit)."""
    etag = await file_store.put("k", b"x")
    file_faults.on(method, refuse(err))
    calls = {
        "get": lambda: file_store.get("k"),
        "list": lambda: file_store.list("k"),
        "commit_create": lambda: file_store.put_if_absent("new", b"y"),
        "commit_replace": lambda: file_store.compare_and_set("k", b"y", etag),
        "delete": lambda: file_store.delete("k", etag),
    }
    with pytest.raises(ObjectStoreError) as caught:
        await calls[method]()
    assert type(caught.value) is kind
    assert caught.value.retryable == (kind is TransientError)


@pytest.fixture
def no_leaked_temps(file_store: FileStore) -> Iterator[FileStore]:
    """The file store, checked afterwards to hold no temp file."""
    yield file_store
    assert list((Path(file_store.root) / _filecore.TMP_DIR).iterdir()) == []


@pytest.mark.parametrize("fault", ["refused-503", "applied-then-dropped"])
async def test_file_upload_settles_and_leaves_no_temp_file(
    no_leaked_temps: FileStore, file_faults: FileFaults, fault: str
) -> None:
    """The file backend's settled upload discards its temp file once, whatever happened."""
    file_faults.on("commit_create", UPLOAD_FAULTS[fault][1])
    await no_leaked_temps.upload(OUTPUT, _chunks(b"abc" * 1000))
    assert (await no_leaked_temps.get(OUTPUT)).data == b"abc" * 1000
