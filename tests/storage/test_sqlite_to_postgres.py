"""``memproxy migrate-to URL``: an SQLite data dir moved into Postgres keeps every memory, its
history, the outbox and the change-log positions its index snapshots recorded."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from memproxy.outbox import queue as outbox
from memproxy.scope import Scope
from tests.support.postgres import PostgresServer
from tests.support.storage_env import Storage, open_store

pytestmark = pytest.mark.slow
ALICE = Scope("tenant-m", "alice", "")
BOB = Scope("tenant-m", "bob", "bot")


def _migrate(tmp_path: Path, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memproxy", "migrate-to", url, "--config", str(tmp_path / "config.yaml")],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )  # fmt: skip


async def _seed(data_dir: Path) -> dict[str, Any]:
    async with open_store(data_dir) as store:
        paris = await store.add(ALICE, "Lives in Paris", metadata={"k": 1})
        await store.update(ALICE.tenant, paris.id, text="Lives in Lyon")
        gone = await store.add(ALICE, "Likes opera")
        await store.delete(ALICE.tenant, gone.id)
        for i in range(30):
            await store.add(BOB, f"Bob fact number {i}")
        await store.search(ALICE, "Lyon")
        await store.search(BOB, "fact")

        def queue(conn: Any) -> None:
            with conn:
                outbox.enqueue(conn, "job_a", ALICE, "s1", [{"role": "user", "content": "I like tea"}], 10.0)
                outbox.enqueue(conn, "job_b", ALICE, "s1", [{"role": "user", "content": "I like jam"}], 11.0)

        await store.db.run(queue)
        return {
            "export": await store.export(ALICE.tenant, None, None),
            "history": await store.history(ALICE.tenant, paris.id),
            "deleted_history": await store.history(ALICE.tenant, gone.id),
        }


def test_migrate_to_copies_everything_and_refuses_a_non_empty_target(
    tmp_path: Path, pg_server: PostgresServer
) -> None:
    data = tmp_path / "data"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"storage": {"data_dir": str(data)}}))
    before = asyncio.run(_seed(data))
    snapshots = sorted((data / "index").glob("*.faiss"))
    assert len(snapshots) == 2
    url = pg_server.fresh_url("migrate")

    result = _migrate(tmp_path, url)
    assert result.returncode == 0, result.stderr
    assert "31 memories" in result.stderr

    async def check() -> None:
        async with open_store(Storage(data, url)) as store:
            assert await store.export(ALICE.tenant, None, None) == before["export"]
            paris = before["export"][0]["id"]
            assert await store.history(ALICE.tenant, paris) == before["history"]
            deleted = before["deleted_history"]
            assert [e["event"] for e in deleted] == ["ADD", "DELETE"]
            jobs = await store.db.run(lambda c: outbox.list_jobs(c, ALICE.tenant, "pending"))
            assert [j.id for j in jobs] == ["job_a", "job_b"]
            # The snapshots written on SQLite are still current: loaded, not rebuilt.
            entry = await store.index.sync(BOB)
            assert entry.snapshot_seq == entry.seq and len(entry.lexical) == 30
            # New rows continue after the copied ones (identity sequences moved on).
            new = await store.add(ALICE, "Speaks Basque")
            assert new.num == 33  # nums 1..32 were copied
            assert (await store.search(ALICE, "basque"))[0][0].id == new.id

    asyncio.run(check())
    again = _migrate(tmp_path, url)
    assert again.returncode == 2 and "already holds" in again.stderr
    bad = _migrate(tmp_path, "mysql://nope")
    assert bad.returncode == 2 and "URL" in bad.stderr
