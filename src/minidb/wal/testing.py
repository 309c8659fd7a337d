"""Power loss, simulated below the WAL: ``CrashFS`` and the disk states a crash may leave.

``kill -9`` leaves the page cache intact, so a killed process never shows a torn write. This
module does what the power cord would: install a ``CrashFS`` with ``using(fs)`` (re-exported
here) and the log's file operations run for real on a real directory while the simulator notes
what has been made durable; ``power_loss()`` (or the ``crash_after``-th operation) then
rewrites the directory into a state the disk could be in after the power went, and every later
operation raises ``PowerLoss``.

Theory of operation. The model of durability is the POSIX/Linux one the WAL relies on:

- A file's data and size are durable up to its last ``fsync``/``fdatasync``. What was written
  (or truncated) after that survives as an in-order prefix, cut at any byte; or, with the size
  already extended (a file system that commits the size before the data, or a torn page), a
  prefix cut at a sector boundary followed by zero bytes up to some later size.
- A create, rename or unlink is durable once the directory has been fsynced after it. One that
  was not is applied or not, independently per operation, in its original order (a rename of
  a name that did not survive is then moot). A file that is unlinked keeps its durable content
  should its unlink be lost.

``BEYOND_POWER_LOSS`` adds what a crash on honest hardware cannot do but a lying or failing
disk can: sectors of the unsynced range persisted out of order, and garbage rather than zeros.
The WAL must never return wrong data then, but may refuse to start (``CorruptionError``).

Not modelled: a disk that loses data it acknowledged as synced, bit rot in synced data, the
data directory itself disappearing, and sub-sector tears (a sector is written whole or not).
Every choice comes from one ``random.Random(seed)``, so a seed replays a crash exactly.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

from minidb.wal._fs import DIRECTORY_FLAGS, FileSystem, using

__all__ = [
    "BEYOND_POWER_LOSS",
    "POWER_LOSS",
    "SECTOR_BYTES",
    "CrashFS",
    "Damage",
    "PowerLoss",
    "using",
]

SECTOR_BYTES = 512
"""The unit a disk writes atomically: a torn write's zeros start at a multiple of this."""

_MUTATING_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC


class PowerLoss(BaseException):
    """The simulated power failure. A ``BaseException``, so the code under test cannot catch
    it with ``except OSError`` or ``except Exception``: the process state is simply abandoned."""


@dataclass(frozen=True)
class Damage:
    """Which kinds of damage ``power_loss()`` may pick for the unsynced part of a file."""

    zero_fill: bool = True  # the size made it further than the data: zeros after a sector
    reorder: bool = False  # unsynced sectors persisted out of order (new or zero, each)
    garbage: bool = False  # unsynced sectors hold neither the new data nor zeros


POWER_LOSS = Damage()
"""What a power loss on an honest disk can do; the WAL must open with every acked write."""

BEYOND_POWER_LOSS = Damage(reorder=True, garbage=True)
"""What only a lying or failing disk does; the WAL may refuse to start, never return junk."""


@dataclass
class _Inode:
    """One file, whatever names it has had: its durable content and what followed it."""

    durable: bytes
    pending: list[tuple[int, bytes] | int] = field(default_factory=list)
    """Changes since the last sync, in order: ``(offset, data)`` writes, ``size`` truncations."""

    def current(self) -> bytes:
        return _apply(self.durable, self.pending)


def _apply(content: bytes, changes: list[tuple[int, bytes] | int]) -> bytes:
    buf = bytearray(content)
    for change in changes:
        if isinstance(change, int):
            del buf[change:]
            buf.extend(bytes(change - len(buf)))
        else:
            offset, data = change
            buf.extend(bytes(max(0, offset - len(buf))))
            buf[offset : offset + len(data)] = data
    return bytes(buf)


class CrashFS(FileSystem):
    """A ``FileSystem`` over ``directory`` that knows what is durable and can lose power.

    Only files directly in ``directory`` are modelled (the data directory has no
    subdirectories). What is there when the simulator is created counts as durable.
    ``operations`` counts the calls that change or sync something; with ``crash_after=k``
    the power goes out instead of the ``k+1``-th (so ``0`` crashes at the first).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        seed: int | str = 0,
        crash_after: int | None = None,
        damage: Damage = POWER_LOSS,
    ) -> None:
        # abspath, not realpath: no syscall per operation; the log joins names to the path it
        # was given, and the simulator must be given the same one.
        self.directory = os.path.abspath(os.fspath(directory))
        self.seed = seed
        self.crash_after = crash_after
        self.damage = damage
        self.operations = 0
        self.crashed = False
        self.report: list[str] = []  # what power_loss() chose, one line per decision
        self._rng = random.Random(seed)
        self._names: dict[str, _Inode] = {}  # the namespace the page cache shows
        self._durable_names: dict[str, _Inode] = {}
        self._dir_ops: list[tuple[str, str, str | _Inode]] = []  # since the last dir fsync
        self._fds: dict[int, _Inode | None] = {}  # None: the directory itself
        os.makedirs(self.directory, exist_ok=True)
        for name in os.listdir(self.directory):
            with open(os.path.join(self.directory, name), "rb") as f:
                self._names[name] = _Inode(f.read())
        self._durable_names = dict(self._names)

    # -- the operations ----------------------------------------------------------------------

    def open(self, path: str, flags: int, mode: int = 0o777) -> int:  # type: ignore[override]
        name = self._name(path)
        if flags & DIRECTORY_FLAGS == DIRECTORY_FLAGS and name is None:
            self._alive()
            fd = os.open(path, flags)
            self._fds[fd] = None
            return fd
        assert name is not None, f"{path} is outside {self.directory}"
        if flags & _MUTATING_FLAGS:
            self._step()
        fd = os.open(path, flags, mode)
        inode = self._names.get(name)
        if inode is None:
            inode = self._names[name] = _Inode(b"")
            self._dir_ops.append(("link", name, inode))
        elif flags & os.O_TRUNC:
            inode.pending.append(0)
        self._fds[fd] = inode
        return fd

    def close(self, fd: int) -> None:
        if self.crashed:
            return  # every descriptor was closed at the power loss
        del self._fds[fd]
        os.close(fd)

    def write(self, fd: int, data: bytes) -> int:  # type: ignore[override]
        self._step()
        inode = self._file(fd)
        written = os.write(fd, data)
        end = os.lseek(fd, 0, os.SEEK_CUR)  # where this write ended, O_APPEND or not
        inode.pending.append((end - written, bytes(data[:written])))
        return written

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:  # type: ignore[override]
        self._step()
        inode = self._file(fd)
        written = os.pwrite(fd, data, offset)
        inode.pending.append((offset, bytes(data[:written])))
        return written

    def fsync(self, fd: int) -> None:  # type: ignore[override]
        self._step()
        inode = self._fds[fd]
        if inode is None:
            self._durable_names = dict(self._names)
            self._dir_ops.clear()
        else:
            inode.durable, inode.pending = inode.current(), []

    # For the simulator both flush a file's data and size, and only fsync of a directory fd
    # makes its entries durable; the real calls are not made (the temp dir need not survive).
    fdatasync = fsync  # type: ignore[assignment]

    def ftruncate(self, fd: int, size: int) -> None:
        self._step()
        inode = self._file(fd)
        os.ftruncate(fd, size)
        inode.pending.append(size)

    def rename(self, src: str, dst: str) -> None:  # type: ignore[override]
        self._step()
        src_name, dst_name = self._name(src), self._name(dst)
        assert src_name is not None and dst_name is not None
        os.rename(src, dst)
        self._names[dst_name] = self._names.pop(src_name)
        self._dir_ops.append(("rename", src_name, dst_name))

    def unlink(self, path: str) -> None:  # type: ignore[override]
        self._step()
        name = self._name(path)
        assert name is not None
        os.unlink(path)
        del self._names[name]
        self._dir_ops.append(("unlink", name, ""))

    def makedirs(self, path: str) -> None:
        self._alive()
        assert os.path.abspath(path) == self.directory, "only the data directory is modelled"

    # -- the power loss ----------------------------------------------------------------------

    def power_loss(self) -> None:
        """Cut the power now: rewrite the directory as the disk could be, then refuse all.

        Idempotent. Every descriptor handed out is closed first (which releases the log's
        ``flock``), so the directory can be opened again in this process.
        """
        if self.crashed:
            return
        self.crashed = True
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        for name, inode in self._names.items():
            with open(os.path.join(self.directory, name), "rb") as f:
                assert f.read() == inode.current(), f"simulator lost track of {name}"
        names = dict(self._durable_names)
        for kind, a, b in self._dir_ops:
            applied = self._rng.random() < 0.5
            what = f"{kind} {a} -> {b}" if kind == "rename" else f"{kind} {a}"
            self.report.append(f"{what}: {'kept' if applied else 'lost'}")
            if not applied:
                continue
            if kind == "link":
                assert isinstance(b, _Inode)
                names[a] = b
            elif kind == "rename" and a in names:
                assert isinstance(b, str)
                names[b] = names.pop(a)
            elif kind == "unlink":
                names.pop(a, None)
        for name in os.listdir(self.directory):
            os.unlink(os.path.join(self.directory, name))
        for name, inode in sorted(names.items()):
            content = self._torn(name, inode)
            with open(os.path.join(self.directory, name), "wb") as f:
                f.write(content)

    def _torn(self, name: str, inode: _Inode) -> bytes:
        """One content the file may have after the power loss."""
        old, new = inode.durable, inode.current()
        if not inode.pending or old == new:
            return old
        rng, damage = self._rng, self.damage
        if len(new) > len(old) and new.startswith(old):  # appended to: the common case
            choice = rng.random()
            if damage.reorder and choice < 0.2:
                return self._note(name, "sectors out of order", self._scrambled(old, new))
            if damage.zero_fill and choice < 0.5:
                # The zeros start where a sector was not written: at the old end (its last
                # sector rewritten in vain) or at a sector boundary after it.
                first = -(-len(old) // SECTOR_BYTES) * SECTOR_BYTES
                cuts = [len(old), *range(first or SECTOR_BYTES, len(new), SECTOR_BYTES)]
                cut = rng.choice(cuts)
                size = rng.randint(cut + 1, len(new))
                return self._note(name, f"data to {cut}, zeros to {size}",
                                  new[:cut] + bytes(size - cut))
            cut = rng.randint(len(old), len(new))
            return self._note(name, f"prefix to {cut} of {len(new)}", new[:cut])
        # Truncated or rewritten: a prefix of the changes, the last one possibly cut short.
        keep = rng.randint(0, len(inode.pending))
        changes = inode.pending[:keep]
        if keep < len(inode.pending):
            partial = inode.pending[keep]
            if not isinstance(partial, int):
                offset, data = partial
                changes.append((offset, data[: rng.randint(0, len(data))]))
        return self._note(name, f"{keep} of {len(inode.pending)} changes", _apply(old, changes))

    def _scrambled(self, old: bytes, new: bytes) -> bytes:
        rng = self._rng
        size = rng.randint(len(old) + 1, len(new))
        out = bytearray(new[:size])
        for start in range(len(old) - len(old) % SECTOR_BYTES, size, SECTOR_BYTES):
            lo, hi = max(start, len(old)), min(start + SECTOR_BYTES, size)
            roll = rng.random()
            if roll < 0.3:
                out[lo:hi] = bytes(hi - lo)
            elif roll < 0.4 and self.damage.garbage:
                out[lo:hi] = rng.randbytes(hi - lo)
        return bytes(out)

    def _note(self, name: str, what: str, content: bytes) -> bytes:
        self.report.append(f"{name}: {what}")
        return content

    # -- internals ---------------------------------------------------------------------------

    def _alive(self) -> None:
        if self.crashed:
            raise PowerLoss(f"power is off (seed {self.seed})")

    def _step(self) -> None:
        self._alive()
        if self.crash_after is not None and self.operations >= self.crash_after:
            self.power_loss()
            raise PowerLoss(f"power lost after operation {self.operations} (seed {self.seed})")
        self.operations += 1

    def _name(self, path: str) -> str | None:
        """The file's name in the directory; ``None`` for the directory itself."""
        real = os.path.abspath(path)
        if real == self.directory:
            return None
        head, name = os.path.split(real)
        assert head == self.directory, f"{path} is outside {self.directory}"
        return name

    def _file(self, fd: int) -> _Inode:
        inode = self._fds[fd]
        assert inode is not None, "write to a directory descriptor"
        return inode

