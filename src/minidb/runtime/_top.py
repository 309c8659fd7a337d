"""``minidb top HOST:PORT``: a live terminal view of a process's event loop, like ``top``.

It polls ``http://HOST:PORT/debug/tasks`` (the JSON of ``minidb.runtime.snapshot()``, which
the minidb server serves on its metrics port) and redraws a table of tasks sorted by busy
time, under a header of loop-wide figures. ``--once`` prints one frame and exits, for scripts
and tests.

Formatting (``task_rows``, ``header_lines``) is pure and works on the snapshot's plain data;
rich, which draws the table and keeps it in place, is imported only when something is drawn.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

DEFAULT_INTERVAL_S = 1.0
"""Seconds between two polls of the endpoint in the live view."""

FETCH_TIMEOUT_S = 3.0
"""Seconds a poll may take before it counts as a failure."""

DEFAULT_LIMIT = 40
"""Task rows shown; the busiest first."""

MAX_LOCATION_CHARS = 60
"""Width budget of the location column (the end of a path is the part worth keeping)."""

ENDPOINT = "/debug/tasks"

COLUMNS = ("NAME", "STATE", "POLLS", "BUSY", "SCHED", "IDLE", "AGE", "WHERE")


class TopError(Exception):
    """The endpoint could not be reached or did not answer with a snapshot."""


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``:PORT`` for localhost) as a pair; ValueError if malformed."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"expected HOST:PORT, not {text!r}")
    return (host.strip("[]") or "127.0.0.1"), int(port_text)


def fetch(host: str, port: int, timeout: float = FETCH_TIMEOUT_S) -> dict[str, Any]:
    """GET the snapshot from the endpoint; TopError on any failure."""
    import urllib.error
    import urllib.request

    url = f"http://{host}:{port}{ENDPOINT}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read()
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TopError(f"cannot read {url}: {reason}") from None
    try:
        data = json.loads(body)
    except ValueError:
        raise TopError(f"{url} did not answer JSON") from None
    if not isinstance(data, dict) or "tasks" not in data:
        raise TopError(f"{url} answered no task snapshot (is the runtime too old?)")
    return data


def format_duration(seconds: float | None) -> str:
    """A short human duration: ``850us``, ``12.3ms``, ``4.56s``, ``7m05s``; ``-`` if unknown."""
    if seconds is None:
        return "-"
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f}us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f}ms"
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s"


def _short_location(location: str | None) -> str:
    if not location:
        return "-"
    if len(location) <= MAX_LOCATION_CHARS:
        return location
    return "..." + location[-(MAX_LOCATION_CHARS - 3) :]


def task_rows(snapshot: dict[str, Any], limit: int = DEFAULT_LIMIT) -> list[tuple[str, ...]]:
    """The task table as strings, busiest first (ties by name), at most ``limit`` rows."""
    tasks = sorted(
        snapshot.get("tasks", []),
        key=lambda t: (-(t.get("busy_s") or 0.0), str(t.get("name"))),
    )
    rows: list[tuple[str, ...]] = []
    for task in tasks[:limit]:
        polls = task.get("polls")
        rows.append(
            (
                str(task.get("name")),
                str(task.get("state")),
                "-" if polls is None else str(polls),
                format_duration(task.get("busy_s")),
                format_duration(task.get("scheduled_s")),
                format_duration(task.get("since_last_poll_s")),
                format_duration(task.get("total_s")),
                _short_location(task.get("location")),
            )
        )
    return rows


def header_lines(
    snapshot: dict[str, Any], source: str, previous: dict[str, Any] | None = None
) -> list[str]:
    """The loop-wide figures above the table; ``previous`` gives rates between two polls."""
    loop = snapshot.get("loop", {})
    lines = [
        f"minidb top  {source}  pid {snapshot.get('pid')}  {loop.get('class', '?')}  "
        f"tasks {loop.get('tasks', len(snapshot.get('tasks', [])))}  "
        f"ready {loop.get('ready', '-')}"
    ]
    timers = loop.get("timers")
    if timers:
        levels = "/".join(str(n) for n in timers.get("per_level", []))
        lines.append(f"timers {timers.get('entries')} (per wheel level {levels})")
    if not snapshot.get("introspection"):
        lines.append("introspection is off: no counters (MINIDB_INTROSPECTION=1 switches it on)")
        return lines
    busy = ""
    if previous is not None and previous.get("introspection"):
        wall = snapshot.get("wall_time", 0.0) - previous.get("wall_time", 0.0)
        spent = loop.get("busy_s", 0.0) - previous.get("loop", {}).get("busy_s", 0.0)
        if wall > 0:
            busy = f"  busy {min(max(spent / wall, 0.0), 1.0):.0%}"
    lines.append(
        f"steps/s {loop.get('steps_per_second', 0):,.0f}  steps {loop.get('steps', 0):,}  "
        f"I/O polls {loop.get('io_polls', 0):,}  "
        f"longest step {format_duration(loop.get('longest_step_s'))}{busy}  "
        f"blocking {loop.get('blocking_steps', 0)} "
        f"(>{format_duration(loop.get('blocking_threshold_s'))})"
    )
    for event in snapshot.get("blocking", [])[-3:]:
        who = event.get("task") or event.get("callback")
        gc_note = f", {format_duration(event['gc_s'])} GC" if event.get("gc_s") else ""
        lines.append(
            f"  blocked {format_duration(event.get('duration_s'))}{gc_note} by {who} at "
            f"{_short_location(event.get('location'))}"
        )
    return lines


def render(
    snapshot: dict[str, Any],
    source: str,
    previous: dict[str, Any] | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Any:
    """A rich renderable of one frame: the header lines, then the task table."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="bold reverse", pad_edge=False, expand=False)
    for column in COLUMNS:
        numeric = column in ("POLLS", "BUSY", "SCHED", "IDLE", "AGE")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=True)
    for row in task_rows(snapshot, limit):
        table.add_row(*row)
    header = Text("\n".join(header_lines(snapshot, source, previous)))
    return Group(header, Text(""), table)


def run_top(
    address: str,
    *,
    once: bool,
    interval: float = DEFAULT_INTERVAL_S,
    limit: int = DEFAULT_LIMIT,
) -> int:
    """The ``minidb top`` command: exit 0, 1 if the endpoint fails (``--once``), 2 if misused."""
    try:
        host, port = parse_address(address)
    except ValueError as exc:
        sys.stderr.write(f"minidb top: error: {exc}\n")
        return 2
    from rich.console import Console

    source = f"{host}:{port}"
    if once:
        try:
            snapshot = fetch(host, port)
        except TopError as exc:
            sys.stderr.write(f"minidb top: error: {exc}\n")
            return 1
        # Not a terminal: draw wide rather than rich's 80 columns, so no column is cut.
        console = Console(width=None if sys.stdout.isatty() else 200)
        console.print(render(snapshot, source, limit=limit))
        return 0
    return _live(host, port, source, interval, limit)


def _live(host: str, port: int, source: str, interval: float, limit: int) -> int:
    from rich.live import Live
    from rich.text import Text

    previous: dict[str, Any] | None = None
    try:
        with Live(Text(f"minidb top: connecting to {source} ..."), auto_refresh=False) as live:
            while True:
                try:
                    snapshot = fetch(host, port)
                except TopError as exc:
                    live.update(Text(f"minidb top: {exc} (retrying)"), refresh=True)
                else:
                    live.update(render(snapshot, source, previous, limit), refresh=True)
                    previous = snapshot
                time.sleep(interval)
    except KeyboardInterrupt:
        return 0
