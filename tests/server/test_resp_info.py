"""``INFO replication`` of a replica: the fields Redis tools read, then minidb's lag."""

from __future__ import annotations

from minidb.server.resp._info import InfoSnapshot, ReplicaInfo, ServerFacts, render_info


def _fields(text: str) -> dict[str, str]:
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


def test_info_replication_of_a_replica_reads_like_a_redis_replica() -> None:
    """A replica shows role:slave, its link, offsets as next sequence numbers, and its lag."""
    replica = ReplicaInfo(
        source="s3://bucket/db", link_up=True, last_io_s=1, applied_seq=41, shipped_seq=44,
        lag_records=3, lag_seconds=0.25, generation="1764592000000-9f3a0c1e", state="following",
    )
    text = render_info(["replication"], ServerFacts("0"), InfoSnapshot(replica=replica))
    assert text.startswith("# Replication\r\nrole:slave\r\n")
    fields = _fields(text)
    assert fields["master_host"] == "s3://bucket/db" and fields["master_link_status"] == "up"
    assert fields["slave_repl_offset"] == fields["master_repl_offset"] == "42"
    assert fields["slave_read_repl_offset"] == "45" and fields["slave_read_only"] == "1"
    assert fields["master_replid"] == "1764592000000-9f3a0c1e"
    assert fields["minidb_replica_lag_records"] == "3"
    assert fields["minidb_replica_lag_seconds"] == "0.250"
    assert fields["minidb_replica_state"] == "following"


def test_info_replication_of_a_primary_is_unchanged() -> None:
    """Without a follower the section is the primary's."""
    text = render_info(["replication"], ServerFacts("0"), InfoSnapshot())
    assert _fields(text)["role"] == "master"
