"""Task types: what a task *does*, as plugins with validated params, and the context they run in.

A ``TaskType`` names itself, says whether it needs an uploaded input, validates (and
normalises) its params, and has an async ``run(context)``. The API validates params when a task
is created (an unknown type or invalid params is a ``TaskTypeError``: HTTP 422), the worker
validates again before running (a record written by an older version may not fit any more).

Built in: ``csv_import`` (``{"max_bad_rows"?: int >= 0, "connections"?: 1..16}``),
``csv_export`` (``{"bucket": name, "neutralize_formulas"?: bool}``) and ``sleep``
(``{"seconds": 0..3600, "fail": null | "retryable" | "permanent"}``, for tests and
operations). Their ``run`` is supplied by the worker layer; here they are declarations. Others
are registered from the entry-point group ``minidb.batch.task_types`` (each entry point loads a
``TaskType``) or a dotted path (``package.module:attribute``).

``TaskContext`` is the whole world of a running task, as a Protocol so this module stays free
of asyncio and I/O: the input as an async iterator of byte chunks, output files opened by name
(written under ``outputs/<id>/attempt-<n>/``), progress reports (checkpointed on heartbeats),
the cancellation check, and the minidb client.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from minidb.batch._errors import TaskTypeError
from minidb.batch._model import Progress
from minidb.protocol import MAX_NAME_CHARS

ENTRY_POINT_GROUP = "minidb.batch.task_types"
DEFAULT_MAX_BAD_ROWS: int | None = None
"""``csv_import`` fails once more rows than ``max_bad_rows`` are bad (they are all in
``errors.csv``); by default no count of bad rows fails it: every one is reported."""
MAX_BAD_ROWS_LIMIT = 10**9
DEFAULT_IMPORT_CONNECTIONS = 4
"""Connections a ``csv_import`` streams its rows over. Each ``BulkWriter`` sends ``BULK``
frames of up to 1024 rows, and the server takes a frame heavier than a connection's
``--max-in-flight`` (128) only as the first of a take, so one connection brings about one frame
to each group commit; more connections bring more rows to each fdatasync and keep the server
busy while one waits for its reply. Measured with ``bench/batch_import.py --rows 300000`` (the
loader alone, durable server, quiet 2-core machine): 1 / 4 connections loaded 140k / 188k
rows/s. 4 takes that gain while each connection holds only ``BulkWriter``'s window."""
MAX_IMPORT_CONNECTIONS = 16
"""The most connections one ``csv_import`` may open to minidb."""
MAX_SLEEP_S = 3600.0
"""The longest ``sleep`` task, in seconds."""

_TYPE_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}", re.ASCII)
_BUCKET = re.compile(rf"[A-Za-z0-9_.:/-]{{1,{MAX_NAME_CHARS}}}", re.ASCII)


# --- what a running task sees -----------------------------------------------------------------


class OutputSink(Protocol):
    """One output file being written; ``close`` makes it durable (put-if-absent)."""

    async def write(self, data: bytes) -> None: ...

    async def close(self) -> None: ...


class KeyValueClient(Protocol):
    """The part of ``minidb.client.Client`` a task uses."""

    async def get(self, bucket: str, key: str) -> str | None: ...

    async def set(self, bucket: str, key: str, value: str) -> None: ...

    def scan(self, bucket: str, page: int = 100) -> AsyncIterator[str]: ...


class TaskContext(Protocol):
    """What a task gets from the worker while it runs one attempt."""

    @property
    def task_id(self) -> str: ...

    @property
    def attempt(self) -> int: ...

    @property
    def params(self) -> Mapping[str, Any]:
        """The params as returned by the type's ``validate``."""
        ...

    @property
    def minidb(self) -> KeyValueClient: ...

    def input(self) -> AsyncIterator[bytes]:
        """The uploaded input, in chunks (types with ``needs_input`` only)."""
        ...

    async def open_output(self, name: str) -> OutputSink:
        """A new output file of this attempt (``name`` as ``_keys.check_file_name`` allows)."""
        ...

    def report_progress(self, progress: Progress) -> None:
        """Record progress; the next heartbeat writes it."""
        ...

    def cancel_requested(self) -> bool:
        """Whether the task was cancelled (or the lease lost): stop soon and return."""
        ...


@dataclass(frozen=True)
class TaskOutcome:
    """What ``run`` returns when the attempt succeeded: the result object and output files."""

    result: Mapping[str, Any] = field(default_factory=dict)
    files: tuple[str, ...] = ()


class TaskFailure(Exception):
    """Raised by ``run`` to fail the attempt with a stable ``code``; ``retryable`` says whether
    another attempt could succeed."""

    def __init__(self, code: str, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


Runner = Callable[[TaskContext], Awaitable[TaskOutcome]]


@dataclass(frozen=True)
class TaskType:
    """One kind of task."""

    name: str
    validate: Callable[[Mapping[str, Any]], dict[str, Any]]
    """Return the normalised params or raise ``TaskTypeError``."""
    needs_input: bool = False
    """Whether submit requires ``inputs/<id>/input.csv`` to exist."""
    run: Runner | None = None
    """The attempt itself; None for a declaration whose runner the worker layer supplies."""


# --- param validation -------------------------------------------------------------------------


def _params(task_type: str, params: object, allowed: Iterable[str]) -> dict[str, Any]:
    if not isinstance(params, Mapping):
        raise TaskTypeError("params must be a JSON object", task_type=task_type)
    extra = sorted(set(params) - set(allowed))
    if extra:
        raise TaskTypeError(f"unknown param {extra[0]!r}", task_type=task_type, field=extra[0])
    return dict(params)


def _int(task_type: str, name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise TaskTypeError(
            f"{name} must be an integer in {low}..{high}", task_type=task_type, field=name
        )
    return value


def validate_csv_import(params: Mapping[str, Any]) -> dict[str, Any]:
    """``{"max_bad_rows"?: int >= 0 | null, "connections"?: 1..MAX_IMPORT_CONNECTIONS}``,
    defaulting to ``DEFAULT_MAX_BAD_ROWS`` (null: unlimited) and ``DEFAULT_IMPORT_CONNECTIONS``."""
    p = _params("csv_import", params, {"max_bad_rows", "connections"})
    limit = p.get("max_bad_rows", DEFAULT_MAX_BAD_ROWS)
    connections = p.get("connections", DEFAULT_IMPORT_CONNECTIONS)
    return {
        "max_bad_rows": (None if limit is None
                         else _int("csv_import", "max_bad_rows", limit, 0, MAX_BAD_ROWS_LIMIT)),
        "connections": _int("csv_import", "connections", connections, 1,
                            MAX_IMPORT_CONNECTIONS),
    }


def validate_csv_export(params: Mapping[str, Any]) -> dict[str, Any]:
    """``{"bucket": name, "neutralize_formulas"?: bool}`` (formula guard on by default)."""
    p = _params("csv_export", params, {"bucket", "neutralize_formulas"})
    bucket = p.get("bucket")
    if not isinstance(bucket, str) or _BUCKET.fullmatch(bucket) is None:
        raise TaskTypeError(
            f"bucket must be 1-{MAX_NAME_CHARS} of [A-Za-z0-9_.:/-]", task_type="csv_export",
            field="bucket",
        )
    guard = p.get("neutralize_formulas", True)
    if not isinstance(guard, bool):
        raise TaskTypeError(
            "neutralize_formulas must be a boolean", task_type="csv_export",
            field="neutralize_formulas",
        )
    return {"bucket": bucket, "neutralize_formulas": guard}


def validate_sleep(params: Mapping[str, Any]) -> dict[str, Any]:
    """``{"seconds": number 0..3600, "fail"?: null | "retryable" | "permanent"}``."""
    p = _params("sleep", params, {"seconds", "fail"})
    seconds = p.get("seconds")
    if (
        isinstance(seconds, bool) or not isinstance(seconds, int | float)
        # The range first: it refuses NaN and infinities too, and math.isfinite would raise
        # OverflowError on an integer too large for a float (JSON allows 400 digits).
        or not 0 <= seconds <= MAX_SLEEP_S
    ):
        raise TaskTypeError(
            f"seconds must be a number in 0..{MAX_SLEEP_S:g}", task_type="sleep", field="seconds"
        )
    fail = p.get("fail")
    if fail not in (None, "retryable", "permanent"):
        raise TaskTypeError(
            'fail must be null, "retryable" or "permanent"', task_type="sleep", field="fail"
        )
    return {"seconds": seconds, "fail": fail}


CSV_IMPORT = TaskType("csv_import", validate_csv_import, needs_input=True)
CSV_EXPORT = TaskType("csv_export", validate_csv_export)
SLEEP = TaskType("sleep", validate_sleep)
BUILTIN = (CSV_IMPORT, CSV_EXPORT, SLEEP)


# --- the registry -----------------------------------------------------------------------------


class EntryPointLike(Protocol):
    """What ``importlib.metadata.EntryPoint`` offers that the registry uses."""

    @property
    def name(self) -> str: ...

    def load(self) -> Any: ...


class TaskTypeRegistry:
    """The task types a process knows, by name."""

    def __init__(self, types: Iterable[TaskType] = BUILTIN) -> None:
        self._types: dict[str, TaskType] = {}
        for task_type in types:
            self.register(task_type)

    def register(self, task_type: TaskType, *, replace: bool = False) -> None:
        """Add ``task_type``; a second type of one name is an error unless ``replace``."""
        if not isinstance(task_type, TaskType):
            raise TypeError(f"not a TaskType: {task_type!r}")
        if _TYPE_NAME.fullmatch(task_type.name) is None:
            raise ValueError(f"invalid task type name {task_type.name!r}")
        if task_type.name in self._types and not replace:
            raise ValueError(f"task type {task_type.name!r} is already registered")
        self._types[task_type.name] = task_type

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._types)

    def get(self, name: object) -> TaskType:
        """The type called ``name``, or ``TaskTypeError``."""
        if not isinstance(name, str) or name not in self._types:
            shown = name[:64] if isinstance(name, str) else type(name).__name__
            raise TaskTypeError(f"unknown task type {shown!r}", task_type=str(shown))
        return self._types[name]

    def validate(self, name: object, params: object) -> dict[str, Any]:
        """The normalised params of a task of type ``name`` (``TaskTypeError`` if invalid)."""
        task_type = self.get(name)
        if not isinstance(params, Mapping):
            raise TaskTypeError("params must be a JSON object", task_type=task_type.name)
        return task_type.validate(params)

    def load_entry_points(self, entry_points: Iterable[EntryPointLike]) -> list[str]:
        """Register the types of ``importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)``
        (passed in by the caller); returns the names added."""
        added = []
        for entry_point in entry_points:
            task_type = entry_point.load()
            if not isinstance(task_type, TaskType) or task_type.name != entry_point.name:
                raise ValueError(
                    f"entry point {entry_point.name!r} must load a TaskType of that name"
                )
            self.register(task_type)
            added.append(task_type.name)
        return added

    def load_dotted(self, path: str) -> str:
        """Register the ``TaskType`` at ``package.module:attribute`` (or ``module.attribute``)."""
        module_name, sep, attribute = path.partition(":")
        if not sep:
            module_name, _, attribute = path.rpartition(".")
        if not module_name or not attribute:
            raise ValueError(f"not a dotted path: {path!r}")
        task_type = getattr(importlib.import_module(module_name), attribute)
        self.register(task_type)
        return str(task_type.name)
