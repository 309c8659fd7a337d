"""Shipping minidb's WAL to object storage, and the layout a restore reads back.

``docs/replication.md`` is the specification. Modules: ``_errors`` (the hierarchy),
``_layout`` (object names, the generation record and pointer, the restore planner; pure).
"""

from minidb.replication._errors import (
    DamagedObject,
    Fenced,
    GapError,
    GenerationConflict,
    ReplicationError,
    RestoreError,
)
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

__all__ = [
    "CURRENT_KEY",
    "LAYOUT_VERSION",
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
    "SnapshotObject",
    "chunk_for",
    "generation_id",
    "generation_started_ms",
    "object_checksum",
    "parse_key",
    "plan_restore",
    "snapshot_for",
    "verify_object",
]
