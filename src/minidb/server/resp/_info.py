"""``INFO`` and ``CONFIG GET`` of the RESP listener: facts and statistics as Redis shows them.

Two inputs, both filled by the server: ``ServerFacts`` (fixed at start: versions, port, data
dir, limits) and ``InfoSnapshot`` (counters read at the moment of the ``INFO``: clients,
memory, keyspace per bucket, per-command calls). Nothing here reads the clock, the process or
the store itself, so the text is a pure function of the two and tests pin it exactly.

Layout follows Redis's ``genRedisInfoString``: ``# Section`` headers, ``field:value`` lines
ending in CRLF, one blank line between sections, sections always in Redis's order whatever
order they were asked in. Fields minidb has no equivalent for are either left out or given
the value that is true of minidb (``rdb_bgsave_in_progress:0``, ``connected_slaves:0``).

Keyspace lines are ``db<bucket>:keys=N,expires=M,avg_ttl=0``: a bucket named ``0`` reads as
Redis's ``db0``. Bucket names may contain ``:``, which client parsers split ``field:value``
on, so ``:`` is written ``%3A`` there (``%`` never occurs in a bucket name, so it reads back).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from minidb.server.resp._glob import glob_match

REDIS_VERSION = "7.2.0"
"""The Redis release whose command semantics and error wording the RESP listener follows.

7.2 is the first release with ``CLIENT SETINFO`` (which redis-py sends on every connect) and
``CLIENT NO-TOUCH``; every reply shape and error text here was checked against the 7.2 source.
Clients gate features on this number, so it must be a plain X.Y.Z of a real release >= 7.0.
"""

DEFAULT_SECTIONS = (
    "server", "clients", "memory", "persistence", "stats", "replication", "cpu",
    "modules", "errorstats", "cluster", "keyspace",
)  # fmt: skip
"""What ``INFO`` with no argument (or ``default``) shows, in Redis's order."""
ALL_SECTIONS = (
    "server", "clients", "memory", "persistence", "stats", "replication", "cpu",
    "modules", "commandstats", "errorstats", "cluster", "keyspace",
)  # fmt: skip
"""``INFO all`` / ``everything``: every section we have, in Redis's order."""
_SECTION_ALIASES = {"module_list": "modules"}


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What stays fixed while the server runs."""

    minidb_version: str
    tcp_port: int = 0
    host: str = "127.0.0.1"
    data_dir: str = ""
    max_clients: int = 0
    idle_timeout_s: float = 0.0
    process_id: int = 0
    run_id: str = "0" * 40
    arch_bits: int = 64
    os: str = ""
    executable: str = ""
    python_version: str = ""
    redis_version: str = REDIS_VERSION


@dataclass(frozen=True, slots=True)
class BucketStats:
    """One keyspace line."""

    name: bytes
    keys: int
    expires: int = 0


@dataclass(frozen=True, slots=True)
class CommandStats:
    """One ``cmdstat_`` line."""

    name: str
    calls: int
    usec: int = 0
    rejected_calls: int = 0
    failed_calls: int = 0


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """A replica's link to the log it follows, for the ``replication`` section."""

    source: str
    """The URL of the shipped log (Redis shows the master's host and port here)."""
    link_up: bool
    last_io_s: int
    """Seconds since the last successful poll of the store (-1: none yet)."""
    applied_seq: int
    shipped_seq: int
    lag_records: int
    lag_seconds: float
    generation: str
    state: str = "following"
    """The follower's state: starting, following, down, refused, stopped."""


@dataclass(frozen=True, slots=True)
class InfoSnapshot:
    """The moving figures, read when ``INFO`` runs (the server maps its statistics here)."""

    uptime_s: float = 0.0
    unix_time_us: int = 0
    connected_clients: int = 0
    blocked_clients: int = 0
    """Clients waiting in a blocking command (BLPOP...)."""
    used_memory: int = 0
    used_memory_peak: int = 0
    used_memory_rss: int = 0
    total_connections_received: int = 0
    total_commands_processed: int = 0
    rejected_connections: int = 0
    keyspace_hits: int = 0
    keyspace_misses: int = 0
    expired_keys: int = 0
    total_error_replies: int = 0
    pubsub_channels: int = 0
    """Channels with a subscriber (shard channels apart)."""
    pubsub_patterns: int = 0
    """Distinct patterns with a subscriber."""
    pubsubshard_channels: int = 0
    total_net_input_bytes: int = 0
    total_net_output_bytes: int = 0
    changes_since_last_checkpoint: int = 0
    last_checkpoint_unix_s: int = 0
    checkpoints: int = 0
    wal_bytes: int = 0
    read_only: bool = False
    used_cpu_sys: float = 0.0
    used_cpu_user: float = 0.0
    buckets: tuple[BucketStats, ...] = ()
    commands: tuple[CommandStats, ...] = ()
    errors: tuple[tuple[str, int], ...] = field(default=())
    """Error replies by code (``ERR``, ``NOAUTH``...): the ``errorstat_`` lines."""
    replica: ReplicaInfo | None = None
    """Set while the server is a read replica (``role:slave``)."""


def _human(n: int) -> str:
    """Redis's ``bytesToHuman``: ``1.50K``, ``2.00M``, plain bytes below 1024."""
    for unit, size in (
        ("P", 1 << 50),
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"


def _bucket_order(name: bytes) -> tuple[int, int, bytes]:
    return (0, int(name), b"") if name.isdigit() else (1, 0, name)


def _section(name: str, facts: ServerFacts, snap: InfoSnapshot) -> list[str]:
    if name == "server":
        uptime = int(snap.uptime_s)
        return [
            f"redis_version:{facts.redis_version}",
            f"minidb_version:{facts.minidb_version}",
            "redis_mode:standalone",
            f"os:{facts.os}",
            f"arch_bits:{facts.arch_bits}",
            "multiplexing_api:asyncio",
            f"python_version:{facts.python_version}",
            f"process_id:{facts.process_id}",
            "process_supervised:no",
            f"run_id:{facts.run_id}",
            f"tcp_port:{facts.tcp_port}",
            f"server_time_usec:{snap.unix_time_us}",
            f"uptime_in_seconds:{uptime}",
            f"uptime_in_days:{uptime // 86400}",
            f"executable:{facts.executable}",
            "config_file:",
        ]
    if name == "clients":
        return [
            f"connected_clients:{snap.connected_clients}",
            "cluster_connections:0",
            f"maxclients:{facts.max_clients}",
            f"blocked_clients:{snap.blocked_clients}",
            "tracking_clients:0",
        ]
    if name == "memory":
        peak = max(snap.used_memory_peak, snap.used_memory)
        return [
            f"used_memory:{snap.used_memory}",
            f"used_memory_human:{_human(snap.used_memory)}",
            f"used_memory_rss:{snap.used_memory_rss}",
            f"used_memory_rss_human:{_human(snap.used_memory_rss)}",
            f"used_memory_peak:{peak}",
            f"used_memory_peak_human:{_human(peak)}",
            "maxmemory:0",
            "maxmemory_human:0B",
            "maxmemory_policy:noeviction",
            "mem_allocator:pymalloc",
        ]
    if name == "persistence":
        return [
            "loading:0",
            "async_loading:0",
            f"rdb_changes_since_last_save:{snap.changes_since_last_checkpoint}",
            "rdb_bgsave_in_progress:0",
            f"rdb_last_save_time:{snap.last_checkpoint_unix_s}",
            "rdb_last_bgsave_status:ok",
            f"rdb_saves:{snap.checkpoints}",
            "aof_enabled:1",
            "aof_rewrite_in_progress:0",
            f"aof_last_write_status:{'err' if snap.read_only else 'ok'}",
            f"aof_current_size:{snap.wal_bytes}",
        ]
    if name == "stats":
        return [
            f"total_connections_received:{snap.total_connections_received}",
            f"total_commands_processed:{snap.total_commands_processed}",
            f"total_net_input_bytes:{snap.total_net_input_bytes}",
            f"total_net_output_bytes:{snap.total_net_output_bytes}",
            f"rejected_connections:{snap.rejected_connections}",
            f"expired_keys:{snap.expired_keys}",
            "evicted_keys:0",
            f"keyspace_hits:{snap.keyspace_hits}",
            f"keyspace_misses:{snap.keyspace_misses}",
            f"pubsub_channels:{snap.pubsub_channels}",
            f"pubsub_patterns:{snap.pubsub_patterns}",
            f"pubsubshard_channels:{snap.pubsubshard_channels}",
            f"total_error_replies:{snap.total_error_replies}",
        ]
    if name == "replication":
        if snap.replica is not None:
            return _replica_lines(snap.replica)
        return ["role:master", "connected_slaves:0", "master_repl_offset:0"]
    if name == "cpu":
        return [f"used_cpu_sys:{snap.used_cpu_sys:.6f}", f"used_cpu_user:{snap.used_cpu_user:.6f}"]
    if name == "modules":
        return []
    if name == "commandstats":
        return [
            f"cmdstat_{c.name}:calls={c.calls},usec={c.usec},"
            f"usec_per_call={(c.usec / c.calls if c.calls else 0):.2f},"
            f"rejected_calls={c.rejected_calls},failed_calls={c.failed_calls}"
            for c in snap.commands
            if c.calls or c.rejected_calls or c.failed_calls
        ]
    if name == "errorstats":
        return [f"errorstat_{code}:count={count}" for code, count in snap.errors if count]
    if name == "cluster":
        return ["cluster_enabled:0"]
    if name == "keyspace":
        buckets = sorted(snap.buckets, key=lambda b: _bucket_order(b.name))
        return [
            f"db{b.name.decode('ascii', 'replace').replace(':', '%3A')}:"
            f"keys={b.keys},expires={b.expires},avg_ttl=0"
            for b in buckets
            if b.keys or b.expires
        ]
    raise AssertionError(name)


def _replica_lines(r: ReplicaInfo) -> list[str]:
    """Redis's replica fields (what redis-py, Sentinel-aware tools and exporters read: the role,
    the link, the offsets), then minidb's own. The offsets are sequence numbers: the next
    record the replica needs, as Redis's replication offset is the next byte."""
    return [
        "role:slave",
        f"master_host:{r.source}",
        "master_port:0",
        f"master_link_status:{'up' if r.link_up else 'down'}",
        f"master_last_io_seconds_ago:{r.last_io_s}",
        "master_sync_in_progress:0",
        f"slave_read_repl_offset:{r.shipped_seq + 1}",
        f"slave_repl_offset:{r.applied_seq + 1}",
        "slave_priority:100",
        "slave_read_only:1",
        "replica_announced:1",
        "connected_slaves:0",
        f"master_replid:{r.generation or '0'}",
        f"master_repl_offset:{r.applied_seq + 1}",
        f"minidb_replica_lag_records:{r.lag_records}",
        f"minidb_replica_lag_seconds:{r.lag_seconds:.3f}",
        f"minidb_replica_state:{r.state}",
    ]


def sections_for(args: Sequence[bytes]) -> tuple[str, ...]:
    """Which sections ``INFO args...`` shows, in Redis's order (unknown names show nothing)."""
    if not args:
        return DEFAULT_SECTIONS
    wanted: set[str] = set()
    for arg in args:
        word = arg.decode("ascii", "replace").lower()
        if word == "default":
            wanted.update(DEFAULT_SECTIONS)
        elif word in ("all", "everything"):
            wanted.update(ALL_SECTIONS)
        else:
            wanted.add(_SECTION_ALIASES.get(word, word))
    return tuple(s for s in ALL_SECTIONS if s in wanted)


_TITLES = {"cpu": "CPU", "commandstats": "Commandstats", "errorstats": "Errorstats"}


def render_info(sections: Iterable[str], facts: ServerFacts, snap: InfoSnapshot) -> str:
    """The text of ``INFO``."""
    blocks = []
    for name in sections:
        title = _TITLES.get(name, name.capitalize())
        lines = [f"# {title}", *_section(name, facts, snap)]
        blocks.append("".join(line + "\r\n" for line in lines))
    return "\r\n".join(blocks)


# -- CONFIG GET ----------------------------------------------------------------------------


def config_parameters(facts: ServerFacts) -> dict[str, str]:
    """Every parameter ``CONFIG GET`` knows, as Redis names it, with minidb's true value.

    ``save ""`` (no RDB snapshots to schedule: every write is logged), ``appendonly yes`` and
    ``appendfsync always`` (each write is fsynced before its reply), no memory limit or
    eviction. redis-benchmark asks for ``save`` and ``appendonly``; client libraries and GUIs
    for ``databases``, ``maxmemory`` and ``notify-keyspace-events``. ``requirepass`` is left
    out on purpose: a password is not something to hand to anyone who can connect.
    """
    return {
        "appendfsync": "always",
        "appendonly": "yes",
        "bind": facts.host,
        "cluster-enabled": "no",
        "databases": "16",
        "dir": facts.data_dir,
        "maxclients": str(facts.max_clients),
        "maxmemory": "0",
        "maxmemory-policy": "noeviction",
        "notify-keyspace-events": "",
        "port": str(facts.tcp_port),
        "save": "",
        "timeout": str(int(facts.idle_timeout_s)),
    }


def config_get(patterns: Sequence[bytes], facts: ServerFacts) -> dict[bytes, bytes]:
    """``CONFIG GET pattern...``: name -> value for every parameter a pattern matches."""
    params = config_parameters(facts)
    found: dict[bytes, bytes] = {}
    for pattern in patterns:
        for name, value in params.items():
            key = name.encode()
            if key not in found and glob_match(pattern, key):
                found[key] = value.encode()
    return found
