"""MCP search latency beside REST search, in one run against one ``memproxy serve``.

    python bench/mcp_latency.py [--memories 10000] [--requests 300] [--embedder hash|onnx]

Imports ``--memories`` memories into one user's scope (``POST /v1/memories/import``), then sends
the same unique queries, alternating door per request so both see the same machine load, as
``POST /v1/memories/search`` and as the ``search_memories`` tool through ``/mcp`` (Streamable
HTTP, one session; JSON-RPC posted with the same httpx client as REST). Both doors run the same
operation (``memory.management``), so the difference is the MCP layer: the SDK's session manager,
JSON-RPC, the input-schema check and the tool result. A third row goes through the SDK's own
client (``ClientSession``), which adds its client-side work. Prints JSON: p50/p99 per door and
the MCP layer's p50 overhead over REST (target: <= 1 ms). About 40 s with the hash embedder.
(Not ``bench/mcp.py``: run as a script, ``bench/`` is ``sys.path[0]``, and that name would hide
the ``mcp`` package.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import processes
from stats import percentiles_ms

TOKEN = "sk-bench-mcp"
USER = "bench-user"
_WORDS = ("tea coffee hiking chess violin Lisbon Porto Kyoto garden bicycle novel jazz kayak piano "
          "sourdough marathon astronomy pottery tennis sushi climbing poetry cello opera museum "
          "bakery lighthouse orchard falcon glacier harbour meadow volcano").split()  # fmt: skip
_MCP_HEADERS = {"Accept": "application/json, text/event-stream", "X-Memproxy-User-Id": USER}


def texts(n: int, rng: random.Random) -> list[str]:
    return [f"Memory {i}: likes {rng.choice(_WORDS)} and {rng.choice(_WORDS)}, visited {rng.choice(_WORDS)}"
            for i in range(n)]  # fmt: skip


def seed(http: httpx.Client, memories: list[str]) -> None:
    for start in range(0, len(memories), 2000):
        lines = [json.dumps({"user_id": USER, "text": text}) for text in memories[start : start + 2000]]
        http.post("/v1/memories/import", content="\n".join(lines) + "\n").raise_for_status()


def open_mcp(http: httpx.Client) -> dict[str, str]:
    """initialize + initialized; the headers every later call sends."""
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "bench", "version": "0"}}}  # fmt: skip
    response = http.post("/mcp", json=init, headers=_MCP_HEADERS)
    response.raise_for_status()
    headers = {**_MCP_HEADERS, "Mcp-Session-Id": response.headers.get("mcp-session-id", ""),
               "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
    http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return headers


def rest_search(http: httpx.Client, query: str) -> int:
    response = http.post("/v1/memories/search", json={"query": query, "user_id": USER, "top_k": 10})
    response.raise_for_status()
    return len(response.json()["data"])


def mcp_search(http: httpx.Client, headers: dict[str, str], n: int, query: str) -> int:
    call = {"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "search_memories", "arguments": {"query": query, "top_k": 10}}}  # fmt: skip
    response = http.post("/mcp", json=call, headers=headers)
    response.raise_for_status()
    result = response.json()["result"]
    assert not result.get("isError"), result
    return len(result["structuredContent"]["data"])


async def sdk_rows(url: str, queries: list[str]) -> list[float]:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    seconds = []
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Memproxy-User-Id": USER}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for query in queries:
            started = time.perf_counter()
            result = await session.call_tool("search_memories", {"query": query, "top_k": 10})
            seconds.append(time.perf_counter() - started)
            assert not result.is_error
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=300, help="searches per door")
    parser.add_argument("--embedder", default="hash", choices=["hash", "onnx"])
    args = parser.parse_args(argv)
    rng = random.Random(7)
    # Unique queries, so no door profits from the other's query-embedding cache.
    queries = [f"{rng.choice(_WORDS)} {rng.choice(_WORDS)} {i}" for i in range(2 * args.requests + 40)]
    with tempfile.TemporaryDirectory(prefix="memproxy-mcp-bench-") as tmp:
        work, port = Path(tmp), processes.free_port()
        settings = {"server": {"port": port}, "storage": {"data_dir": str(work / "data")},
                    "embedding": {"provider": args.embedder}, "extraction": {"worker_enabled": False}}  # fmt: skip
        child = processes.memproxy_child("serve", settings, work, "serve")
        url = f"http://127.0.0.1:{port}"
        with processes.running([child]), httpx.Client(base_url=url, timeout=120,
                                                      headers={"Authorization": f"Bearer {TOKEN}"}) as http:  # fmt: skip
            started = time.perf_counter()
            seed(http, texts(args.memories, rng))
            seeded_s = time.perf_counter() - started
            headers = open_mcp(http)
            for n, query in enumerate(queries[:20]):  # warm both paths (index load, JIT-ish caches)
                rest_search(http, query + " warm")
                mcp_search(http, headers, 10_000 + n, query + " warm")
            rest_s: list[float] = []
            mcp_s: list[float] = []
            for n, query in enumerate(queries[20 : 20 + args.requests]):
                order = ("rest", "mcp") if n % 2 == 0 else ("mcp", "rest")
                for door in order:
                    t0 = time.perf_counter()
                    if door == "rest":
                        found = rest_search(http, query)
                        rest_s.append(time.perf_counter() - t0)
                    else:
                        found = mcp_search(http, headers, n + 1, query)
                        mcp_s.append(time.perf_counter() - t0)
                    assert found > 0, query
            sdk_s = asyncio.run(sdk_rows(url, queries[20 + args.requests : 20 + 2 * args.requests]))
    rest, mcp = percentiles_ms(rest_s, (50, 99)), percentiles_ms(mcp_s, (50, 99))
    report: dict[str, Any] = {
        "memories": args.memories, "embedder": args.embedder, "requests_per_door": args.requests,
        "seed_s": round(seeded_s, 1),
        "rest_search": rest, "mcp_search": mcp, "mcp_search_sdk_client": percentiles_ms(sdk_s, (50, 99)),
        "mcp_overhead_p50_ms": round(mcp["p50_ms"] - rest["p50_ms"], 3),
        "target_overhead_p50_ms": 1.0,
    }  # fmt: skip
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
