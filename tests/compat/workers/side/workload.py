"""The job every library's worker runs, and the one thing it does: record that it ran.

Runs inside the library's virtualenv (this folder is on the worker's ``PYTHONPATH``). Each
execution appends ``"<job number> <pid>\\n"`` to the file named by ``MINIDB_COMPAT_RUNS`` with
one ``write`` on an ``O_APPEND`` descriptor, so concurrent workers' lines never interleave and a
job run twice shows as two lines.
"""

from __future__ import annotations

import os

RUNS_ENV = "MINIDB_COMPAT_RUNS"


def record_run(number: int) -> int:
    fd = os.open(os.environ[RUNS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{number} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return number


def record(number: int) -> int:
    """RQ's job (imported by name, ``workload.record``)."""
    return record_run(number)


def job_id(number: int) -> str:
    """The id each job is enqueued under, so the result check can find it."""
    return f"job-{number}"


def write_acked(path: str, numbers: list[int]) -> None:
    """The jobs whose enqueue the server acknowledged, one number a line."""
    with open(path, "w") as out:
        out.write("".join(f"{n}\n" for n in numbers))


def only_numbers(args: list[str], count: int) -> list[int]:
    """The job numbers a ``results`` call asks about: those listed (``N,N,...``, one
    argument) or, with none, every job ``0 .. count - 1``."""
    if not args:
        return list(range(count))
    return [int(n) for n in args[0].split(",") if n]
