"""What memproxy adds to a chat call, next to a bare ``litellm.acompletion`` and LiteLLM's proxy.

One run measures these rows against the same scripted upstream (``ScriptedUpstream``):

- ``direct``: an aiohttp ``ClientSession`` (keep-alive) posting straight to the fake upstream;
- ``litellm``: ``litellm.acompletion`` to the fake (``api_base``, ``custom_llm_provider="openai"``);
- ``litellm_proxy``: LiteLLM's own proxy server, started from its package as a user runs it
  (``litellm --config <yaml>``, one worker, a master key), same aiohttp session;
- ``memproxy_off``: memproxy as configured by default (``upstream.fast_path: auto``, so the
  fake, an OpenAI-compatible endpoint, is relayed byte for byte), one process, memory off (no
  scope headers);
- ``memproxy_on``: the same with memory on (``X-Memproxy-User-Id`` naming a scope that holds
  ``--memories`` (10k) memories, recall on) and the default embedder (``embedding.provider:
  onnx``, the built-in int8 MiniLM: what ``memproxy serve`` ships);
- ``memproxy_on_hash``: memory on with the ``hash`` embedder (no model; its own data dir);
- ``memproxy_on_cached``: the default embedder, the **same question every time**: after the
  first request every query embedding is a cache hit (the cache-hit case, not the typical one);
- ``memproxy_litellm_off`` / ``memproxy_litellm_on``: ``upstream.fast_path: off``, i.e. every
  request through LiteLLM (what memproxy did before issue 12), ``hash`` embedder;
- ``memproxy_on_w2``: the fast path, memory on, default embedder, ``memproxy serve --workers 2``.

Questions (issue 25): every request of every row but ``memproxy_on_cached`` asks a different
question (the rows share the client's cost of building bodies), drawn in turn from a pool of
``--questions`` (4,000) generated questions about facts stored in the scope (``question_pool``);
the pool is larger than the query-embedding cache (1,024 entries, LRU) and each row walks it
from its own offset, so no varied request is answered from that cache: ``breakdown`` shows the
hits the servers counted.

Breakdown: for the memory-on rows served by one process, ``/metrics`` is read before and after
each row's load and the difference of the server's own histograms is reported per request
(``breakdown``): recall's stages (``memproxy_recall_stage_duration_seconds``: embed, search,
budget, placement), the whole recall, the relay to the fake (``memproxy_upstream_duration_seconds``,
fast path), query-embedding cache hits and misses, and the mean batch of micro-batched queries.

Capture is off on the memory-on rows (``X-Memproxy-Capture: off``) so they isolate recall and
no extraction worker competes for the CPU. All memproxy servers share one seeded data dir
(as ``--workers`` processes do).

For each row: concurrency 1 and 32; non-stream latency and stream time-to-first-chunk
(first body bytes for aiohttp, first chunk object for LiteLLM); p50/p95/p99 in ms and
requests/s, and the share of the whole machine's CPU that was busy while the row ran
(``machine_cpu_busy``: near 1.0, the load generator, the fake and the servers together
used every core, so requests/s measure the machine). Rows are interleaved in rounds so drift (CPU frequency, other load on the
machine) spreads over all of them. Printed as one JSON document with the overheads (row
minus ``direct``), their ratios and verdicts on issue 12's targets, judged as ratios
within this run because absolute times differ a lot between machines of this class:

- issue 25, memory on with the default embedder, varied questions: c=1 p50 adds <= 1/4 of
  what ``litellm_proxy`` adds, c=32 p50 <= 1/6 of it, c=32 requests/s >= 2x ``litellm_proxy``'s;
- issue 12, c=1 p50: ``memproxy_off`` adds <= 1/5 of what ``litellm`` adds; ``memproxy_on_hash``
  <= 1/3; c=32 p50: ``memproxy_off`` adds <= 1/5 of what ``litellm_proxy`` adds; c=32
  requests/s, memory on: one fast-path process (``hash``) >= 3x ``memproxy_litellm_on``;
  ``--workers 2`` >= 1.7x one process (both with the default embedder).

Fairness (the machine has 2 cores): the fake upstream and each server run in their own
process, so the load generator, the fake and the proxies never share a GIL. The load
generator's client is aiohttp (an httpx ``AsyncClient`` costs 0.8 ms a call at concurrency
1 here and its pool collapses at 32, so it would measure itself); the same session serves
the ``direct``, LiteLLM-proxy and memproxy rows, so what the client costs cancels out of
the overheads. The load generator, the fake and the servers still share the two cores, so
c=32 figures (and requests/s, ``--workers 2`` above all) are bounded by the whole machine,
not by the server alone. ``--in-process`` runs the fake and one fast-path memproxy on
threads instead (quick, only the direct, litellm, memproxy_off and memproxy_on_hash rows).

The memories are seeded before memproxy starts, into one data dir per embedder (a data dir
holds one embedder's vectors), through the storage layer's own code (``MemoryStore.import_``
with that embedder, then an index snapshot), so the rows are exactly what the API would have
written. Embedding 10k memories with MiniLM takes about a minute: ``--data-cache DIR`` keeps
the seeded data dirs there and reuses them on the next run.

Usage: ``python bench/overhead.py [--quick] [--requests N] [--memories N] [--questions N]
[--skip ROW ...] [--in-process] [--data-cache DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import aiohttp
import numpy as np
import processes

from memproxy.auth import passthrough_tenant
from memproxy.config import Settings, settings_from_dict
from memproxy.scope import Scope
from memproxy.upstream.provider import import_litellm

MODEL = "gpt-4o-mini"
TOKEN = "sk-bench-0000000000000000"
USER_ID = "bench-user"
MESSAGES: list[dict[str, str]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What should I cook tonight? Something with the vegetables I like."},
]
MASTER_KEY = "sk-bench-litellm-proxy-master-0000"
ROWS = ("direct", "litellm", "litellm_proxy", "memproxy_off", "memproxy_on", "memproxy_on_hash",
        "memproxy_on_cached", "memproxy_litellm_off", "memproxy_litellm_on", "memproxy_on_w2")  # fmt: skip
IN_PROCESS_ROWS = ("direct", "litellm", "memproxy_off", "memproxy_on_hash")
MEMORY_ON_ROWS = (
    "memproxy_on",
    "memproxy_on_hash",
    "memproxy_on_cached",
    "memproxy_litellm_on",
    "memproxy_on_w2",
)
# Issue 25's targets (memory on, default embedder, varied questions, 10k memories), as ratios
# within one run.
TARGET_ON_VS_LITELLM_PROXY_C1 = 1 / 4  # c=1 p50, added over direct
TARGET_ON_VS_LITELLM_PROXY_C32 = 1 / 6  # c=32 p50, added over direct
TARGET_RPS_ON_VS_LITELLM_PROXY = 2.0  # c=32 requests/s
# Issue 12's targets, as ratios within one run.
TARGET_FAST_OFF_VS_LITELLM = 1 / 5  # c=1 p50, added over direct
TARGET_FAST_ON_VS_LITELLM = 1 / 3  # c=1 p50, 10k memories in the scope (hash embedder)
TARGET_OFF_VS_LITELLM_PROXY = 1 / 5  # c=32 p50
TARGET_RPS_ON_VS_TODAY = 3.0  # c=32, memory on, one process: fast path vs LiteLLM path
TARGET_RPS_W2_VS_W1 = 1.7  # c=32, memory on, fast path
MODES = ("non_stream", "stream_ttfc")
PERCENTILES = (50, 95, 99)
ROUNDS = 3

Call = Callable[[], Awaitable[float]]
_STARTED = time.perf_counter()


def progress(message: str) -> None:
    """Progress on stderr, so stdout stays one JSON document."""
    print(f"[{time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


@dataclass
class Plan:
    requests_c1: int
    requests_c32: int
    warmup: int
    memories: int
    in_process: bool
    rows: tuple[str, ...] = ROWS
    questions: int = 4000

    @property
    def per_concurrency(self) -> dict[int, int]:
        return {1: self.requests_c1, 32: self.requests_c32}


@dataclass
class Observed:
    """Response headers seen on a memory-on row (is recall wired, how much it found, did it fail open)."""

    recalled: list[int] = field(default_factory=list)
    recall_errors: dict[str, int] = field(default_factory=dict)


Questions = Callable[[], str]


def walk(pool: list[str], offset: int) -> Questions:
    """The next question of ``pool`` on each call, from ``offset``, wrapping around."""
    position = offset

    def next_question() -> str:
        nonlocal position
        question = pool[position % len(pool)]
        position += 1
        return question

    return next_question


# --------------------------------------------------------------------------- servers


def same_answer_for_every_row() -> None:
    """Make the fake's answer ignore system messages (so injected memories too).

    The scripted upstream echoes recalled memories into its answer; a streamed answer
    would then be ~100 chunks longer on the memory-on row, and that row would measure
    relaying a longer answer instead of recall. Only this bench's fake is changed.
    """
    from memproxy.testing import scripted_upstream

    original = scripted_upstream.reply_for

    def reply_for(body: dict[str, Any]) -> str:
        messages = [
            m for m in body.get("messages", []) if not (isinstance(m, dict) and m.get("role") == "system")
        ]
        return original({**body, "messages": messages})

    scripted_upstream.reply_for = reply_for


def serve_fake(port: int) -> None:
    """Child-process entry: the scripted upstream alone on ``port``, answering every row alike."""
    same_answer_for_every_row()
    processes.serve_scripted_upstream(port)


def proxy_settings(fake_v1: str, data_dir: Path, port: int, fast_path: str = "auto",
                   embedder: str = "hash") -> dict[str, Any]:  # fmt: skip
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "storage": {"data_dir": str(data_dir)},
        "upstream": {"api_base": fake_v1, "timeout_s": 30, "fast_path": fast_path},
        "embedding": {"provider": embedder},
    }


EMBEDDERS = ("onnx", "hash")  # the default embedder, and the one without a model
# memproxy servers → (fast_path, embedding.provider, extra ``serve`` arguments)
SERVERS = {
    "memproxy": ("auto", "hash", ()),
    "memproxy_onnx": ("auto", "onnx", ()),
    "memproxy_litellm": ("off", "hash", ()),
    "memproxy_w2": ("auto", "onnx", ("--workers", "2")),
}
ROW_SERVER = {"memproxy_off": "memproxy", "memproxy_on_hash": "memproxy", "memproxy_on": "memproxy_onnx",
              "memproxy_on_cached": "memproxy_onnx", "memproxy_litellm_off": "memproxy_litellm",
              "memproxy_litellm_on": "memproxy_litellm", "memproxy_on_w2": "memproxy_w2"}  # fmt: skip
# One process answers its /metrics: the breakdown is read from these (not from --workers 2).
SINGLE_PROCESS_SERVERS = ("memproxy", "memproxy_onnx", "memproxy_litellm")


def embedders_needed(rows: tuple[str, ...]) -> list[str]:
    return [e for e in EMBEDDERS if any(SERVERS[ROW_SERVER[r]][1] == e for r in rows if r in ROW_SERVER)]


@contextlib.contextmanager
def servers(plan: Plan, work: Path, data_dirs: dict[str, Path], while_starting: Callable[[], None],
            ) -> Iterator[tuple[str, dict[str, str]]]:  # fmt: skip
    """Start the fake and the servers the rows need; yield (fake /v1 base, {server: base URL})."""
    from memproxy.testing.background_server import BackgroundServer

    if plan.in_process:
        from memproxy.api.app import create_app
        from memproxy.testing.scripted_upstream import ScriptedUpstream

        while_starting()
        same_answer_for_every_row()
        with BackgroundServer(ScriptedUpstream().app) as fake:
            in_process = settings_from_dict(proxy_settings(fake.url + "/v1", data_dirs["hash"], 0))
            with BackgroundServer(create_app(in_process)) as proxy:
                yield fake.url + "/v1", {"memproxy": proxy.url}
        return
    fake_port = processes.free_port()
    fake_v1 = f"http://127.0.0.1:{fake_port}/v1"
    children = [processes.upstream_child(__file__, "--serve-fake", fake_port, work / "fake.log")]
    urls: dict[str, str] = {}
    for name in sorted({ROW_SERVER[row] for row in plan.rows if row in ROW_SERVER}):
        port = processes.free_port()
        fast_path, embedder, extra = SERVERS[name]
        config = proxy_settings(fake_v1, data_dirs[embedder], port, fast_path, embedder)
        children.append(processes.memproxy_child("serve", config, work, name, *extra))
        urls[name] = f"http://127.0.0.1:{port}"
    if "litellm_proxy" in plan.rows:
        port = processes.free_port()
        model = {"model_name": MODEL, "litellm_params": {"model": f"openai/{MODEL}", "api_base": fake_v1,
                                                         "api_key": TOKEN}}  # fmt: skip
        children.append(processes.litellm_proxy_child(port, [model], MASTER_KEY, work))
        urls["litellm_proxy"] = f"http://127.0.0.1:{port}"
    with processes.running(children, while_starting):
        try:
            yield fake_v1, urls
        finally:
            progress("stopping the servers")


# --------------------------------------------------------------------------- seeding


FOODS = ("spinach", "carrots", "leeks", "peppers", "mushrooms", "tofu", "salmon", "lentils", "rice", "pasta",
         "aubergines", "chickpeas", "courgettes", "kale", "quinoa", "beetroot", "fennel", "okra", "shrimp",
         "halloumi", "mangoes", "figs", "walnuts", "barley", "squid", "asparagus", "plums", "tempeh",
         "sardines", "pumpkin", "radishes", "oysters", "noodles", "apricots", "cabbage", "dates", "millet",
         "artichokes", "cashews", "mackerel")  # fmt: skip
PLACES = ("Berlin", "Lisbon", "Osaka", "Denver", "Nairobi", "Lyon", "Quito", "Hanoi", "Oslo", "Perth", "Porto",
          "Kyoto", "Austin", "Accra", "Seville", "Cusco", "Busan", "Bergen", "Hobart", "Tbilisi", "Naples",
          "Sapporo", "Boise", "Dakar", "Granada", "Lima", "Hue", "Turku", "Darwin", "Yerevan", "Bologna",
          "Fukuoka", "Tucson", "Kigali", "Bilbao", "Arequipa", "Daegu", "Tromso", "Cairns", "Batumi")  # fmt: skip
# (how the memory says it, how the user's question says it)
VERBS = (("likes", "I like"), ("dislikes", "I dislike"), ("cooked", "I cooked"), ("bought", "I bought"),
         ("wants to try", "I want to try"), ("is allergic to", "I am allergic to"), ("grows", "I grow"),
         ("orders", "I order"))  # fmt: skip
QUESTIONS = (
    "Is it true that {claim} {food} from {place}?",
    "Did I tell you {claim} the {food} from {place}?",
    "Remind me whether {claim} {food} from {place}.",
    "Do you remember if {claim} {place} {food}?",
    "Quick question: {claim} {food} from {place}, right?",
    "Can you check my notes: {claim} {food} from {place}?",
    "What do you know about me and {food} from {place}?",
    "Anything about {food} from {place} I should keep in mind?",
    "Tell me again what I said about the {food} from {place}.",
    "Planning dinner: what did I say about {place} {food}?",
)


def fact(i: int) -> tuple[int, str, str]:
    """The ``i``-th fact: (verb index, food, place); 8 x 40 x 40 = 12,800 distinct facts."""
    return (
        i % len(VERBS),
        FOODS[(i // len(VERBS)) % len(FOODS)],
        PLACES[(i // (len(VERBS) * len(FOODS))) % len(PLACES)],
    )


def memory_texts(n: int) -> list[str]:
    """``n`` plausible facts, distinct up to 12,800 (so lexical and vector search have real work)."""
    texts = []
    for i in range(n):
        verb, food, place = fact(i)
        texts.append(f"The user {VERBS[verb][0]} {food} from {place}.")
    return texts


def question_pool(memories: int, size: int, seed: int = 25) -> list[str]:
    """``size`` distinct on-topic questions, each about one of the first ``memories`` facts
    (so its answer is in the scope), in a fixed shuffled order; fewer when the scope has
    fewer facts x phrasings."""
    rng = np.random.default_rng(seed)
    facts = min(memories, len(VERBS) * len(FOODS) * len(PLACES))
    pool: list[str] = []
    seen: set[str] = set()
    for cell in rng.permutation(facts * len(QUESTIONS)):
        verb, food, place = fact(int(cell) // len(QUESTIONS))
        question = QUESTIONS[int(cell) % len(QUESTIONS)].format(claim=VERBS[verb][1], food=food, place=place)
        if question not in seen:  # a phrasing without the verb is one question for all eight
            seen.add(question)
            pool.append(question)
            if len(pool) == size:
                break
    return pool


async def seed_memories(settings: Settings, scope: Scope, n: int) -> int:
    """Write ``n`` memories into ``scope`` with the storage layer, then snapshot its index."""
    from memproxy.memory.store import open_store

    async with open_store(settings) as store:
        items = [
            {"text": text, "user_id": scope.user_id, "agent_id": scope.agent_id} for text in memory_texts(n)
        ]
        counts = await store.import_(scope.tenant, items)
        await store.index.sync(scope)
        await store.index.snapshot(scope)
    return int(counts["imported"])


# --------------------------------------------------------------------------- calls


def messages(question: str) -> list[dict[str, str]]:
    return [MESSAGES[0], {"role": "user", "content": question}]


def body_bytes(stream: bool, question: str = MESSAGES[1]["content"]) -> bytes:
    return json.dumps({"model": MODEL, "messages": messages(question), "stream": stream}).encode()


def http_call(session: aiohttp.ClientSession, url: str, headers: dict[str, str], stream: bool,
              questions: Questions, observed: Observed | None = None) -> Call:  # fmt: skip
    all_headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}", **headers}

    async def check(response: aiohttp.ClientResponse) -> None:
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {(await response.text())[:300]}")
        if observed is not None:
            observed.recalled.append(int(response.headers.get("x-memproxy-recalled", "-1")))
            error = response.headers.get("x-memproxy-recall-error")
            if error:
                observed.recall_errors[error] = observed.recall_errors.get(error, 0) + 1

    async def non_stream() -> float:
        content = body_bytes(stream, questions())
        start = time.perf_counter()
        async with session.post(url, data=content, headers=all_headers) as response:
            await response.read()
        elapsed = time.perf_counter() - start
        await check(response)
        return elapsed

    async def first_chunk() -> float:
        content = body_bytes(stream, questions())
        start = time.perf_counter()
        async with session.post(url, data=content, headers=all_headers) as response:
            await check(response)
            await response.content.readany()
            elapsed = time.perf_counter() - start
            async for _ in response.content.iter_any():
                pass
        return elapsed

    return first_chunk if stream else non_stream


def litellm_call(litellm: Any, fake_v1: str, stream: bool, questions: Questions) -> Call:
    kwargs = {"model": MODEL, "api_base": fake_v1, "api_key": TOKEN,
              "custom_llm_provider": "openai", "max_retries": 0, "timeout": 30}  # fmt: skip

    async def non_stream() -> float:
        asked = messages(questions())
        start = time.perf_counter()
        await litellm.acompletion(**kwargs, messages=asked)
        return time.perf_counter() - start

    async def first_chunk() -> float:
        asked = messages(questions())
        start = time.perf_counter()
        response = await litellm.acompletion(**kwargs, messages=asked, stream=True)
        chunks = aiter(response)
        await anext(chunks)
        elapsed = time.perf_counter() - start
        async for _ in chunks:
            pass
        return elapsed

    return first_chunk if stream else non_stream


# --------------------------------------------------------------------------- load


@dataclass
class Samples:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None
    busy_s: float = 0.0
    # Machine-wide CPU while this row ran (/proc/stat jiffies): busy and all, over every core.
    cpu_busy: float = 0.0
    cpu_all: float = 0.0


def machine_cpu() -> tuple[float, float]:
    """(busy, all) jiffies over every core since boot; (0, 0) where /proc/stat is missing."""
    try:
        fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


async def run_load(call: Call, total: int, concurrency: int, into: Samples) -> None:
    remaining = total

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            try:
                into.latencies.append(await call())
            except Exception as exc:
                into.errors += 1
                into.first_error = into.first_error or f"{type(exc).__name__}: {exc}"[:300]

    start, (busy, every) = time.perf_counter(), machine_cpu()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, total))))
    into.busy_s += time.perf_counter() - start
    busy_after, every_after = machine_cpu()
    into.cpu_busy += busy_after - busy
    into.cpu_all += every_after - every


def summarize(samples: Samples) -> dict[str, Any]:
    ms = np.asarray(samples.latencies, dtype=np.float64) * 1000.0
    out: dict[str, Any] = {"n": len(samples.latencies), "errors": samples.errors}
    if len(ms):
        out.update({f"p{p}": round(float(np.percentile(ms, p)), 3) for p in PERCENTILES})
        out["mean"] = round(float(ms.mean()), 3)
        out["rps"] = round(len(ms) / samples.busy_s, 1) if samples.busy_s else None
    if samples.cpu_all:
        # 1.0: every core busy (load generator, fake and servers together) — the machine,
        # not the server, bounds requests/s then.
        out["machine_cpu_busy"] = round(samples.cpu_busy / samples.cpu_all, 3)
    if samples.first_error:
        out["first_error"] = samples.first_error
    return out


# --------------------------------------------------------------------------- the servers' own timings

Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]
STAGES = ("embed", "search", "budget", "placement")


async def scrape(session: aiohttp.ClientSession, url: str) -> Scrape:
    """Every sample of a server's ``/metrics``, by (name, sorted labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    async with session.get(url + "/metrics") as response:
        text = await response.text()
    samples: Scrape = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def add_difference(into: dict[str, float], before: Scrape, after: Scrape) -> None:
    """Accumulate what the metrics moved by between two scrapes of one server."""
    for key, value in after.items():
        name = key[0] + "".join(f"|{k}={v}" for k, v in key[1])
        into[name] = into.get(name, 0.0) + value - before.get(key, 0.0)


def breakdown(moved: dict[str, float], path: str) -> dict[str, Any]:
    """Per request means (ms) of recall's stages, the whole recall and the relay, from
    what the server's histograms moved by while a row ran; cache hits and batch sizes."""

    def mean_ms(name: str) -> float | None:
        count = moved.get(name.replace("{}", "_count"), 0.0)
        return round(moved.get(name.replace("{}", "_sum"), 0.0) / count * 1000, 3) if count else None

    stage = "memproxy_recall_stage_duration_seconds{}|stage="
    out: dict[str, Any] = {"mean_ms": {name: mean_ms(stage + name) for name in STAGES}}
    out["mean_ms"]["recall_total"] = mean_ms("memproxy_recall_duration_seconds{}")
    relay = [
        mean_ms(f"memproxy_upstream_duration_seconds{{}}|path={path}|streamed={flag}")
        for flag in ("false", "true")
    ]
    out["mean_ms"]["upstream"] = next((value for value in relay if value is not None), None)
    out["query_embedding_cache"] = {
        result: int(moved.get(f"memproxy_query_embeddings_total|result={result}", 0))
        for result in ("hit", "miss")
    }
    batches = moved.get("memproxy_query_embedding_batch_size_count", 0.0)
    out["mean_query_batch"] = (
        round(moved.get("memproxy_query_embedding_batch_size_sum", 0.0) / batches, 2) if batches else None
    )
    out["query_embedder_calls"] = int(batches)
    return out


async def measure(calls: dict[str, dict[str, Call]], plan: Plan, session: aiohttp.ClientSession,
                  metrics_urls: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """({"c1"|"c32": {mode: {row: summary}}}, the breakdown of the rows in ``metrics_urls``),
    rows interleaved in ``ROUNDS`` rounds."""
    results: dict[str, Any] = {}
    breakdowns: dict[str, Any] = {}
    for concurrency, total in plan.per_concurrency.items():
        per_mode: dict[str, Any] = {}
        for mode in MODES:
            samples = {row: Samples() for row in plan.rows}
            moved: dict[str, dict[str, float]] = {row: {} for row in metrics_urls}
            progress(f"concurrency {concurrency}, {mode}")
            for row in plan.rows:  # warm-up: connections, caches, the scope's index
                await run_load(calls[mode][row], plan.warmup, concurrency, Samples())
            for round_no in range(ROUNDS):
                share = total // ROUNDS + (1 if round_no < total % ROUNDS else 0)
                order = plan.rows if round_no % 2 == 0 else tuple(reversed(plan.rows))
                for row in order:
                    before = await scrape(session, metrics_urls[row]) if row in metrics_urls else None
                    await run_load(calls[mode][row], share, concurrency, samples[row])
                    if before is not None:
                        add_difference(moved[row], before, await scrape(session, metrics_urls[row]))
            per_mode[mode] = {row: summarize(samples[row]) for row in plan.rows}
            for row, changes in moved.items():
                path = "litellm" if row.startswith("memproxy_litellm") else "fast"
                breakdowns.setdefault(f"c{concurrency}", {}).setdefault(mode, {})[row] = breakdown(
                    changes, path
                )
        results[f"c{concurrency}"] = per_mode
    return results, breakdowns


# --------------------------------------------------------------------------- report


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return round(numerator / denominator, 3)


def derive(results: dict[str, Any]) -> dict[str, Any]:
    """Added latency over ``direct`` per row and percentile, and memory-on minus memory-off."""
    overhead: dict[str, Any] = {}
    memory: dict[str, Any] = {}
    for level, modes in results.items():
        for mode, rows in modes.items():
            for p in PERCENTILES:
                key = f"p{p}"
                if key not in rows["direct"]:
                    continue
                cell = overhead.setdefault(level, {}).setdefault(mode, {}).setdefault(key, {})
                for row, summary in rows.items():
                    if row != "direct" and key in summary:
                        cell[row] = round(summary[key] - rows["direct"][key], 3)
                for path, (off, on) in {"fast": ("memproxy_off", "memproxy_on"),
                                        "fast_hash": ("memproxy_off", "memproxy_on_hash"),
                                        "litellm": ("memproxy_litellm_off", "memproxy_litellm_on")}.items():  # fmt: skip
                    if key in rows.get(off, {}) and key in rows.get(on, {}):
                        memory.setdefault(level, {}).setdefault(mode, {}).setdefault(path, {})[
                            f"{key}_ms"
                        ] = round(rows[on][key] - rows[off][key], 3)
    return {"overhead_ms": overhead, "memory_on_minus_off": memory}


def _rps(results: dict[str, Any], mode: str, row: str) -> float | None:
    value = results.get("c32", {}).get(mode, {}).get(row, {}).get("rps")
    return float(value) if value is not None else None


def verdict(report: dict[str, Any]) -> dict[str, Any]:
    """Issues 25's and 12's targets, per mode, as ratios within this run (None: a row was skipped)."""
    added = report["overhead_ms"]
    out: dict[str, Any] = {}
    for mode in MODES:
        c1 = added.get("c1", {}).get(mode, {}).get("p50", {})
        c32 = added.get("c32", {}).get(mode, {}).get("p50", {})
        results = report["results"]
        checks = {
            # Issue 25: memory on, default embedder, varied questions.
            "c1_on_vs_litellm_proxy": (_ratio(c1.get("memproxy_on"), c1.get("litellm_proxy")),
                                       TARGET_ON_VS_LITELLM_PROXY_C1, "<="),
            "c32_on_vs_litellm_proxy": (_ratio(c32.get("memproxy_on"), c32.get("litellm_proxy")),
                                        TARGET_ON_VS_LITELLM_PROXY_C32, "<="),
            "c32_rps_on_vs_litellm_proxy": (_ratio(_rps(results, mode, "memproxy_on"),
                                                   _rps(results, mode, "litellm_proxy")),
                                            TARGET_RPS_ON_VS_LITELLM_PROXY, ">="),
            "c1_on_hash_vs_litellm_proxy": (_ratio(c1.get("memproxy_on_hash"), c1.get("litellm_proxy")), None, ""),
            "c32_on_hash_vs_litellm_proxy": (_ratio(c32.get("memproxy_on_hash"), c32.get("litellm_proxy")),
                                             None, ""),
            # Issue 12.
            "c1_fast_off_vs_litellm": (_ratio(c1.get("memproxy_off"), c1.get("litellm")),
                                       TARGET_FAST_OFF_VS_LITELLM, "<="),
            "c1_fast_on_hash_vs_litellm": (_ratio(c1.get("memproxy_on_hash"), c1.get("litellm")),
                                           TARGET_FAST_ON_VS_LITELLM, "<="),
            "c32_fast_off_vs_litellm_proxy": (_ratio(c32.get("memproxy_off"), c32.get("litellm_proxy")),
                                              TARGET_OFF_VS_LITELLM_PROXY, "<="),
            "c1_litellm_path_off_vs_litellm": (_ratio(c1.get("memproxy_litellm_off"), c1.get("litellm")),
                                               None, ""),
            "c32_rps_on_hash_fast_vs_litellm_path": (_ratio(_rps(results, mode, "memproxy_on_hash"),
                                                            _rps(results, mode, "memproxy_litellm_on")),
                                                TARGET_RPS_ON_VS_TODAY, ">="),
            "c32_rps_on_w2_vs_w1": (_ratio(_rps(results, mode, "memproxy_on_w2"), _rps(results, mode, "memproxy_on")),
                                    TARGET_RPS_W2_VS_W1, ">="),
        }  # fmt: skip
        cell: dict[str, Any] = {}
        for name, (value, target, sense) in checks.items():
            met = None
            if value is not None and target is not None:
                met = value <= target if sense == "<=" else value >= target
            cell[name] = {
                "value": value,
                "target": f"{sense} {round(target, 3)}" if target else None,
                "met": met,
            }
        out[mode] = cell
    return out


# --------------------------------------------------------------------------- main


def build_calls(litellm: Any, session: aiohttp.ClientSession, fake_v1: str, urls: dict[str, str],
                plan: Plan, observed: dict[str, Observed]) -> dict[str, dict[str, Call]]:  # fmt: skip
    on_headers = {"X-Memproxy-User-Id": USER_ID, "X-Memproxy-Capture": "off"}
    pool = question_pool(plan.memories, plan.questions)
    # Each row walks the pool from its own offset: the rows of one server never share a question.
    offsets = {row: n * len(pool) // len(ROWS) for n, row in enumerate(ROWS)}
    asked = {row: walk(pool, offsets[row]) for row in ROWS}
    asked["memproxy_on_cached"] = lambda: MESSAGES[1]["content"]  # the same question every time
    calls: dict[str, dict[str, Call]] = {}
    for mode in MODES:
        stream = mode == "stream_ttfc"
        row_calls: dict[str, Call] = {
            "direct": http_call(session, fake_v1 + "/chat/completions", {}, stream, asked["direct"]),
            "litellm": litellm_call(litellm, fake_v1, stream, asked["litellm"]),
        }
        if "litellm_proxy" in urls:
            master = {"Authorization": f"Bearer {MASTER_KEY}"}
            row_calls["litellm_proxy"] = http_call(session, urls["litellm_proxy"] + "/v1/chat/completions",
                                                   master, stream, asked["litellm_proxy"])  # fmt: skip
        for row, server in ROW_SERVER.items():
            if row in plan.rows:
                on = row in MEMORY_ON_ROWS
                url = urls[server] + "/v1/chat/completions"
                row_calls[row] = http_call(session, url, on_headers if on else {}, stream, asked[row],
                                           observed.setdefault(row, Observed()) if on else None)  # fmt: skip
        calls[mode] = row_calls
    return calls


async def bench(plan: Plan, litellm: Any, fake_v1: str, urls: dict[str, str]) -> dict[str, Any]:
    observed: dict[str, Observed] = {}
    metrics_urls = {row: urls[ROW_SERVER[row]] for row in plan.rows
                    if row in MEMORY_ON_ROWS and ROW_SERVER[row] in SINGLE_PROCESS_SERVERS}  # fmt: skip
    # Below the servers' 5 s keep-alive: rows wait for each other, and reusing a connection the
    # server is closing at that instant would count as the server's error.
    connector = aiohttp.TCPConnector(limit=64, keepalive_timeout=3)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        calls = build_calls(litellm, session, fake_v1, urls, plan, observed)
        results, breakdowns = await measure(calls, plan, session, metrics_urls)
    per_row = {}
    for row, seen in observed.items():
        recalled = [r for r in seen.recalled if r >= 0]
        per_row[row] = {
            "recalled_per_request_median": float(np.median(recalled)) if recalled else None,
            "responses_with_header": len(recalled),
            "responses_seen": len(seen.recalled),
            "failed_open": seen.recall_errors,  # recall timed out or failed: the request had no memories
        }
    wired = [row for row in per_row.values() if row["responses_with_header"]]
    return {
        "results": results,
        "breakdown": breakdowns,
        "recall": {
            "recall_wired": bool(wired),
            "recalled_per_request_median": per_row.get(next(iter(per_row), ""), {}).get(
                "recalled_per_request_median"
            ),
            "responses_with_header": sum(row["responses_with_header"] for row in per_row.values()),
            "responses_seen": sum(row["responses_seen"] for row in per_row.values()),
            "rows": per_row,
        },
    }


def make_plan(args: argparse.Namespace) -> Plan:
    if args.quick:
        c1, c32, warmup = 20, 64, 3
    else:
        c1, c32, warmup = 300, 1000, 30
    if args.requests:
        c1, c32 = args.requests, max(args.requests, 32)
    rows = IN_PROCESS_ROWS if args.in_process else ROWS
    skipped = set(args.skip or ())
    if "litellm_proxy" in rows and not processes.litellm_proxy_available():
        progress("LiteLLM's proxy server cannot start here (pip install 'memproxy[bench]'): row skipped")
        skipped.add("litellm_proxy")
    return Plan(
        c1,
        c32,
        warmup,
        args.memories,
        args.in_process,
        tuple(r for r in rows if r not in skipped),
        args.questions,
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="few requests: a smoke run")
    parser.add_argument("--requests", type=int, help="requests per row at each concurrency (after warm-up)")
    parser.add_argument("--memories", type=int, default=10_000, help="memories in the memory-on scope")
    parser.add_argument(
        "--questions",
        type=int,
        default=4000,
        help="size of the pool of varied on-topic questions (>= 2,000; above the cache's 1,024)",
    )
    parser.add_argument("--data-cache", type=Path, metavar="DIR",
                        help="keep the seeded data dirs here and reuse them (seeding MiniLM takes ~1 min)")  # fmt: skip
    parser.add_argument("--skip", action="append", choices=[r for r in ROWS if r != "direct"],
                        help="leave a row out (repeatable)")  # fmt: skip
    parser.add_argument("--in-process", action="store_true", help="servers on threads of this process")
    parser.add_argument("--serve-fake", type=int, metavar="PORT", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def seeded_data_dir(work: Path, embedder: str, memories: int, cache: Path | None) -> tuple[Path, int]:
    """A data dir holding ``memories`` memories embedded by ``embedder`` (from ``cache`` when
    it has one), and how many it holds."""
    data_dir = work / f"data-{embedder}"
    cached = cache / f"{embedder}-{memories}" if cache is not None else None
    if cached is not None and (cached / "seeded").exists():
        progress(f"reusing {memories} memories embedded by {embedder} from {cached}")
        shutil.copytree(cached, data_dir)
        return data_dir, int((cached / "seeded").read_text())
    progress(f"seeding {memories} memories with the {embedder} embedder")
    settings = settings_from_dict(proxy_settings("http://unused/v1", data_dir, 0, embedder=embedder))
    seeded = asyncio.run(seed_memories(settings, Scope(passthrough_tenant(TOKEN), USER_ID, ""), memories))
    if cached is not None:
        shutil.rmtree(cached, ignore_errors=True)
        shutil.copytree(data_dir, cached)
        (cached / "seeded").write_text(str(seeded))
    return data_dir, seeded


def load_average() -> list[float] | None:
    """The machine's 1/5/15-minute load when the run ended: other work shares these cores."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve_fake:
        serve_fake(args.serve_fake)
        return 0
    plan = make_plan(args)
    started = time.perf_counter()
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="memproxy-bench-") as tmp:
        work = Path(tmp)
        data_dirs: dict[str, Path] = {}
        seeded = 0
        for embedder in ["hash"] if plan.in_process else embedders_needed(plan.rows):
            data_dirs[embedder], seeded = seeded_data_dir(work, embedder, plan.memories, args.data_cache)
        progress(f"starting the fake upstream and the servers for {', '.join(plan.rows)}")
        loaded: list[Any] = []
        with servers(plan, work, data_dirs, lambda: loaded.append(import_litellm())) as (fake_v1, urls):
            progress("servers ready")
            report = asyncio.run(bench(plan, loaded[0], fake_v1, urls))
    progress("servers stopped")
    report.update(derive(report["results"]))
    report["targets"] = verdict(report)
    report["config"] = {
        "rows": list(plan.rows),
        "requests": {"c1": plan.requests_c1, "c32": plan.requests_c32, "warmup": plan.warmup},
        "memories_seeded": seeded,
        "question_pool": len(question_pool(plan.memories, plan.questions)),
        "servers": "threads in the bench process" if plan.in_process else "separate processes",
        "cpus": os.cpu_count(),
        "load_average_before_after": [load_before, load_average()],
        "python": platform.python_version(),
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
