"""The pure parts of ``minidb up``'s supervisor: its options and the lines it prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from minidb.errors import ConfigError
from minidb.server import _config as server_defaults
from minidb.up._supervisor import UpConfig, banner


def test_up_default_ports_are_distinct_and_not_redis() -> None:
    """The defaults are four different ports, the line port is the server's, none is 6379."""
    config = UpConfig()
    ports = [config.port, config.resp_port, config.http_port, config.metrics_port]
    assert len(set(ports)) == 4
    assert 6379 not in ports
    assert config.port == server_defaults.DEFAULT_PORT


def test_up_rejects_colliding_or_bad_ports() -> None:
    """Two listeners on one fixed port, or a port out of range, are a ConfigError."""
    with pytest.raises(ConfigError, match="must differ"):
        UpConfig(port=9000, http_port=9000)
    with pytest.raises(ConfigError, match="0-65535"):
        UpConfig(resp_port=70000)
    UpConfig(port=0, resp_port=0, http_port=0, metrics_port=0)  # any free port, all of them


def test_up_children_share_the_data_dir_layout(tmp_path: Path) -> None:
    """The server keeps DATA/server, the API the file: store DATA/objects and DATA/batch/tokens."""
    config = UpConfig(data_dir=tmp_path)
    server = config.server_argv()
    assert server[server.index("--data-dir") + 1] == str(tmp_path / "server")
    batch = config.batch_argv(("0.0.0.0", 7878))
    assert batch[batch.index("--store") + 1] == f"file:{(tmp_path / 'objects').resolve()}"
    assert batch[batch.index("--tokens") + 1] == str(tmp_path / "batch" / "tokens")
    assert batch[batch.index("--minidb") + 1] == "127.0.0.1:7878"
    assert batch[batch.index("--workers") + 1] == "1"
    s3 = UpConfig(data_dir=tmp_path, store="s3://b/p").batch_argv(("127.0.0.1", 1))
    assert s3[s3.index("--store") + 1] == "s3://b/p"


def test_up_banner_lines() -> None:
    """One listening line per listener in a fixed order, the page, the token, a curl example."""
    listening = {"batch": ("127.0.0.1", 8080), "line": ("127.0.0.1", 7878),
                 "metrics": ("127.0.0.1", 9108), "resp": ("127.0.0.1", 6380)}
    assert banner(listening, "TOK") == [
        "minidb listening on 127.0.0.1:7878 (line)",
        "minidb listening on 127.0.0.1:6380 (resp)",
        "minidb listening on 127.0.0.1:9108 (metrics)",
        "minidb listening on 127.0.0.1:8080 (batch)",
        "web page: http://127.0.0.1:8080/",
        "operator token: TOK",
        "curl -H 'Authorization: Bearer TOK' http://127.0.0.1:8080/tasks",
    ]


def test_up_passes_log_shipping_to_the_server_only(tmp_path: Path) -> None:
    """--replicate-to and its options reach ``minidb serve``, not the batch API; alone they
    are a ConfigError."""
    config = UpConfig(data_dir=tmp_path, replicate_to="s3://b/log", ship_interval=0.5,
                      retain="24h", s3_endpoint="http://127.0.0.1:9")
    server = config.server_argv()
    assert server[server.index("--replicate-to") + 1] == "s3://b/log"
    assert server[server.index("--ship-interval") + 1] == "0.5"
    assert server[server.index("--retain") + 1] == "24h"
    assert server[server.index("--s3-endpoint") + 1] == "http://127.0.0.1:9"
    assert "--replicate-to" not in config.batch_argv(("127.0.0.1", 1))
    assert "--replicate-to" not in UpConfig(data_dir=tmp_path).server_argv()
    with pytest.raises(ConfigError, match="need --replicate-to"):
        UpConfig(retain="24h")
