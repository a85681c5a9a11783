"""The index stays consistent with SQLite when the server is SIGKILLed between commit and snapshot.

The data dir starts with committed memories and their snapshot. A real
``python -m memproxy serve`` process changes the scope (adds, deletes, patches) and is
killed with SIGKILL before any snapshot can reflect that; the next server must answer
from SQLite's truth: the stale snapshot is loaded and the change log after its seq replayed.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from memproxy.auth import passthrough_tenant
from memproxy.scope import Scope
from memproxy.testing.background_server import free_port
from tests.support.serve_process import ServeProcess, write_config
from tests.support.storage_env import open_store

pytestmark = pytest.mark.slow  # subprocesses: see README "Tests"

TOKEN = "sk-crash-test"
USER = "crash-user"
FIRST = [f"Crash fact {i}: keeps item KX-{1000 + i} in locker {i}" for i in range(8)]
SECOND = [f"After snapshot {i}: parcel PQ-{5000 + i} arrives on day {i}" for i in range(5)]


@contextmanager
def serve(config: Path, port: int, log: Path) -> Iterator[tuple[ServeProcess, httpx.Client]]:
    """A ready ``memproxy serve`` and a client authorised as TOKEN; reaped on exit."""
    url = f"http://127.0.0.1:{port}"
    with (
        ServeProcess("serve", config, log) as server,
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as client,
    ):
        server.wait_ready(url)
        yield server, client


def add(client: httpx.Client, text: str) -> str:
    response = client.post("/v1/memories", json={"user_id": USER, "text": text})
    assert response.status_code == 201, response.text
    memory_id: str = response.json()["id"]
    return memory_id


def top(client: httpx.Client, query: str, k: int = 3) -> list[dict[str, Any]]:
    response = client.post("/v1/memories/search", json={"user_id": USER, "query": query, "top_k": k})
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


async def seed_with_snapshot(data_dir: Path) -> list[str]:
    """The first memories, committed and snapshotted (as a clean shutdown leaves them)."""
    async with open_store(data_dir) as store:
        scope = Scope(passthrough_tenant(TOKEN), USER)
        ids = [(await store.add(scope, text)).id for text in FIRST]
        await store.search(scope, "KX-1003")  # load the index so closing snapshots it
    return ids


def test_sigkill_between_commit_and_snapshot_loses_nothing(tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "config.yaml", {
        "server": {"host": "127.0.0.1", "port": port, "shutdown_grace_s": 2},
        "storage": {"data_dir": str(tmp_path / "data")},
        "upstream": {"api_base": "http://127.0.0.1:9/v1", "timeout_s": 2},
        "embedding": {"provider": "hash"},
        # Long enough that no periodic snapshot happens during the test.
        "index": {"snapshot_interval_s": 3600},
        "extraction": {"worker_enabled": False},
    })  # fmt: skip
    snapshot = tmp_path / "data" / "index" / f"{Scope(passthrough_tenant(TOKEN), USER).key}.faiss"

    (tmp_path / "data").mkdir()
    first_ids = asyncio.run(seed_with_snapshot(tmp_path / "data"))
    stale = snapshot.read_bytes()

    with serve(config, port, tmp_path / "first.log") as (server, client):
        second_ids = [add(client, text) for text in SECOND]
        deleted = first_ids[2]
        assert client.delete(f"/v1/memories/{deleted}").status_code == 200
        patched = client.patch(f"/v1/memories/{first_ids[5]}", json={"text": "Moved item to drawer ZZ-77"})
        assert patched.status_code == 200
        assert top(client, "PQ-5004")[0]["id"] == second_ids[4]  # the live index has the changes
        assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    assert snapshot.read_bytes() == stale  # the crash came before any snapshot of the changes

    with serve(config, port, tmp_path / "second.log") as (_, client):
        for i, memory_id in enumerate(second_ids):
            assert top(client, f"PQ-{5000 + i}")[0]["id"] == memory_id
        for i, memory_id in enumerate(first_ids):
            if i in (2, 5):
                continue
            assert top(client, f"KX-{1000 + i}")[0]["id"] == memory_id
        assert deleted not in {r["id"] for r in top(client, "KX-1002 locker 2", k=20)}
        assert top(client, "drawer ZZ-77")[0]["id"] == first_ids[5]
        assert all("KX-1005" not in r["text"] for r in top(client, "KX-1005", k=20))
        listed = client.get("/v1/memories", params={"user_id": USER}).json()["data"]
        assert len(listed) == len(FIRST) + len(SECOND) - 1
