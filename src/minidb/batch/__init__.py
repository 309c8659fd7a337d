"""minidb.batch: a durable task queue on object storage, for CSV import and export.

All task state lives in object storage: one ``status.json`` per task, changed only by
compare-and-set on its ETag, fenced leases and capped retries, so any number of workers on any
number of machines cooperate with no database and no broker (docs/batch.md).

This package holds the pure cores, free of asyncio, I/O and clock reads (time is passed in):
``_ids`` (task ids), ``_keys`` (the storage layout), ``_model`` (the record), ``_machine`` (the
state machine), ``_reconcile`` (the ambiguous-write rule), ``_backoff`` (retry and poll
timing), ``_csv_import`` / ``_csv_export`` (the file formats) and ``_tasktypes`` (plugins).
"""

from minidb.batch._backoff import IdlePoll, RetryBackoff
from minidb.batch._csv_export import ExportWriter
from minidb.batch._csv_import import BadRow, GoodRow, ImportReader
from minidb.batch._errors import (
    BatchError,
    CsvError,
    IllegalTransition,
    InvalidRecord,
    InvalidTaskId,
    LeaseLost,
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
from minidb.batch._reconcile import reconcile
from minidb.batch._tasktypes import (
    TaskContext,
    TaskFailure,
    TaskOutcome,
    TaskType,
    TaskTypeRegistry,
)

__all__ = [
    "Attempt",
    "BadRow",
    "BatchError",
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
    "TaskOutcome",
    "TaskRecord",
    "TaskType",
    "TaskTypeError",
    "TaskTypeRegistry",
    "decode",
    "encode",
    "invert",
    "new_record",
    "parse_task_id",
    "reconcile",
]
