"""Search latency, memory per memory and snapshot-vs-rebuild time of the memory store.

    python bench/recall.py [--sizes 1000,10000,100000] [--queries 300] [--dim 256]

Prints one JSON object. Rows are bulk-inserted straight into SQLite (as the sync row
functions would write them) so setup stays fast; searching goes through the real
``MemoryStore.search`` path (index catch-up check, FAISS, BM25, fusion, SQLite hydration).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from stats import percentiles_ms

from memproxy.config import IndexSettings
from memproxy.index.embedder import HashEmbedder
from memproxy.index.manager import IndexManager
from memproxy.memory.rows import text_hash
from memproxy.memory.store import MemoryStore
from memproxy.scope import Scope
from memproxy.storage.database import SqliteDatabase as Database

SCOPE = Scope("bench-tenant", "bench-user", "")
REPEATS = 3  # load/rebuild timings are medians: this often runs on a shared machine
NAMES = ["Alice", "Bob", "Chen", "Dara", "Emil", "Fatima", "Goran", "Hana", "Ivan", "Jun", "Kofi", "Lena"]
PLACES = ["Berlin", "Lisbon", "Kyoto", "Nairobi", "Lima", "Oslo", "Austin", "Hanoi", "Porto", "Seoul"]
THINGS = ["green tea", "jazz", "sushi", "chess", "running", "the piano", "sci-fi novels", "gardening",
          "espresso", "hiking", "Rust", "watercolours", "tennis", "podcasts", "board games"]  # fmt: skip
TEMPLATES = [
    "{name} lives in {place} and enjoys {thing}",
    "The user prefers {thing} over {thing2} on weekends",
    "{name} is travelling to {place} in month {n}",
    "Order {code} for {thing} ships to {place}",
    "{name}'s favourite hobby is {thing}; started in {year}",
    "Meeting with {name} about project {code} moved to {place}",
    "Allergic to {thing}; mention it when booking in {place}",
    "Reminder {n}: call {name} about {thing2}",
]


def synthetic_texts(count: int, rng: random.Random) -> list[str]:
    texts = []
    for i in range(count):
        texts.append(rng.choice(TEMPLATES).format(
            name=rng.choice(NAMES), place=rng.choice(PLACES), thing=rng.choice(THINGS),
            thing2=rng.choice(THINGS), n=rng.randint(1, 500), year=rng.randint(1990, 2025),
            code=f"ZX-{rng.randint(1000, 99999)}",
        ) + f" (note {i})")  # fmt: skip
    return texts


def bulk_insert(path: Path, texts: list[str], vectors: np.ndarray, identity: str) -> None:
    conn = sqlite3.connect(path)
    now = time.time()
    rows = [
        (uuid.uuid4().hex, SCOPE.tenant, SCOPE.key, SCOPE.user_id, text, text_hash(text), "extracted",
         "{}", now, now, vectors[i].tobytes(), identity)
        for i, text in enumerate(texts)
    ]  # fmt: skip
    with conn:
        conn.executemany(
            "INSERT INTO memories (id, tenant, scope_key, user_id, text, text_hash, source, metadata, "
            "created_at, updated_at, embedding, embed_model) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.execute(
            "INSERT INTO changes (tenant, scope_key, memory_num, op) "
            "SELECT tenant, scope_key, num, 'upsert' FROM memories ORDER BY num"
        )
    conn.close()


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def timed_searches(store: MemoryStore, queries: list[str], embed: bool) -> dict[str, float]:
    vectors = store.embedder.embed_sync(queries) if isinstance(store.embedder, HashEmbedder) else None
    for query in queries[:20]:  # warm up
        await store.search(SCOPE, query, top_k=8)
    samples = []
    for i, query in enumerate(queries):
        start = time.perf_counter()
        if embed or vectors is None:
            await store.search(SCOPE, query, top_k=8)
        else:
            await store.search(SCOPE, query, top_k=8, query_vector=vectors[i])
        samples.append(time.perf_counter() - start)
    return percentiles_ms(samples, (50, 99))


async def timed_load(index: IndexManager) -> float:
    """Seconds to bring the scope into memory: from its snapshot if one exists, else SQLite."""
    await index.unload(SCOPE, snapshot=False)
    start = time.perf_counter()
    await index.sync(SCOPE)
    return time.perf_counter() - start


async def open_store(data_dir: Path, embedder: HashEmbedder, db: Database | None = None) -> MemoryStore:
    if db is None:
        db = Database(data_dir / "memproxy.sqlite3")
        await db.open()
    return MemoryStore(db, embedder, IndexManager(db, data_dir, embedder, IndexSettings()))


async def bench_size(size: int, n_queries: int, dim: int, root: Path) -> dict[str, Any]:
    rng = random.Random(size)
    data_dir = root / f"n{size}"
    embedder = HashEmbedder(dim)
    texts = synthetic_texts(size, rng)
    start = time.perf_counter()
    vectors = await asyncio.to_thread(embedder.embed_sync, texts)
    embed_s = time.perf_counter() - start
    db = Database(data_dir / "memproxy.sqlite3")
    await db.open()
    bulk_insert(db.path, texts, vectors, embedder.identity)
    queries = [
        rng.choice(TEMPLATES).split("{")[0] + f"{rng.choice(THINGS)} {rng.choice(PLACES)}"
        for _ in range(n_queries)
    ]
    queries[::10] = [f"order ZX-{rng.randint(1000, 99999)}" for _ in queries[::10]]

    store = await open_store(data_dir, embedder, db)
    rss_before = rss_bytes()
    rebuilds = [await timed_load(store.index)]
    rss_per_memory = (rss_bytes() - rss_before) / size
    rebuilds += [await timed_load(store.index) for _ in range(REPEATS - 1)]
    rebuild_s = float(np.median(rebuilds))
    result: dict[str, Any] = {
        "memories": size,
        "search_embedding_excluded": await timed_searches(store, queries, embed=False),
        "search_embedding_included": await timed_searches(store, queries, embed=True),
        "rss_bytes_per_memory": round(rss_per_memory, 1),
        "bulk_embed_ms_per_memory": round(embed_s * 1000 / size, 4),
        "rebuild_from_sqlite_s": round(rebuild_s, 3),
    }
    await store.index.snapshot_dirty()
    loads = [await timed_load((await open_store(data_dir, embedder, db)).index) for _ in range(REPEATS)]
    load_s = float(np.median(loads))
    result["snapshot_load_s"] = round(load_s, 3)
    result["snapshot_bytes"] = store.index.snapshot_path(SCOPE.key).stat().st_size
    result["rebuild_over_load"] = round(rebuild_s / max(load_s, 1e-9), 1)
    await db.close()
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--dim", type=int, default=256)
    args = parser.parse_args()
    report: dict[str, Any] = {"embedder": f"hash:{args.dim}", "top_k": 8, "results": []}
    with tempfile.TemporaryDirectory(prefix="memproxy-bench-") as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            report["results"].append(await bench_size(size, args.queries, args.dim, Path(tmp)))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
