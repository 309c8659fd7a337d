"""The scripts CLI of the batch API: ``minidb batch submit/ls/show/cancel/retry/output``.

Every subcommand is an HTTP client of the control API (``_apiclient``), so it works the same
against ``minidb up`` on this machine and against a shared deployment. The address and the
token come after the subcommand (``--url``, ``--token``) or from ``MINIDB_BATCH_URL`` /
``MINIDB_BATCH_TOKEN``.

Exit status, the contract scripts rely on:

  0  success (for ``submit``: the task succeeded);
  1  the task failed or was cancelled (``submit`` waiting for it);
  2  usage: bad options, a missing token, an unreadable input file;
  3  the API refused the request, the token was refused, or the API could not be reached.

``submit`` creates the task (with a fresh ``Idempotency-Key``), uploads FILE if given, submits,
then waits for the end: a ``rich`` progress bar when stdout is a terminal, otherwise one plain
line whenever the progress changes (at most every ``PLAIN_EVERY_S``), so logs of scripts stay
readable. The formatting functions are pure (a task dict in, text out) and tested as such.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from minidb.batch._apiclient import ApiClient

EXIT_OK: Final = 0
EXIT_TASK_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_API: Final = 3

POLL_S: Final = 0.5
"""How often ``submit`` re-reads the task while it waits, in seconds."""
PLAIN_EVERY_S: Final = 2.0
"""Without a terminal, a progress line at most this often (and only when something changed)."""
DEFAULT_LIST_LIMIT: Final = 20
"""Tasks ``ls`` shows per page (the API's default too)."""
TERMINAL_STATES: Final = frozenset({"succeeded", "failed", "cancelled"})

_DEFAULT_URL = "http://127.0.0.1:8080"  # _apiclient.DEFAULT_URL, without importing httpx here
_URL_ENV = "MINIDB_BATCH_URL"
_TOKEN_ENV = "MINIDB_BATCH_TOKEN"


class UsageError(Exception):
    """A usage problem found after parsing (exit 2)."""


# --- argument parsing -------------------------------------------------------------------------


def register(commands: Any) -> None:
    """Add the scripts subcommands to ``minidb batch``'s subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=None,
                        help=f"the batch API (default ${_URL_ENV} or {_DEFAULT_URL})")
    common.add_argument("--token", default=None, help=f"bearer token (default ${_TOKEN_ENV})")

    submit = commands.add_parser(
        "submit", parents=[common], help="submit a task and wait for it",
        description="Create a task, upload FILE as its input, submit it and wait for the end. "
        "Exit 0 if it succeeded, 1 if it failed or was cancelled, 2 usage, 3 API error.",
    )
    submit.add_argument("file", nargs="?", type=Path, metavar="FILE",
                        help="the input (csv_import: a bucket,key,value CSV)")
    submit.add_argument("--type", required=True, dest="task_type",
                        help="csv_import, csv_export, ...")
    submit.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="a task parameter; VALUE is JSON if it parses (5, true), else text")
    submit.add_argument("--name", default=None, help="a display name for the task")
    submit.add_argument("--max-attempts", type=int, default=None)
    submit.add_argument("--no-wait", action="store_true",
                        help="print the task id once submitted and exit 0")
    submit.set_defaults(handler=_handler(_submit))

    ls = commands.add_parser("ls", parents=[common], help="list tasks, newest first")
    ls.add_argument("--limit", type=int, default=DEFAULT_LIST_LIMIT, help="1-100")
    ls.add_argument("--cursor", default=None, help="the next page (printed by the last ls)")
    ls.add_argument("--json", action="store_true", help="print the API's JSON")
    ls.set_defaults(handler=_handler(_ls))

    for name, help_text, run in (
        ("show", "show one task", _show),
        ("cancel", "cancel a task", _cancel),
        ("retry", "queue a failed or cancelled task again", _retry),
    ):
        sub = commands.add_parser(name, parents=[common], help=help_text)
        sub.add_argument("task_id", metavar="ID")
        sub.add_argument("--json", action="store_true", help="print the task's JSON")
        sub.set_defaults(handler=_handler(run))

    output = commands.add_parser("output", parents=[common], help="list or download outputs")
    output.add_argument("task_id", metavar="ID")
    output.add_argument("--download", type=Path, default=None, metavar="DIR",
                        help="save every output file into DIR")
    output.set_defaults(handler=_handler(_output))


def _handler(run: Callable[[ApiClient, argparse.Namespace], int]) -> Callable[..., int]:
    """The argparse handler of ``run``: the client from the options, errors to exit codes."""

    def handle(args: argparse.Namespace) -> int:
        from minidb.batch._apiclient import ApiClient, ApiError

        command = f"minidb batch {args.batch_command}"
        url = args.url or os.environ.get(_URL_ENV) or _DEFAULT_URL
        token = args.token or os.environ.get(_TOKEN_ENV)
        if not token:
            sys.stderr.write(f"{command}: error: no token: give --token or set ${_TOKEN_ENV}\n")
            return EXIT_USAGE
        try:
            with ApiClient(url, token) as client:
                return run(client, args)
        except UsageError as exc:
            sys.stderr.write(f"{command}: error: {exc}\n")
            return EXIT_USAGE
        except ApiError as exc:
            sys.stderr.write(f"{command}: error: {exc}\n")
            return EXIT_API

    return handle


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """``--param NAME=VALUE`` options as a params object (VALUE as JSON when it parses)."""
    params: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--param must be NAME=VALUE, not {pair!r}")
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        params[name] = value
    return params


# --- pure formatting --------------------------------------------------------------------------


def progress_detail(task: Mapping[str, Any]) -> str:
    """The rows and bytes a task has done so far, or ``-`` before any."""
    progress = task.get("progress") or {}
    parts = []
    rows = progress.get("rows_done", 0)
    if rows:
        parts.append(f"rows {rows} (ok {progress.get('rows_ok', 0)}, "
                     f"failed {progress.get('rows_failed', 0)})")
    total = progress.get("bytes_total")
    if total:
        parts.append(f"{100 * progress.get('bytes_done', 0) // total}% of {total} bytes")
    return " ".join(parts) or "-"


def progress_text(task: Mapping[str, Any]) -> str:
    """One line of where a task is: id, state, rows, bytes."""
    cancelling = task.get("cancel_requested") and task.get("state") not in TERMINAL_STATES
    state = f"{task.get('state')}{' (cancel requested)' if cancelling else ''}"
    detail = progress_detail(task)
    return f"{task.get('id')} {state}" + ("" if detail == "-" else f" {detail}")


def result_text(task: Mapping[str, Any]) -> str:
    """How a task ended: ``succeeded: rows=300 ok=297 failed=3`` or the error's code and text."""
    state = task.get("state")
    if state == "succeeded":
        result = task.get("result") or {}
        counts = " ".join(f"{k}={v}" for k, v in result.items())
        return f"{state}: {counts}" if counts else str(state)
    error = task.get("error")
    if error:
        return f"{state}: {error.get('code')}: {error.get('message')}"
    return str(state)


def task_lines(task: Mapping[str, Any]) -> list[str]:
    """The human form of ``show``: one ``field: value`` per line."""
    lines = [
        f"id: {task.get('id')}",
        f"type: {task.get('type')}",
        f"name: {task.get('name')}",
        f"state: {task.get('state')}" + (" (cancel requested)"
                                         if task.get("cancel_requested") else ""),
        f"params: {json.dumps(task.get('params'), sort_keys=True)}",
        f"attempt: {task.get('attempt')} of max {task.get('max_attempts')}",
        f"created: {task.get('created_at')} by {task.get('created_by')}",
        f"updated: {task.get('updated_at')}",
        f"progress: {progress_detail(task)}",
    ]
    if task.get("state") in TERMINAL_STATES:
        lines.append(f"result: {result_text(task)}")
    output = task.get("output")
    if output:
        names = ", ".join(f"{f['name']} ({f['size']} bytes)" for f in output.get("files", []))
        lines.append(f"output: attempt {output.get('attempt')}: {names}")
    return lines


def list_rows(tasks: list[Mapping[str, Any]]) -> list[str]:
    """The table of ``ls``: id, type, state, created, name."""
    header = f"{'ID':26}  {'TYPE':12}  {'STATE':10}  {'CREATED':24}  NAME"
    rows = [header]
    for task in tasks:
        rows.append(f"{task.get('id')!s:26}  {task.get('type')!s:12}  {task.get('state')!s:10}  "
                    f"{task.get('created_at')!s:24}  {task.get('name') or ''}")
    return rows


def safe_file_name(name: object) -> str:
    """``name`` if it is a plain file name to write into the download dir, else ``UsageError``.

    The API's names are already checked by the batch layer; this is the CLI's own guard, since
    it writes to the user's disk whatever the server says.
    """
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name
            or "\\" in name or "\0" in name):
        raise UsageError(f"refusing to write an output file named {name!r}")
    return name


# --- subcommands ------------------------------------------------------------------------------


def _print(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _submit(client: ApiClient, args: argparse.Namespace) -> int:
    params = parse_params(args.param)
    input_file = None
    if args.file is not None:
        try:
            input_file = args.file.open("rb")
        except OSError as exc:
            raise UsageError(f"cannot read {args.file}: {exc.strerror}") from exc
    try:
        task = client.create(
            args.task_type, params, name=args.name or (args.file.name if args.file else None),
            max_attempts=args.max_attempts, idempotency_key=str(uuid.uuid4()),
        )
        task_id = str(task["id"])
        if input_file is not None:
            client.put_input(task_id, input_file)
    finally:
        if input_file is not None:
            input_file.close()
    task = client.submit(task_id)
    _print(f"task {task_id} {task.get('state')}")
    if args.no_wait:
        return EXIT_OK
    try:
        task = _wait(client, task_id, tty=sys.stdout.isatty())
    except KeyboardInterrupt:
        sys.stderr.write(f"\nstopped waiting; task {task_id} goes on: "
                         f"minidb batch show {task_id} / minidb batch cancel {task_id}\n")
        return 130
    _print(result_text(task))
    if task.get("output"):
        _print_output(client, task_id)
    return EXIT_OK if task.get("state") == "succeeded" else EXIT_TASK_FAILED


def _wait(client: ApiClient, task_id: str, *, tty: bool) -> dict[str, Any]:
    """Poll the task until it ends, showing progress; its last JSON."""
    if tty:
        return _wait_bar(client, task_id)
    task = client.get(task_id)
    last_text, last_at = "", 0.0
    while task.get("state") not in TERMINAL_STATES:
        text = progress_text(task)
        now = time.monotonic()
        if text != last_text and now - last_at >= PLAIN_EVERY_S:
            _print(text)
            last_text, last_at = text, now
        time.sleep(POLL_S)
        task = client.get(task_id)
    return task


def _wait_bar(client: ApiClient, task_id: str) -> dict[str, Any]:
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
               TextColumn("{task.fields[rows]}"), TimeElapsedColumn())
    with Progress(*columns, transient=False) as bar:
        handle = bar.add_task(task_id, total=None, rows="")
        task = client.get(task_id)
        while True:
            progress = task.get("progress") or {}
            rows = progress.get("rows_done", 0)
            bar.update(
                handle, description=f"{task_id} {task.get('state')}",
                completed=progress.get("bytes_done", 0), total=progress.get("bytes_total"),
                rows=f"rows {rows} (failed {progress.get('rows_failed', 0)})" if rows else "",
            )
            if task.get("state") in TERMINAL_STATES:
                return task
            time.sleep(POLL_S)
            task = client.get(task_id)


def _print_output(client: ApiClient, task_id: str) -> None:
    listing = client.output(task_id)
    for file in listing.get("files", []):
        _print(f"output {file.get('name')} ({file.get('size')} bytes): "
               f"{client.absolute(str(file.get('url')))}")
    _print(f"download: minidb batch output {task_id} --download DIR")


def _ls(client: ApiClient, args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 100:
        raise UsageError("--limit must be 1-100")
    page = client.list(limit=args.limit, cursor=args.cursor)
    if args.json:
        _print(json.dumps(page, indent=2))
        return EXIT_OK
    for row in list_rows(page.get("tasks", [])):
        _print(row)
    if page.get("next_cursor"):
        _print(f"more: minidb batch ls --cursor {page['next_cursor']}")
    return EXIT_OK


def _show_task(task: Mapping[str, Any], as_json: bool) -> int:
    if as_json:
        _print(json.dumps(task, indent=2))
    else:
        for line in task_lines(task):
            _print(line)
    return EXIT_OK


def _show(client: ApiClient, args: argparse.Namespace) -> int:
    return _show_task(client.get(args.task_id), args.json)


def _cancel(client: ApiClient, args: argparse.Namespace) -> int:
    return _show_task(client.cancel(args.task_id), args.json)


def _retry(client: ApiClient, args: argparse.Namespace) -> int:
    return _show_task(client.retry(args.task_id), args.json)


def _output(client: ApiClient, args: argparse.Namespace) -> int:
    listing = client.output(args.task_id)
    files = listing.get("files", [])
    if args.download is None:
        _print(f"attempt {listing.get('attempt')}")
        for file in files:
            _print(f"{file.get('name')}  {file.get('size')} bytes  "
                   f"{client.absolute(str(file.get('url')))}")
        return EXIT_OK
    try:
        args.download.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {args.download}: {exc.strerror}") from exc
    for file in files:
        dest = args.download / safe_file_name(file.get("name"))
        size = client.download(str(file.get("url")), dest)
        _print(f"{dest}  {size} bytes")
    return EXIT_OK
