"""Swapping ``RespConnection``'s C methods (``server.resp._cconnection``) for their Python
twins, for the tests that hold one to the other."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from minidb.server.resp._connection import PYTHON_TWINS, RespConnection


@contextmanager
def python_connection_methods() -> Iterator[None]:
    """Within the block, ``RespConnection`` runs its Python ``data_received``,
    ``turn_answered`` and ``output_room`` (whether or not the C ones are built)."""
    installed = {name: RespConnection.__dict__.get(name) for name in PYTHON_TWINS}
    for name, method in PYTHON_TWINS.items():
        setattr(RespConnection, name, method)
    try:
        yield
    finally:
        for name, method in installed.items():
            if method is None:
                delattr(RespConnection, name)
            else:
                setattr(RespConnection, name, method)
