"""Scale-out figures: SQLite vs Postgres, one vs two processes, against one scripted upstream.

    python bench/scale.py [--quick]

Prints one JSON object:
- ``chat``: chat with memory on (recall + capture) at c=32, for 1 and 2 ``memproxy serve``
  processes on SQLite (one shared data dir) and on Postgres (a data dir each), req/s, p50/p99;
- ``recall``: ``MemoryStore.search`` in-process in a 10k-memory scope on each engine (p50/p99
  and Postgres's extra p50; target ≤ 1 ms);
- ``drain``: jobs/s drained by 1 and 2 ``memproxy worker`` processes on Postgres with a 50 ms
  extractor (target ≥ 1.8x);
- ``rebuild``: an empty replica building the index of a 100k-memory scope from Postgres.

It starts a throwaway Postgres cluster (``memproxy.testing.pg_cluster``), the scripted upstream
and the memproxy processes itself, and stops them all when it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import aiohttp
import processes
import psycopg
from stats import percentiles_ms

from memproxy.config import IndexSettings
from memproxy.index.embedder import HashEmbedder
from memproxy.index.manager import IndexManager
from memproxy.memory.rows import text_hash, vector_blob
from memproxy.memory.store import MemoryStore
from memproxy.scope import Scope
from memproxy.storage.postgres import PostgresDatabase
from memproxy.testing.pg_cluster import PostgresCluster

TOKEN = "sk-bench-scale"
EXTRACTOR_DELAY_S = 0.05
UPSTREAM_FLAG = "--serve-upstream"


def serve_upstream(port: int) -> None:
    """Child-process entry: the scripted upstream whose extractor takes 50 ms."""
    import uvicorn

    from memproxy.testing.scripted_extractor import rule_extractor
    from memproxy.testing.scripted_upstream import ScriptedUpstream

    async def slow(body: dict[str, Any]) -> str:
        await asyncio.sleep(EXTRACTOR_DELAY_S)
        return rule_extractor(body)

    fake = ScriptedUpstream(extractor=slow)
    uvicorn.run(fake.app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def settings(fake_v1: str, data_dir: Path, port: int, url: str | None, worker: bool) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "storage": {"data_dir": str(data_dir), "url": url},
        "upstream": {"api_base": fake_v1, "timeout_s": 30},
        "embedding": {"provider": "hash"},
        "extraction": {"model": "extractor", "worker_enabled": worker, "poll_interval_s": 0.05},
    }


def fresh_schema(cluster: PostgresCluster) -> str:
    schema = "s_" + uuid.uuid4().hex[:10]
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return cluster.url() + f"?options=-csearch_path%3D{schema}"


async def load(urls: list[str], total: int, concurrency: int) -> dict[str, Any]:
    """``total`` chat turns with memory on, ``concurrency`` at a time, round-robin over ``urls``."""
    rr = itertools.cycle(urls)
    latencies: list[float] = []
    errors = 0

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        nonlocal errors
        headers = {"Authorization": f"Bearer {TOKEN}", "X-Memproxy-User-Id": f"user-{i % 64}"}
        body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"I like topic {i}"}]}
        started = time.perf_counter()
        async with session.post(next(rr) + "/v1/chat/completions", json=body, headers=headers) as response:
            await response.read()
            if response.status != 200 or response.headers.get("X-Memproxy-Capture") == "failed":
                errors += 1
        latencies.append(time.perf_counter() - started)

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        for i in range(64):  # warm-up: connections, tokenizers, every user's scope loaded
            await one(session, i)
        latencies.clear()
        queue = iter(range(total))
        started = time.perf_counter()

        async def runner() -> None:
            for i in queue:
                await one(session, i)

        await asyncio.gather(*(runner() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {"requests": total, "req_per_s": round(total / elapsed, 1), "errors": errors,
            **percentiles_ms(latencies, (50, 99))}  # fmt: skip


def chat_row(work: Path, fake_v1: str, url: str | None, replicas: int, total: int) -> dict[str, Any]:
    shared = work / f"chat-{'pg' if url else 'sqlite'}-{replicas}"
    children, urls = [], []
    for n in range(replicas):
        port = processes.free_port()
        data_dir = shared / (f"replica{n}" if url else "shared")
        config = settings(fake_v1, data_dir, port, url, worker=False)
        children.append(processes.memproxy_child("serve", config, work, f"{shared.name}-{n}"))
        urls.append(f"http://127.0.0.1:{port}")
    with processes.running(children):
        return asyncio.run(load(urls, total, 32))


async def seed(store: MemoryStore, scope: Scope, n: int) -> None:
    rows = [{"text": f"Fact number {i} about topic {i % 97} and place {i % 31}", "user_id": scope.user_id}
            for i in range(n)]  # fmt: skip
    for start in range(0, n, 2000):
        await store.import_(scope.tenant, rows[start : start + 2000])


async def recall_latency(work: Path, url: str | None, memories: int, queries: int) -> dict[str, Any]:
    from memproxy.storage.database import SqliteDatabase

    db: Any = (
        PostgresDatabase(url) if url else SqliteDatabase(work / f"recall-{uuid.uuid4().hex[:6]}.sqlite3")
    )
    await db.open()
    try:
        embedder = HashEmbedder(256)
        store = MemoryStore(db, embedder, IndexManager(db, work / "recall-index", embedder, IndexSettings()))
        await store.start()
        scope = Scope("bench", "recall-" + uuid.uuid4().hex[:6], "")
        await seed(store, scope, memories)
        if url:  # what autovacuum does within a minute of a bulk load: plans use the primary key
            await db.run(lambda c: c.execute("ANALYZE memories"))
        samples = []
        for i in range(queries + 50):
            started = time.perf_counter()
            await store.search(scope, f"what about topic {i % 97} place {i % 31}", top_k=8)
            if i >= 50:  # the first searches load the scope
                samples.append(time.perf_counter() - started)
        return {"memories": memories, **percentiles_ms(samples, (50, 99))}
    finally:
        await db.close()


def drain_row(work: Path, fake_v1: str, cluster: PostgresCluster, workers: int, jobs: int) -> dict[str, Any]:
    url = fresh_schema(cluster)
    now = time.time()
    with psycopg.connect(url, autocommit=True) as conn:
        from memproxy.storage.postgres import migrate

        migrate(conn)
        with conn.transaction(), conn.cursor() as cursor:
            for i in range(jobs):  # one job per scope: the figure is workers' throughput, not batching
                scope = Scope("bench", f"drain-{i}", "")
                job_id = f"job_{uuid.uuid4().hex}"
                cursor.execute(
                    "INSERT INTO messages (tenant, scope_key, user_id, session_id, job_id, role, content, created_at) "
                    "VALUES (%s, %s, %s, 's', %s, 'user', %s, %s)",
                    (scope.tenant, scope.key, scope.user_id, job_id,
                     json.dumps({"role": "user", "content": f"I like drain topic {i}"}), now + i * 1e-6),
                )  # fmt: skip
                cursor.execute(
                    "INSERT INTO jobs (id, tenant, scope_key, user_id, status, next_attempt_at, created_at, "
                    "updated_at) VALUES (%s, %s, %s, %s, 'pending', 0, %s, %s)",
                    (job_id, scope.tenant, scope.key, scope.user_id, now + i * 1e-6, now),
                )
    children = [
        processes.memproxy_child(
            "worker",
            settings(fake_v1, work / f"drain{workers}-{n}", 0, url, True),
            work,
            f"drain{workers}-{n}",
        )
        for n in range(workers)
    ]
    with psycopg.connect(url, autocommit=True) as conn, processes.running(children):
        first: tuple[float, int] | None = None
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            done = int(conn.execute("SELECT count(*) FROM jobs WHERE status = 'done'").fetchone()[0])  # type: ignore[index]
            stamp = time.perf_counter()
            if done and first is None:
                first = (stamp, done)
            if done >= jobs:
                break
            time.sleep(0.02)
        else:
            raise TimeoutError("the workers did not drain the outbox")
    assert first is not None
    return {"workers": workers, "jobs": jobs, "jobs_per_s": round((jobs - first[1]) / (stamp - first[0]), 1)}


async def rebuild(work: Path, cluster: PostgresCluster, memories: int) -> dict[str, Any]:
    url = fresh_schema(cluster)
    scope = Scope("bench", "big", "")
    embedder = HashEmbedder(256)
    db = PostgresDatabase(url)
    await db.open()
    try:
        started = time.perf_counter()
        with psycopg.connect(url) as conn, conn.cursor() as cursor:
            with cursor.copy(
                "COPY memories (id, tenant, scope_key, user_id, text, text_hash, source, created_at, updated_at, "
                "embedding, embed_model) FROM STDIN"
            ) as copy:
                for start in range(0, memories, 5000):
                    texts = [
                        f"Big scope fact {i} on subject {i % 997}"
                        for i in range(start, min(memories, start + 5000))
                    ]
                    vectors = embedder.embed_sync(texts)
                    for text, vector in zip(texts, vectors, strict=True):
                        copy.write_row((uuid.uuid4().hex, scope.tenant, scope.key, scope.user_id, text,
                                        text_hash(text), "manual", 0.0, 0.0, vector_blob(vector), embedder.identity))  # fmt: skip
            cursor.execute(
                "INSERT INTO changes (tenant, scope_key, memory_num, op) SELECT tenant, scope_key, num, 'upsert' "
                "FROM memories ORDER BY num"
            )
        seeded_s = time.perf_counter() - started
        index = IndexManager(db, work / "empty-replica", embedder, IndexSettings())
        started = time.perf_counter()
        entry = await index.sync(scope)
        built_s = time.perf_counter() - started
        assert len(entry.lexical) == memories
        return {"memories": memories, "rebuild_s": round(built_s, 2), "seed_s": round(seeded_s, 1)}
    finally:
        await db.close()


def run(quick: bool) -> dict[str, Any]:
    chat_total, recall_n, queries, jobs, big = (300, 2000, 100, 120, 20_000) if quick else (
        2000, 10_000, 500, 600, 100_000)  # fmt: skip
    cluster = PostgresCluster.start()
    try:
        with tempfile.TemporaryDirectory(prefix="memproxy-bench-scale-") as tmp:
            work = Path(tmp)
            port = processes.free_port()
            upstream = processes.upstream_child(__file__, UPSTREAM_FLAG, port, work / "upstream.log")
            fake_v1 = f"http://127.0.0.1:{port}/v1"
            with processes.running([upstream]):
                chat = {}
                for engine, url in (("sqlite", None), ("postgres", fresh_schema(cluster))):
                    for replicas in (1, 2):
                        print(f"chat: {engine}, {replicas} process(es)", file=sys.stderr)
                        chat[f"{engine}_{replicas}"] = chat_row(work, fake_v1, url, replicas, chat_total)
                print("recall latency", file=sys.stderr)
                recall: dict[str, Any] = {"sqlite": asyncio.run(recall_latency(work, None, recall_n, queries)),
                          "postgres": asyncio.run(recall_latency(work, fresh_schema(cluster), recall_n, queries))}  # fmt: skip
                recall["postgres_extra_p50_ms"] = round(
                    recall["postgres"]["p50_ms"] - recall["sqlite"]["p50_ms"], 3
                )
                print("drain", file=sys.stderr)
                drain: dict[str, Any] = {
                    f"workers_{n}": drain_row(work, fake_v1, cluster, n, jobs) for n in (1, 2)
                }
                drain["speedup"] = round(
                    drain["workers_2"]["jobs_per_s"] / drain["workers_1"]["jobs_per_s"], 2
                )
            print("rebuild", file=sys.stderr)
            built = asyncio.run(rebuild(work, cluster, big))
    finally:
        cluster.stop()
    return {
        "config": {
            "quick": quick,
            "concurrency": 32,
            "extractor_delay_ms": EXTRACTOR_DELAY_S * 1000,
            "cpus": os.cpu_count(),
        },
        "chat": chat,
        "recall": recall,
        "drain": drain,
        "rebuild": built,
        "targets": {
            "recall_postgres_extra_p50_le_1ms": recall["postgres_extra_p50_ms"] <= 1.0,
            "drain_speedup_ge_1_8": drain["speedup"] >= 1.8,
        },
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == [UPSTREAM_FLAG]:
        serve_upstream(int(args[1]))
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller runs (a smoke test)")
    print(json.dumps(run(parser.parse_args(args).quick), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
