"""Helpers of the loop I/O tests: a protocol that records its events, and a socket wrapper."""

from __future__ import annotations

import asyncio
import socket
from typing import Any


class Recorder(asyncio.Protocol):
    """Every protocol event, in order (raising from data_received when told to)."""

    def __init__(self, fail: bool = False) -> None:
        self.events: list[object] = []
        self.fail = fail
        self.lost = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.events.append(data)
        if self.fail:
            raise RuntimeError("protocol failed")

    def eof_received(self) -> None:
        self.events.append("eof")

    def pause_writing(self) -> None:
        self.events.append("pause")

    def resume_writing(self) -> None:
        self.events.append("resume")

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append(("lost", type(exc).__name__ if exc else None))
        self.lost.set()


class WrappedSocket:
    """A socket.socket in something else (as asyncio's own tests put in a transport's
    ``_sock``), counting the calls of its ``recv`` and ``send``."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.calls = 0

    def recv(self, size: int) -> bytes:
        self.calls += 1
        return self.sock.recv(size)

    def send(self, data: bytes) -> int:
        self.calls += 1
        return self.sock.send(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)
