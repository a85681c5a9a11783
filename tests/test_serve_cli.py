"""``memproxy serve`` as a user runs it: it says where it listens, and that address works."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.support.memory_flow import wait_until
from tests.support.serve_process import ServeProcess, write_config

LISTENING = re.compile(r"memproxy listening on (http://127\.0\.0\.1:(\d+))")


@pytest.mark.slow
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
