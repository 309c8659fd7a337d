"""Structured logs with the standard library: one event name plus key=value fields per line.

stdlib ``logging`` rather than structlog: the server logs a handful of events (lifecycle,
failures, connection open/close at debug), far from the hot path, and key=value output needs
only a formatter, not a dependency. Call ``event(logger, level, "name", key=value, ...)``. Each
connection's open and close are debug events (``minidb serve --log-level debug``): at info, a
client that connects per request would pay a log record per connection.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

_FIELDS = "minidb_fields"


def _quote(value: object) -> str:
    text = str(value)
    if not text or any(c in text for c in ' "=\n'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


class KeyValueFormatter(logging.Formatter):
    """``ts=2026-01-01T00:00:00.123Z level=info event=connection_open peer=127.0.0.1:5000``."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [
            f"ts={stamp}.{int(record.msecs):03d}Z",
            f"level={record.levelname.lower()}",
            f"event={_quote(record.getMessage())}",
        ]
        fields: dict[str, Any] = getattr(record, _FIELDS, {})
        parts.extend(f"{key}={_quote(value)}" for key, value in fields.items())
        if record.exc_info:
            parts.append("exc=" + _quote(self.formatException(record.exc_info)))
        return " ".join(parts)


def event(logger: logging.Logger, level: int, name: str, **fields: Any) -> None:
    """Log event ``name`` with ``fields`` (cheap when the level is disabled)."""
    if logger.isEnabledFor(level):
        exc_info = fields.pop("exc_info", None)
        logger.log(level, name, extra={_FIELDS: fields}, exc_info=exc_info)


def configure(level: int = logging.INFO) -> None:
    """Send minidb's logs to stderr as key=value lines (stdout carries the listening lines)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter())
    root = logging.getLogger("minidb")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
