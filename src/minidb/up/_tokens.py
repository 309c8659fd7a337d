"""The operator token of ``minidb up``: made on the first start, read back on every later one.

The file is the batch API's tokens file (one ``TOKEN USER ROLE`` per line, ``#`` comments), at
``DATA/batch/tokens``. The first start creates it with mode 0600 (created that way, never
chmodded after, so there is no moment where another user could read it) holding one operator
line; later starts reuse the first operator token they find, so the token in a README or a
script keeps working. An operator may add lines (users of their own): they are kept.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Final

OPERATOR_USER: Final = "operator"
"""The user name of the token ``minidb up`` makes."""
TOKEN_BYTES: Final = 32
"""Random bytes in a made token (``secrets.token_urlsafe``: 43 characters)."""
FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700
_HEADER = "# minidb batch API tokens: TOKEN USER ROLE (made by minidb up)\n"


def operator_token_in(text: str) -> str | None:
    """The first operator token of a tokens file's text, or None."""
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) == 3 and fields[2] == "operator":
            return fields[0]
    return None


def token_line(token: str) -> str:
    """The tokens-file line of ``token`` as ``minidb up``'s operator."""
    return f"{token} {OPERATOR_USER} operator\n"


def ensure_operator_token(path: Path) -> tuple[str, bool]:
    """The operator token in ``path``, making the file or the line if needed; True if made."""
    path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = None
    if text is not None:
        found = operator_token_in(text)
        if found is not None:
            return found, False
    token = secrets.token_urlsafe(TOKEN_BYTES)
    if text is None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        content = _HEADER + token_line(token)
    else:
        flags = os.O_WRONLY | os.O_APPEND
        content = ("" if not text or text.endswith("\n") else "\n") + token_line(token)
    fd = os.open(path, flags, FILE_MODE)
    try:
        os.write(fd, content.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return token, True
