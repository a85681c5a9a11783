"""Retrieval quality of the memory store: does search find the turns that answer a question?

    python bench/retrieval_quality.py [--dataset hard] [--embedders hash,onnx] [--min-scores 0,0.1,0.2,0.3]
                                      [--top-k 8] [--max-tokens 400] [--batch-size 64] [--threads 2]
                                      [--out FILE]

Dataset: ``bench/data/retrieval/`` (6 conversations over 6 sessions each, 732 turns, 366
questions with the ids of the turns that answer them; ``generate.py`` there rebuilds it and
says how). Every turn is stored as one memory of its conversation's scope (imported through
``MemoryStore.import_``, so embedded in batches of ``embedding.batch_size``), then every
question is searched through the real ``MemoryStore.search`` (FAISS + BM25, fusion, gate,
scores).

Reported per embedder and pipeline:
- recall@1/5/10/25: share of a question's evidence turns among the first k results,
  averaged over answerable questions (and per question type for @10);
- what recall would inject under the budget (``recall.top_k``, ``recall.max_tokens``,
  ``min_score``), fitted with recall's own ``fit_to_budget``: precision (evidence turns /
  injected memories), evidence recall of the injected set, tokens injected per request,
  and the share of no-answer questions and of small talk that get anything injected;
- per embedder: query embedding p50 (wall) and mean CPU ms, ingest memories/s (wall and
  per CPU second) and the process load at the time.

Pipelines: ``legacy`` is the scoring before the evidence gate (raw cosine, nothing dropped,
``min_score`` 0: what ``hash`` and ``local`` did before); ``gated@S`` is the current scoring
(``default_ranking`` of the embedder) with ``min_score`` S. Prints one JSON object and a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tiktoken

from memproxy.config import IndexSettings
from memproxy.index.embedder import Embedder, HashEmbedder, OnnxEmbedder
from memproxy.index.manager import IndexManager
from memproxy.index.scoring import Ranking, default_ranking
from memproxy.memory.store import MemoryStore
from memproxy.proxy.budget import use_bundled_tokenizers
from memproxy.proxy.recall import fit_to_budget
from memproxy.scope import Scope
from memproxy.storage.database import SqliteDatabase

DATA = Path(__file__).resolve().parent / "data" / "retrieval"
TENANT = "bench"
KS = (1, 5, 10, 25)


def load_dataset(variant: str = "") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The default dataset, or ``hard`` (``generate.py --hard``: other people's news as near misses)."""
    folder = DATA / variant if variant else DATA

    def read(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (folder / name).read_text().splitlines() if line]

    return read("conversations.jsonl"), read("questions.jsonl")


def make_embedder(name: str, batch_size: int, threads: int) -> Embedder:
    if name == "hash":
        return HashEmbedder(256)
    if name == "onnx":
        return OnnxEmbedder(batch_size=batch_size, threads=threads)
    raise SystemExit(f"unknown embedder {name!r} (hash, onnx)")


def memory_items(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    items = []
    for session in conversation["sessions"]:
        when = datetime.fromisoformat(session["date"]).replace(hour=12, tzinfo=UTC).isoformat()
        for turn in session["turns"]:
            items.append({"id": turn["id"], "text": turn["text"], "user_id": conversation["id"],
                          "created_at": when, "updated_at": when})  # fmt: skip
    return items


async def timed_queries(
    embedder: Embedder, questions: list[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Embed every question once as a query: the vectors, and wall/CPU per query."""
    await embedder.embed(["warm up"], query=True)
    vectors: dict[str, Any] = {}
    walls, cpus = [], []
    for question in questions:
        cpu, wall = time.process_time(), time.perf_counter()
        vectors[question["id"]] = (await embedder.embed([question["question"]], query=True))[0]
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    walls.sort()
    timing = {"query_p50_ms": round(walls[len(walls) // 2], 2), "query_p90_ms": round(walls[len(walls) * 9 // 10], 2),
              "query_cpu_mean_ms": round(statistics.mean(cpus), 2)}  # fmt: skip
    return vectors, timing


def evaluate(
    results: dict[str, list[str]], injected: dict[str, tuple[list[str], int]], questions: list[dict[str, Any]]
) -> dict[str, Any]:
    answerable = [q for q in questions if q["evidence"]]
    recall = {k: statistics.mean(len(set(q["evidence"]) & set(results[q["id"]][:k])) / len(q["evidence"])
                                 for q in answerable) for k in KS}  # fmt: skip
    by_type: dict[str, list[float]] = defaultdict(list)
    for q in answerable:
        by_type[q["type"]].append(len(set(q["evidence"]) & set(results[q["id"]][:10])) / len(q["evidence"]))
    shown = sum(len(injected[q["id"]][0]) for q in answerable)
    hits = sum(len(set(q["evidence"]) & set(injected[q["id"]][0])) for q in answerable)
    evidence = sum(len(q["evidence"]) for q in answerable)

    def injection_rate(kind: str) -> float:
        chosen = [q for q in questions if q["type"] == kind]
        return sum(1 for q in chosen if injected[q["id"]][0]) / len(chosen)

    return {
        **{f"recall@{k}": round(100 * v, 1) for k, v in recall.items()},
        "recall@10_by_type": {t: round(100 * statistics.mean(v), 1) for t, v in sorted(by_type.items())},
        "injected_precision": round(100 * hits / shown, 1) if shown else 0.0,
        "injected_evidence_recall": round(100 * hits / evidence, 1),
        "injected_per_answerable": round(shown / len(answerable), 2),
        "tokens_per_request": round(statistics.mean(injected[q["id"]][1] for q in questions), 1),
        "no_answer_injection_rate": round(100 * injection_rate("no-answer"), 1),
        "small_talk_injection_rate": round(100 * injection_rate("small-talk"), 1),
    }


async def run_embedder(name: str, args: argparse.Namespace, conversations: list[dict[str, Any]],
                       questions: list[dict[str, Any]], encoding: Any) -> dict[str, Any]:  # fmt: skip
    embedder = make_embedder(name, args.batch_size, args.threads)
    started = time.perf_counter()
    await embedder.load()
    report: dict[str, Any] = {"identity": embedder.identity, "load_s": round(time.perf_counter() - started, 2),
                              "floor": round(embedder.floor, 3)}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="memproxy-retrieval-") as tmp:
        db = SqliteDatabase(Path(tmp) / "memproxy.sqlite3")
        await db.open()
        try:
            store = MemoryStore(db, embedder, IndexManager(db, Path(tmp), embedder, IndexSettings()))
            await store.start()
            load_before = os.getloadavg()[0]
            cpu, wall = time.process_time(), time.perf_counter()
            count = 0
            for conversation in conversations:
                items = memory_items(conversation)
                imported = await store.import_(TENANT, items)
                count += imported["imported"]
            wall_s, cpu_s = time.perf_counter() - wall, time.process_time() - cpu
            report.update(memories=count, ingest_per_s=round(count / wall_s, 1),
                          ingest_per_cpu_s=round(count / cpu_s, 1))  # fmt: skip
            vectors, timing = await timed_queries(embedder, questions)
            report.update(timing, loadavg=round((load_before + os.getloadavg()[0]) / 2, 1))
            report["pipelines"] = {}
            pipelines = [("legacy", Ranking.legacy(), 0.0)]
            base = default_ranking(embedder.identity)
            pipelines += [(f"gated@{s:g}" + (f" rel{r:g}" if r else "") + (f" lex{w:g}" if w is not None else "")
                           + ("" if b else " one-hop"),
                           replace(base, relative=r, bridges=b,
                                   lexical_weight=base.lexical_weight if w is None else w), s)
                          for b in args.bridges for w in args.lexical_weight for r in args.relative
                          for s in args.min_scores]  # fmt: skip
            for label, ranking, min_score in pipelines:
                store.ranking = ranking
                report["pipelines"][label] = await run_pipeline(
                    store, questions, vectors, min_score, args, encoding
                )
        finally:
            await db.close()
    return report


async def run_pipeline(store: MemoryStore, questions: list[dict[str, Any]], vectors: dict[str, Any],
                       min_score: float, args: argparse.Namespace, encoding: Any) -> dict[str, Any]:  # fmt: skip
    results: dict[str, list[str]] = {}
    injected: dict[str, tuple[list[str], int]] = {}
    for q in questions:
        scope = Scope(TENANT, q["conversation"], "")
        found = await store.search(scope, q["question"], 25, 0.0, query_vector=vectors[q["id"]])
        results[q["id"]] = [memory.id for memory, _ in found]
        # What recall itself would do: its top_k and min_score, then the token budget.
        chosen = await store.search(
            scope, q["question"], args.top_k, min_score, query_vector=vectors[q["id"]]
        )
        memories = [memory for memory, _ in chosen]
        text, count = fit_to_budget(memories, args.max_tokens, lambda s: len(encoding.encode(s)))
        injected[q["id"]] = ([m.id for m in memories[:count]] if count else [],
                             len(encoding.encode(text)) if count else 0)  # fmt: skip
    return evaluate(results, injected, questions)


def table(report: dict[str, Any]) -> str:
    head = ("| embedder | pipeline | R@1 | R@5 | R@10 | R@25 | R@10 single/para/multi/temporal | "
            "inj. precision | inj. evidence | tokens/req | no-answer inj. | small-talk inj. |")  # fmt: skip
    lines = [head, "|" + "---|" * 12]
    for name, emb in report["embedders"].items():
        for label, p in emb["pipelines"].items():
            t = p["recall@10_by_type"]
            lines.append(
                f"| {name} | {label} | {p['recall@1']} | {p['recall@5']} | {p['recall@10']} | {p['recall@25']} | "
                f"{t.get('single-hop')}/{t.get('paraphrase')}/{t.get('multi-hop')}/{t.get('temporal')} | "
                f"{p['injected_precision']} | {p['injected_evidence_recall']} | {p['tokens_per_request']} | "
                f"{p['no_answer_injection_rate']} | {p['small_talk_injection_rate']} |"
            )
    lines += ["", "| embedder | query p50 ms | query CPU ms | ingest memories/s | per CPU-s | load avg | floor |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, emb in report["embedders"].items():
        lines.append(f"| {name} | {emb['query_p50_ms']} | {emb['query_cpu_mean_ms']} | {emb['ingest_per_s']} | "
                     f"{emb['ingest_per_cpu_s']} | {emb['loadavg']} | {emb['floor']} |")  # fmt: skip
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedders", default="hash,onnx")
    parser.add_argument(
        "--dataset", default="", choices=["", "hard"], help="'hard': bench/data/retrieval/hard"
    )
    parser.add_argument("--min-scores", default="0,0.1,0.2,0.3,0.4")
    parser.add_argument("--relative", default="0", help="Ranking.relative values to try")
    parser.add_argument(
        "--lexical-weight",
        default="",
        help="Ranking.lexical_weight values to try (default: the embedder's own)",
    )
    parser.add_argument("--bridges", default="1", help="Ranking.bridges values to try (1 on, 0 off)")
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2, help="embedding.threads (onnx ingest)")
    parser.add_argument("--out", help="also write the JSON report here")
    args = parser.parse_args()
    args.min_scores = [float(s) for s in args.min_scores.split(",") if s]
    args.relative = [float(r) for r in args.relative.split(",") if r]
    args.lexical_weight = [float(w) for w in args.lexical_weight.split(",") if w] or [None]
    args.bridges = [b.strip() == "1" for b in args.bridges.split(",") if b]
    conversations, questions = load_dataset(args.dataset)
    use_bundled_tokenizers()
    encoding = tiktoken.get_encoding("o200k_base")
    report: dict[str, Any] = {
        "dataset": {"variant": args.dataset or "default", "conversations": len(conversations), "questions": len(questions),
                    "turns": sum(len(s["turns"]) for c in conversations for s in c["sessions"])},
        "budget": {"top_k": args.top_k, "max_tokens": args.max_tokens},
        "cpus": os.cpu_count(), "embedders": {},
    }  # fmt: skip
    for name in args.embedders.split(","):
        report["embedders"][name] = await run_embedder(name, args, conversations, questions, encoding)
    print(json.dumps(report, indent=1))
    print(table(report))
    if args.out:
        await asyncio.to_thread(Path(args.out).write_text, json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
