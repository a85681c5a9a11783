"""Operator commands as subprocesses: ``memproxy reindex``, ``export`` and ``import``.

``import`` is all or nothing: a file with bad lines imports none of it and lists each."""

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


def exported_texts(tmp_path: Path, tenant: str) -> list[str]:
    result = run(tmp_path, "export", "--tenant", tenant)
    return sorted(json.loads(line)["text"] for line in result.stdout.decode().split("\n") if line)


def test_import_refuses_a_file_with_bad_lines_listing_each_by_file_line(
    data_dir: Path, tmp_path: Path
) -> None:
    """All or nothing: every bad line named by its number in the file (blank lines count),
    guard and length refusals included, one line each and no traceback; nothing imported."""
    good = json.dumps({"text": "Plays the cello", "user_id": "x"})
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([
        good,
        "",  # line 2: blank, counted
        "{oops",  # line 3
        json.dumps({"text": "Card 4111 1111 1111 1111", "user_id": "x"}),  # line 4: the guard refuses it
        "",
        json.dumps({"text": "long " * 4000, "user_id": "x"}),  # line 6: over the length limit
        json.dumps({"text": "Reads sagas", "user_id": "x"}),
    ]) + "\n")  # fmt: skip
    result = run(tmp_path, "import", "--tenant", "tenant-new", str(bad))
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert "Traceback" not in err
    assert f"{bad}: 3 bad lines, nothing imported" in err
    listed = [line.split(":")[0].strip() for line in err.splitlines() if line.startswith("  line ")]
    assert listed == ["line 3", "line 4", "line 6"], err
    assert "4111" not in err  # the refusal does not repeat the secret
    assert exported_texts(tmp_path, "tenant-new") == []
    fixed = tmp_path / "fixed.jsonl"
    fixed.write_text(good + "\n\n" + json.dumps({"text": "Reads sagas", "user_id": "x"}) + "\n")
    assert run(tmp_path, "import", "--tenant", "tenant-new", str(fixed)).returncode == 0
    assert exported_texts(tmp_path, "tenant-new") == ["Plays the cello", "Reads sagas"]


def test_import_of_a_missing_file_is_one_line(data_dir: Path, tmp_path: Path) -> None:
    for path in (tmp_path / "nope.jsonl", tmp_path):  # missing; a directory
        result = run(tmp_path, "import", "--tenant", TENANT, str(path))
        err = result.stderr.decode().strip()
        assert result.returncode == 2 and len(err.splitlines()) == 1, err
        assert err.startswith(f"memproxy: cannot read {path}: "), err


def test_import_shows_progress_and_warns_of_a_tenant_no_client_reaches(
    data_dir: Path, tmp_path: Path
) -> None:
    from memproxy.auth import passthrough_tenant

    lines = tmp_path / "many.jsonl"
    lines.write_text(
        "".join(json.dumps({"text": f"Fact {i} about ships", "user_id": "x"}) + "\n" for i in range(150))
    )
    typo = run(tmp_path, "import", "--tenant", "x", str(lines))  # passthrough: tenants are pt_<40 hex>
    err = typo.stderr.decode()
    assert typo.returncode == 0, err
    assert "warning: no token reaches tenant 'x'" in err and "memproxy tenant --token" in err
    assert "import [" in err and "100%" in err and "150/150 memories" in err
    assert "imported 150, skipped 0" in err
    reachable = run(tmp_path, "import", "--tenant", passthrough_tenant("sk-some-token"), str(lines))
    assert reachable.returncode == 0 and "warning" not in reachable.stderr.decode()

    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    config["auth"] = {"mode": "keys", "keys": [{"key": "mp-cli-key-00000000001", "tenant": "team-a"}]}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    keyed = run(tmp_path, "import", "--tenant", "team-a", str(lines))
    assert keyed.returncode == 0 and "warning" not in keyed.stderr.decode()
    unkeyed = run(tmp_path, "import", "--tenant", passthrough_tenant("sk-some-token"), str(lines))
    assert (
        "warning: no key reaches tenant 'pt_" in unkeyed.stderr.decode()
        and "team-a" in unkeyed.stderr.decode()
    )


def test_an_export_with_line_separators_in_a_text_imports_back(data_dir: Path, tmp_path: Path) -> None:
    """An export writes U+2028 and U+0085 raw (ensure_ascii=False); only \\n ends a JSON line."""
    text = "First part\u2028second part\x85third"

    async def add() -> None:
        async with open_store(data_dir) as store:
            await store.add(Scope("tenant-seps", "u", ""), text)

    asyncio.run(add())
    out = tmp_path / "seps.jsonl"
    assert run(tmp_path, "export", "--tenant", "tenant-seps", "--out", str(out)).returncode == 0
    result = run(tmp_path, "import", "--tenant", "tenant-seps-copy", str(out))
    assert result.returncode == 0, result.stderr.decode()
    assert exported_texts(tmp_path, "tenant-seps-copy") == [text]


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
    lines = tmp_path.parent / f"{tmp_path.name}-import.jsonl"
    lines.write_text(json.dumps({"text": "Plays the cello", "user_id": "x"}) + "\n")
    result = subprocess.run([sys.executable, "-m", "memproxy", "import", "--tenant", "t", str(lines)], cwd=tmp_path,
                            env=env, capture_output=True, timeout=60, check=False)  # fmt: skip
    assert result.returncode == 2 and "nothing was created" in result.stderr.decode()
    assert list(tmp_path.iterdir()) == []  # import too: it would have made a new memproxy-data here


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
