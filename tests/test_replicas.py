"""Several processes on one Postgres behave like one: two ``memproxy serve`` replicas (each with
its own data dir, so its own index and snapshots) and separate ``memproxy worker`` processes,
driven by the real OpenAI SDK over HTTP."""

from __future__ import annotations

import asyncio
import itertools
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from memproxy.auth import passthrough_tenant
from memproxy.config import Settings
from memproxy.scope import Scope
from memproxy.testing.background_server import free_port
from memproxy.testing.scripted_extractor import rule_extractor
from memproxy.testing.scripted_upstream import MEMORY_MARKER, ScriptedUpstream
from tests.support.memory_flow import memories, query, search, unique, wait_job, wait_until
from tests.support.postgres import PostgresServer
from tests.support.proxy import Proxy, proxy_settings
from tests.support.serve_process import ServeProcess, write_config

pytestmark = pytest.mark.slow
TOKEN = "sk-replica-test"
STARTUP_S = 180.0  # a cold ``import litellm`` on a loaded 2-core machine


@dataclass
class Replica:
    proxy: Proxy
    process: ServeProcess

    def client(self, user: str) -> openai.OpenAI:
        return self.proxy.client(TOKEN, **{"X-Memproxy-User-Id": user})

    def chat(self, user: str, text: str) -> tuple[str, dict[str, str]]:
        raw = self.client(user).chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": text}]
        )
        reply = raw.parse().choices[0].message.content or ""
        return reply, dict(raw.headers)


def _settings(upstream_url: str, data_dir: Path, url: str, port: int, **extraction: Any) -> Settings:
    return proxy_settings(
        upstream_url, data_dir, server={"port": port}, storage={"url": url},
        index={"snapshot_interval_s": 0.2}, upstream={"timeout_s": 30},
        extraction={"worker_enabled": False, "lease_s": 2.0, **extraction},
    )  # fmt: skip


def _serve(tmp_path: Path, name: str, upstream_url: str, url: str) -> Replica:
    port = free_port()
    settings = _settings(upstream_url, tmp_path / name, url, port)
    process = ServeProcess(
        "serve", write_config(tmp_path / f"{name}.yaml", settings), tmp_path / f"{name}.log"
    )
    return Replica(Proxy(f"http://127.0.0.1:{port}", settings, settings.storage.data_dir), process)


def _worker(tmp_path: Path, name: str, upstream_url: str, url: str, **extraction: Any) -> ServeProcess:
    settings = _settings(upstream_url, tmp_path / name, url, free_port(), **extraction)
    config = write_config(tmp_path / f"{name}.yaml", settings)
    return ServeProcess("worker", config, tmp_path / f"{name}.log")


@pytest.fixture(scope="module")
def replicas(
    upstream: tuple[ScriptedUpstream, str],
    pg_server: PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Replica, Replica]]:
    """Replicas A and B (no in-process worker) and two worker processes, on one fresh schema."""
    tmp = tmp_path_factory.mktemp("replicas")
    url = pg_server.fresh_url("replicas")
    a, b = _serve(tmp, "a", upstream[1], url), _serve(tmp, "b", upstream[1], url)
    workers: list[ServeProcess] = []
    try:
        a.process.wait_ready(a.proxy.url, timeout=STARTUP_S)
        b.process.wait_ready(b.proxy.url, timeout=STARTUP_S)
        workers += [_worker(tmp, f"w{n}", upstream[1], url, concurrency=2) for n in (1, 2)]
        yield a, b
    finally:
        for process in (a.process, b.process, *workers):
            process.kill()


def test_a_fact_told_through_a_is_recalled_through_b(
    replicas: tuple[Replica, Replica], fake: ScriptedUpstream
) -> None:
    a, b = replicas
    user = unique("u")
    _, headers = a.chat(user, "Hello! I live in Reykjavik.")
    wait_job(b.proxy.url, headers["x-memproxy-capture"], timeout=STARTUP_S, token=TOKEN)  # a worker did it
    question = unique("Where do I live")
    reply, headers = b.chat(user, question)
    assert headers["x-memproxy-recalled"] == "1"
    assert "User lives in Reykjavik" in reply
    forwarded = fake.find_chat(question).body["messages"]
    assert any(MEMORY_MARKER in str(m["content"]) for m in forwarded)


def test_a_forget_through_b_leaves_no_trace_in_a(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    user = unique("forget")
    marker = "quokka" + unique("m").split("-")[1]
    with a.proxy.http(TOKEN) as http:
        for text in (f"The locker code is {marker}", f"{marker} is the cat's name", "Likes rainy days"):
            assert http.post("/v1/memories", json={"user_id": user, "text": text}).status_code == 201
    found = {hit["text"] for hit in search(a.proxy.url, user, marker, token=TOKEN)}
    assert f"The locker code is {marker}" in found  # A's index holds the scope now
    snapshot = a.proxy.data_dir / "index" / f"{Scope(passthrough_tenant(TOKEN), user, '').key}.faiss"
    wait_until(snapshot.exists, timeout=30)  # ... and has written it to disk
    with b.proxy.http(TOKEN) as http:
        forgot = http.delete("/v1/memories", params={"user_id": user}).json()["deleted"]
    assert forgot["memories"] == 3
    wait_until(lambda: not snapshot.exists(), timeout=30)  # A learned it from the change log
    assert search(a.proxy.url, user, marker, token=TOKEN) == []
    assert memories(a.proxy.url, user, token=TOKEN) == []
    reply, headers = a.chat(user, f"What is {marker}?")
    assert headers["x-memproxy-recalled"] == "0" and "I remember" not in reply
    for path in a.proxy.data_dir.rglob("*"):
        assert not path.is_file() or marker.encode() not in path.read_bytes(), path


def test_two_workers_never_extract_one_scope_at_once(
    replicas: tuple[Replica, Replica], fake: ScriptedUpstream
) -> None:
    a, b = replicas
    calls: list[tuple[str, float, float]] = []  # (scope, start, end) of each extraction call
    lock = threading.Lock()

    async def slow_extractor(body: dict[str, Any]) -> str:
        started = time.monotonic()
        await asyncio.sleep(0.3)
        text = str(body)
        scope = next((s for s in scopes if s in text), "?")
        with lock:
            calls.append((scope, started, time.monotonic()))
        return rule_extractor(body)

    scopes = [unique("busy") for _ in range(3)]
    fake.extractor = slow_extractor
    try:
        jobs = []
        for round_ in range(4):
            for n, user in enumerate(scopes):
                replica = (a, b)[(round_ + n) % 2]
                jobs.append(replica.chat(user, f"I like sport {user} {round_}")[1]["x-memproxy-capture"])
        for job_id in jobs:
            wait_job(a.proxy.url, job_id, timeout=90, token=TOKEN)
    finally:
        fake.extractor = None
    by_scope: dict[str, list[tuple[float, float]]] = {}
    for scope, start, end in calls:
        if scope != "?":  # a turn of an earlier test, extracted meanwhile
            by_scope.setdefault(scope, []).append((start, end))
    assert set(by_scope) == set(scopes)
    for spans in by_scope.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, "two extractions of one scope overlapped"
    # Both workers (4 loops) ran at once across scopes, or the test proved nothing.
    everything = sorted((start, end) for scope, start, end in calls if scope != "?")
    assert any(s2 < e1 for (_, e1), (s2, _) in itertools.pairwise(everything))


def test_sigkill_of_a_worker_holding_a_lease_another_completes_exactly_once(
    upstream: tuple[ScriptedUpstream, str], pg_server: PostgresServer, tmp_path: Path
) -> None:
    fake, upstream_url = upstream
    url = pg_server.fresh_url("sigkill")
    replica = _serve(tmp_path, "a", upstream_url, url)
    name = "Ines" + unique("x").split("-")[1]
    with replica.process, _worker(tmp_path, "hanging", upstream_url, url, model="hang") as hanging:
        replica.process.wait_ready(replica.proxy.url, timeout=STARTUP_S)
        _, headers = replica.chat("ines", f"My name is {name}")
        job_id = headers["x-memproxy-capture"]
        wait_until(
            lambda: any(name in str(r.body) for r in fake.chat_requests(extraction=True)), timeout=STARTUP_S
        )
        assert query(replica.proxy, "SELECT status FROM jobs WHERE id = ?", (job_id,)) == [("running",)]
        hanging.stop(signal.SIGKILL)  # the crash under test, while it holds the lease
        with _worker(tmp_path, "healthy", upstream_url, url, model="extractor"):
            done = wait_job(replica.proxy.url, job_id, timeout=STARTUP_S, token=TOKEN)
    assert done["attempts"] == 2  # the killed attempt counted, then one that finished
    assert query(replica.proxy, "SELECT count(*) FROM history WHERE new_text LIKE ?", (f"%{name}%",)) == [
        (1,)
    ]
    assert [r.body["model"] for r in fake.chat_requests(extraction=True) if name in str(r.body)] == [
        "hang",
        "extractor",
    ]
