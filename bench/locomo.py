"""Recall on real long conversations: LoCoMo's protocol through a real ``memproxy serve``.

    python bench/locomo.py [--locomo ../shared/datasets/locomo-dev/locomo-dev.json]
                           [--embedder onnx|hash] [--model DIR] [--out FILE]

The protocol (``../shared/datasets/locomo-dev/README.md``): every turn is one memory
(``"<speaker>: <text>"`` plus ``" [image: <caption>]"``, ``metadata.dia_id``), one scope per
conversation (``user_id`` = the sample id), stored through ``POST /v1/memories/import``;
each question with evidence is one ``POST /v1/memories/search`` (``top_k`` 50,
``min_score`` 0, the server's default embedder and ranking). recall@k is the share of the
question's evidence turns among the first k results, averaged over questions.

Also measured, as a user meets recall:
- ``gate``: a second search per question as recall runs it (``top_k`` = ``recall.top_k``,
  ``min_score`` = the default ``recall.min_score``): the share of questions with an
  evidence turn among what recall would inject, against the same share of the ungated
  first ``recall.top_k``;
- ``pairs``: first-person facts stored the way extraction phrases them ("User works at
  Acme Corp") and asked in the second person ("Where do I work?"), each must come back
  through the default gate; and small talk, which must recall nothing;
- search latency through the API (p50/p99, one client, sequential).

The dataset is read from its path and never copied into the project (its licence, CC
BY-NC 4.0, is not the project's). Prints a table and one JSON object (``--out`` too).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import processes
from stats import percentiles_ms

DEFAULT_PATH = (
    Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "locomo-dev" / "locomo-dev.json"
)
KS = (1, 5, 10, 25, 50)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
TOKEN = "locomo-bench"
RECALL_TOP_K = 8  # the defaults recall runs with (config.yaml recall.top_k)

# Stored as extraction phrases them, asked as a user asks: each must be recalled.
PAIRS = (
    ("User works at Acme Corp", "Where do I work?"),
    ("User likes hiking", "What do I like doing?"),
    ("User lives in Porto", "Where do I live?"),
    ("User's cat is called Miso", "What is my cat called?"),
    ("User is allergic to peanuts", "What am I allergic to?"),
    ("User's sister Joana is a dentist", "What does my sister do?"),
    ("User drives a blue Volvo", "What car do I drive?"),
    ("User is training for the Berlin marathon", "Which race am I training for?"),
)
FILLER = (
    "User prefers green tea to coffee", "User plays the cello on weekends", "User's manager is called Priya",
    "User is learning Portuguese", "User keeps bees in the back garden", "User's rent is due on the first",
)  # fmt: skip
SMALL_TALK = ("hi", "thanks!", "hello there", "ok cool", "good morning", "bye for now")


def load(path: Path) -> list[dict[str, Any]]:
    """Each conversation's turns (dia_id, text in the protocol's form) and questions with evidence."""
    conversations = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        sessions = sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k[8:]))
        turns = []
        for session in sessions:
            for turn in conv[session]:
                text = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [image: {turn['blip_caption']}]"
                turns.append((turn["dia_id"], text))
        known = {dia for dia, _ in turns}
        questions = []
        for qa in sample["qa"]:
            evidence = list(dict.fromkeys(e for raw in qa.get("evidence", []) for e in _dia_ids(str(raw))))
            evidence = [e for e in evidence if e in known]
            if evidence:
                questions.append(
                    {"question": qa["question"], "evidence": evidence, "category": qa["category"]}
                )
        conversations.append({"id": sample["sample_id"], "turns": turns, "questions": questions})
    return conversations


def _dia_ids(raw: str) -> list[str]:
    """Normalised dialogue ids of one evidence entry ("D8:6; D9:17", "D:11:26" and such)."""
    found = re.findall(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", raw)
    return [f"D{int(session)}:{int(turn)}" for session, turn in found]


def settings(data_dir: Path, port: int, embedder: str, model: str | None) -> dict[str, Any]:
    embedding: dict[str, Any] = {"provider": embedder}
    if model:
        embedding["model"] = model
    return {
        "server": {"port": port},
        "storage": {"data_dir": str(data_dir)},
        "embedding": embedding,
        "memory": {"max_chars": 4000},  # no turn refused for its length
        "extraction": {"worker_enabled": False},
    }


def import_turns(http: httpx.Client, conversations: list[dict[str, Any]]) -> None:
    """Every turn one memory of its conversation's scope, through ``POST /v1/memories/import``."""
    for conv in conversations:
        lines = [json.dumps({"user_id": conv["id"], "text": text, "metadata": {"dia_id": dia}})
                 for dia, text in conv["turns"]]  # fmt: skip
        http.post("/v1/memories/import", content="\n".join(lines) + "\n").raise_for_status()


def evaluate(url: str, conversations: list[dict[str, Any]]) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    hits: dict[int, list[float]] = {k: [] for k in KS}
    by_category: dict[int, dict[int, list[float]]] = {}
    gated_any: list[bool] = []
    ungated_any: list[bool] = []
    latencies: list[float] = []
    # 30 min: one import request embeds a whole conversation (~600 turns), which a base-size
    # model (docs/stronger-models.md) took over 120 s to do on a busy 2-core machine.
    with httpx.Client(base_url=url, headers=headers, timeout=1800) as http:
        started = time.perf_counter()
        import_turns(http, conversations)
        ingest_s = time.perf_counter() - started
        for conv in conversations:
            for q in conv["questions"]:
                body = {"query": q["question"], "user_id": conv["id"], "top_k": 50, "min_score": 0}
                t0 = time.perf_counter()
                reply = http.post("/v1/memories/search", json=body)
                latencies.append(time.perf_counter() - t0)
                reply.raise_for_status()
                got = [m["metadata"].get("dia_id") for m in reply.json()["data"]]
                evidence = set(q["evidence"])
                for k in KS:
                    share = len(set(got[:k]) & evidence) / len(evidence)
                    hits[k].append(share)
                    by_category.setdefault(q["category"], {kk: [] for kk in KS})[k].append(share)
                gated = http.post("/v1/memories/search",
                                  json={"query": q["question"], "user_id": conv["id"], "top_k": RECALL_TOP_K})  # fmt: skip
                gated.raise_for_status()
                ungated_any.append(bool(set(got[:RECALL_TOP_K]) & evidence))
                gated_any.append(bool({m["metadata"].get("dia_id") for m in gated.json()["data"]} & evidence))
    both = sum(1 for g, u in zip(gated_any, ungated_any, strict=True) if g and u)
    return {
        "questions": len(hits[1]),
        "recall": {f"R@{k}": _pct(hits[k]) for k in KS},
        "recall_without_adversarial": {
            f"R@{k}": _pct([v for c, per in by_category.items() if c != 5 for v in per[k]]) for k in KS
        },
        "by_category_R@10": {
            CATEGORIES.get(c, str(c)): _pct(per[10]) for c, per in sorted(by_category.items())
        },
        "by_category_R@1": {
            CATEGORIES.get(c, str(c)): _pct(per[1]) for c, per in sorted(by_category.items())
        },
        "gate": {
            "evidence_in_top_k_ungated": _pct([float(u) for u in ungated_any]),
            "evidence_injected_with_default_gate": _pct([float(g) for g in gated_any]),
            "kept_by_gate_of_ungated": round(100.0 * both / max(1, sum(ungated_any)), 1),
        },
        "search_latency": percentiles_ms(latencies, (50, 99)),
        "ingest_s": round(ingest_s, 1),
    }


def check_pairs(url: str) -> dict[str, Any]:
    """Second-person questions against first-person facts, and small talk, through the default gate."""
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Memproxy-User-Id": "pairs"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
        for text in [fact for fact, _ in PAIRS] + list(FILLER):
            http.post("/v1/memories", json={"text": text}).raise_for_status()
        misses = []
        for fact, question in PAIRS:
            found = http.post("/v1/memories/search", json={"query": question, "top_k": RECALL_TOP_K}).json()[
                "data"
            ]
            if fact not in [m["text"] for m in found]:
                misses.append(question)
        chatty = []
        for phrase in SMALL_TALK:
            found = http.post("/v1/memories/search", json={"query": phrase, "top_k": RECALL_TOP_K}).json()[
                "data"
            ]
            if found:
                chatty.append(phrase)
    return {"pairs": len(PAIRS), "pairs_missed": misses, "small_talk_recalling": chatty}


def run(path: Path, embedder: str = "onnx", model: str | None = None) -> dict[str, Any]:
    conversations = load(path)
    with tempfile.TemporaryDirectory(prefix="memproxy-locomo-") as tmp:
        work = Path(tmp)
        port = processes.free_port()
        child = processes.memproxy_child(
            "serve", settings(work / "data", port, embedder, model), work, "memproxy"
        )
        with processes.running([child]):
            url = f"http://127.0.0.1:{port}"
            result = {
                "embedder": embedder,
                "model": model,
                **evaluate(url, conversations),
                **check_pairs(url),
            }
    return result


def plain_bm25(path: Path) -> dict[str, Any]:
    """The reference row: textbook BM25 (k1 1.2, b 0.75, lowercase words, no stopwords removed,
    no stems) over the same turns, in process: what keyword search alone finds."""
    hits: dict[int, list[float]] = {k: [] for k in KS}
    for conv in load(path):
        docs = [Counter(re.findall(r"\w+", text.lower())) for _, text in conv["turns"]]
        lengths = np.asarray([sum(doc.values()) for doc in docs], dtype=np.float64)
        df = Counter(term for doc in docs for term in doc)
        n, avgdl = len(docs), float(lengths.mean())
        ids = [dia for dia, _ in conv["turns"]]
        for q in conv["questions"]:
            scores = np.zeros(n)
            for term in set(re.findall(r"\w+", q["question"].lower())):
                if term not in df:
                    continue
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                tf = np.asarray([doc.get(term, 0) for doc in docs], dtype=np.float64)
                scores += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * lengths / avgdl))
            order = [ids[i] for i in np.argsort(-scores, kind="stable")[:50] if scores[i] > 0]
            for k in KS:
                hits[k].append(len(set(order[:k]) & set(q["evidence"])) / len(q["evidence"]))
    return {"embedder": "plain BM25 (reference)", "questions": len(hits[1]),
            "recall": {f"R@{k}": _pct(hits[k]) for k in KS}}  # fmt: skip


def _pct(values: list[float]) -> float:
    return round(100.0 * sum(values) / max(1, len(values)), 1)


def table(result: dict[str, Any]) -> str:
    r = result["recall"]
    head = "| embedder | " + " | ".join(f"R@{k}" for k in KS) + " | " + " | ".join(
        result["by_category_R@10"]) + " (R@10) | search p50/p99 ms |"  # fmt: skip
    row = f"| {result['embedder']} | " + " | ".join(f"{r[f'R@{k}']:.1f}" for k in KS) + " | " + " | ".join(
        f"{v:.1f}" for v in result["by_category_R@10"].values()) + (
        f" | {result['search_latency'].get('p50_ms', 0):.1f} / {result['search_latency'].get('p99_ms', 0):.1f} |")  # fmt: skip
    return head + "\n" + row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--locomo", type=Path, default=DEFAULT_PATH, help="path of locomo-dev.json")
    parser.add_argument("--embedder", default="onnx", help="embedding.provider (onnx, hash, ...)")
    parser.add_argument("--model", default=None, help="embedding.model (e.g. an ONNX model directory)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON result here")
    parser.add_argument("--reference", action="store_true", help="score plain BM25 in process instead")
    args = parser.parse_args(argv)
    if args.reference:
        result = plain_bm25(args.locomo)
        print(json.dumps(result, indent=2))
        return 0
    result = run(args.locomo, args.embedder, args.model)
    print(table(result))
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
