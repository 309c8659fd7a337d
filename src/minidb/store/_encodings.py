"""What Redis calls each container's representation (``OBJECT ENCODING``), and the thresholds
at which it converts one to the next (Redis 7.2's defaults in ``redis.conf``; minidb's are
fixed)."""

from __future__ import annotations

HASH_MAX_LISTPACK_ENTRIES = 128
"""Fields a hash holds before it converts to a hashtable (``hash-max-listpack-entries``)."""
HASH_MAX_LISTPACK_VALUE = 64
"""Longest field or value, in bytes, a listpack hash holds (``hash-max-listpack-value``)."""
SET_MAX_INTSET_ENTRIES = 512
"""Members an all-integer set holds as an intset (``set-max-intset-entries``)."""
SET_MAX_LISTPACK_ENTRIES = 128
"""Members a set holds as a listpack (``set-max-listpack-entries``)."""
SET_MAX_LISTPACK_VALUE = 64
"""Longest member, in bytes, a listpack set holds (``set-max-listpack-value``)."""
LIST_MAX_LISTPACK_BYTES = 8192
"""The listpack a list keeps before it converts to a quicklist (``list-max-listpack-size`` -2)."""
ZSET_MAX_LISTPACK_ENTRIES = 128
"""Members a sorted set holds as a listpack (``zset-max-listpack-entries``)."""
ZSET_MAX_LISTPACK_VALUE = 64
"""Longest member, in bytes, a listpack sorted set holds (``zset-max-listpack-value``)."""
EMBSTR_MAX_BYTES = 44
"""Longest string Redis stores ``embstr`` (``OBJ_ENCODING_EMBSTR_SIZE_LIMIT``)."""

LISTPACK, HASHTABLE, INTSET, QUICKLIST = "listpack", "hashtable", "intset", "quicklist"
SKIPLIST = "skiplist"
