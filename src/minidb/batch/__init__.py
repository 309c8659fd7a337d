"""minidb.batch: a durable task queue on object storage, for CSV import and export.

All task state lives in object storage: one ``status.json`` per task, changed only by
compare-and-set on its ETag, fenced leases and capped retries, so any number of workers on any
number of machines cooperate with no database and no broker (docs/batch.md).

This package holds the pure cores, free of asyncio, I/O and clock reads (time is passed in):
``_ids`` (task ids), ``_keys`` (the storage layout), ``_model`` (the record), ``_machine`` (the
state machine), ``_reconcile`` (the ambiguous-write rule), ``_backoff`` (retry and poll
timing), ``_csv_import`` / ``_csv_export`` (the file formats) and ``_tasktypes`` (plugins).

On them sit the async shells: ``_queue`` (``TaskQueue``, the client every API and worker
uses), ``_runner`` (the context one attempt runs in, the built-in runners), ``_worker`` (the
poll / claim / heartbeat loop) and ``_cli`` (``minidb batch worker``). ``_apiclient`` is a sync
HTTP client of the control API and ``_scripts`` the CLI on it (``minidb batch submit/ls/...``).
"""

from minidb.batch._backoff import IdlePoll, RetryBackoff
from minidb.batch._csv_export import ExportWriter
from minidb.batch._csv_import import BadRow, GoodRow, ImportReader
from minidb.batch._errors import (
    BatchError,
    Contended,
    CsvError,
    IllegalTransition,
    InvalidRecord,
    InvalidTaskId,
    LeaseLost,
    TaskNotFound,
    TaskTypeError,
)
from minidb.batch._ids import TaskIdGenerator, invert, parse_task_id
from minidb.batch._model import (
    Attempt,
    Lease,
    Output,
    OutputFile,
    Progress,
    TaskError,
    TaskRecord,
    decode,
    encode,
    new_record,
)
from minidb.batch._queue import Claim, TaskPage, TaskQueue
from minidb.batch._reconcile import reconcile
from minidb.batch._tasktypes import (
    TaskContext,
    TaskFailure,
    TaskOutcome,
    TaskType,
    TaskTypeRegistry,
)
from minidb.batch._worker import Worker, WorkerConfig

__all__ = [
    "Attempt",
    "BadRow",
    "BatchError",
    "Claim",
    "Contended",
    "CsvError",
    "ExportWriter",
    "GoodRow",
    "IdlePoll",
    "IllegalTransition",
    "ImportReader",
    "InvalidRecord",
    "InvalidTaskId",
    "Lease",
    "LeaseLost",
    "Output",
    "OutputFile",
    "Progress",
    "RetryBackoff",
    "TaskContext",
    "TaskError",
    "TaskFailure",
    "TaskIdGenerator",
    "TaskNotFound",
    "TaskOutcome",
    "TaskPage",
    "TaskQueue",
    "TaskRecord",
    "TaskType",
    "TaskTypeError",
    "TaskTypeRegistry",
    "Worker",
    "WorkerConfig",
    "decode",
    "encode",
    "invert",
    "new_record",
    "parse_task_id",
    "reconcile",
]
