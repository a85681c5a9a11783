"""``memproxy serve`` as a user runs it: it says where it listens (at INFO), and that address
works; a port in use is one line before anything loads; the start-up log has no library
noise and says truthfully who may call an offline server."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.memory_flow import wait_until
from tests.support.serve_process import ServeProcess, write_config

LISTENING = re.compile(r" INFO memproxy\.serving memproxy listening on (http://127\.0\.0\.1:(\d+))")
OFFLINE = re.compile(r"OFFLINE mode: .*")

pytestmark = pytest.mark.slow


def test_serve_prints_the_address_it_listens_on(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.yaml", {
        "server": {"port": 0},  # the OS picks a port: the line must show the real one
        "storage": {"data_dir": str(tmp_path / "data")},
        "extraction": {"worker_enabled": False},
    })  # fmt: skip
    with ServeProcess("serve", config, tmp_path / "serve.log") as server:
        match = wait_until(lambda: LISTENING.search(server.log_text()), timeout=60)
        url = match.group(1)
        assert int(match.group(2)) > 0
        assert httpx.get(url + "/healthz", timeout=5).status_code == 200
        big = httpx.get(url + "/healthz", headers={"X-Big": "a" * 1_000_000}, timeout=30)
        assert big.status_code == 431  # the cap is on the real server, not only in tests
        assert server.stop() == 0
        # faiss says at INFO which CPU build it loads, with a caught ModuleNotFoundError
        # that reads as a failure; that belongs at DEBUG.
        assert not [line for line in server.log_text().splitlines() if "faiss" in line], server.log_text()


def test_offline_with_keys_says_a_key_is_needed_and_one_is(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.yaml", {
        "server": {"port": 0},
        "storage": {"data_dir": str(tmp_path / "data")},
        "auth": {"mode": "keys", "keys": [{"key": "mp-offline-key-0000001", "tenant": "team"}]},
        "extraction": {"worker_enabled": False},
    })  # fmt: skip
    with ServeProcess("serve", config, tmp_path / "serve.log", args=("--offline",)) as server:
        url = wait_until(lambda: LISTENING.search(server.log_text()), timeout=60).group(1)
        said = OFFLINE.search(server.log_text())
        assert said and "any bearer token works" not in said.group(0), server.log_text()
        assert "auth.mode is keys" in said.group(0) and "auth.keys" in said.group(0)
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        wrong = httpx.post(url + "/v1/chat/completions", json=chat, timeout=10,
                           headers={"Authorization": "Bearer mp-wrong-key-00000001"})  # fmt: skip
        assert wrong.status_code == 401
        right = httpx.post(url + "/v1/chat/completions", json=chat, timeout=10,
                           headers={"Authorization": "Bearer mp-offline-key-0000001"})  # fmt: skip
        assert right.status_code == 200, right.text


@pytest.fixture
def taken_port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A port another process listens on; ``reuseport`` as another memproxy supervisor binds it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if getattr(request, "param", False):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    with sock:
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("taken_port", "workers"), [(False, "1"), (True, "2")], indirect=["taken_port"], ids=["one", "workers"]
)
def test_a_port_in_use_is_one_line_before_anything_loads(
    tmp_path: Path, taken_port: int, workers: str
) -> None:
    data_dir = tmp_path / "data"
    config = write_config(tmp_path / "config.yaml", {"storage": {"data_dir": str(data_dir)}})
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMPROXY_")}
    result = subprocess.run(
        [sys.executable, "-m", "memproxy", "serve", "--config", str(config), "--port", str(taken_port),
         "--workers", workers],
        env={**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    err = result.stderr.decode().strip()
    assert result.returncode == 2, err
    assert err == f"memproxy: port {taken_port} is in use: pass --port or stop the other process"
    assert not data_dir.exists()  # refused before the checks that create it, and before the load
