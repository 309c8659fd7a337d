"""The tokens file and the table it becomes (pure: no I/O but ``load_tokens``' one read).

The file has one ``TOKEN USER ROLE`` per line, ``#`` starting a comment, blank lines ignored;
``ROLE`` is ``user`` (sees its own tasks) or ``operator`` (sees all, and ``/metrics``).

Theory of operation. A lookup never compares the presented token with a stored one directly:
both are reduced to their SHA-256 digests and every entry is compared with
``hmac.compare_digest``, so neither the position of the first differing byte nor which entry
matched (nor the length of any token) shows in the time a request takes. Errors name the
line number only: a token never appears in a message, a log line or a ``repr``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from minidb.batch._errors import BatchError
from minidb.batch._keys import check_user
from minidb.errors import ConfigError

Role = Literal["user", "operator"]
ROLES: tuple[Role, ...] = ("user", "operator")

MIN_TOKEN_CHARS = 16
"""A shorter token is refused: it could be guessed."""
MAX_TOKEN_CHARS = 512
"""A longer token is refused (and a longer ``Authorization`` header never matches)."""
MAX_TOKEN_FILE_BYTES = 1 << 20
"""A tokens file larger than this is refused rather than read."""


class TokenFileError(ConfigError):
    """The tokens file is malformed; ``line`` is the 1-based line number (the token is never
    part of the message)."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        super().__init__(message if line is None else f"tokens file line {line}: {message}")
        self.line = line


@dataclasses.dataclass(frozen=True, slots=True)
class Principal:
    """Who a request is: the user its tasks are created by and listed under, and the role."""

    user: str
    role: Role

    @property
    def operator(self) -> bool:
        return self.role == "operator"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class TokenTable:
    """Bearer tokens to principals; ``lookup`` is constant-time in the token's content."""

    def __init__(self, entries: Iterable[tuple[str, Principal]]) -> None:
        self._entries: list[tuple[bytes, Principal]] = []
        seen: set[bytes] = set()
        for token, principal in entries:
            digest = _digest(token)
            if digest in seen:
                raise TokenFileError("a token appears twice")
            seen.add(digest)
            self._entries.append((digest, principal))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<TokenTable of {len(self._entries)} tokens>"

    def lookup(self, token: str) -> Principal | None:
        """The principal ``token`` names, or None; every entry is compared, whichever matches."""
        presented = _digest(token[:MAX_TOKEN_CHARS + 1])
        found: Principal | None = None
        for digest, principal in self._entries:
            if hmac.compare_digest(digest, presented):
                found = principal
        if len(token) > MAX_TOKEN_CHARS:
            return None
        return found


def parse_tokens(text: str) -> TokenTable:
    """The table of a tokens file's text (``TokenFileError`` naming the bad line)."""
    entries: list[tuple[str, Principal]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 3:
            raise TokenFileError("expected TOKEN USER ROLE", line=number)
        token, user, role = fields
        if not MIN_TOKEN_CHARS <= len(token) <= MAX_TOKEN_CHARS or not token.isascii():
            raise TokenFileError(
                f"a token is {MIN_TOKEN_CHARS}-{MAX_TOKEN_CHARS} ASCII characters", line=number
            )
        try:
            check_user(user)
        except BatchError:
            raise TokenFileError("USER is 1-64 of [A-Za-z0-9_-]", line=number) from None
        if role not in ROLES:
            raise TokenFileError("ROLE is user or operator", line=number)
        entries.append((token, Principal(user, "operator" if role == "operator" else "user")))
    try:
        return TokenTable(entries)
    except TokenFileError as exc:
        raise TokenFileError(str(exc)) from None


def load_tokens(path: str | Path) -> TokenTable:
    """Read and parse the tokens file at ``path``."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise TokenFileError(f"cannot read tokens file {path}: {exc.strerror}") from None
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise TokenFileError(f"tokens file {path} is larger than {MAX_TOKEN_FILE_BYTES} bytes")
    try:
        return parse_tokens(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise TokenFileError(f"tokens file {path} is not UTF-8") from None
