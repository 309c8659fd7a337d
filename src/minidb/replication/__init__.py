"""Shipping minidb's WAL to object storage, and the layout a restore reads back.

``docs/replication.md`` is the specification. Modules: ``_errors`` (the hierarchy),
``_layout`` (object names, the generation record and pointer, the restore planner; pure),
``_retention`` (what no restore point needs: pure, plus its sweep), ``_generation`` (the claim
and the fence), ``_shipper`` (the upload task beside the data owner).
"""

from minidb.replication._errors import (
    DamagedObject,
    Fenced,
    GapError,
    GenerationConflict,
    ReplicationError,
    RestoreError,
)
from minidb.replication._generation import LOCAL_FILE, read_current
from minidb.replication._layout import (
    CURRENT_KEY,
    LAYOUT_VERSION,
    Catalog,
    ChunkObject,
    CurrentPointer,
    GenerationKey,
    GenerationRecord,
    PlannedChunk,
    RestorePlan,
    SnapshotObject,
    chunk_for,
    generation_id,
    generation_started_ms,
    object_checksum,
    parse_key,
    plan_restore,
    snapshot_for,
    verify_object,
)
from minidb.replication._retention import (
    RetentionPolicy,
    expired_keys,
    list_catalog,
    oldest_point,
)
from minidb.replication._shipper import (
    DEFAULT_SHIP_INTERVAL_S,
    Shipper,
    ShipperConfig,
    ShipperStatistics,
    start_shipping,
)

__all__ = [
    "CURRENT_KEY",
    "DEFAULT_SHIP_INTERVAL_S",
    "LAYOUT_VERSION",
    "LOCAL_FILE",
    "Catalog",
    "ChunkObject",
    "CurrentPointer",
    "DamagedObject",
    "Fenced",
    "GapError",
    "GenerationConflict",
    "GenerationKey",
    "GenerationRecord",
    "PlannedChunk",
    "ReplicationError",
    "RestoreError",
    "RestorePlan",
    "RetentionPolicy",
    "Shipper",
    "ShipperConfig",
    "ShipperStatistics",
    "SnapshotObject",
    "chunk_for",
    "expired_keys",
    "generation_id",
    "generation_started_ms",
    "list_catalog",
    "object_checksum",
    "oldest_point",
    "parse_key",
    "plan_restore",
    "read_current",
    "snapshot_for",
    "start_shipping",
    "verify_object",
]
