"""The attached server's figures for the page (pure): its ``INFO`` and ``/metrics`` text in,
the buckets and one ``GET /server/stats`` reading out.

Every figure is the server's own, read at the moment of the request; the API keeps no copy
and no history (the page keeps the last minutes of readings for its charts and turns
counters into rates itself). Where each comes from:

==========================  ===========================================================
``commands_total``          ``INFO stats`` ``total_commands_processed`` (both protocols)
``commands`` by kind        ``/metrics``: ``minidb_requests_total`` (line verbs) plus
                            ``minidb_resp_commands_total`` (RESP names), by lower-case
                            name; without the metrics listener, ``INFO commandstats``
                            (RESP only)
``connections``             ``INFO clients`` ``connected_clients``
``memory_bytes``            ``INFO memory`` ``used_memory_rss``
``keys``, buckets           ``INFO keyspace`` (``db<bucket>:keys=N,expires=M``)
``wal_appends``/``_syncs``  ``/metrics`` ``minidb_wal_appends_total``/``_syncs_total``
``replication``             ``/metrics`` ``minidb_replication_lag_*`` (a server shipping
                            its log) or ``minidb_replica_lag_*`` (a replica following
                            one); without metrics, a replica's ``INFO replication``
==========================  ===========================================================

``latency`` is the server's request latency histogram (``/metrics``
``minidb_request_latency_seconds``: from a batch's send to the data owner to its replies'
write), as cumulative ``[upper bound in seconds, requests]`` pairs, the last bound ``-1`` for
``+Inf``; the page takes p50/p99 from the difference of two readings. Without the metrics
listener there is none, and the page falls back to ``probe_ms``, what the API measured
itself for this reading: round trips of a cheap data command (``EXISTS``) that goes through
the data owner's mailbox like every read, so it rises when the owner is busy.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

INFO_SECTIONS = ("server", "clients", "memory", "stats", "replication", "keyspace",
                 "commandstats")
"""What ``GET /server/stats`` asks ``INFO`` for."""


def parse_info(text: str) -> dict[str, str]:
    """``INFO``'s ``field:value`` lines as one dict (section headers and blanks dropped)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition(":")
        if sep:
            fields[name] = value
    return fields


def _pairs(value: str) -> dict[str, str]:
    """``keys=3,expires=0`` as a dict."""
    out = {}
    for part in value.split(","):
        name, sep, item = part.partition("=")
        if sep:
            out[name] = item
    return out


def _int(text: str | None) -> int:
    try:
        return int(float(text)) if text is not None else 0
    except ValueError:
        return 0


def buckets(info: dict[str, str]) -> list[dict[str, Any]]:
    """The buckets of ``INFO keyspace`` (``db<name>``; ``%3A`` stands for ``:``), in the
    server's order: numbers first, then names."""
    found = []
    for field, value in info.items():
        if field.startswith("db") and "keys=" in value:
            pairs = _pairs(value)
            found.append({"name": field[2:].replace("%3A", ":"), "keys": _int(pairs.get("keys")),
                          "expires": _int(pairs.get("expires"))})
    return found


def _commandstats(info: dict[str, str]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for field, value in info.items():
        if field.startswith("cmdstat_"):
            pairs = _pairs(value)
            out[field.removeprefix("cmdstat_")] += sum(
                _int(pairs.get(k)) for k in ("calls", "rejected_calls"))
    return dict(out)


def parse_metrics(text: str) -> dict[str, Any]:
    """The figures of the server's Prometheus text that the page charts."""
    commands: Counter[str] = Counter()
    scalars: dict[str, float] = {}
    latency: list[list[float]] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "minidb_request_latency_seconds_bucket":
                bound = float(sample.labels.get("le", "inf"))
                latency.append([bound if bound != float("inf") else -1, int(sample.value)])
            elif sample.name == "minidb_requests_total":
                commands[sample.labels.get("verb", "").lower()] += int(sample.value)
            elif sample.name == "minidb_resp_commands_total":
                commands[sample.labels.get("command", "").lower()] += int(sample.value)
            elif not sample.labels:
                scalars[sample.name] = sample.value
    replication = None
    for prefix, role in (("minidb_replication", "shipping"), ("minidb_replica", "replica")):
        if f"{prefix}_lag_seconds" in scalars:
            replication = {"role": role, "lag_seconds": scalars[f"{prefix}_lag_seconds"],
                           "lag_records": int(scalars.get(f"{prefix}_lag_records", 0))}
    return {
        "commands": {name: count for name, count in commands.items() if name},
        "wal_appends": _maybe_int(scalars.get("minidb_wal_appends_total")),
        "wal_syncs": _maybe_int(scalars.get("minidb_wal_syncs_total")),
        "replication": replication,
        "latency": sorted(latency, key=lambda pair: (pair[0] < 0, pair[0])) or None,
    }


def _maybe_int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _info_replication(info: dict[str, str]) -> dict[str, Any] | None:
    if info.get("role") != "slave" or "minidb_replica_lag_seconds" not in info:
        return None
    try:
        lag = float(info["minidb_replica_lag_seconds"])
    except ValueError:
        return None
    return {"role": "replica", "lag_seconds": lag,
            "lag_records": _int(info.get("minidb_replica_lag_records"))}


def stats_reading(
    info: dict[str, str], metrics: dict[str, Any] | None, probe_ms: list[float]
) -> dict[str, Any]:
    """One reading of ``GET /server/stats`` (docs/batch-api.md, "The attached server")."""
    return {
        "unix_ms": _int(info.get("server_time_usec")) // 1000,
        "uptime_s": _int(info.get("uptime_in_seconds")),
        "commands_total": _int(info.get("total_commands_processed")),
        "commands": metrics["commands"] if metrics is not None else _commandstats(info),
        "connections": _int(info.get("connected_clients")),
        "memory_bytes": _int(info.get("used_memory_rss")),
        "keys": sum(b["keys"] for b in buckets(info)),
        "wal_appends": metrics["wal_appends"] if metrics is not None else None,
        "wal_syncs": metrics["wal_syncs"] if metrics is not None else None,
        "replication": (metrics["replication"] if metrics is not None
                        and metrics["replication"] is not None else _info_replication(info)),
        "latency": metrics.get("latency") if metrics is not None else None,
        "probe_ms": probe_ms,
        "sources": {"info": True, "metrics": metrics is not None},
    }
