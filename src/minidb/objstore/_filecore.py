"""The ``file:`` backend's blocking core: objects as files under one root directory.

Theory of operation
-------------------
Object ``a/b`` is the file ``ROOT/a/b``: a fixed header ``MINIDBOBJ1 <sha256 hex>\\n`` followed
by the object's bytes. The header makes the ETag (``"<sha256 hex>"``, a content hash like
S3's, never an mtime) readable without the body, so ``list`` stays cheap.

Every write first puts the complete new file in ``ROOT/.minidb-tmp/`` and fsyncs it; only then
does it touch the key:

- create: ``link(temp, final)``: the kernel refuses an existing name, so two creators can
  never both win and no lock is needed;
- replace / compare-and-set / delete: under the key's ``flock`` lock (a file in
  ``ROOT/.minidb-locks/`` named by the key's hash, so processes sharing the directory
  serialise too), read the current header, compare, then ``rename`` (or ``unlink``).

The create path and the locked paths cannot interleave badly: ``link`` only acts on an absent
name and the locked paths act only on a present one (or, for ``put``, replace atomically).
After the commit step the directory is fsynced; a failure there is an ``AmbiguousWrite``
(the name changed but may not survive a crash). Paths are checked after resolving: a key
whose real path differs from its plain path (a symlink anywhere) is refused.

Everything here blocks; ``_file.FileStore`` runs it in a thread pool.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import stat
import uuid
from collections.abc import Iterator
from typing import BinaryIO

from ._errors import AmbiguousWrite, InvalidKey, NotFound, PreconditionFailed
from ._keys import RESERVED_PREFIX, check_key, check_prefix
from ._presign import SECRET_BYTES
from ._types import ListEntry, ListPage, check_list_limit

MAGIC = b"MINIDBOBJ1 "
HEADER_BYTES = len(MAGIC) + 64 + 1
"""Bytes before an object's data: magic, 64 hex digits of sha256, newline."""

TMP_DIR = RESERVED_PREFIX + "-tmp"
LOCK_DIR = RESERVED_PREFIX + "-locks"
SECRET_FILE = RESERVED_PREFIX + "-presign-key"
SECRET_MODE = 0o600


def quote_etag(digest_hex: str) -> str:
    return f'"{digest_hex}"'


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class TempObject:
    """A new object file being written in the temp directory; ``finish()`` fsyncs it."""

    def __init__(self, tmp_dir: str) -> None:
        self.path = os.path.join(tmp_dir, f"{uuid.uuid4().hex}.tmp")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._file: BinaryIO = os.fdopen(fd, "wb")
        self._file.write(b"\0" * HEADER_BYTES)
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self._file.write(data)
        self._hash.update(data)
        self.size += len(data)

    def finish(self) -> str:
        """Write the header, fsync, close; returns the ETag."""
        digest = self._hash.hexdigest()
        self._file.seek(0)
        self._file.write(MAGIC + digest.encode() + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        return quote_etag(digest)

    def discard(self) -> None:
        self._file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class FileCore:
    """Blocking object operations on one root directory (thread-safe, process-safe)."""

    def __init__(self, root: str) -> None:
        os.makedirs(root, exist_ok=True)
        self.root = os.path.realpath(root)
        self.tmp_dir = os.path.join(self.root, TMP_DIR)
        self.lock_dir = os.path.join(self.root, LOCK_DIR)
        os.makedirs(self.tmp_dir, exist_ok=True)
        os.makedirs(self.lock_dir, exist_ok=True)

    # -- paths -------------------------------------------------------------------------------

    def path(self, key: str) -> str:
        """The file of ``key``, refusing anything that resolves elsewhere."""
        check_key(key)
        path = os.path.join(self.root, *key.split("/"))
        if os.path.realpath(path) != path:
            raise InvalidKey(f"key {key!r} resolves through a symlink", key=key)
        return path

    def _writable_path(self, key: str) -> str:
        path = self.path(key)
        if os.path.isdir(path):
            raise InvalidKey(f"key {key!r} is a prefix of other objects", key=key)
        self._make_parents(key, path)
        return path

    def _make_parents(self, key: str, path: str) -> None:
        parent = os.path.dirname(path)
        missing = []
        while parent != self.root and not os.path.isdir(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        for directory in reversed(missing):
            try:
                os.mkdir(directory)
            except FileExistsError:
                if not os.path.isdir(directory) or os.path.islink(directory):
                    raise InvalidKey(
                        f"key {key!r} needs a directory where an object exists", key=key
                    ) from None
                continue
            except NotADirectoryError:
                raise InvalidKey(
                    f"key {key!r} needs a directory where an object exists", key=key
                ) from None
            _fsync_dir(os.path.dirname(directory))
        if os.path.realpath(os.path.dirname(path)) != os.path.dirname(path):
            raise InvalidKey(f"key {key!r} resolves through a symlink", key=key)

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        name = hashlib.sha256(key.encode()).hexdigest() + ".lock"
        fd = os.open(os.path.join(self.lock_dir, name), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    # -- reads -------------------------------------------------------------------------------

    def open(self, key: str) -> tuple[BinaryIO, str, int]:
        """The object's file positioned at its data, its ETag and its size."""
        path = self.path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise NotFound(f"no object {key!r}", key=key, status=404) from None
        except IsADirectoryError:
            raise NotFound(f"no object {key!r}", key=key, status=404) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a directory: a prefix, not an object
            os.close(fd)
            raise NotFound(f"no object {key!r}", key=key, status=404)
        file = os.fdopen(fd, "rb")
        try:
            etag = _parse_header(file.read(HEADER_BYTES))
            if etag is None:
                raise NotFound(f"no object {key!r} (not an object file)", key=key, status=404)
            size = os.fstat(fd).st_size - HEADER_BYTES
        except BaseException:
            file.close()
            raise
        return file, etag, size

    def get(self, key: str) -> tuple[bytes, str]:
        file, etag, _ = self.open(key)
        with file:
            return file.read(), etag

    def current_etag(self, key: str, path: str) -> str | None:
        try:
            with open(path, "rb", opener=_nofollow) as file:
                return _parse_header(file.read(HEADER_BYTES))
        except (FileNotFoundError, IsADirectoryError):
            return None

    # -- writes ------------------------------------------------------------------------------

    def new_temp(self) -> TempObject:
        return TempObject(self.tmp_dir)

    def write_temp(self, data: bytes) -> tuple[TempObject, str]:
        temp = self.new_temp()
        try:
            temp.write(data)
            return temp, temp.finish()
        except BaseException:
            temp.discard()
            raise

    def commit_create(self, key: str, temp: TempObject, etag: str) -> str:
        """Link a finished temp to ``key`` if absent (``PreconditionFailed`` otherwise). The
        temp stays for the caller to discard (a create whose outcome is unknown may be tried
        again with it)."""
        path = self._writable_path(key)
        try:
            os.link(temp.path, path)
        except FileExistsError:
            raise PreconditionFailed(
                f"object {key!r} already exists", key=key, status=412
            ) from None
        self._sync_after_commit(key, path)
        return etag

    def commit_replace(
        self, key: str, temp: TempObject, etag: str, if_match: str | None
    ) -> str:
        """Rename a finished temp over ``key``, if its ETag is ``if_match`` when given (the
        caller discards the temp, which is gone once renamed)."""
        path = self._writable_path(key)
        with self._locked(key):
            if if_match is not None:
                self._check_match(key, path, if_match)
            os.rename(temp.path, path)
            self._sync_after_commit(key, path)
        return etag

    def delete(self, key: str, if_match: str | None) -> None:
        path = self.path(key)
        with self._locked(key):
            if if_match is not None:
                self._check_match(key, path, if_match)
            try:
                os.unlink(path)
            except FileNotFoundError:
                return
            except IsADirectoryError:
                return
            self._sync_after_commit(key, path)

    def _check_match(self, key: str, path: str, if_match: str) -> None:
        current = self.current_etag(key, path)
        if current is None:
            raise NotFound(f"no object {key!r}", key=key, status=404)
        if current != if_match:
            raise PreconditionFailed(
                f"object {key!r} has ETag {current}, not {if_match}", key=key, status=412
            )

    def _sync_after_commit(self, key: str, path: str) -> None:
        try:
            _fsync_dir(os.path.dirname(path))
        except OSError as exc:
            raise AmbiguousWrite(
                f"object {key!r} written but its directory did not sync: {exc}", key=key
            ) from exc

    # -- listing -----------------------------------------------------------------------------

    def list(self, prefix: str, start_after: str | None, limit: int) -> ListPage:
        check_prefix(prefix)
        check_list_limit(limit)
        keys = sorted(
            key for key in self._keys_under(prefix)
            if key.startswith(prefix) and (start_after is None or key > start_after)
        )
        entries = []
        for key in keys:
            path = os.path.join(self.root, *key.split("/"))
            try:
                with open(path, "rb", opener=_nofollow) as file:
                    etag = _parse_header(file.read(HEADER_BYTES))
                    size = os.fstat(file.fileno()).st_size - HEADER_BYTES
            except OSError:
                continue  # deleted since the walk, or not a regular file
            if etag is None:
                continue
            entries.append(ListEntry(key, size, etag))
            if len(entries) > limit:
                break
        more = len(entries) > limit
        entries = entries[:limit]
        return ListPage(tuple(entries), entries[-1].key if more else None)

    def _keys_under(self, prefix: str) -> Iterator[str]:
        # Walk only the deepest directory the prefix names fully ("a/b/c" -> ROOT/a/b).
        directory_part = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = os.path.join(self.root, *directory_part.split("/")) if directory_part else (
            self.root
        )
        if os.path.realpath(start) != start or not os.path.isdir(start):
            return
        for dirpath, dirnames, filenames in os.walk(start):
            if dirpath == self.root:
                dirnames[:] = [d for d in dirnames if not d.startswith(RESERVED_PREFIX)]
                filenames = [f for f in filenames if not f.startswith(RESERVED_PREFIX)]
            relative = os.path.relpath(dirpath, self.root)
            base = "" if relative == "." else relative.replace(os.sep, "/") + "/"
            for name in filenames:
                yield base + name

    # -- presign secret ----------------------------------------------------------------------

    def presign_secret(self) -> bytes:
        """The directory's presign secret, created (mode 0600) on first use."""
        path = os.path.join(self.root, SECRET_FILE)
        for _ in range(2):
            try:
                with open(path, "rb", opener=_nofollow) as file:
                    text = file.read().strip()
                if text:
                    return bytes.fromhex(text.decode())
            except FileNotFoundError:
                pass
            tmp = os.path.join(self.tmp_dir, f"{uuid.uuid4().hex}.key")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, SECRET_MODE)
            try:
                os.write(fd, secrets.token_hex(SECRET_BYTES).encode() + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)  # atomic: the first process to get here wins
                _fsync_dir(self.root)
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
        raise OSError(errno.EIO, f"cannot read presign secret {path}")


def _nofollow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)


def _parse_header(header: bytes) -> str | None:
    if len(header) != HEADER_BYTES or not header.startswith(MAGIC) or header[-1:] != b"\n":
        return None
    digest = header[len(MAGIC):-1]
    try:
        int(digest, 16)
    except ValueError:
        return None
    return quote_etag(digest.decode())
