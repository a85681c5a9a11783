"""What recall itself costs per chat request: ``Recaller.memory_block`` with N memories in scope.

    python bench/recall_prepare.py [--memories 10000] [--requests 300] [--embedder onnx|hash]
                                   [--concurrency 1 32] [--variants batched unbatched ...]

In-process (no HTTP, no upstream), the default embedder unless ``--embedder hash``: each
request a different on-topic question (``overhead.question_pool``, larger than the
query-embedding cache), recall as a chat request runs it (query embedding, hybrid search:
change-seq check, fp16 FAISS scan, BM25, rows from the row cache or SQLite; token budget;
placement). ``concurrency`` requests run at once (as many chat requests would), and the
stage breakdown is read from the recaller's own ``/metrics`` histograms.

``--variants`` compares ways of running the query embedding within one run, interleaved in
rounds (the machine is shared: compare ratios within a run):

- ``batched``: what ships, concurrent queries micro-batched (``index.embedders.batching``);
- ``unbatched``: each query its own model call on a worker thread (before issue 25);
- ``batched_1thread``: micro-batches on the one-thread session instead of the
  ``embedding.threads`` session.

``bench/overhead.py`` measures the same thing end to end (``memproxy_on`` minus
``memproxy_off``). Prints one JSON object with p50/p95/p99 in ms per variant and concurrency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import overhead  # the same seeding, facts and questions as the end-to-end bench
from stats import percentiles_ms

from memproxy.config import settings_from_dict
from memproxy.index.embedder import OnnxEmbedder
from memproxy.metrics import RECALL_STAGES, Metrics
from memproxy.proxy.recall import QUERY_MAX_CHARS
from memproxy.scope import RequestScope, Scope
from memproxy.services import Services, open_services
from memproxy.wire.message_text import latest_user_text

VARIANTS = ("batched", "unbatched", "batched_1thread")
ROUNDS = 3


def use_variant(embedder: Any, variant: str, shipped: dict[str, Any]) -> None:
    """Make ``embedder`` run its queries the ``variant`` way (``shipped``: its own attributes)."""
    if not isinstance(embedder, OnnxEmbedder):
        return
    embedder._batch_session = shipped["batch_session"]
    embedder.__dict__.pop("embed", None)
    if variant == "unbatched":

        async def embed(texts: list[str], *, query: bool = False) -> Any:
            return await asyncio.to_thread(embedder.embed_sync, texts, query)

        embedder.embed = embed  # type: ignore[method-assign]
    elif variant == "batched_1thread":
        embedder._batch_session = embedder._session


def stage_sums(metrics: Metrics) -> dict[str, list[float]]:
    """[sum s, count] per recall stage, as the recaller's histograms hold them now."""
    out: dict[str, list[float]] = {stage: [0.0, 0.0] for stage in RECALL_STAGES}
    for family in metrics.registry.collect():
        for sample in family.samples:
            stage = sample.labels.get("stage")
            if stage in out and sample.name.endswith("_sum"):
                out[stage][0] = sample.value
            elif stage in out and sample.name.endswith("_count"):
                out[stage][1] = sample.value
    return out


async def load(services: Services, bodies: Callable[[], dict[str, Any]], scope: RequestScope,
               total: int, concurrency: int) -> list[float]:  # fmt: skip
    samples: list[float] = []
    remaining = total

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            body = bodies()
            started = time.perf_counter()
            query = latest_user_text(body["messages"], QUERY_MAX_CHARS)
            _, _, error = await services.recaller.memory_block(query, str(body["model"]), scope)
            samples.append(time.perf_counter() - started)
            assert error is None, error

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return samples


async def run(memories: int, requests: int, embedder: str, levels: list[int], variants: list[str],
              ) -> dict[str, Any]:  # fmt: skip
    data_dir = Path(tempfile.mkdtemp(prefix="memproxy-recall-bench-"))
    # A long recall timeout: a request queued behind others is measured, not failed open.
    settings = settings_from_dict({"storage": {"data_dir": str(data_dir)}, "embedding": {"provider": embedder},
                                   "recall": {"timeout_ms": 60_000}})  # fmt: skip
    scope = Scope("bench-tenant", overhead.USER_ID, "")
    await overhead.seed_memories(settings, scope, memories)
    metrics = Metrics()
    services = await open_services(settings, metrics)
    pool = overhead.question_pool(memories, 4000)
    position = 0

    def body() -> dict[str, Any]:
        nonlocal position
        position += 1
        return {"model": overhead.MODEL, "messages": overhead.messages(pool[position % len(pool)])}

    out: dict[str, Any] = {"memories": memories, "embedder": embedder, "requests": requests, "results": {}}
    try:
        await services.store.start()
        await services.embedder.load()
        await services.recaller.tokenizers.warm()
        shipped = {"batch_session": getattr(services.embedder, "_batch_session", None)}
        request_scope = RequestScope(scope)
        await load(services, body, request_scope, 30, 1)  # warm-up: index load, row cache
        for level in levels:
            samples: dict[str, list[float]] = {v: [] for v in variants}
            stages: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
            for round_no in range(ROUNDS):
                order = variants if round_no % 2 == 0 else list(reversed(variants))
                for variant in order:
                    use_variant(services.embedder, variant, shipped)
                    before = stage_sums(metrics)
                    share = requests // ROUNDS
                    samples[variant] += await load(services, body, request_scope, share, level)
                    after = stage_sums(metrics)
                    for stage in RECALL_STAGES:
                        acc = stages[variant].setdefault(stage, [0.0, 0.0])
                        acc[0] += after[stage][0] - before[stage][0]
                        acc[1] += after[stage][1] - before[stage][1]
            out["results"][f"c{level}"] = {
                v: {"prepare": percentiles_ms(samples[v]),
                    "stage_mean_ms": {s: round(t / n * 1000, 3) if n else None for s, (t, n) in stages[v].items()}}
                for v in variants
            }  # fmt: skip
    finally:
        await services.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=300, help="per variant and concurrency")
    parser.add_argument("--embedder", choices=("onnx", "hash"), default="onnx")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=["batched"])
    args = parser.parse_args()
    result = asyncio.run(run(args.memories, args.requests, args.embedder, args.concurrency, args.variants))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
