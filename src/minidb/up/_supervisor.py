"""The supervisor of ``minidb up``: start the server, then the batch API, print, wait, stop.

Theory of operation. ``run_up`` starts ``minidb serve`` (line, RESP and metrics listeners,
data under ``DATA/server``) and waits for its listening lines, then ``minidb batch serve
--workers 1`` pointed at the server's line port (the API, the web page and one worker; the
store ``file:DATA/objects`` or ``--store``; the tokens file ``DATA/batch/tokens``) and at its
RESP and metrics listeners (the page's store browser and charts). Only once both are
listening does it print the addresses, the web page, the operator token and a curl example;
a start that fails stops whatever did start and exits 1 with the reason.

Then it waits for one of: SIGINT, SIGTERM (exit 0 after a graceful stop) or a child exiting on
its own (the other is stopped, exit 1). The stop order is the reverse of the start: the API
first, so its worker's last writes still reach the server, then the server, which syncs its
log. Signals only set an event; all the work happens on the main thread, between waits.

Why children and not one process: docs/architecture.md, "minidb up".
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Final

from minidb.errors import ConfigError
from minidb.server import _config as server_defaults
from minidb.up._children import Child, ChildError
from minidb.up._tokens import ensure_operator_token

DEFAULT_HOST: Final = server_defaults.DEFAULT_HOST
DEFAULT_DATA_DIR: Final = server_defaults.DEFAULT_DATA_DIR
"""The same as ``minidb serve``'s, which ``up`` divides into server/, objects/ and batch/."""
DEFAULT_PORT: Final = server_defaults.DEFAULT_PORT
"""The line protocol: ``minidb serve``'s own default."""
DEFAULT_RESP_PORT: Final = 6380
"""RESP: one above Redis's 6379, so a local Redis keeps its port."""
DEFAULT_HTTP_PORT: Final = 8080
"""The batch API and its web page."""
DEFAULT_METRICS_PORT: Final = 9108
"""Prometheus ``/metrics`` of the server (in the 9100s of exporters, free of the common ones)."""
STARTUP_TIMEOUT_S: Final = 60.0
"""How long each child may take to print its listening lines (recovery of a long log counts)."""
STOP_GRACE_S: Final = 30.0
"""How long each child may take to stop after SIGTERM before it is killed: above the
server's 10 s grace and the API's in-flight requests."""
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What stops ``minidb up`` gracefully (exit 0)."""
SERVER_KINDS: Final = frozenset({"line", "resp", "metrics"})
BATCH_KINDS: Final = frozenset({"batch"})


@dataclass(frozen=True)
class UpConfig:
    """Everything ``minidb up`` can be told; ports 0 mean any free port."""

    data_dir: Path = Path(DEFAULT_DATA_DIR)
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    resp_port: int = DEFAULT_RESP_PORT
    http_port: int = DEFAULT_HTTP_PORT
    metrics_port: int = DEFAULT_METRICS_PORT
    store: str | None = None
    """An object store URL; None: ``file:DATA/objects``."""
    s3_endpoint: str | None = None
    """An S3-compatible endpoint for an ``s3://`` store (MinIO, R2, moto); None: AWS or
    ``AWS_ENDPOINT_URL``."""
    replicate_to: str | None = None
    """Where the server ships its log (``minidb serve --replicate-to``); None: no shipping."""
    ship_interval: float | None = None
    retain: str | None = None
    python: str = sys.executable
    """The interpreter the children run on (``python -m minidb``)."""

    def __post_init__(self) -> None:
        for name in ("port", "resp_port", "http_port", "metrics_port"):
            value = getattr(self, name)
            if not 0 <= value <= 65535:
                raise ConfigError(f"--{name.replace('_', '-')} must be 0-65535, not {value}")
        fixed = [p for p in (self.port, self.resp_port, self.http_port, self.metrics_port) if p]
        if len(fixed) != len(set(fixed)):
            raise ConfigError("--port, --resp-port, --http-port and --metrics-port must differ")
        if self.replicate_to is None and (self.ship_interval is not None or self.retain):
            raise ConfigError("--ship-interval and --retain need --replicate-to")

    @property
    def server_dir(self) -> Path:
        return self.data_dir / "server"

    @property
    def tokens_file(self) -> Path:
        return self.data_dir / "batch" / "tokens"

    @property
    def store_url(self) -> str:
        return self.store or f"file:{(self.data_dir / 'objects').resolve()}"

    def server_argv(self) -> list[str]:
        return [
            self.python, "-m", "minidb", "serve", "--host", self.host,
            "--port", str(self.port), "--resp-port", str(self.resp_port),
            "--metrics-port", str(self.metrics_port), "--data-dir", str(self.server_dir),
            *self._replication_argv(),
        ]

    def _replication_argv(self) -> list[str]:
        """``minidb serve``'s shipping options, passed through as given (the server checks them)."""
        if self.replicate_to is None:
            return []
        argv = ["--replicate-to", self.replicate_to]
        if self.ship_interval is not None:
            argv += ["--ship-interval", str(self.ship_interval)]
        if self.retain:
            argv += ["--retain", self.retain]
        if self.s3_endpoint and self.replicate_to.startswith("s3://"):
            argv += ["--s3-endpoint", self.s3_endpoint]
        return argv

    def batch_argv(
        self, minidb: tuple[str, int], resp: tuple[str, int] | None = None,
        metrics: tuple[str, int] | None = None,
    ) -> list[str]:
        """``minidb batch serve`` pointed at the server's listeners: the line port for its
        worker, RESP and metrics for the page's store browser and charts."""
        attached = [
            *(["--minidb-resp", _host_port(resp)] if resp is not None else []),
            *(["--minidb-metrics", _host_port(metrics)] if metrics is not None else []),
        ]
        return [
            self.python, "-m", "minidb", "batch", "serve", "--host", self.host,
            "--port", str(self.http_port), "--store", self.store_url,
            "--minidb", _host_port(minidb), *attached,
            "--tokens", str(self.tokens_file), "--workers", "1",
            *(["--s3-endpoint", self.s3_endpoint] if self.s3_endpoint else []),
        ]


def _connectable(host: str) -> str:
    """An address to connect to for a listener bound to ``host`` (a wildcard means loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def _host_port(address: tuple[str, int]) -> str:
    return f"{_connectable(address[0])}:{address[1]}"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def banner(listening: dict[str, tuple[str, int]], token: str) -> list[str]:
    """The lines ``minidb up`` prints once everything listens (pure, for the tests)."""
    lines = [
        f"minidb listening on {host}:{port} ({kind})"
        for kind in ("line", "resp", "metrics", "batch")
        for host, port in [listening[kind]]
    ]
    host, port = listening["batch"]
    base = f"http://{_url_host(_connectable(host))}:{port}"
    lines += [
        f"web page: {base}/",
        f"operator token: {token}",
        f"curl -H 'Authorization: Bearer {token}' {base}/tasks",
    ]
    return lines


@contextmanager
def _stop_signals(stopping: threading.Event) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP set ``stopping`` while inside; old handlers come back after.

    SIGHUP (the terminal went away) is a stop like the others rather than the default instant
    exit, so the children still stop in order instead of by their death signal.
    """

    def handle(_signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    old = {s: signal.signal(s, handle) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _error(message: str) -> None:
    sys.stderr.write(f"minidb up: error: {message}\n")
    sys.stderr.flush()


def run_up(config: UpConfig) -> int:
    """Run everything until SIGINT/SIGTERM (exit 0) or a child's failure (exit 1)."""
    stopping = threading.Event()
    children: list[Child] = []
    status = 0
    with _stop_signals(stopping):
        try:
            token, _made = ensure_operator_token(config.tokens_file)
            config.server_dir.mkdir(parents=True, exist_ok=True)
            server = Child.spawn("minidb serve", config.server_argv())
            children.append(server)
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            server.wait_listening(set(SERVER_KINDS), deadline, stopping)
            if not stopping.is_set():
                batch = Child.spawn("minidb batch serve", config.batch_argv(
                    server.listening["line"], server.listening["resp"],
                    server.listening["metrics"]))
                children.append(batch)
                deadline = time.monotonic() + STARTUP_TIMEOUT_S
                batch.wait_listening(set(BATCH_KINDS), deadline, stopping)
            if not stopping.is_set():
                for line in banner({**server.listening, **batch.listening}, token):
                    _say(line)
            while not stopping.wait(0.2):
                for child in children:
                    code = child.exited()
                    if code is not None:
                        _error(f"{child.name} exited with status {code}; stopping")
                        status = 1
                        stopping.set()
        except ChildError as exc:
            _error(str(exc))
            status = 1
        except OSError as exc:
            _error(f"{exc.filename or config.data_dir}: {exc.strerror or exc}")
            status = 1
        finally:
            # Reverse start order: the API (a client of the server) first.
            for child in reversed(children):
                code = child.stop(STOP_GRACE_S)
                if code != 0 and status == 0:
                    _error(f"{child.name} stopped with status {code}")
                    status = 1
    return status
