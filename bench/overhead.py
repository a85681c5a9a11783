"""What memproxy adds to a chat call, next to a bare ``litellm.acompletion`` and LiteLLM's proxy.

One run measures these rows against the same scripted upstream (``ScriptedUpstream``):

- ``direct``: an aiohttp ``ClientSession`` (keep-alive) posting straight to the fake upstream;
- ``litellm``: ``litellm.acompletion`` to the fake (``api_base``, ``custom_llm_provider="openai"``);
- ``litellm_proxy``: LiteLLM's own proxy server, started from its package as a user runs it
  (``litellm --config <yaml>``, one worker, a master key), same aiohttp session;
- ``memproxy_off`` / ``memproxy_on``: memproxy as configured by default (``upstream.fast_path:
  auto``, so the fake, an OpenAI-compatible endpoint, is relayed byte for byte), one process;
  memory off (no scope headers) / on (``X-Memproxy-User-Id`` naming a scope that holds
  ``--memories`` (10k) memories embedded by the ``hash`` embedder, recall on);
- ``memproxy_litellm_off`` / ``memproxy_litellm_on``: the same with ``upstream.fast_path: off``,
  i.e. every request through LiteLLM (what memproxy did before issue 12);
- ``memproxy_on_w2``: the fast path, memory on, ``memproxy serve --workers 2``.

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

- c=1 p50: ``memproxy_off`` adds <= 1/5 of what ``litellm`` adds; ``memproxy_on`` <= 1/3;
- c=32 p50: ``memproxy_off`` adds <= 1/5 of what ``litellm_proxy`` adds;
- c=32 requests/s, memory on: one fast-path process >= 3x ``memproxy_litellm_on``;
  ``--workers 2`` >= 1.7x one process.

Fairness (the machine has 2 cores): the fake upstream and each server run in their own
process, so the load generator, the fake and the proxies never share a GIL. The load
generator's client is aiohttp (an httpx ``AsyncClient`` costs 0.8 ms a call at concurrency
1 here and its pool collapses at 32, so it would measure itself); the same session serves
the ``direct``, LiteLLM-proxy and memproxy rows, so what the client costs cancels out of
the overheads. The load generator, the fake and the servers still share the two cores, so
c=32 figures (and requests/s, ``--workers 2`` above all) are bounded by the whole machine,
not by the server alone. ``--in-process`` runs the fake and one fast-path memproxy on
threads instead (quick, only the memproxy_off/on, direct and litellm rows).

The memories are seeded before memproxy starts, into the shared data dir, through the
storage layer's own code (``MemoryStore.import_`` with the configured embedder, then an
index snapshot), so the rows are exactly what the API would have written.

Usage: ``python bench/overhead.py [--quick] [--requests N] [--memories N] [--skip ROW ...] [--in-process]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
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
from memproxy.upstream import import_litellm

MODEL = "gpt-4o-mini"
TOKEN = "sk-bench-0000000000000000"
USER_ID = "bench-user"
MESSAGES: list[dict[str, str]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What should I cook tonight? Something with the vegetables I like."},
]
MASTER_KEY = "sk-bench-litellm-proxy-master-0000"
ROWS = ("direct", "litellm", "litellm_proxy", "memproxy_off", "memproxy_on", "memproxy_litellm_off",
        "memproxy_litellm_on", "memproxy_on_w2")  # fmt: skip
IN_PROCESS_ROWS = ("direct", "litellm", "memproxy_off", "memproxy_on")
# Issue 12's targets, as ratios within one run.
TARGET_FAST_OFF_VS_LITELLM = 1 / 5  # c=1 p50, added over direct
TARGET_FAST_ON_VS_LITELLM = 1 / 3  # c=1 p50, 10k memories in the scope
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

    @property
    def per_concurrency(self) -> dict[int, int]:
        return {1: self.requests_c1, 32: self.requests_c32}


@dataclass
class Observed:
    """Response headers seen on the memory-on row (is recall wired, how much it found)."""

    recalled: list[int] = field(default_factory=list)


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


def proxy_settings(fake_v1: str, data_dir: Path, port: int, fast_path: str = "auto") -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "storage": {"data_dir": str(data_dir)},
        "upstream": {"api_base": fake_v1, "timeout_s": 30, "fast_path": fast_path},
        "embedding": {"provider": "hash"},
    }


# memproxy rows → (server name, fast_path, extra ``serve`` arguments)
SERVERS = {
    "memproxy": ("auto", ()),
    "memproxy_litellm": ("off", ()),
    "memproxy_w2": ("auto", ("--workers", "2")),
}
ROW_SERVER = {"memproxy_off": "memproxy", "memproxy_on": "memproxy", "memproxy_litellm_off": "memproxy_litellm",
              "memproxy_litellm_on": "memproxy_litellm", "memproxy_on_w2": "memproxy_w2"}  # fmt: skip


@contextlib.contextmanager
def servers(plan: Plan, work: Path, data_dir: Path, while_starting: Callable[[], None],
            ) -> Iterator[tuple[str, dict[str, str]]]:  # fmt: skip
    """Start the fake and the servers the rows need; yield (fake /v1 base, {server: base URL})."""
    from memproxy.testing.background_server import BackgroundServer

    if plan.in_process:
        from memproxy.api.app import create_app
        from memproxy.testing.scripted_upstream import ScriptedUpstream

        while_starting()
        same_answer_for_every_row()
        with BackgroundServer(ScriptedUpstream().app) as fake:
            in_process = settings_from_dict(proxy_settings(fake.url + "/v1", data_dir, 0))
            with BackgroundServer(create_app(in_process)) as proxy:
                yield fake.url + "/v1", {"memproxy": proxy.url}
        return
    fake_port = processes.free_port()
    fake_v1 = f"http://127.0.0.1:{fake_port}/v1"
    children = [processes.upstream_child(__file__, "--serve-fake", fake_port, work / "fake.log")]
    urls: dict[str, str] = {}
    for name in sorted({ROW_SERVER[row] for row in plan.rows if row in ROW_SERVER}):
        port = processes.free_port()
        fast_path, extra = SERVERS[name]
        config = proxy_settings(fake_v1, data_dir, port, fast_path)
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


def memory_texts(n: int) -> list[str]:
    """``n`` distinct, plausible facts (so lexical and vector search have real work)."""
    foods = [
        "spinach",
        "carrots",
        "leeks",
        "peppers",
        "mushrooms",
        "tofu",
        "salmon",
        "lentils",
        "rice",
        "pasta",
    ]
    places = ["Berlin", "Lisbon", "Osaka", "Denver", "Nairobi", "Lyon", "Quito", "Hanoi", "Oslo", "Perth"]
    verbs = ["likes", "dislikes", "cooked", "bought", "wants to try", "is allergic to", "grows", "orders"]
    return [
        f"The user {verbs[i % len(verbs)]} {foods[(i // 8) % len(foods)]} from {places[(i // 80) % len(places)]} "
        f"(note {i})."
        for i in range(n)
    ]


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


def body_bytes(stream: bool) -> bytes:
    return json.dumps({"model": MODEL, "messages": MESSAGES, "stream": stream}).encode()


def http_call(session: aiohttp.ClientSession, url: str, headers: dict[str, str], stream: bool,
              observed: Observed | None = None) -> Call:  # fmt: skip
    content = body_bytes(stream)
    all_headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}", **headers}

    async def check(response: aiohttp.ClientResponse) -> None:
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {(await response.text())[:300]}")
        if observed is not None:
            observed.recalled.append(int(response.headers.get("x-memproxy-recalled", "-1")))

    async def non_stream() -> float:
        start = time.perf_counter()
        async with session.post(url, data=content, headers=all_headers) as response:
            await response.read()
        elapsed = time.perf_counter() - start
        await check(response)
        return elapsed

    async def first_chunk() -> float:
        start = time.perf_counter()
        async with session.post(url, data=content, headers=all_headers) as response:
            await check(response)
            await response.content.readany()
            elapsed = time.perf_counter() - start
            async for _ in response.content.iter_any():
                pass
        return elapsed

    return first_chunk if stream else non_stream


def litellm_call(litellm: Any, fake_v1: str, stream: bool) -> Call:
    kwargs = {"model": MODEL, "messages": MESSAGES, "api_base": fake_v1, "api_key": TOKEN,
              "custom_llm_provider": "openai", "max_retries": 0, "timeout": 30}  # fmt: skip

    async def non_stream() -> float:
        start = time.perf_counter()
        await litellm.acompletion(**kwargs)
        return time.perf_counter() - start

    async def first_chunk() -> float:
        start = time.perf_counter()
        response = await litellm.acompletion(**kwargs, stream=True)
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


async def measure(calls: dict[str, dict[str, Call]], plan: Plan) -> dict[str, Any]:
    """{"c1"|"c32": {mode: {row: summary}}}, rows interleaved in ``ROUNDS`` rounds."""
    results: dict[str, Any] = {}
    for concurrency, total in plan.per_concurrency.items():
        per_mode: dict[str, Any] = {}
        for mode in MODES:
            samples = {row: Samples() for row in plan.rows}
            progress(f"concurrency {concurrency}, {mode}")
            for row in plan.rows:  # warm-up: connections, caches, the scope's index
                await run_load(calls[mode][row], plan.warmup, concurrency, Samples())
            for round_no in range(ROUNDS):
                share = total // ROUNDS + (1 if round_no < total % ROUNDS else 0)
                order = plan.rows if round_no % 2 == 0 else tuple(reversed(plan.rows))
                for row in order:
                    await run_load(calls[mode][row], share, concurrency, samples[row])
            per_mode[mode] = {row: summarize(samples[row]) for row in plan.rows}
        results[f"c{concurrency}"] = per_mode
    return results


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
    """Issue 12's targets, per mode, as ratios within this run (None: a row was skipped)."""
    added = report["overhead_ms"]
    out: dict[str, Any] = {}
    for mode in MODES:
        c1 = added.get("c1", {}).get(mode, {}).get("p50", {})
        c32 = added.get("c32", {}).get(mode, {}).get("p50", {})
        results = report["results"]
        checks = {
            "c1_fast_off_vs_litellm": (_ratio(c1.get("memproxy_off"), c1.get("litellm")),
                                       TARGET_FAST_OFF_VS_LITELLM, "<="),
            "c1_fast_on_vs_litellm": (_ratio(c1.get("memproxy_on"), c1.get("litellm")),
                                      TARGET_FAST_ON_VS_LITELLM, "<="),
            "c32_fast_off_vs_litellm_proxy": (_ratio(c32.get("memproxy_off"), c32.get("litellm_proxy")),
                                              TARGET_OFF_VS_LITELLM_PROXY, "<="),
            "c32_fast_on_vs_litellm_proxy": (_ratio(c32.get("memproxy_on"), c32.get("litellm_proxy")), None, ""),
            "c1_litellm_path_off_vs_litellm": (_ratio(c1.get("memproxy_litellm_off"), c1.get("litellm")),
                                               None, ""),
            "c32_rps_on_fast_vs_litellm_path": (_ratio(_rps(results, mode, "memproxy_on"),
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
                plan: Plan, observed: Observed) -> dict[str, dict[str, Call]]:  # fmt: skip
    on_headers = {"X-Memproxy-User-Id": USER_ID, "X-Memproxy-Capture": "off"}
    calls: dict[str, dict[str, Call]] = {}
    for mode in MODES:
        stream = mode == "stream_ttfc"
        row_calls: dict[str, Call] = {
            "direct": http_call(session, fake_v1 + "/chat/completions", {}, stream),
            "litellm": litellm_call(litellm, fake_v1, stream),
        }
        if "litellm_proxy" in urls:
            master = {"Authorization": f"Bearer {MASTER_KEY}"}
            row_calls["litellm_proxy"] = http_call(session, urls["litellm_proxy"] + "/v1/chat/completions",
                                                   master, stream)  # fmt: skip
        for row, server in ROW_SERVER.items():
            if row in plan.rows:
                on = row.endswith("_on") or row.endswith("_on_w2")
                url = urls[server] + "/v1/chat/completions"
                row_calls[row] = http_call(
                    session, url, on_headers if on else {}, stream, observed if on else None
                )
        calls[mode] = row_calls
    return calls


async def bench(plan: Plan, litellm: Any, fake_v1: str, urls: dict[str, str]) -> dict[str, Any]:
    observed = Observed()
    # Below the servers' 5 s keep-alive: rows wait for each other, and reusing a connection the
    # server is closing at that instant would count as the server's error.
    connector = aiohttp.TCPConnector(limit=64, keepalive_timeout=3)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        results = await measure(build_calls(litellm, session, fake_v1, urls, plan, observed), plan)
    recalled = [r for r in observed.recalled if r >= 0]
    return {
        "results": results,
        "recall": {
            "recall_wired": bool(recalled),
            "recalled_per_request_median": float(np.median(recalled)) if recalled else None,
            "responses_with_header": len(recalled),
            "responses_seen": len(observed.recalled),
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
    return Plan(c1, c32, warmup, args.memories, args.in_process, tuple(r for r in rows if r not in skipped))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="few requests: a smoke run")
    parser.add_argument("--requests", type=int, help="requests per row at each concurrency (after warm-up)")
    parser.add_argument("--memories", type=int, default=10_000, help="memories in the memory-on scope")
    parser.add_argument("--skip", action="append", choices=[r for r in ROWS if r != "direct"],
                        help="leave a row out (repeatable)")  # fmt: skip
    parser.add_argument("--in-process", action="store_true", help="servers on threads of this process")
    parser.add_argument("--serve-fake", type=int, metavar="PORT", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


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
        data_dir = work / "data"
        scope = Scope(passthrough_tenant(TOKEN), USER_ID, "")
        progress(f"seeding {plan.memories} memories")
        seed_settings = settings_from_dict(proxy_settings("http://unused/v1", data_dir, 0))
        seeded = asyncio.run(seed_memories(seed_settings, scope, plan.memories))
        progress(f"starting the fake upstream and the servers for {', '.join(plan.rows)}")
        loaded: list[Any] = []
        with servers(plan, work, data_dir, lambda: loaded.append(import_litellm())) as (fake_v1, urls):
            progress("servers ready")
            report = asyncio.run(bench(plan, loaded[0], fake_v1, urls))
    progress("servers stopped")
    report.update(derive(report["results"]))
    report["targets"] = verdict(report)
    report["config"] = {
        "rows": list(plan.rows),
        "requests": {"c1": plan.requests_c1, "c32": plan.requests_c32, "warmup": plan.warmup},
        "memories_seeded": seeded,
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
