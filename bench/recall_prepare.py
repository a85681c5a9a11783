"""What recall itself costs per chat request: ``Recaller.prepare`` with N memories in scope.

    python bench/recall_prepare.py [--memories 10000] [--requests 500]

In-process (no HTTP, no upstream): query embedding (``hash`` embedder, cache bypassed),
hybrid search (change-seq check, fp16 FAISS scan, BM25, rows from the row cache or SQLite), token budgeting and
injection. ``bench/overhead.py`` measures the same thing end to end (``memproxy_on`` minus
``memproxy_off``), which also includes the larger prompt travelling through LiteLLM.
Prints one JSON object with p50/p95/p99 in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import overhead  # the same seeding and messages as the end-to-end bench
from stats import percentiles_ms

from memproxy.config import settings_from_dict
from memproxy.scope import RequestScope, Scope
from memproxy.services import open_services


async def run(memories: int, requests: int) -> dict[str, object]:
    settings = settings_from_dict({"storage": {"data_dir": tempfile.mkdtemp(prefix="memproxy-recall-bench-")},
                                   "recall": {"cache_ttl_s": 0},
                                   "embedding": {"provider": "hash"}})  # fmt: skip
    scope = Scope("bench-tenant", overhead.USER_ID, "")
    await overhead.seed_memories(settings, scope, memories)
    services = await open_services(settings)
    try:
        await services.store.start()
        await services.recaller.tokenizers.warm()
        body = {"model": overhead.MODEL, "messages": overhead.MESSAGES}
        request_scope = RequestScope(scope)
        samples, recalled = [], 0
        for n in range(requests + 30):
            started = time.perf_counter()
            _, recalled, error = await services.recaller.prepare(body, request_scope)
            if n >= 30:  # warm-up: index load, caches
                samples.append(time.perf_counter() - started)
            assert error is None, error
    finally:
        await services.close()
    return {
        "memories": memories,
        "requests": requests,
        "recalled": recalled,
        "prepare": percentiles_ms(samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.memories, args.requests)), indent=2))


if __name__ == "__main__":
    main()
