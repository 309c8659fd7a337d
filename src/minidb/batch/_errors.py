"""The errors of the batch layer, rooted at ``MinidbError``.

::

    BatchError
    ├── InvalidTaskId       an id (or key) from outside that is not one of ours: answer 404
    ├── InvalidRecord       a status.json that fails validation: never half-trusted
    ├── IllegalTransition   the state machine refuses (state, action): answer 409
    │   └── LeaseLost       a fenced write by a worker whose lease is gone: stop working
    ├── TaskTypeError       unknown task type or invalid params: answer 422
    ├── CsvError            the input cannot be read as CSV at all: the task fails with ``code``
    ├── TaskNotFound        no status.json under this id: answer 404
    ├── Contended           a compare-and-set kept losing races: retry later (503)
    └── ApiError            (``_apiclient``) the control API refused a request (``status``) or
                            could not be reached (``status`` None): the scripts CLI exits 3

Every error carries the fields a caller needs (the state and action, the lease id, the CSV
error code and line), so nothing upstream parses messages.
"""

from __future__ import annotations

from minidb.errors import MinidbError


class BatchError(MinidbError):
    """Base of every error of ``minidb.batch``."""


class InvalidTaskId(BatchError):
    """A task id, storage key or user name from outside is malformed; ``value`` is a cut copy."""

    def __init__(self, message: str, *, value: str = "") -> None:
        super().__init__(message)
        self.value = value


class InvalidRecord(BatchError):
    """A ``status.json`` that does not decode or validate; ``field`` names the first problem."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message if field is None else f"{field}: {message}")
        self.field = field


class IllegalTransition(BatchError):
    """The state machine has no ``action`` from ``state`` (or its precondition is false)."""

    def __init__(self, state: str, action: str, reason: str = "") -> None:
        text = f"cannot {action} a task in state {state}"
        super().__init__(f"{text}: {reason}" if reason else text)
        self.state = state
        self.action = action
        self.reason = reason


class LeaseLost(IllegalTransition):
    """The caller's lease is not the task's live lease (taken over, expired, or finished)."""

    def __init__(self, state: str, action: str, reason: str, *, lease_id: str) -> None:
        super().__init__(state, action, reason)
        self.lease_id = lease_id


class TaskTypeError(BatchError):
    """An unknown task type or invalid params; ``field`` names the offending param if any."""

    def __init__(self, message: str, *, task_type: str, field: str | None = None) -> None:
        super().__init__(message)
        self.task_type = task_type
        self.field = field


class CsvError(BatchError):
    """A structural CSV failure that fails the whole task with the stable ``code``."""

    def __init__(self, code: str, message: str, *, line: int | None = None) -> None:
        super().__init__(message if line is None else f"line {line}: {message}")
        self.code = code
        self.line = line


class TaskNotFound(BatchError):
    """No task has this id (its ``status.json`` does not exist): answer 404."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task {task_id}")
        self.task_id = task_id


class Contended(BatchError):
    """A compare-and-set lost its race too many times in a row; ``rounds`` were tried."""

    def __init__(self, task_id: str, action: str, rounds: int) -> None:
        super().__init__(f"{action} of task {task_id} lost {rounds} races in a row")
        self.task_id = task_id
        self.action = action
        self.rounds = rounds
