"""Server time of the console's API calls, page by page, on a big tenant, as JSON.

    python bench/console.py [--memories 10000] [--scopes 1000] [--rounds 30]

Seeds one data dir with the storage layer: a scope holding ``--memories`` memories (10k
history ADD rows with them, 2,000 done and 50 dead jobs, each with its captured turn, and
one memory with 20 text updates), plus ``--scopes - 1`` small scopes (3 memories, one job
each), all in one tenant. Then starts ``memproxy serve`` (keys mode, ``hash`` embedder,
worker off so the seeded jobs keep their status) and makes, for each console page, the
same API calls the page makes, ``--rounds`` times after warm-up, at concurrency 1.

Server time is read from memproxy's own access log (``latency_ms`` of the request, matched
by ``X-Request-Id``): the time from the request's arrival to its last byte, excluding the
client and loopback. Client-observed time is printed next to it. A page's time is the sum
of its calls' p50 (the page makes them one after another, except memory and job pages,
which run their two calls in parallel; summing is the pessimistic figure). Target: every
page ≤ 200 ms. Export (10k lines) is a download, not a page; it is reported separately.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx
import processes

KEY = "mp-bench-console-key-0001"
TENANT = "bench"
BIG = "big-user"
HEADERS = {"Authorization": f"Bearer {KEY}"}
TARGET_MS = 200.0


def settings(data_dir: Path, port: int) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "storage": {"data_dir": str(data_dir)},
        "auth": {"mode": "keys", "keys": [{"key": KEY, "tenant": TENANT}]},
        "upstream": {"api_base": "http://127.0.0.1:9/v1"},  # never called: no chat, worker off
        "embedding": {"provider": "hash"},
        "extraction": {"worker_enabled": False},
    }


async def seed(config: dict[str, Any], memories: int, scopes: int) -> dict[str, str]:
    """Fill the data dir; returns ids the calls need (a memory with history, a dead job)."""
    from memproxy.config import settings_from_dict
    from memproxy.memory.store import open_store
    from memproxy.scope import Scope

    conf = settings_from_dict(config)
    big = Scope(TENANT, BIG, "")
    async with open_store(conf) as store:
        words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
        items = [{"text": f"Fact {i}: the user mentioned {words[i % 10]} and {words[i // 10 % 10]} "
                  f"on day {i // 100}", "user_id": BIG, "metadata": {"n": i}} for i in range(memories)]  # fmt: skip
        items += [{"text": f"Small fact {j} of scope {i}", "user_id": f"user-{i:04d}",
                   "agent_id": "bot" if i % 3 == 0 else ""} for i in range(1, scopes) for j in range(3)]  # fmt: skip
        await store.import_(TENANT, items)
        page, _ = await store.list_memories(TENANT, BIG, "", limit=1)
        edited = page[0].id
        for n in range(20):
            await store.update(TENANT, edited, text=f"Fact 0 edited {n} times")
        await store.index.sync(big)
        await store.index.snapshot(big)
        dead = await store.db.run(lambda conn: seed_jobs(conn, scopes))
    return {"memory": edited, "dead_job": dead}


def seed_jobs(conn: Any, scopes: int) -> str:
    from memproxy.outbox import queue as outbox
    from memproxy.scope import Scope

    now = time.time()
    turn = [{"role": "user", "content": "I live in Lisbon"}, {"role": "assistant", "content": "Noted."}]
    dead = ""
    with conn:
        for i in range(2050):
            job_id = outbox.new_job_id()
            outbox.enqueue(conn, job_id, Scope(TENANT, BIG, ""), "s", turn, now - 3600 + i)
            status = "dead" if i % 41 == 0 else "done"
            conn.execute("UPDATE jobs SET status = ?, attempts = 5, last_error = ? WHERE id = ?",
                         (status, "ExtractionError: bench" if status == "dead" else None, job_id))  # fmt: skip
            dead = job_id if status == "dead" else dead
        for i in range(1, scopes):
            scope = Scope(TENANT, f"user-{i:04d}", "bot" if i % 3 == 0 else "")
            outbox.enqueue(conn, outbox.new_job_id(), scope, "s", turn, now - 60)
            conn.execute("UPDATE jobs SET status = 'done' WHERE scope_key = ?", (scope.key,))
    return dead


def pages(ids: dict[str, str], cursors: dict[str, str]) -> dict[str, list[tuple[str, str, dict[str, Any]]]]:
    """The API calls each console page makes: (method, path, params or JSON body)."""
    big = {"user_id": BIG, "agent_id": ""}
    return {
        "sign-in": [("GET", "/v1/scopes", {"limit": 1})],
        "scopes (first page)": [("GET", "/v1/scopes", {"limit": 50})],
        "scopes (page 10)": [("GET", "/v1/scopes", {"limit": 50, "cursor": cursors["scopes"]})],
        "scopes (search 'user-05')": [("GET", "/v1/scopes", {"limit": 50, "q": "user-05"})],
        "scope (10k memories, first page)": [("GET", "/v1/scopes", {**big, "limit": 1}),
                                             ("GET", "/v1/memories", {**big, "limit": 25})],
        "scope (page in the middle)": [("GET", "/v1/scopes", {**big, "limit": 1}),
                                       ("GET", "/v1/memories", {**big, "limit": 25, "cursor": cursors["memories"]})],
        "scope (filter: manual, with expiry = none match)": [
            ("GET", "/v1/scopes", {**big, "limit": 1}),
            ("GET", "/v1/memories", {**big, "limit": 25, "source": "extracted", "has_expiry": "true"})],
        "scope (hybrid search)": [("GET", "/v1/scopes", {**big, "limit": 1}),
                                  ("POST", "/v1/memories/search", {**big, "query": "delta foxtrot day 42",
                                                                   "top_k": 50, "min_score": 0})],
        "memory (21 history events)": [("GET", f"/v1/memories/{ids['memory']}", {}),
                                       ("GET", f"/v1/memories/{ids['memory']}/history", {})],
        "jobs (dead, scope)": [("GET", "/v1/jobs", {**big, "status": "dead", "limit": 50})],
        "jobs (done, tenant)": [("GET", "/v1/jobs", {"status": "done", "limit": 50})],
        "job (messages)": [("GET", f"/v1/jobs/{ids['dead_job']}", {}),
                           ("GET", f"/v1/jobs/{ids['dead_job']}/messages", {})],
        "export (download, 10k lines)": [("GET", "/v1/memories/export", big)],
    }  # fmt: skip


def call(http: httpx.Client, method: str, path: str, data: dict[str, Any]) -> tuple[str, float]:
    request_id = uuid.uuid4().hex
    headers = {**HEADERS, "X-Request-Id": request_id}
    started = time.perf_counter()
    if method == "GET":
        response = http.get(path, params=data, headers=headers)
    else:
        response = http.post(path, json=data, headers=headers)
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")
    return request_id, elapsed * 1000


def server_times(log: Path) -> dict[str, float]:
    found = {}
    for line in log.read_text(errors="replace").splitlines():
        rid, latency = re.search(r"request_id=(\w+)", line), re.search(r"latency_ms=([\d.]+)", line)
        if rid and latency:
            found[rid[1]] = float(latency[1])
    return found


def p(samples: list[float], q: int) -> float:
    return (
        round(statistics.quantiles(samples, n=100, method="inclusive")[q - 1], 2)
        if len(samples) > 1
        else samples[0]
    )


def middle_cursor(http: httpx.Client, memories: int) -> str:
    """The cursor of the big scope's page that starts half-way through its memories."""
    cursor: str | None = None
    seen = 0
    while seen < memories // 2:
        limit = min(1000, memories // 2 - seen)
        params: dict[str, str | int] = {"user_id": BIG, "agent_id": "", "limit": limit}
        if cursor:
            params["cursor"] = cursor
        cursor = http.get("/v1/memories", params=params, headers=HEADERS).json()["next_cursor"]
        seen += limit
    return str(cursor)


def measure(base: str, log: Path, ids: dict[str, str], rounds: int, memories: int) -> dict[str, Any]:
    with httpx.Client(base_url=base, timeout=60) as http:
        cursors = {"scopes": http.get("/v1/scopes", params={"limit": 450}, headers=HEADERS).json()["next_cursor"],
                   "memories": middle_cursor(http, memories)}  # fmt: skip
        plan = pages(ids, cursors)
        sent: dict[tuple[str, int], list[tuple[str, float]]] = {}
        for n in range(rounds + 3):
            for page, calls in plan.items():
                for i, (method, path, data) in enumerate(calls):
                    rid, client_ms = call(http, method, path, data)
                    if n >= 3:  # warm-up: index load, caches
                        sent.setdefault((page, i), []).append((rid, client_ms))
    time.sleep(0.5)  # the last access lines are written after the response
    server = server_times(log)
    report: dict[str, Any] = {}
    for page, calls in plan.items():
        rows, total = [], 0.0
        for i, (method, path, _) in enumerate(calls):
            got = sent[(page, i)]
            srv = [server[rid] for rid, _ in got if rid in server]
            cli = [ms for _, ms in got]
            total += statistics.median(srv)
            rows.append({"call": f"{method} {re.sub(r'/(job_)?[0-9a-f]{32}', '/{id}', path)}",
                         "server_p50_ms": round(statistics.median(srv), 2), "server_p95_ms": p(srv, 95),
                         "server_max_ms": max(srv), "client_p50_ms": round(statistics.median(cli), 2)})  # fmt: skip
        report[page] = {"server_ms": round(total, 2), "ok": total <= TARGET_MS, "calls": rows}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--scopes", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="memproxy-console-bench-"))
    port = processes.free_port()
    config = settings(work / "data", port)
    started = time.perf_counter()
    ids = asyncio.run(seed(config, args.memories, args.scopes))
    print(f"seeded in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    child = processes.memproxy_child("serve", config, work, "serve")
    with processes.running([child]):
        report = measure(f"http://127.0.0.1:{port}", child.log_path, ids, args.rounds, args.memories)
    pages_only = {k: v for k, v in report.items() if not k.startswith("export")}
    print(json.dumps({
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()}",
        "tenant": {"scopes": args.scopes, "memories_in_big_scope": args.memories,
                   "memories_total": args.memories + 3 * (args.scopes - 1), "jobs": 2050 + args.scopes - 1},
        "rounds": args.rounds,
        "target_ms": TARGET_MS,
        "slowest_page_server_ms": max(v["server_ms"] for v in pages_only.values()),
        "all_pages_within_target": all(v["ok"] for v in pages_only.values()),
        "pages": report,
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
