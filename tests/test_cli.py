"""Operator commands as subprocesses: ``memproxy reindex``, ``export`` and ``import``."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from memproxy.scope import Scope
from tests.support.storage_env import open_store

TENANT = "tenant-ops"
ALICE = Scope(TENANT, "alice", "")
BOB = Scope(TENANT, "bob", "helper")
OTHER_TENANT = Scope("tenant-else", "alice", "")


def run(tmp_path: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.run(
        [sys.executable, "-m", "memproxy", *args, "--config", str(tmp_path / "config.yaml")],
        input=stdin, capture_output=True, env=env, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"storage": {"data_dir": str(data)}}))

    async def seed() -> None:
        async with open_store(data) as store:
            for i in range(30):
                await store.add(
                    ALICE, f"Alice fact {i}: parcel AL-{i:03d}", metadata={"i": i}, session_id="s"
                )
            for i in range(5):
                await store.add(BOB, f"Bob fact {i}: ticket BO-{i:03d}")
            await store.add(OTHER_TENANT, "Another tenant's secret")

    asyncio.run(seed())
    return data


def snapshot(data: Path, scope: Scope) -> Path:
    return data / "index" / f"{scope.key}.faiss"


def search_ids(data: Path, scope: Scope, query: str) -> list[str]:
    async def go() -> list[str]:
        async with open_store(data, snapshot_on_close=False) as store:
            return [m.id for m, _ in await store.search(scope, query, top_k=3)]

    return asyncio.run(go())


def test_reindex_rebuilds_every_scope_with_a_progress_bar(
    data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    index = data_dir / "index"
    index.mkdir(exist_ok=True)
    orphan = index / f"{'ab' * 32}.faiss"
    orphan.write_bytes(b"left over from a scope that no longer exists")
    snapshot(data_dir, ALICE).write_bytes(b"corrupt")
    result = run(tmp_path, "reindex")
    assert result.returncode == 0, result.stderr.decode()
    err = result.stderr.decode()
    assert "reindex [" in err and "100%" in err and "3/3 scopes" in err
    assert "reindexed 36 memories in 3 scope(s)" in err and "removed 1 orphan snapshot(s)" in err
    assert sorted(p.name for p in index.iterdir()) == sorted(
        f"{s.key}.faiss" for s in (ALICE, BOB, OTHER_TENANT)
    )
    caplog.set_level(logging.INFO, logger="memproxy.index.manager")
    assert len(search_ids(data_dir, ALICE, "AL-017")) == 3
    assert "rebuilt index" not in caplog.text  # the fresh snapshot loads (the corrupt one is gone)


def test_reindex_one_scope(data_dir: Path, tmp_path: Path) -> None:
    result = run(tmp_path, "reindex", "--scope", BOB.key)
    assert result.returncode == 0, result.stderr.decode()
    assert "reindexed 5 memories in 1 scope(s)" in result.stderr.decode()
    assert sorted(p.name for p in (data_dir / "index").iterdir()) == [f"{BOB.key}.faiss"]
    bad = run(tmp_path, "reindex", "--scope", "bob")
    assert bad.returncode == 2 and "64 lowercase hex" in bad.stderr.decode()


def test_export_then_import_into_another_tenant(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "alice.jsonl"
    result = run(tmp_path, "export", "--tenant", TENANT, "--user-id", "alice", "--out", str(out))
    assert result.returncode == 0, result.stderr.decode()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert (
        len(lines) == 30
        and lines[7]["text"] == "Alice fact 7: parcel AL-007"
        and lines[7]["metadata"] == {"i": 7}
    )
    assert all("tenant" not in line for line in lines)
    everything = run(tmp_path, "export", "--tenant", TENANT)  # stdout, every scope of the tenant
    assert len(everything.stdout.decode().splitlines()) == 35 and b"Another tenant" not in everything.stdout

    imported = run(tmp_path, "import", "--tenant", "tenant-new", str(out))
    assert imported.returncode == 0, imported.stderr.decode()
    assert "imported 30, skipped 0" in imported.stderr.decode()
    again = run(tmp_path, "import", "--tenant", "tenant-new", "-", stdin=out.read_bytes())
    assert "imported 0, skipped 30" in again.stderr.decode()
    new_scope = Scope("tenant-new", "alice", "")
    found = search_ids(data_dir, new_scope, "parcel AL-021")
    copied = run(tmp_path, "export", "--tenant", "tenant-new").stdout.decode().splitlines()
    by_id = {json.loads(line)["id"]: json.loads(line) for line in copied}
    assert by_id[found[0]]["text"] == "Alice fact 21: parcel AL-021"
    assert not set(by_id) & {line["id"] for line in lines}  # ids are global: fresh ids in another tenant


def test_import_reports_the_bad_line(data_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "fine", "user_id": "x"}) + "\n" + "{oops\n")
    result = run(tmp_path, "import", "--tenant", TENANT, str(bad))
    assert result.returncode == 2 and "line 2" in result.stderr.decode()
