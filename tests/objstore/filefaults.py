"""Faults of the ``file:`` backend, injected into one ``FileStore``'s blocking core: the
file-system counterpart of ``faultproxy`` for tests that run on both backends.

``FileFaults(monkeypatch, store).on(method, fault, times=1, key=regex)`` wraps the core's
``method`` (``get``, ``open``, ``list``, ``commit_create``, ``commit_replace``, ``delete``) so
that its next ``times`` calls whose key (or listed prefix) matches ``key`` meet ``fault``
instead: ``refuse(errno)`` raises that ``OSError`` before anything is done (translated like
any OSError of the store); ``lose_answer`` does the call, then raises ``AmbiguousWrite`` as a
directory fsync that failed after the commit would.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable
from typing import Any

import pytest

from minidb.objstore import AmbiguousWrite, FileStore

Fault = Callable[..., Any]


def refuse(err: int) -> Fault:
    """A fault: the call fails with ``OSError(err)`` and does nothing."""
    def fault(_real: Callable[..., Any], *_args: Any) -> Any:
        raise OSError(err, f"{errno.errorcode[err]} (injected)")
    return fault


def lose_answer(real: Callable[..., Any], *args: Any) -> Any:
    """A fault: the call is done, then reported as unconfirmed (``AmbiguousWrite``)."""
    real(*args)
    raise AmbiguousWrite("injected: the directory did not sync")


class FileFaults:
    """Faults armed on one store's core (see the module docstring)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, store: FileStore) -> None:
        self.monkeypatch = monkeypatch
        self.core = store._core
        self.fired = 0

    def on(self, method: str, fault: Fault, times: int = 1, key: str = "") -> None:
        real = getattr(self.core, method)
        left = times

        def faulty(*args: Any) -> Any:
            nonlocal left
            if left and isinstance(args[0], str) and re.search(key, args[0]):
                left -= 1
                self.fired += 1
                return fault(real, *args)
            return real(*args)
        self.monkeypatch.setattr(self.core, method, faulty)
