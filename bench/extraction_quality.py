"""Extraction quality: scripted conversations in, final memory state scored against what it should be.

Each conversation is a list of sessions of (user, assistant) turns and the facts its final
memory state should hold: durable facts, facts that changed (the old version must be gone),
a retraction, secrets (never stored), small talk and assistant suggestions (never facts).
Every turn goes through the real pipeline: ``POST /v1/memories`` with ``messages`` queues it
like a captured chat turn, the worker extracts it (guards included), and the bench waits for
the job before the next turn, then reads ``GET /v1/memories``.

Scores per run (JSON on stdout):
- ``precision``: stored memories that state an expected fact / stored memories;
- ``recall``: expected facts stated by some stored memory / expected facts;
- ``updates_applied`` / ``retractions_applied`` (of ``…_expected``): the old fact was stored
  at some point before the change, and at the end the new fact is there and the old one is not;
- ``secrets_stored`` (must be 0): memories that ever held a secret (checked after every turn);
- ``junk_stored``: stored memories that state no expected fact (small talk, suggestions, …);
- ``relative_dates_stored``: memories still saying "tomorrow", "next Friday", "last month" …;
- ``dead_jobs``, ``empty_answers``, ``refused`` (guard refusals by reason from the jobs'
  reports), ``longest_memory_chars``. A run-on counts once in precision however many facts
  it merges: read precision next to ``longest_memory_chars``.

Modes:
- ``--scripted``: the rule-based stand-in (``memproxy.testing.scripted_extractor``);
- ``--replay FILE``: each extraction call is answered with a recorded small-model answer
  for the same user message (``tests/data/small-models.jsonl``; one run per recorded model),
  so the guards are scored on real bad answers, offline;
- ``--model M [--api-base URL] [--api-key KEY]``: a real extraction model through LiteLLM
  (bring your own key; ``$MEMPROXY_BENCH_API_KEY`` or the provider's usual env var).
Without flags: ``--scripted`` and ``--replay tests/data/small-models.jsonl``.

Usage: ``python bench/extraction_quality.py [--scripted] [--replay FILE] [--model M ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx

from memproxy.api.app import create_app
from memproxy.config import settings_from_dict
from memproxy.testing.background_server import BackgroundServer
from memproxy.testing.scripted_extractor import rule_extractor
from memproxy.testing.scripted_upstream import ScriptedUpstream

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "tests" / "data" / "small-models.jsonl"
TOKEN = "sk-bench-extraction"
RELATIVE = re.compile(
    r"\b(?:tomorrow|yesterday|tonight|next (?:week|month|year|\w+day)|last (?:week|month|year))\b", re.I
)


@dataclass
class Fact:
    name: str
    pattern: str  # a memory states the fact when this matches (case-insensitive)
    stale: str | None = None  # the fact's old version: must be gone at the end
    retracted: bool = False  # the user took it back: ``stale`` must be gone, nothing replaces it


@dataclass
class Conversation:
    name: str
    sessions: list[list[tuple[str, str]]]
    facts: list[Fact]
    secrets: list[str] = field(default_factory=list)


def _maya_sessions() -> list[list[tuple[str, str]]]:
    """The recorded 4-session conversation (user turns and the 1.5B model's replies)."""
    sessions: list[list[tuple[str, str]]] = []
    seen: set[str] = set()
    for line in SAMPLES.read_text().splitlines():
        row = json.loads(line)
        if not row["model"].startswith("Qwen2.5-Coder-1.5B") or row["user"] in seen:
            continue
        seen.add(row["user"])
        if row["session_start"] or not sessions:
            sessions.append([])
        sessions[-1].append((row["user"], row["assistant"] or ""))
    return sessions


MAYA = Conversation(
    "maya",
    _maya_sessions(),
    [
        Fact("name", r"\bmaya\b"),
        Fact("home", r"\bporto\b", stale=r"\b(?:lives?|living|based) in lisbon\b"),
        Fact("job", r"\bux\b|designer", stale=r"(?:works?|working) as a nurse|\bis a nurse\b|nurse at"),
        Fact("dog", r"biscuit|golden retriever"),
        Fact("allergy", r"shellfish"),
        Fact("diet", r"chicken|not (?:a )?vegetarian|no longer (?:a )?vegetarian"),
        Fact(
            "vegetarian",
            r"(?<!not )(?<!not a )(?<!no longer )(?<!no longer a )\bvegetarian\b(?! anymore)",
            stale=r"(?<!not )(?<!not a )(?<!no longer )(?<!no longer a )\bvegetarian\b(?! anymore)",
            retracted=True,
        ),
        Fact("partner", r"tom[aá]s"),
        Fact("trip", r"tokyo"),
        Fact("cello", r"cello|orchestra"),
        Fact("coffee", r"coffee"),
        Fact("answers", r"short answers|bullet"),
        Fact("japanese", r"japanese|duolingo"),
        Fact("birthday", r"march 14|14 march|birthday"),
    ],
    secrets=[r"hunter2"],
)

LEO = Conversation(
    "leo",
    [
        [
            ("Hi, my name is Leo. I work at Initech as an accountant.", "Nice to meet you, Leo!"),
            ("I live in Munich.", "Munich is a great city."),
            ("I love jazz. I play the saxophone on weekends.", "Saxophone and jazz go well together."),
            ("What should I cook tonight?", "You could try a mushroom risotto or a Thai green curry."),
            (
                "Here is my OpenAI key for later: sk-proj-4fJ9kL2mN8pQ1rS5tU7vW3xY6zA0bC2d",
                "I'd rather not keep API keys; please store it in a password manager.",
            ),
        ],
        [
            ("I don't like jazz anymore. These days I listen to techno.", "Techno it is."),
            ("I moved to Berlin.", "Welcome to Berlin!"),
            (
                "My card number is 4111 1111 1111 1111, remember it for the booking.",
                "I can't store card numbers.",
            ),
            ("Thanks, bye!", "Bye!"),
        ],
    ],
    [
        Fact("name", r"\bleo\b"),
        Fact("job", r"initech|accountant"),
        Fact("saxophone", r"saxophone"),
        Fact("techno", r"techno"),
        Fact("home", r"berlin", stale=r"\b(?:lives?|living|based) in munich\b"),
        Fact(
            "jazz", r"(?<!not like )\bjazz\b", stale=r"\b(?:likes?|loves?|enjoys?)\s+jazz\b", retracted=True
        ),
    ],
    secrets=[r"sk-proj-", r"4111[ -]?1111"],
)

CONVERSATIONS = [MAYA, LEO]


def _states(fact: Fact, text: str) -> bool:
    return re.search(fact.pattern, text, re.I) is not None


def _stale(fact: Fact, text: str) -> bool:
    return fact.stale is not None and re.search(fact.stale, text, re.I) is not None


@dataclass
class Trace:
    """What a run saw: the memory texts after every turn, and the final jobs."""

    snapshots: list[list[str]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)


def score(conversation: Conversation, trace: Trace, show: bool = False) -> dict[str, Any]:
    final = trace.snapshots[-1] if trace.snapshots else []
    current = [f for f in conversation.facts if not f.retracted]
    matched = [t for t in final if any(_states(f, t) for f in current)]
    updates = [f for f in current if f.stale]
    retractions = [f for f in conversation.facts if f.retracted]

    def changed(f: Fact) -> bool:
        was_stored = any(_stale(f, t) for snap in trace.snapshots[:-1] for t in snap)
        now_right = not any(_stale(f, t) for t in final) and (
            f.retracted or any(_states(f, t) for t in final)
        )
        return was_stored and now_right

    ever = {t for snap in trace.snapshots for t in snap}
    reports = [j["report"] for j in trace.jobs if j.get("report")]
    return {
        "memories": len(final),
        "longest_memory_chars": max((len(t) for t in final), default=0),
        "precision": round(len(matched) / len(final), 3) if final else 0.0,
        "recall": round(sum(any(_states(f, t) for t in final) for f in current) / len(current), 3),
        "updates_applied": sum(changed(f) for f in updates),
        "updates_expected": len(updates),
        "retractions_applied": sum(changed(f) for f in retractions),
        "retractions_expected": len(retractions),
        "secrets_stored": sum(any(re.search(s, t, re.I) for s in conversation.secrets) for t in ever),
        "junk_stored": len(final) - len(matched),
        "relative_dates_stored": sum(bool(RELATIVE.search(t)) for t in final),
        "dead_jobs": sum(j["status"] == "dead" for j in trace.jobs),
        "empty_answers": sum(bool(r.get("empty_answer")) for r in reports),
        "refused": dict(sorted(Counter(x["reason"] for r in reports for x in r["rejected"]).items())),
        **({"final_memories": final} if show else {}),
    }


def _wait_job(http: httpx.Client, job_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}").json()
        if job.get("status") in ("done", "dead") or time.monotonic() > deadline:
            return job
        time.sleep(0.05)


def run_conversation(base_url: str, conversation: Conversation, timeout_s: float) -> Trace:
    trace, user = Trace(), f"{conversation.name}-{time.time_ns()}"
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http:
        for n, session in enumerate(conversation.sessions):
            for said, answered in session:
                messages = [{"role": "user", "content": said}, {"role": "assistant", "content": answered}]
                queued = http.post(
                    "/v1/memories", json={"user_id": user, "session_id": f"s{n}", "messages": messages}
                )
                queued.raise_for_status()
                trace.jobs.append(_wait_job(http, queued.json()["job_id"], timeout_s))
                listed = http.get("/v1/memories", params={"user_id": user, "limit": 1000}).json()["data"]
                trace.snapshots.append([m["text"] for m in listed])
    return trace


def replayer(rows: list[dict[str, Any]]) -> Callable[[dict[str, Any]], str]:
    """Answer each extraction call with the next recorded answer for its user message."""
    queues: dict[str, list[str]] = {}
    for row in rows:
        queues.setdefault(row["user"], []).append(row["raw_answer"])

    def answer(body: dict[str, Any]) -> str:
        new = json.loads(body["messages"][1]["content"])["new_messages"]
        said = next((m["content"] for m in new if m["role"] == "user"), "")
        recorded = queues.get(said) or ['{"operations": []}']
        return recorded.pop(0) if len(recorded) > 1 else recorded[0]

    return answer


def run(
    name: str, settings: dict[str, Any], conversations: list[Conversation], args: argparse.Namespace
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memproxy-extraction-") as data_dir:
        settings = {**settings, "storage": {"data_dir": data_dir}}
        started = time.monotonic()
        with BackgroundServer(create_app(settings_from_dict(settings))) as server:
            scores = {
                c.name: score(c, run_conversation(server.url, c, args.timeout), args.show)
                for c in conversations
            }
        print(f"{name}: {time.monotonic() - started:.1f} s", file=sys.stderr)
    return scores


def offline_settings(fake_v1: str) -> dict[str, Any]:
    return {
        "upstream": {"api_base": fake_v1, "timeout_s": 30},
        "embedding": {"provider": "hash"},
        "extraction": {"model": "extractor", "poll_interval_s": 0.05, "backoff_base_s": 0.05},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scripted", action="store_true", help="run against the rule-based scripted extractor"
    )
    parser.add_argument(
        "--replay", type=Path, help="recorded answers (JSON Lines) to replay, one run per model"
    )
    parser.add_argument("--model", help="a real extraction model (LiteLLM name)")
    parser.add_argument("--api-base", help="OpenAI-compatible base URL for --model")
    parser.add_argument("--api-key", default=os.environ.get("MEMPROXY_BENCH_API_KEY"), help="key for --model")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for one job")
    parser.add_argument("--show", action="store_true", help="include each run's final memory texts")
    args = parser.parse_args()
    if not (args.scripted or args.replay or args.model):
        args.scripted, args.replay = True, SAMPLES
    results: dict[str, Any] = {}
    fake = ScriptedUpstream()
    with BackgroundServer(fake.app) as upstream:
        fake_v1 = upstream.url + "/v1"
        if args.scripted:
            fake.extractor = rule_extractor
            results["scripted"] = run("scripted", offline_settings(fake_v1), CONVERSATIONS, args)
        if args.replay:
            rows = [json.loads(line) for line in args.replay.read_text().splitlines() if line.strip()]
            for model in dict.fromkeys(row["model"] for row in rows):
                fake.extractor = replayer([row for row in rows if row["model"] == model])
                results[f"replay:{model}"] = run(model, offline_settings(fake_v1), [MAYA], args)
    if args.model:
        upstream_cfg: dict[str, Any] = {"timeout_s": 120}
        if args.api_base:
            upstream_cfg["api_base"] = args.api_base
        if args.api_key:
            upstream_cfg["api_key"] = args.api_key
        live = {"upstream": upstream_cfg, "embedding": {"provider": "hash"},
                "extraction": {"model": args.model, "poll_interval_s": 0.05, "backoff_base_s": 1}}  # fmt: skip
        results[f"model:{args.model}"] = run(args.model, live, CONVERSATIONS, args)
    print(json.dumps({"runs": results}, indent=1))


if __name__ == "__main__":
    main()
