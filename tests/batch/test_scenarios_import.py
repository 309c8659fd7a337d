"""CSV imports through a real ``minidb batch worker`` process into a real ``minidb serve``, on
both backends: every bad-row reason in ``errors.csv`` with its line, ``max_bad_rows``, every
structural failure, and an input gone missing before the run; every wait has a deadline."""

from __future__ import annotations

import csv
import io

import pytest

from minidb.batch import _keys
from minidb.batch._queue import TaskQueue
from minidb.client import Client
from minidb.objstore import NotFound

from .conftest import submit_task, terminal, until
from .procs import Workers

pytestmark = pytest.mark.minidb_loop

BAD_ROWS_CSV = (
    b"bucket,key,value\n"                          # line 1
    b"imp,good1,v1\n"                              # 2  good
    b"imp,k2\n"                                    # 3  wrong_column_count (too few)
    b"imp,k3,v,extra\n"                            # 4  wrong_column_count (too many)
    b"bad bucket,k5,v\n"                           # 5  invalid_bucket
    b"imp,bad/key!,v\n"                            # 6  invalid_key
    b"imp,long," + b"x" * 4097 + b"\n"             # 7  value_too_long
    b'imp,lf,"two\nlines"\n'                       # 8-9  value_has_newline (LF)
    b'imp,cr,"a\rb"\n'                             # 10 value_has_newline (CR)
    b"imp,utf8,\xff\xfe\n"                         # 11 invalid_utf8
    b"imp,good2,=1+1 \xc3\xbc\n"                   # 12 good (UTF-8, formula-like)
)
"""One good row, every bad-row reason, a quoted value spanning two lines, another good row."""
EXPECTED_ERRORS = [
    ["line", "reason", "bucket", "key"],
    ["3", "wrong_column_count", "imp", "k2"],
    ["4", "wrong_column_count", "imp", "k3"],
    ["5", "invalid_bucket", "bad bucket", "k5"],
    ["6", "invalid_key", "imp", "bad/key!"],
    ["7", "value_too_long", "imp", "long"],
    ["8", "value_has_newline", "imp", "lf"],
    ["10", "value_has_newline", "imp", "cr"],
    ["11", "invalid_utf8", "imp", "utf8"],
]


async def _errors_csv(queue: TaskQueue, task_id: str, attempt: int) -> list[list[str]]:
    data = (await queue.store.get(_keys.output_key(task_id, attempt, "errors.csv"))).data
    return list(csv.reader(io.StringIO(data.decode(), newline="")))


async def _values(workers: Workers, keys: list[str]) -> list[str | None]:
    host, _, port = workers.minidb.rpartition(":")
    async with await Client.connect(host, int(port)) as client:
        return [await client.get("imp", key) for key in keys]


async def test_every_bad_row_reason_lands_in_errors_csv(
    workers: Workers, queue: TaskQueue
) -> None:
    """Each bad-row reason is one errors.csv row with its start line; the good rows are in
    minidb; the task succeeds on attempt 1 with counts that agree with its progress."""
    workers.start("w-imp")
    task_id = await submit_task(queue, "csv_import", {}, data=BAD_ROWS_CSV)
    record = await until(queue, task_id, terminal)
    assert (record.state, record.attempt) == ("succeeded", 1), record.error
    assert record.result == {"rows": 10, "ok": 2, "failed": 8}
    assert record.progress.rows_done == 10 and record.progress.rows_failed == 8
    assert record.progress.bytes_done == record.progress.bytes_total == len(BAD_ROWS_CSV)
    assert await _errors_csv(queue, task_id, 1) == EXPECTED_ERRORS
    assert await _values(workers, ["good1", "good2", "k2", "lf"]) == ["v1", "=1+1 ü", None, None]


async def test_max_bad_rows_fails_without_retry_and_keeps_errors_csv(
    workers: Workers, queue: TaskQueue
) -> None:
    """Past max_bad_rows the task fails at once (too_many_bad_rows, one attempt of three) and
    the errors.csv of that attempt is still there, up to the row that tipped it."""
    workers.start("w-imp")
    task_id = await submit_task(queue, "csv_import", {"max_bad_rows": 2}, data=BAD_ROWS_CSV)
    record = await until(queue, task_id, terminal)
    assert record.state == "failed" and record.error is not None
    assert record.error.code == "too_many_bad_rows"
    assert record.attempt == 1 and [a.outcome for a in record.attempts] == ["failed"]
    assert await _errors_csv(queue, task_id, 1) == EXPECTED_ERRORS[:4]


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", "empty_file"),
        (b"bucket,key,val\nb,k,v\n", "bad_header"),
        (b'bucket,key,value\nb,k,v\nb,k,"never closed\nb,k,v\n', "unterminated_quote"),
        (b"bucket,key,value\nb,k," + b"y" * (1 << 20) + b"\n", "field_too_large"),
    ],
    ids=["empty", "header", "quote", "endless-field"],
)
async def test_structural_failure_fails_at_once_with_its_code(
    workers: Workers, queue: TaskQueue, data: bytes, code: str
) -> None:
    """A file that is not an import CSV fails on its first attempt with a stable code."""
    workers.start("w-imp")
    task_id = await submit_task(queue, "csv_import", {}, data=data)
    record = await until(queue, task_id, terminal)
    assert record.state == "failed" and record.error is not None
    assert (record.error.code, record.attempt, len(record.attempts)) == (code, 1, 1)


async def test_input_missing_at_run_time_is_a_permanent_failure(
    workers: Workers, queue: TaskQueue
) -> None:
    """An input deleted after submission fails the task once (input_missing), not a crash
    loop through every attempt."""
    task_id = await submit_task(queue, "csv_import", {}, data=b"bucket,key,value\nimp,a,1\n")
    await queue.store.delete(_keys.input_key(task_id))
    with pytest.raises(NotFound):
        await queue.store.get(_keys.input_key(task_id))
    workers.start("w-imp")
    record = await until(queue, task_id, terminal)
    assert record.state == "failed" and record.error is not None
    assert (record.error.code, record.attempt, len(record.attempts)) == ("input_missing", 1, 1)


async def test_last_row_of_a_key_wins_over_several_connections(
    workers: Workers, queue: TaskQueue
) -> None:
    """With rows spread over 4 connections, every key ends with its last value in the file."""
    keys = [f"k{i}" for i in range(401)]  # odd: a key's rows do not keep to one of 4 lanes
    lines = [f"imp,{key},v{round_}" for round_ in range(5) for key in keys]
    data = ("bucket,key,value\n" + "\n".join(lines) + "\n").encode()
    workers.start("w-imp")
    task_id = await submit_task(queue, "csv_import", {"connections": 4}, data=data)
    record = await until(queue, task_id, terminal)
    assert record.state == "succeeded" and record.result == {"rows": 2005, "ok": 2005, "failed": 0}
    assert await _values(workers, keys) == ["v4"] * len(keys)
