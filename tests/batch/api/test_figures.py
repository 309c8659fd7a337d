"""The server's figures from INFO and Prometheus text (pure)."""

from __future__ import annotations

from minidb.batch.api._figures import buckets, parse_info, parse_metrics, stats_reading

INFO = (
    "# Server\r\nserver_time_usec:1700000000123456\r\nuptime_in_seconds:42\r\n\r\n"
    "# Clients\r\nconnected_clients:3\r\n\r\n# Memory\r\nused_memory_rss:1048576\r\n\r\n"
    "# Stats\r\ntotal_commands_processed:99\r\n\r\n# Replication\r\nrole:master\r\n\r\n"
    "# Commandstats\r\ncmdstat_get:calls=5,usec=0,usec_per_call=0.00,rejected_calls=1,"
    "failed_calls=0\r\n\r\n# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=0\r\n"
    "dbusers:keys=300,expires=0,avg_ttl=0\r\ndba%3Ab:keys=1,expires=0,avg_ttl=0\r\n"
)
METRICS = """# TYPE minidb_requests_total counter
minidb_requests_total{outcome="ok",verb="GET"} 7.0
minidb_requests_total{outcome="ok",verb="SET"} 2.0
# TYPE minidb_resp_commands_total counter
minidb_resp_commands_total{command="get",outcome="ok"} 3.0
minidb_resp_commands_total{command="get",outcome="error"} 1.0
minidb_resp_commands_total{command="info",outcome="ok"} 4.0
# TYPE minidb_wal_appends_total counter
minidb_wal_appends_total 11.0
# TYPE minidb_wal_syncs_total counter
minidb_wal_syncs_total 5.0
# TYPE minidb_replication_lag_seconds gauge
minidb_replication_lag_seconds 0.25
# TYPE minidb_replication_lag_records gauge
minidb_replication_lag_records 3.0
# TYPE minidb_request_latency_seconds histogram
minidb_request_latency_seconds_bucket{le="0.001"} 5.0
minidb_request_latency_seconds_bucket{le="0.01"} 9.0
minidb_request_latency_seconds_bucket{le="+Inf"} 10.0
minidb_request_latency_seconds_count 10.0
minidb_request_latency_seconds_sum 0.5
"""


def test_buckets_of_info_keyspace() -> None:
    """``db<name>`` lines, ``%3A`` back to ``:``."""
    assert buckets(parse_info(INFO)) == [
        {"name": "0", "keys": 2, "expires": 1}, {"name": "users", "keys": 300, "expires": 0},
        {"name": "a:b", "keys": 1, "expires": 0},
    ]


def test_metrics_merge_both_protocols_by_kind() -> None:
    """Line verbs and RESP names add up by lower-case kind; WAL and shipping figures."""
    figures = parse_metrics(METRICS)
    assert figures["commands"] == {"get": 11, "set": 2, "info": 4}
    assert figures["wal_appends"] == 11 and figures["wal_syncs"] == 5
    assert figures["replication"] == {"role": "shipping", "lag_seconds": 0.25,
                                      "lag_records": 3}
    assert figures["latency"] == [[0.001, 5], [0.01, 9], [-1, 10]]


def test_reading_with_and_without_metrics() -> None:
    """A reading from INFO and /metrics; without /metrics, commandstats and no WAL figures."""
    info = parse_info(INFO)
    full = stats_reading(info, parse_metrics(METRICS), [0.5])
    assert full["unix_ms"] == 1700000000123 and full["commands_total"] == 99
    assert full["connections"] == 3 and full["memory_bytes"] == 1048576 and full["keys"] == 303
    assert full["sources"] == {"info": True, "metrics": True}
    assert full["latency"] == [[0.001, 5], [0.01, 9], [-1, 10]]
    alone = stats_reading(info, None, [])
    assert alone["commands"] == {"get": 6} and alone["wal_appends"] is None
    assert alone["latency"] is None
    assert alone["replication"] is None


def test_replica_lag_from_info_without_metrics() -> None:
    """A replica's lag comes from INFO replication when /metrics is not known."""
    info = parse_info("role:slave\r\nminidb_replica_lag_seconds:1.500\r\n"
                      "minidb_replica_lag_records:7\r\n")
    assert stats_reading(info, None, [])["replication"] == {
        "role": "replica", "lag_seconds": 1.5, "lag_records": 7}
