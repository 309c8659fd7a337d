"""A script's compiled form and its shebang: ``#!lua flags=...`` read as Redis 7 reads it
(``evalExtractShebangFlags``): the first line names the engine (only ``lua``) and its flags;
the code compiled is the rest, with the line's newline kept so line numbers stay."""

from __future__ import annotations

from typing import Any, NamedTuple

from minidb.store._results import ErrorReply

SHEBANG_FLAGS = frozenset(
    {b"no-writes", b"allow-oom", b"allow-stale", b"no-cluster", b"allow-cross-slot-keys"}
)
"""The flags a ``#!lua flags=...`` line may name (Redis 7); only ``no-writes`` changes
anything here (the script may not write; EVAL_RO takes only such a script)."""


class Script(NamedTuple):
    """A compiled script: its Lua function and its shebang's flags (None: no shebang)."""

    fn: Any
    flags: frozenset[bytes] | None


def parse_shebang(body: bytes) -> tuple[frozenset[bytes] | None, bytes] | ErrorReply:
    """A ``#!lua flags=a,b`` first line's flags and the code to compile (the line emptied,
    so line numbers stay), as Redis 7's ``evalExtractShebangFlags``; (None, body) without."""
    if not body.startswith(b"#!"):
        return None, body
    end = body.find(b"\n")
    if end < 0:
        return ErrorReply("ERR Invalid script shebang")
    parts = body[:end].split()
    if parts[0].lower() != b"#!lua":
        return ErrorReply(one_line(f"ERR Unexpected engine in script shebang: {_show(parts[0])}"))
    flags: set[bytes] = set()
    for part in parts[1:]:
        if not part.startswith(b"flags="):
            return ErrorReply(one_line(f"ERR Unknown lua shebang option: {_show(part)}"))
        for flag in part[6:].split(b","):
            if flag and flag not in SHEBANG_FLAGS:
                text = f"ERR Unexpected flag in script shebang: {_show(flag)}"
                return ErrorReply(one_line(text))
            flags.add(flag)
    return frozenset(flags), body[end:]


def _show(word: bytes) -> str:
    return word.decode("utf-8", "replace")


def one_line(text: str) -> str:
    """``text`` fit for an error reply (no CR or LF)."""
    return text.replace("\r", " ").replace("\n", " ")
