"""The accept loop: failed accepts back off on the loop clock and never end it; a real server
out of file descriptors recovers, and still drains and checkpoints on SIGTERM."""

from __future__ import annotations

import errno
import itertools
import logging
import resource
import socket
import time
from typing import Any

import pytest

from minidb.server._fdlimit import FD_RESERVE
from minidb.server._listeners import (
    ACCEPT_BACKOFF_MAX_S,
    ACCEPT_BACKOFF_MIN_S,
    Acceptor,
    accept_backoff,
    bind_listener,
)
from tests.server._clock import run_on_virtual_clock
from tests.server.conftest import IO_TIMEOUT_S, LineClient, ServeFactory

FD_LIMIT = 64
"""RLIMIT_NOFILE, soft and hard, of the server started out of descriptors."""
HELD_FDS = 30
"""Descriptors the process holds before the server starts, unknown to its budget."""

# Runs the minidb CLI in a process that already holds HELD_FDS descriptors, as an embedding
# program (or an inherited set) would: the server's reserve does not know about them, so its
# connections run the process out of descriptors before --max-connections is reached.
HOLDING_LAUNCHER = f"""
import os, sys
held = [os.open(os.devnull, os.O_RDONLY) for _ in range({HELD_FDS})]
from minidb._cli import main
sys.argv[0] = "minidb"
sys.exit(main())
"""


def _low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def test_accept_backoff_doubles_up_to_its_cap() -> None:
    """The wait after the n-th consecutive failure doubles from the minimum to the maximum."""
    assert accept_backoff(1) == ACCEPT_BACKOFF_MIN_S
    assert accept_backoff(2) == 2 * ACCEPT_BACKOFF_MIN_S
    assert accept_backoff(10_000) == ACCEPT_BACKOFF_MAX_S


def _run_acceptor(failures: list[int], caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    """Run an Acceptor whose first accepts fail with ``failures``; report what happened."""

    async def body() -> dict[str, Any]:
        import asyncio

        loop = asyncio.get_running_loop()
        listener = bind_listener("127.0.0.1", 0)
        real_accept = loop.sock_accept
        attempts: list[float] = []

        async def scripted_accept(sock: socket.socket) -> tuple[socket.socket, Any]:
            attempts.append(loop.time())
            if len(attempts) <= len(failures):
                code = failures[len(attempts) - 1]
                raise OSError(code, f"scripted {errno.errorcode[code]}")
            return await real_accept(sock)

        loop.sock_accept = scripted_accept  # type: ignore[method-assign]
        connected = asyncio.Event()

        class Recorder(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                connected.set()
                transport.close()

        async def always_room() -> None:
            return None

        acceptor = Acceptor(
            listener, Recorder, always_room, listener="test", open_connections=lambda: 0
        )
        task = loop.create_task(acceptor.run())
        client = socket.create_connection(listener.getsockname())
        try:
            async with asyncio.timeout(30):
                await connected.wait()
                while acceptor.statistics().accepted == 0:  # connect_accepted_socket returning
                    await asyncio.sleep(0)
        finally:
            task.cancel()
            client.close()
            listener.close()
        return {"attempts": attempts, "stats": acceptor.statistics(), "done": task.done()}

    with caplog.at_level(logging.DEBUG, logger="minidb.server"):
        return run_on_virtual_clock(body)


def test_acceptor_backs_off_on_emfile_and_logs_once_per_episode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Three EMFILEs: retries wait 10, 20, 40 ms on the loop clock, one warning, then served."""
    report = _run_acceptor([errno.EMFILE, errno.EMFILE, errno.ENFILE], caplog)
    attempts = report["attempts"][:4]  # three failures and the accept that succeeded
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(attempts)]
    assert gaps == [0.01, 0.02, 0.04]
    stats = report["stats"]
    assert (stats.resource_failures, stats.episodes, stats.accepted) == (3, 1, 1)
    assert not stats.failing
    events = [r.getMessage() for r in caplog.records]
    assert events.count("accept_failing") == 1 and events.count("accept_resumed") == 1
    failing = next(r for r in caplog.records if r.getMessage() == "accept_failing")
    assert failing.levelno == logging.WARNING and failing.minidb_fields["errno"] == "EMFILE"


def test_acceptor_retries_aborted_connections_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """ECONNABORTED concerns one connection: the next accept follows without a wait or warning."""
    report = _run_acceptor([errno.ECONNABORTED, errno.EPROTO], caplog)
    assert len(set(report["attempts"][:3])) == 1  # no time passed between the attempts
    stats = report["stats"]
    assert (stats.transient_failures, stats.episodes, stats.accepted) == (2, 0, 1)
    assert "accept_failing" not in [r.getMessage() for r in caplog.records]


def test_acceptor_survives_an_unexpected_accept_error(caplog: pytest.LogCaptureFixture) -> None:
    """An errno outside both sets is logged as an error and backed off, not raised."""
    report = _run_acceptor([errno.EINVAL], caplog)
    assert report["stats"].other_failures == 1 and report["stats"].accepted == 1
    failing = next(r for r in caplog.records if r.getMessage() == "accept_failing")
    assert failing.levelno == logging.ERROR


def test_listener_out_of_fds_recovers_and_shuts_down_cleanly(serve: ServeFactory) -> None:
    """Under ulimit -n 64: max-connections is lowered, accept hits EMFILE, then the server
    serves again once clients leave, and SIGTERM drains, checkpoints and exits 0."""
    server = serve(launcher=("-c", HOLDING_LAUNCHER), preexec_fn=_low_fd_limit)
    writer = server.client()
    assert writer.request("SET users alice hello") == "OK"
    clients = [LineClient(server.port, timeout=IO_TIMEOUT_S) for _ in range(FD_LIMIT // 2)]
    server.clients.extend(clients)
    for conn in clients:
        conn.send(b"GET users alice\n")
    answered = unanswered = 0
    for conn in clients:
        # Accepted in order from the backlog: once one waits, the rest wait too.
        conn.sock.settimeout(2.0 if not unanswered else 0.05)
        try:
            assert conn.read_line() == b"VALUE hello"
            answered += 1
        except TimeoutError:
            unanswered += 1
    assert answered > 0 and unanswered > 0, (answered, unanswered)
    for conn in clients:
        conn.close()
    fresh = LineClient(server.port, timeout=IO_TIMEOUT_S)
    server.clients.append(fresh)
    started = time.monotonic()
    try:
        assert fresh.request("GET users alice") == "VALUE hello"
    except TimeoutError:
        server.kill()
        pytest.fail(f"a new client was not served after the fds came back:\n{server.stderr()}")
    assert time.monotonic() - started < IO_TIMEOUT_S
    assert fresh.request("SET users bob hi") == "OK"
    server.terminate()
    assert fresh.at_eof()  # drained: answered everything, then closed by the server
    assert server.wait() == 0
    log = server.stderr()
    assert "Traceback" not in log
    lowered = next(line for line in log.splitlines() if "event=max_connections_lowered" in line)
    assert "requested=1024" in lowered and f"max_connections={FD_LIMIT - FD_RESERVE}" in lowered
    assert f"fd_limit={FD_LIMIT}" in lowered
    assert "event=accept_failing listener=line errno=EMFILE" in log
    assert "event=accept_resumed listener=line" in log
    assert "event=shutdown_checkpoint ok=True" in log
    assert "event=shutdown_complete dropped_connections=0" in log
