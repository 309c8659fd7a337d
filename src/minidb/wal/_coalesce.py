"""Joining many small byte strings into fewer large ones, in order.

What both writers of whole files in the log need: a snapshot's records (``pack_payloads``
joins one-key payloads into 64 KiB records) and ``write_atomically`` (joins a file's chunks
into blocks before each write), so neither pays a call per small piece downstream.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator


def coalesce(pieces: Iterable[bytes], limit: int) -> Iterator[bytes]:
    """``pieces`` joined into blocks of at least ``limit`` bytes each, the last one shorter;
    a piece is never split (one longer than ``limit`` is a block, or ends one). Nothing for
    no pieces."""
    block: list[bytes] = []
    size = 0
    for piece in pieces:
        block.append(piece)
        size += len(piece)
        if size >= limit:
            yield b"".join(block)
            block = []
            size = 0
    if block:
        yield b"".join(block)
