"""The descriptor budget: the soft limit raised toward the hard one, max-connections lowered to
what fits, and a refusal to start when not one connection fits."""

from __future__ import annotations

import logging
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from minidb.errors import ConfigError
from minidb.server import ServerConfig
from minidb.server._fdlimit import FD_RESERVE, fd_reserve, fit_to_fd_limit, plan_fd_budget
from minidb.server._metrics import METRICS_MAX_CONNECTIONS
from tests.server.conftest import IO_TIMEOUT_S


@pytest.mark.parametrize(
    "soft, hard, wanted, reserve, planned",
    [
        (1024, 4096, 1024, 32, (1056, 1024)),   # raised just enough, not to the hard limit
        (1024, 1024, 1024, 32, (1024, 992)),    # hard limit short: connections lowered
        (1024, None, 1024, 32, (1056, 1024)),   # hard limit unlimited
        (8192, 8192, 1024, 32, (8192, 1024)),   # already enough: never lowered
        (64, 64, 1024, 48, (64, 16)),           # ulimit -n 64 with the metrics port on
        (16, 16, 1024, 32, (16, -16)),          # not one connection fits
    ],
)
def test_plan_fd_budget(
    soft: int, hard: int | None, wanted: int, reserve: int, planned: tuple[int, int]
) -> None:
    """The soft limit asked for and the connections allowed, for each shape of limits."""
    budget = plan_fd_budget(soft, hard, wanted, reserve)
    assert (budget.soft, budget.max_connections) == planned


def test_fd_reserve_counts_the_metrics_connections() -> None:
    """The metrics port's connection limit is part of the reserve only when it is on."""
    assert fd_reserve(ServerConfig()) == FD_RESERVE
    assert fd_reserve(ServerConfig(metrics_port=0)) == FD_RESERVE + METRICS_MAX_CONNECTIONS


class FakeLimits:
    """Stands in for resource.getrlimit/setrlimit on RLIMIT_NOFILE."""

    def __init__(self, soft: int, hard: int, refuse: bool = False) -> None:
        self.limits = (soft, hard)
        self.refuse = refuse

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.limits

    def setrlimit(self, which: int, limits: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE
        if self.refuse:
            raise ValueError("not allowed to raise the current limit")
        self.limits = limits


def _install(monkeypatch: pytest.MonkeyPatch, fake: FakeLimits) -> None:
    monkeypatch.setattr(resource, "getrlimit", fake.getrlimit)
    monkeypatch.setattr(resource, "setrlimit", fake.setrlimit)


def test_fit_raises_the_soft_limit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A soft limit below what max-connections needs is raised; the config is unchanged."""
    fake = FakeLimits(256, 4096)
    _install(monkeypatch, fake)
    config = ServerConfig(max_connections=1024)
    with caplog.at_level(logging.INFO, logger="minidb.server"):
        assert fit_to_fd_limit(config) is config
    assert fake.limits == (1024 + FD_RESERVE, 4096)
    assert [r.getMessage() for r in caplog.records] == ["fd_limit_raised"]


def test_fit_lowers_max_connections_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With the hard limit at 1024, the default 1024 connections are lowered and both named."""
    _install(monkeypatch, FakeLimits(1024, 1024))
    with caplog.at_level(logging.INFO, logger="minidb.server"):
        fitted = fit_to_fd_limit(ServerConfig())
    assert fitted.max_connections == 1024 - FD_RESERVE
    (record,) = caplog.records
    assert record.getMessage() == "max_connections_lowered"
    assert record.levelno == logging.WARNING
    fields = record.minidb_fields  # type: ignore[attr-defined]
    assert fields["requested"] == 1024 and fields["max_connections"] == 1024 - FD_RESERVE
    assert fields["fd_limit"] == 1024 and fields["reserved_fds"] == FD_RESERVE


def test_fit_works_with_the_limit_it_has_when_raising_fails(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """If setrlimit refuses, the current soft limit decides how many connections fit."""
    _install(monkeypatch, FakeLimits(256, 4096, refuse=True))
    with caplog.at_level(logging.INFO, logger="minidb.server"):
        fitted = fit_to_fd_limit(ServerConfig())
    assert fitted.max_connections == 256 - FD_RESERVE
    assert [r.getMessage() for r in caplog.records] == [
        "fd_limit_not_raised", "max_connections_lowered",
    ]


def test_fit_refuses_a_limit_without_room_for_a_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A limit at or below the reserve is a ConfigError naming the limit and the need."""
    _install(monkeypatch, FakeLimits(FD_RESERVE, FD_RESERVE))
    with pytest.raises(ConfigError, match=f"of {FD_RESERVE} .* at least {FD_RESERVE + 1}"):
        fit_to_fd_limit(ServerConfig())


def test_serve_with_too_low_a_file_limit_exits_1_with_one_line(tmp_path: Path) -> None:
    """`minidb serve` under a limit below the reserve says so in one line and exits 1."""

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (FD_RESERVE, FD_RESERVE))

    result = subprocess.run(
        [sys.executable, "-m", "minidb", "serve", "--port", "0", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=IO_TIMEOUT_S * 2, preexec_fn=low_limit,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and "refusing to start" in result.stderr
    assert f"ulimit -n) of {FD_RESERVE}" in result.stderr
