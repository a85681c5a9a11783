"""Settings: YAML, env overrides, and refusal of unsafe or unknown values."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memproxy.config import ConfigError, find_config_path, load_settings
from memproxy.testing.background_server import free_port
from tests.support.postgres import PostgresServer


def test_defaults_without_a_file() -> None:
    settings = load_settings(None, environ={})
    assert (settings.server.host, settings.server.port) == ("127.0.0.1", 8080)
    assert settings.storage.data_dir == Path("memproxy-data")
    assert settings.auth.mode == "passthrough"


def test_repo_config_yaml_is_valid() -> None:
    settings = load_settings(Path(__file__).parent.parent / "config.yaml", environ={})
    assert settings.embedding.provider == "onnx" and settings.recall.min_score == 0.1


def test_env_overrides_file_and_parses_types(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("server:\n  port: 7000\nrecall:\n  top_k: 3\n")
    settings = load_settings(
        path,
        environ={
            "MEMPROXY_SERVER__PORT": "9000",
            "MEMPROXY_STORAGE__DATA_DIR": "/data",
            "MEMPROXY_SERVER__LOG_CONTENT": "true",
            "UNRELATED": "x",
        },
    )
    assert settings.server.port == 9000
    assert settings.server.log_content is True
    assert settings.storage.data_dir == Path("/data")
    assert settings.recall.top_k == 3


@pytest.mark.parametrize(
    ("yaml_text", "env", "needle"),
    [
        ("server:\n  port: lots\n", {}, "server.port"),
        ("server:\n  colour: blue\n", {}, "server.colour"),
        ("", {"MEMPROXY_RECALL__TOP_K": "0"}, "recall.top_k"),
        ("auth:\n  mode: keys\n", {}, "auth"),
        ("auth:\n  mode: keys\n  keys:\n    - {key: short, tenant: a}\n", {}, "auth.keys.0.key"),
        (
            "auth:\n  mode: keys\n  keys:\n    - {key: aaaaaaaaaaaaaaaaaaaa, tenant: a}\n    - {key: aaaaaaaaaaaaaaaaaaaa, tenant: b}\n",
            {},
            "same key twice",
        ),
        ("- just\n- a list\n", {}, "mapping"),
        ("storage:\n  url: mysql://db/x\n", {}, "storage.url"),
        ("{}", {"MEMPROXY_STORAGE__URL": "postgresql://h:99999/x"}, "storage.url"),
    ],
)
def test_invalid_config_names_the_key(
    tmp_path: Path, yaml_text: str, env: dict[str, str], needle: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load_settings(path, environ=env)
    assert needle in str(err.value)


def test_config_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert find_config_path(None, {}) is None
    (tmp_path / "config.yaml").write_text("{}")
    assert find_config_path(None, {}) == Path("config.yaml")
    assert find_config_path(None, {"MEMPROXY_CONFIG": "/etc/m.yaml"}) == Path("/etc/m.yaml")
    assert find_config_path("/x.yaml", {"MEMPROXY_CONFIG": "/etc/m.yaml"}) == Path("/x.yaml")


def test_serve_refuses_bad_config_with_exit_code_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("upstream:\n  timeout_s: -1\n")
    result = subprocess.run(
        [sys.executable, "-m", "memproxy", "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "upstream.timeout_s" in result.stderr


# Slow tier: four subprocesses (each imports memproxy and tries a connection).
@pytest.mark.slow
@pytest.mark.parametrize("command", ["serve", "worker"])
def test_unreachable_database_is_exit_code_2_naming_the_key(
    tmp_path: Path, command: str, pg_server: PostgresServer
) -> None:
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/memproxy"  # nothing listens there
    missing = pg_server.url.rsplit("/", 1)[0] + "/no_such_database"
    for url in (closed, missing):
        result = subprocess.run(
            [sys.executable, "-m", "memproxy", command],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
            env={**os.environ, "MEMPROXY_STORAGE__URL": url, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert "storage.url" in result.stderr and "Traceback" not in result.stderr
