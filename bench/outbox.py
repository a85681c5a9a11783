"""Capture and extraction throughput, capture overhead and memory freshness, as JSON.

Rows (one run, same machine, fake upstream and memproxy each in their own process):

- ``capture_overhead_ms``: a non-streamed and a streamed chat request with a user id and
  recall off, capture on vs ``X-Memproxy-Capture: off``, interleaved in rounds at
  concurrency 1; p50 of each and the difference (target: capture adds <= 2 ms p50).
  The in-serve worker is off for this row so extraction does not compete for the CPU.
- ``capture_write_in_process``: the capture transaction alone (``enqueue_turn`` on a
  ``Database``), p50/p95 — the part of the overhead that is ours, free of HTTP noise.
- ``captured_turns_per_s``: chat turns (non-streamed, 100 users) at concurrency 16, each
  committed to the outbox before its response returns.
- ``drained_jobs_per_s``: a separate ``memproxy worker`` process on the same data dir drains
  those jobs; the fake's rule-based extractor answers instantly. Measured from the first
  completed job to the last; extraction calls are fewer than jobs because pending jobs of
  one scope are coalesced.
- ``freshness_ms``: with the in-serve worker on (defaults: concurrency 1, poll 0.5 s, woken
  on capture), the time from a chat turn's response to its fact being returned by
  ``POST /v1/memories/search``; p50/p95 over sequential turns (target p95 <= 2 s).

Usage: ``python bench/outbox.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import aiohttp
import processes
from stats import percentiles_ms

TOKEN = "sk-bench-outbox"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def config(fake_v1: str, data_dir: Path, port: int, worker: bool) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "storage": {"data_dir": str(data_dir)},
        "upstream": {"api_base": fake_v1, "timeout_s": 30},
        "embedding": {"provider": "hash"},
        "extraction": {"model": "extractor", "worker_enabled": worker},
    }


@contextlib.contextmanager
def serving(settings: dict[str, Any], work: Path, name: str) -> Iterator[str]:
    """``memproxy serve`` on ``settings`` until the block exits; yields its base URL."""
    with processes.running([processes.memproxy_child("serve", settings, work, name)]):
        yield f"http://127.0.0.1:{settings['server']['port']}"


async def chat(session: aiohttp.ClientSession, url: str, text: str, user: str, *, stream: bool = False,
               capture: bool = True) -> float:  # fmt: skip
    """One chat turn; returns its latency in ms (whole body read)."""
    headers = {**AUTH, "X-Memproxy-User-Id": user, "X-Memproxy-Recall": "off"}
    if not capture:
        headers["X-Memproxy-Capture"] = "off"
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}], "stream": stream}
    started = time.perf_counter()
    async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as response:
        await response.read()
        assert response.status == 200, response.status
        assert response.headers["X-Memproxy-Capture"] != "failed"
    return (time.perf_counter() - started) * 1000


async def capture_overhead(url: str, requests: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {"plain_on": [], "plain_off": [], "stream_on": [], "stream_off": []}
    async with aiohttp.ClientSession() as session:
        for i in range(30):  # warm-up: connections, tokenizer, SQLite pages
            await chat(session, url, f"warm {i}", "warm")
        for i in range(requests):
            for key in samples:
                stream, capture = key.startswith("stream"), key.endswith("on")
                samples[key].append(await chat(session, url, f"I like item {i}", f"oh-{i % 50}",
                                               stream=stream, capture=capture))  # fmt: skip
    p50 = {
        key: percentiles_ms([v / 1000 for v in values], (50,))["p50_ms"] for key, values in samples.items()
    }
    return {
        "requests_per_row": requests,
        "p50_ms": p50,
        "added_p50_ms": {
            "non_stream": round(p50["plain_on"] - p50["plain_off"], 3),
            "stream": round(p50["stream_on"] - p50["stream_off"], 3),
        },
    }


async def commit_cost(work: Path, turns: int) -> dict[str, Any]:
    """The capture write alone (messages + job in one transaction), in-process, no HTTP."""
    from memproxy.outbox.capture import enqueue_turn
    from memproxy.outbox.queue import new_job_id
    from memproxy.scope import Scope
    from memproxy.storage.database import SqliteDatabase as Database

    db = Database(work / "commit-cost.sqlite3")
    await db.open()
    try:
        scope, waits = Scope("bench", "user", ""), []
        turn = [
            {"role": "user", "content": "I like green tea"},
            {"role": "assistant", "content": "Noted: green tea."},
        ]
        for _ in range(turns):
            started = time.perf_counter()
            await enqueue_turn(db, new_job_id(), scope, "session", turn, time.time())
            waits.append((time.perf_counter() - started) * 1000)
    finally:
        await db.close()
    return {"turns": turns, **percentiles_ms([w / 1000 for w in waits], (50, 95))}


async def captured_turns(url: str, turns: int, concurrency: int) -> dict[str, Any]:
    queue = list(range(turns))

    async def client(session: aiohttp.ClientSession) -> None:
        while queue:
            i = queue.pop()
            await chat(session, url, f"I live in town{i}", f"user-{i % 100}")

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {"turns": turns, "concurrency": concurrency, "seconds": round(elapsed, 3),
            "turns_per_s": round(turns / elapsed, 1)}  # fmt: skip


def job_counts(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return {str(s): int(n) for s, n in conn.execute("SELECT status, count(*) FROM jobs GROUP BY status")}
    finally:
        conn.close()


def drain(settings: dict[str, Any], work: Path, total: int) -> dict[str, Any]:
    db = Path(settings["storage"]["data_dir"]) / "memproxy.sqlite3"
    first: tuple[float, int] | None = None
    with processes.running([processes.memproxy_child("worker", settings, work, "worker")]):
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            done = job_counts(db).get("done", 0)
            now = time.perf_counter()
            if done and first is None:
                first = (now, done)
            if done >= total:
                break
            time.sleep(0.01)
        else:
            raise TimeoutError("the worker did not drain the outbox")
    assert first is not None
    elapsed = now - first[0]
    log = (work / "worker.log").read_text()
    return {"jobs": total, "seconds": round(elapsed, 3), "jobs_per_s": round((total - first[1]) / elapsed, 1),
            "worker_errors_logged": log.count("failed")}  # fmt: skip


async def freshness(url: str, turns: int) -> dict[str, Any]:
    waits: list[float] = []
    async with aiohttp.ClientSession() as session:
        for i in range(turns):
            user, city = f"fresh-{i}", f"Freshville{i}"
            await chat(session, url, f"I live in {city}", user)
            captured = time.perf_counter()
            while True:
                async with session.post(url + "/v1/memories/search", headers=AUTH,
                                        json={"query": city, "user_id": user}) as response:  # fmt: skip
                    hits = (await response.json())["data"]
                if any(city in hit["text"] for hit in hits):
                    break
                if time.perf_counter() - captured > 30:
                    raise TimeoutError(f"memory of turn {i} not searchable after 30 s")
                await asyncio.sleep(0.005)
            waits.append((time.perf_counter() - captured) * 1000)
    return {"turns": turns, **percentiles_ms([w / 1000 for w in waits], (50, 95)), "max_ms": round(max(waits), 3),
            "mean_ms": round(statistics.fmean(waits), 3)}  # fmt: skip


def run(quick: bool) -> dict[str, Any]:
    overhead_n, turns, fresh_n = (100, 400, 30) if quick else (400, 2000, 100)
    with tempfile.TemporaryDirectory(prefix="memproxy-bench-outbox-") as tmp:
        work = Path(tmp)
        write = asyncio.run(commit_cost(work, 2000))
        fake_port = processes.free_port()
        fake_v1 = f"http://127.0.0.1:{fake_port}/v1"
        with processes.running(
            [processes.upstream_child(__file__, "--serve-fake", fake_port, work / "fake.log")]
        ):
            settings = config(fake_v1, work / "data-a", processes.free_port(), worker=False)
            with serving(settings, work, "serve-a") as url:
                overhead = asyncio.run(capture_overhead(url, overhead_n))
                throughput = asyncio.run(captured_turns(url, turns, 16))
                queued = sum(job_counts(Path(settings["storage"]["data_dir"]) / "memproxy.sqlite3").values())
                drained = drain(settings, work, queued)
            fresh_settings = config(fake_v1, work / "data-b", processes.free_port(), worker=True)
            with serving(fresh_settings, work, "serve-b") as url:
                fresh = asyncio.run(freshness(url, fresh_n))
    return {
        "bench": "outbox",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "capture_write_in_process": write,
        "capture_overhead": overhead,
        "captured_turns": throughput,
        "drained_jobs": drained,
        "freshness": fresh,
        "targets": {
            "capture_added_p50_ms<=2": overhead["added_p50_ms"]["non_stream"] <= 2.0,
            "freshness_p95_ms<=2000": fresh["p95_ms"] <= 2000,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    parser.add_argument("--serve-fake", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_fake:
        processes.serve_scripted_upstream(args.serve_fake)
        return 0
    print(json.dumps(run(args.quick), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
