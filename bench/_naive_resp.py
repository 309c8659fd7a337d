"""A naive RESP server: the ceiling of CPython on this machine, as a peer for ``vs_redis.py``.

What a competent 100-line asyncio server does and nothing more: one ``Protocol`` per
connection, every complete multibulk command of a read parsed inline, a ``dict``, the replies
of a read joined into one ``transport.write``. No data owner, mailbox, admission control,
timeouts, metrics, expiry, binary-safe log format or command table. Durability follows
minidb's policies with the simplest group commit that is still correct: SETs append a line to
an in-memory log, and once per loop turn (``call_soon``) the log is written with one
``os.write`` and, under ``always``, one ``os.fdatasync``, after which the turn's replies are
released (under ``everysec`` a thread fdatasyncs once a second; under ``no`` never).

It answers GET, SET, PING and CONFIG GET (redis-benchmark's start-up probe); anything else is
``+OK``. It is a measuring stick, not a server: never run it for data.

    python bench/_naive_resp.py PORT DATA_DIR always|everysec|no [asyncio|uvloop|minidb|floor]

``floor`` is lower still: on the runtime's loop, every command of a read is answered with a
constant reply (GET ``$-1``, anything else ``+OK``), nothing parsed, stored or logged. It is
what the event loop's turn and the transport cost a request in Python, whatever the server
does (``bench/instructions.py --servers floor``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

_CRLF = b"\r\n"


class _Log:
    """The turn's writes and the connections whose replies wait for them."""

    def __init__(self, path: str, policy: str, loop: asyncio.AbstractEventLoop) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.policy = policy
        self.loop = loop
        self.pending: list[bytes] = []
        self.waiting: list[tuple[asyncio.Transport, bytes]] = []
        if policy == "everysec":
            threading.Thread(target=self._every_second, daemon=True).start()

    def hold(self, transport: asyncio.Transport, replies: bytes) -> None:
        if not self.waiting:
            self.loop.call_soon(self.commit)
        self.waiting.append((transport, replies))

    def commit(self) -> None:
        os.write(self.fd, b"".join(self.pending))
        self.pending.clear()
        if self.policy == "always":
            os.fdatasync(self.fd)
        waiting, self.waiting = self.waiting, []
        for transport, replies in waiting:
            transport.write(replies)

    def _every_second(self) -> None:
        while True:
            time.sleep(1.0)
            os.fdatasync(self.fd)


class NaiveResp(asyncio.Protocol):
    data: dict[bytes, bytes] = {}
    log: _Log

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, chunk: bytes) -> None:
        buf = self.buffer + chunk if self.buffer else chunk
        out: list[bytes] = []
        wrote = False
        pos = 0
        size = len(buf)
        while pos < size and buf[pos] == 0x2A:  # '*'
            end = buf.find(_CRLF, pos)
            if end < 0:
                break
            count = int(buf[pos + 1 : end])
            at = end + 2
            argv: list[bytes] = []
            for _ in range(count):
                end = buf.find(_CRLF, at)
                if end < 0:
                    break
                length = int(buf[at + 1 : end])
                start = end + 2
                if size < start + length + 2:
                    break
                argv.append(buf[start : start + length])
                at = start + length + 2
            if len(argv) < count:
                break
            pos = at
            name = argv[0].upper()
            if name == b"GET":
                value = self.data.get(argv[1])
                out.append(b"$-1\r\n" if value is None else b"$%d\r\n%b\r\n" % (len(value), value))
            elif name == b"SET":
                self.data[argv[1]] = argv[2]
                self.log.pending.append(b"SET %b %b\n" % (argv[1], argv[2]))
                wrote = True
                out.append(b"+OK\r\n")
            elif name == b"CONFIG":
                out.append(b"*2\r\n$4\r\nsave\r\n$0\r\n\r\n")
            elif name == b"PING":
                out.append(b"+PONG\r\n")
            else:
                out.append(b"+OK\r\n")
        self.buffer = buf[pos:]
        if out:
            replies = b"".join(out)
            if wrote or self.log.waiting:
                self.log.hold(self.transport, replies)  # behind the turn's log write
            else:
                self.transport.write(replies)


class FloorResp(asyncio.Protocol):
    """The floor (see the module docstring): redis-benchmark's reads, answered unparsed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.write = transport.write  # type: ignore[attr-defined]

    def data_received(self, chunk: bytes) -> None:
        # redis-benchmark sends whole commands, its name at byte 8 ("*2\r\n$3\r\nGET"), and
        # its values hold no "\n*": one reply per command of the read.
        if chunk[8:11] == b"GET":
            reply = b"$-1\r\n"
        elif chunk[8:14] == b"CONFIG":
            reply = b"*0\r\n"  # the start-up probe: no settings
        else:
            reply = b"+OK\r\n"
        self.write(reply * (chunk.count(b"\n*") + 1))


async def serve_floor(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(FloorResp, "127.0.0.1", port)
    await server.serve_forever()


async def serve(port: int, data_dir: str, policy: str) -> None:
    loop = asyncio.get_running_loop()
    NaiveResp.log = _Log(os.path.join(data_dir, "naive.log"), policy, loop)
    server = await loop.create_server(NaiveResp, "127.0.0.1", port)
    await server.serve_forever()


def main() -> None:
    port, data_dir, policy = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    flavour = sys.argv[4] if len(sys.argv) > 4 else "asyncio"
    if flavour == "uvloop":
        import uvloop

        uvloop.run(serve(port, data_dir, policy))
    elif flavour in ("minidb", "floor"):
        from minidb.runtime import run

        run(serve(port, data_dir, policy) if flavour == "minidb" else serve_floor(port))
    else:
        asyncio.run(serve(port, data_dir, policy))


if __name__ == "__main__":
    main()
