"""What memproxy's relay costs, this checkout against another, in one run: interleaved requests.

    python bench/relay_latency.py --other /path/to/other/checkout [--requests 400] [--concurrency 1]

Starts one scripted upstream and ``memproxy serve`` from this checkout and from ``--other`` (each
with its own code; ``git worktree add /tmp/base <commit>`` makes one), both on the default fast path
with memory off (no scope headers: the relay alone; ``--memory``: a scope header, so recall runs in
an empty scope and every turn is captured, the stream read as it passes), and sends the same requests to
both in alternation so both see the same machine load: chat completions non-streamed and streamed
(time to the whole stream), and the same through the Responses and Messages surfaces. Prints the
p50/p99 per surface and checkout and the ratio of p50s. Machines differ; the ratio is the figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import processes
from stats import percentiles_ms

HERE = Path(__file__).resolve().parents[1]
TOKEN = "sk-bench"
MESSAGES = [{"role": "user", "content": "Say something short about the sea, please."}]
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"model": "gpt-4o-mini", "messages": MESSAGES}),
    "chat_stream": ("/v1/chat/completions", {"model": "gpt-4o-mini", "messages": MESSAGES, "stream": True}),
    "responses_stream": ("/v1/responses", {"model": "gpt-4o-mini", "input": MESSAGES[0]["content"],
                                           "stream": True}),
    "messages_stream": ("/v1/messages", {"model": "gpt-4o-mini", "max_tokens": 64, "messages": MESSAGES,
                                         "stream": True}),
}  # fmt: skip


def start(checkout: Path, work: Path, name: str, upstream: str) -> tuple[processes.Child, str]:
    port = processes.free_port()
    settings = {
        "server": {"port": port},
        "storage": {"data_dir": str(work / name)},
        "embedding": {"provider": "hash"},
        "upstream": {"api_base": upstream, "api_key": "sk-fake"},
        "extraction": {"worker_enabled": False},
    }
    child = processes.memproxy_child("serve", settings, work, name)
    child.cwd = checkout
    return child, f"http://127.0.0.1:{port}"


HEADERS = {"Authorization": f"Bearer {TOKEN}"}


async def one(session: aiohttp.ClientSession, url: str, path: str, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    async with session.post(url + path, json=body, headers=HEADERS) as response:
        await response.read()
        if response.status != 200:
            raise RuntimeError(f"{url}{path}: {response.status}")
    return time.perf_counter() - started


async def measure(urls: dict[str, str], requests: int, concurrency: int) -> dict[str, dict[str, list[float]]]:
    seconds: dict[str, dict[str, list[float]]] = {case: {name: [] for name in urls} for case in CASES}
    async with aiohttp.ClientSession() as session:
        for case, (path, body) in CASES.items():
            for url in urls.values():  # warm-up: pools, tokenizers, first-request costs
                for _ in range(20):
                    await one(session, url, path, body)
            for round_ in range(requests // concurrency):
                order = list(urls) if round_ % 2 == 0 else list(reversed(urls))
                for name in order:
                    took = await asyncio.gather(
                        *(one(session, urls[name], path, body) for _ in range(concurrency))
                    )
                    seconds[case][name] += took
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--other", type=Path, help="the other checkout's root (required)")
    parser.add_argument("--requests", type=int, default=400, help="requests per surface and checkout")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument(
        "--memory",
        action="store_true",
        help="memory on (a scope header: recall in an empty scope, every turn captured)",
    )
    parser.add_argument("--serve-fake", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_fake:
        processes.serve_scripted_upstream(args.serve_fake)
        return 0
    if args.other is None:
        parser.error("--other is required")
    if args.memory:
        HEADERS["X-Memproxy-User-Id"] = "bench-user"
    with tempfile.TemporaryDirectory(prefix="memproxy-relay-") as tmp:
        work = Path(tmp)
        fake_port = processes.free_port()
        fake = processes.upstream_child(__file__, "--serve-fake", fake_port, work / "fake.log")
        upstream = f"http://127.0.0.1:{fake_port}/v1"
        this, this_url = start(HERE, work, "this", upstream)
        other, other_url = start(args.other.resolve(), work, "other", upstream)
        with processes.running([fake, this, other]):
            seconds = asyncio.run(
                measure({"this": this_url, "other": other_url}, args.requests, args.concurrency)
            )
    result: dict[str, Any] = {
        "concurrency": args.concurrency,
        "memory": args.memory,
        "loadavg": round(os.getloadavg()[0], 1),
    }
    for case, by_name in seconds.items():
        latency = {name: percentiles_ms(values, (50, 99)) for name, values in by_name.items()}
        result[case] = {
            **latency,
            "ratio_p50": round(latency["this"]["p50_ms"] / latency["other"]["p50_ms"], 3),
        }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
