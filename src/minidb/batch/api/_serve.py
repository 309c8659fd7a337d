"""``minidb batch serve``: the control API under uvicorn on minidb.runtime's event loop.

Theory of operation. ``serve`` binds the listening socket itself (so ``--port 0`` has a real
port to print before any request can arrive), hands it to a ``uvicorn.Server`` running in the
current loop (``loop="none"``: uvicorn does not make a loop of its own), and prints
``minidb listening on HOST:PORT (batch)`` once uvicorn has started. SIGTERM or SIGINT sets
uvicorn's ``should_exit``: it stops accepting, lets the requests in flight finish (up to
``SHUTDOWN_GRACE_S``), and ``serve`` then stops the in-process workers (each lets its running
attempt finish within its grace or releases it) and returns 0. uvicorn's own signal capture is
switched off (it would re-raise the signal after shutdown, turning a clean stop into death by
SIGTERM); the loop's handlers are ours.

In-process workers are woken by the API itself: the API's ``TaskQueue`` calls ``wake_one``
whenever it has made a task claimable (submit, retry), so an idle worker of this process
claims the task at once instead of at its next poll (docs/batch.md, "Pick-up latency"). This
is what ``minidb up`` runs: its worker lives in this process, beside the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import socket
import sys
from collections.abc import Iterator

import uvicorn

from minidb.batch._queue import TaskQueue
from minidb.batch._worker import Worker, WorkerConfig, wake_one
from minidb.batch.api._app import create_app
from minidb.batch.api._service import ApiSettings
from minidb.batch.api._tokens import TokenTable
from minidb.objstore import ObjectStore

log = logging.getLogger("minidb.batch.api")

SHUTDOWN_GRACE_S = 30.0
"""On SIGTERM, how long requests in flight may take to finish before they are cancelled, s."""
BACKLOG = 128
"""Listen backlog of the API socket."""


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    """What ``minidb batch serve`` was asked to do."""

    host: str = "127.0.0.1"
    port: int = 0
    workers: int = 0
    worker: WorkerConfig | None = None
    """The in-process workers' settings (their ids get ``-<n>`` appended)."""
    minidb: tuple[str, int] | None = None
    settings: ApiSettings = dataclasses.field(default_factory=ApiSettings)
    shutdown_grace_s: float = SHUTDOWN_GRACE_S


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the loop's signal handlers of ``serve`` are in charge


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock


async def serve(store: ObjectStore, tokens: TokenTable, config: ServeConfig) -> int:
    """Serve until SIGTERM/SIGINT; 0 after a clean shutdown."""
    try:
        sock = _bind(config.host, config.port)
    except OSError as exc:
        sys.stderr.write(
            f"minidb batch serve: error: cannot listen on {config.host}:{config.port}: "
            f"{exc.strerror}\n")
        return 1
    queue = TaskQueue(store)
    app = create_app(store, tokens, settings=config.settings, queue=queue)
    server = _Server(uvicorn.Config(
        app, loop="none", lifespan="off", access_log=False, log_config=None,
        timeout_graceful_shutdown=int(config.shutdown_grace_s), server_header=False,
    ))
    workers = []
    if config.workers:
        assert config.worker is not None and config.minidb is not None
        for n in range(1, config.workers + 1):
            worker_config = dataclasses.replace(
                config.worker, worker_id=f"{config.worker.worker_id}-{n}")
            workers.append(Worker(TaskQueue(store), worker_config, minidb=config.minidb))
        queue.on_claimable(lambda _task_id: wake_one(workers))
    loop = asyncio.get_running_loop()

    def stop() -> None:
        server.should_exit = True

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop)
    running = [asyncio.ensure_future(worker.run()) for worker in workers]
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        while not server.started and not serving.done():
            await asyncio.sleep(0.01)
        if serving.done():
            await serving
            return 1
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        sys.stdout.write(f"minidb listening on {shown}:{port} (batch)\n")
        sys.stdout.flush()
        await serving
    finally:
        for worker in workers:
            worker.stop()
        await asyncio.gather(*running, return_exceptions=True)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        sock.close()
    return 0
