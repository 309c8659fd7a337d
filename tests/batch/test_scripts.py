"""The pure parts of the scripts CLI: ``--param`` parsing, the task's text, safe file names."""

from __future__ import annotations

import pytest

from minidb.batch._scripts import (
    UsageError,
    list_rows,
    parse_params,
    progress_text,
    result_text,
    safe_file_name,
    task_lines,
)

TASK = {
    "id": "01KBCQCK20JZ7R9YTJGD1AH5T3", "type": "csv_import", "name": "users.csv",
    "params": {"max_bad_rows": 1000}, "state": "succeeded", "cancel_requested": False,
    "attempt": 1, "max_attempts": 3, "created_by": "operator",
    "created_at": "2026-12-01T10:30:00.000Z", "updated_at": "2026-12-01T10:30:02.000Z",
    "progress": {"rows_done": 303, "rows_ok": 300, "rows_failed": 3, "bytes_done": 9000,
                 "bytes_total": 9000},
    "result": {"rows": 303, "ok": 300, "failed": 3}, "error": None,
    "output": {"attempt": 1, "files": [{"name": "errors.csv", "size": 120}]},
}


def test_scripts_params_are_json_when_they_parse() -> None:
    """``5`` and ``false`` become JSON values, anything else stays text."""
    assert parse_params(["bucket=users", "max_bad_rows=5", "neutralize_formulas=false",
                         "name=a=b"]) == {
        "bucket": "users", "max_bad_rows": 5, "neutralize_formulas": False, "name": "a=b",
    }
    for bad in ("novalue", "=x"):
        with pytest.raises(UsageError):
            parse_params([bad])


def test_scripts_result_and_progress_text() -> None:
    """A success shows its counts; a failure its code and message; progress its rows."""
    assert result_text(TASK) == "succeeded: rows=303 ok=300 failed=3"
    failed = {**TASK, "state": "failed", "error": {"code": "bad_header", "message": "no"}}
    assert result_text(failed) == "failed: bad_header: no"
    running = {**TASK, "state": "running", "cancel_requested": True}
    assert progress_text(running) == (
        "01KBCQCK20JZ7R9YTJGD1AH5T3 running (cancel requested) rows 303 (ok 300, failed 3) "
        "100% of 9000 bytes"
    )


def test_scripts_show_and_ls_lines() -> None:
    """``show`` names every field that matters; ``ls`` is a header and one row per task."""
    lines = task_lines(TASK)
    assert "state: succeeded" in lines
    assert "result: succeeded: rows=303 ok=300 failed=3" in lines
    assert "output: attempt 1: errors.csv (120 bytes)" in lines
    rows = list_rows([TASK])
    assert rows[0].startswith("ID") and rows[1].startswith(TASK["id"])


def test_scripts_download_names_cannot_leave_the_directory() -> None:
    """Names with a separator, dot names or NUL are refused before anything is written."""
    assert safe_file_name("errors.csv") == "errors.csv"
    for bad in ("../x", "a/b", "..", ".", "", "a\\b", "a\0b", None):
        with pytest.raises(UsageError):
            safe_file_name(bad)
