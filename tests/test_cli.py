"""Operator commands as subprocesses: ``memproxy reindex``, ``export`` and ``import``."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from memproxy.cli import tenant_log_hash
from memproxy.scope import Scope
from tests.support.memory_flow import wait_until
from tests.support.proxy import KEYS, Proxy
from tests.support.serve_process import write_config
from tests.support.storage_env import open_store

pytestmark = pytest.mark.slow  # subprocesses: see README "Tests"

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
    # The hash embedder, as the in-process store below uses (the default is the onnx model).
    (tmp_path / "config.yaml").write_text(
        yaml.safe_dump({"storage": {"data_dir": str(data)}, "embedding": {"provider": "hash"}})
    )

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


# --- saying what was found (issue 14 item 6) ----------------------------------------------


def test_export_of_an_unknown_tenant_says_so_and_lists_the_known_ones(data_dir: Path, tmp_path: Path) -> None:
    result = run(tmp_path, "export", "--tenant", "tenant-typo")
    assert result.returncode == 1 and result.stdout == b""
    err = result.stderr.decode()
    assert "exported 0 memories of tenant tenant-typo" in err
    assert "Known tenants: tenant-ops (35 memories, logged as tenant=" in err
    assert "tenant-else (1 memories" in err
    ok = run(tmp_path, "export", "--tenant", TENANT, "--user-id", "nobody")
    assert (
        ok.returncode == 0 and "exported 0 memories of tenant tenant-ops user_id=nobody" in ok.stderr.decode()
    )
    listed = run(tmp_path, "tenant")
    assert listed.returncode == 0
    assert [line.split("\t")[:2] for line in listed.stdout.decode().splitlines()] == [
        ["tenant-ops", "35 memories"], ["tenant-else", "1 memories"]
    ]  # fmt: skip


def test_read_only_commands_never_create_a_data_dir(tmp_path: Path) -> None:
    """Run from a folder without config.yaml: say so, create nothing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMPROXY_")}
    for command in (["export", "--tenant", "t"], ["tenant"], ["reindex"]):
        result = subprocess.run([sys.executable, "-m", "memproxy", *command], cwd=tmp_path, env=env,
                                capture_output=True, timeout=60, check=False)  # fmt: skip
        err = result.stderr.decode()
        assert result.returncode == 2, err
        assert (
            "no memproxy database at memproxy-data/memproxy.sqlite3" in err and "nothing was created" in err
        )
        assert "config: none found" in err
    assert list(tmp_path.iterdir()) == []


def test_tenant_of_a_token_matches_the_server_and_its_access_log(
    proxy: Proxy, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memproxy.access")
    token = f"sk-cli-{uuid.uuid4().hex[:8]}"
    with proxy.http(token) as http:
        response = http.post("/v1/memories", json={"user_id": "u", "text": "Collects stamps"})
    assert response.status_code == 201
    rid = response.headers["x-request-id"]
    write_config(tmp_path / "config.yaml", proxy.settings)
    result = run(tmp_path, "tenant", "--token", token)
    assert result.returncode == 0, result.stderr.decode()
    tenant = result.stdout.decode().strip()
    logged = wait_until(lambda: [r.getMessage() for r in caplog.records if rid in r.getMessage()])
    assert f"tenant={tenant_log_hash(tenant)}" in logged[0]
    assert f"tenant={tenant_log_hash(tenant)}" in result.stderr.decode()
    from_stdin = run(tmp_path, "tenant", "--token", "-", stdin=token.encode() + b"\n")
    assert from_stdin.stdout.decode().strip() == tenant
    exported = run(tmp_path, "export", "--tenant", tenant)  # the printed tenant is the one to use
    assert [json.loads(line)["text"] for line in exported.stdout.decode().splitlines()] == ["Collects stamps"]


def test_tenant_in_keys_mode_refuses_an_unknown_key(keys_proxy: Proxy, tmp_path: Path) -> None:
    write_config(tmp_path / "config.yaml", keys_proxy.settings)
    known = run(tmp_path, "tenant", "--token", KEYS[0]["key"])
    assert known.returncode == 0 and known.stdout.decode().strip() == "alpha"
    unknown = run(tmp_path, "tenant", "--token", "mp-not-a-configured-key-000")
    assert unknown.returncode == 2 and "Incorrect API key" in unknown.stderr.decode()
