"""What one attempt runs in: the ``TaskContext`` a worker gives a task, and the built-in runners.

``AttemptContext`` is the concrete context: the input streamed from the store (counting bytes
for progress), output files written under the attempt's own keys (``If-None-Match``, through a
small bounded hand-off to ``TaskQueue.put_output``), progress for the heartbeats, the
cancellation flag the heartbeat loop sets, and the minidb client of the one server the worker
was given (``LazyClient``: connected on first use, so a ``sleep`` task never connects).

Progress is read when a heartbeat is written, not when the type gets round to reporting it: a
type may hand the context a live source (``follow_progress``), and ``progress`` asks it then.
The import's source counts the rows minidb has acknowledged at that moment, so a progress bar
moves at every heartbeat even while one input chunk takes many heartbeats to import.

Every failure of minidb (refused connection, dropped connection, ``ERR busy``, ``ERR store
unavailable``, ``ERR read-only``) becomes a *retryable* ``TaskFailure`` (``minidb_unavailable``):
the attempt fails and is retried with backoff, and the worker keeps claiming.

Built-in runners: ``sleep`` (heartbeats, honours cancel), ``csv_import`` (streams the input
through ``ImportReader``, good rows to minidb through ``BulkWriter``s on a few connections,
bad rows to ``errors.csv``)
and ``csv_export`` (SCAN + pipelined GET into ``export.csv`` through ``ExportWriter``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from minidb.batch import _keys
from minidb.batch._csv_export import ERROR_REPORT_CELLS, ExportWriter
from minidb.batch._csv_import import BadRow, GoodRow, ImportReader, Row
from minidb.batch._errors import CsvError
from minidb.batch._model import OutputFile, Progress
from minidb.batch._queue import Claim, TaskQueue
from minidb.batch._tasktypes import (
    CSV_EXPORT,
    CSV_IMPORT,
    DEFAULT_IMPORT_CONNECTIONS,
    DEFAULT_MAX_BAD_ROWS,
    SLEEP,
    TaskContext,
    TaskFailure,
    TaskOutcome,
    TaskType,
)
from minidb.client import Backoff, BulkWriter, Client, raise_for_error
from minidb.errors import MinidbError
from minidb.objstore import NotFound
from minidb.protocol import Keys, Value

OUTPUT_CHUNK_BYTES = 64 << 10
"""Output writes are gathered into chunks of about this many bytes before they are handed on."""
OUTPUT_QUEUE_CHUNKS = 4
"""Chunks of one output in flight between the task and the upload (bounds its memory)."""
NO_BUSY_RESEND = Backoff(attempts=1)
"""An import's writers send each row once: ``ERR busy`` fails the attempt (see ``_Import``)."""
SCAN_PAGE = 256
"""Keys per SCAN page of an export (each page's values are read in one pipeline)."""
SLEEP_SLICE_S = 0.05
"""A ``sleep`` task checks for cancellation this often, in seconds."""
IMPORT_SLICE_BYTES = 64 << 10
"""An import feeds its reader this many bytes of an input chunk at a time, so ``bytes_done``
moves in steps of this size rather than of a whole read chunk (1 MiB)."""
ERRORS_NAME = "errors.csv"
EXPORT_NAME = "export.csv"


class LazyClient:
    """A ``minidb.client.Client`` to one server, connected on first use; every failure of the
    server is a retryable ``TaskFailure``."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._client: Client | None = None

    async def _get(self) -> Client:
        if self._client is None:
            try:
                self._client = await Client.connect(self.host, self.port)
            except OSError as exc:
                raise _unavailable(self, exc) from exc
        return self._client

    async def _call(self, op: Callable[[Client], Awaitable[Any]]) -> Any:
        client = await self._get()
        try:
            return await op(client)
        except (OSError, MinidbError) as exc:
            await self.close()
            raise _unavailable(self, exc) from exc

    async def get(self, bucket: str, key: str) -> str | None:
        result: str | None = await self._call(lambda c: c.get(bucket, key))
        return result

    async def set(self, bucket: str, key: str, value: str) -> None:
        await self._call(lambda c: c.set(bucket, key, value))

    async def bulk_writer(self) -> BulkWriter:
        """A ``BulkWriter`` on a connection of its own to the same server (an import streams
        through it; the caller closes it)."""
        try:
            return await BulkWriter.connect(self.host, self.port, busy_backoff=NO_BUSY_RESEND)
        except OSError as exc:
            raise _unavailable(self, exc) from exc

    async def pipeline_checked(self, requests: Sequence[str]) -> list[Any]:
        """Send ``requests`` in one write; any ``ERR`` reply fails the attempt (retryable)."""
        async def op(client: Client) -> list[Any]:
            return [raise_for_error(r) for r in await client.pipeline(requests)]
        result: list[Any] = await self._call(op)
        return result

    async def scan(self, bucket: str, page: int = 100) -> AsyncIterator[str]:
        cursor = "0"
        while True:
            # Page by page through _call, so each request's failure becomes a TaskFailure.
            reply: Keys = await self._call(
                functools.partial(Client.scan_page, bucket=bucket, cursor=cursor, page=page)
            )
            for key in reply.keys:
                yield key
            if reply.cursor == "0":
                return
            cursor = reply.cursor

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(OSError):
                await client.close()


def _unavailable(client: LazyClient, exc: BaseException) -> TaskFailure:
    return TaskFailure(
        "minidb_unavailable", f"minidb at {client.host}:{client.port}: {exc}"[:1000],
        retryable=True,
    )


class _Sink:
    """One output file: chunks handed through a bounded queue to ``TaskQueue.put_output``."""

    def __init__(self, queue: TaskQueue, claim: Claim, name: str) -> None:
        self._chunks: asyncio.Queue[bytes | None] = asyncio.Queue(OUTPUT_QUEUE_CHUNKS)
        self._buffer = bytearray()
        self._upload = asyncio.ensure_future(queue.put_output(claim, name, self._stream()))
        self.file: OutputFile | None = None

    async def _stream(self) -> AsyncIterator[bytes]:
        while (chunk := await self._chunks.get()) is not None:
            yield chunk

    async def _hand_on(self, item: bytes | None) -> None:
        put = asyncio.ensure_future(self._chunks.put(item))
        done, _ = await asyncio.wait({put, self._upload}, return_when=asyncio.FIRST_COMPLETED)
        if put not in done:
            put.cancel()
            self._upload.result()  # the upload ended early: raise its error

    async def write(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) >= OUTPUT_CHUNK_BYTES:
            chunk, self._buffer = bytes(self._buffer), bytearray()
            await self._hand_on(chunk)

    async def close(self) -> None:
        if self.file is not None:
            return
        if self._buffer:
            await self._hand_on(bytes(self._buffer))
            self._buffer = bytearray()
        await self._hand_on(None)
        self.file = await self._upload

    def abort(self) -> None:
        self._upload.cancel()


class AttemptContext:
    """The ``TaskContext`` of one attempt (see the module docstring)."""

    def __init__(
        self, queue: TaskQueue, claim: Claim, params: Mapping[str, Any], minidb: LazyClient
    ) -> None:
        self._queue = queue
        self._claim = claim
        self._params = params
        self._minidb = minidb
        self._reported = Progress()
        self._live: Callable[[], Progress] | None = None
        self._bytes_total: int | None = None
        self.cancelled = False
        self._sinks: list[_Sink] = []

    @property
    def task_id(self) -> str:
        return self._claim.task_id

    @property
    def attempt(self) -> int:
        return self._claim.attempt

    @property
    def params(self) -> Mapping[str, Any]:
        return self._params

    @property
    def minidb(self) -> LazyClient:
        return self._minidb

    async def input(self) -> AsyncIterator[bytes]:
        """The task's input, streamed; an input that is not there (never uploaded, or deleted
        since) fails the attempt for good: another attempt would find it missing too."""
        try:
            reader = await self._queue.open_input(self.task_id)
        except NotFound as exc:
            raise TaskFailure("input_missing", f"the task has no input: {exc}"[:1000],
                              retryable=False) from exc
        async with reader:
            self._bytes_total = reader.size
            async for chunk in reader:
                yield chunk

    async def open_output(self, name: str) -> _Sink:
        _keys.check_file_name(name)
        sink = _Sink(self._queue, self._claim, name)
        self._sinks.append(sink)
        return sink

    @property
    def progress(self) -> Progress:
        """The attempt's progress now, as each heartbeat and the attempt's last write publish
        it: the live source's if the type gave one, else what the type last reported; with
        the input's size as ``bytes_total`` when the type does not say."""
        progress = self._reported if self._live is None else self._live()
        if progress.bytes_total is None and self._bytes_total is not None:
            progress = dataclasses.replace(progress, bytes_total=self._bytes_total)
        return progress

    def report_progress(self, progress: Progress) -> None:
        self._reported = progress

    def follow_progress(self, source: Callable[[], Progress]) -> None:
        """Read progress from ``source()`` whenever it is published (instead of reports)."""
        self._live = source

    def cancel_requested(self) -> bool:
        return self.cancelled

    def files(self) -> tuple[OutputFile, ...]:
        """The output files closed so far, in the order they were opened."""
        return tuple(s.file for s in self._sinks if s.file is not None)

    def abort(self) -> None:
        """Stop the uploads still open (the attempt ended without closing them)."""
        for sink in self._sinks:
            if sink.file is None:
                sink.abort()


def _ctx(context: TaskContext) -> AttemptContext:
    if not isinstance(context, AttemptContext):
        raise TypeError("the built-in task types run in the worker's AttemptContext")
    return context


# --- sleep ------------------------------------------------------------------------------------


async def run_sleep(context: TaskContext) -> TaskOutcome:
    """Sleep ``seconds`` (checking for cancel), then succeed or fail as ``fail`` says."""
    loop = asyncio.get_running_loop()
    end = loop.time() + float(context.params["seconds"])
    while (left := end - loop.time()) > 0 and not context.cancel_requested():
        await asyncio.sleep(min(left, SLEEP_SLICE_S))
    fail = context.params.get("fail")
    if fail is not None:
        raise TaskFailure("sleep_failed", f"sleep asked to fail ({fail})",
                          retryable=fail == "retryable")
    return TaskOutcome({"slept_s": context.params["seconds"]})


# --- csv_import -------------------------------------------------------------------------------


class _Import:
    """One import: good rows streamed through ``BulkWriter``s, bad rows to the error report.

    Rows are dealt to the writers by a hash of their key, so every row of one key goes down
    one connection, in file order: the last row of a key in the file is the value that stays,
    however many connections there are. The writers never resend a row answered ``ERR
    busy`` (a resend could land after a later row of the same key); busy fails the attempt,
    and the retry re-runs the import from the top, which is safe because SET is idempotent.
    """

    def __init__(self, context: AttemptContext, errors: _Sink, writers: list[BulkWriter]) -> None:
        self.context = context
        self.errors = errors
        self.writers = writers
        self.report = ExportWriter(neutralize_formulas=True, columns=ERROR_REPORT_CELLS)
        limit = context.params.get("max_bad_rows", DEFAULT_MAX_BAD_ROWS)
        self.max_bad: int | None = None if limit is None else int(limit)
        self.rows = self.failed = 0
        self.bytes_done = 0
        """Bytes of the input read and parsed, their rows handed to the writers."""

    async def take(self, rows: list[Row]) -> None:
        # The hot loop of an import: a type test, not isinstance, and nothing built per row
        # (a GoodRow is the (tag, bucket, key, value) that set_many takes, its line the tag).
        writers = self.writers
        n = len(writers)
        dealt: list[list[GoodRow]] = [[] for _ in writers]
        deal = [share.append for share in dealt]
        for row in rows:
            if type(row) is GoodRow:
                deal[hash(row[2]) % n](row)  # row[2]: the key
            else:
                await self.bad(cast(BadRow, row))
        # Only the writers' errors are minidb's; the error report's are the object store's
        # and pass through.
        try:
            for writer, share in zip(writers, dealt, strict=True):
                if share:
                    await writer.set_many(share)
        except (OSError, MinidbError) as exc:
            raise _unavailable(self.context.minidb, exc) from exc
        self.rows += len(rows)
        self.check_refusals()

    async def bad(self, row: BadRow) -> None:
        self.failed += 1
        await self.errors.write(self.report.row(*row.report_cells()))
        if self.max_bad is not None and self.failed > self.max_bad:
            await self.errors.close()
            raise TaskFailure(
                "too_many_bad_rows", f"more than {self.max_bad} bad rows (see {ERRORS_NAME})",
                retryable=False,
            )

    async def flush(self) -> None:
        """Wait until every good row sent is durable in minidb."""
        try:
            await asyncio.gather(*(writer.flush() for writer in self.writers))
        except (OSError, MinidbError) as exc:
            raise _unavailable(self.context.minidb, exc) from exc
        self.check_refusals()

    def check_refusals(self) -> None:
        """A row the server refused fails the attempt, retryable like any refusal by minidb:
        the reader already refuses every row the protocol cannot carry, so a refusal is the
        server's state, not the row's."""
        failures = [f for writer in self.writers for f in writer.failures]
        if failures:
            first = min(failures, key=lambda f: cast(int, f.tag))
            raise _unavailable(self.context.minidb, MinidbError(
                f"{len(failures)} rows refused; line {first.tag}: ERR {first.reason}"))

    def progress(self) -> Progress:
        """The import's progress now: rows minidb has acknowledged (the writers' counts,
        which grow while a chunk is still being sent) and bad rows found."""
        ok = sum(writer.statistics().ok for writer in self.writers)
        return Progress(
            rows_done=ok + self.failed, rows_ok=ok, rows_failed=self.failed,
            bytes_done=self.bytes_done,
        )


async def run_csv_import(context: TaskContext) -> TaskOutcome:
    """Import ``input.csv`` into minidb; bad rows to ``errors.csv``."""
    ctx = _ctx(context)
    reader = ImportReader()
    errors = await ctx.open_output(ERRORS_NAME)
    writers: list[BulkWriter] = []
    try:
        for _ in range(int(ctx.params.get("connections", DEFAULT_IMPORT_CONNECTIONS))):
            writers.append(await ctx.minidb.bulk_writer())
        job = _Import(ctx, errors, writers)
        ctx.follow_progress(job.progress)
        await errors.write(job.report.header())
        async for chunk in ctx.input():
            for start in range(0, len(chunk), IMPORT_SLICE_BYTES):
                await job.take(reader.feed(chunk[start:start + IMPORT_SLICE_BYTES]))
                job.bytes_done = reader.bytes_consumed
        await job.take(reader.close())
        job.bytes_done = reader.bytes_consumed
        await job.flush()
    except CsvError as exc:
        raise TaskFailure(exc.code, str(exc), retryable=False) from exc
    finally:
        await asyncio.gather(*(writer.close() for writer in writers))
    await errors.close()
    return TaskOutcome({"rows": job.rows, "ok": job.rows - job.failed, "failed": job.failed},
                       (ERRORS_NAME,))


# --- csv_export -------------------------------------------------------------------------------


async def run_csv_export(context: TaskContext) -> TaskOutcome:
    """Export one bucket (SCAN, then pipelined GETs per page) to ``export.csv``."""
    ctx = _ctx(context)
    bucket = str(ctx.params["bucket"])
    writer = ExportWriter(neutralize_formulas=bool(ctx.params.get("neutralize_formulas", True)))
    out = await ctx.open_output(EXPORT_NAME)
    await out.write(writer.header())
    rows = 0

    async def page(keys: list[str]) -> None:
        nonlocal rows
        replies = await ctx.minidb.pipeline_checked([f"GET {bucket} {k}" for k in keys])
        for key, reply in zip(keys, replies, strict=True):
            if isinstance(reply, Value):  # a key deleted since the SCAN is left out
                await out.write(writer.row(bucket, key, reply.value))
                rows += 1
        ctx.report_progress(Progress(rows_done=rows, rows_ok=rows))

    keys: list[str] = []
    async for key in ctx.minidb.scan(bucket, SCAN_PAGE):
        keys.append(key)
        if len(keys) >= SCAN_PAGE:
            await page(keys)
            keys = []
    if keys:
        await page(keys)
    await out.close()
    return TaskOutcome({"rows": rows}, (EXPORT_NAME,))


RUNNERS: Mapping[str, Callable[[TaskContext], Awaitable[TaskOutcome]]] = {
    SLEEP.name: run_sleep, CSV_IMPORT.name: run_csv_import, CSV_EXPORT.name: run_csv_export,
}
"""The runners of the built-in declarations in ``_tasktypes``."""


def runner_of(task_type: TaskType) -> Callable[[TaskContext], Awaitable[TaskOutcome]] | None:
    """The type's own ``run``, else the built-in runner of its name."""
    return task_type.run if task_type.run is not None else RUNNERS.get(task_type.name)
