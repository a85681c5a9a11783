"""Search latency of this checkout against another, in one run: interleaved requests to both.

    python bench/search_latency.py --other /path/to/other/checkout [--locomo PATH] [--rounds 3]

Starts ``memproxy serve`` from this checkout and from ``--other`` (each with its own code: the
child runs with that checkout as its working directory, so ``python -m memproxy`` imports it;
a ``git worktree add /tmp/base <commit>`` makes one), both with the default embedder, imports
the same LoCoMo dev conversations into each through the API, then sends every question to both
in alternation, ``--rounds`` times, so both see the same machine load. Prints the p50/p99 of
``POST /v1/memories/search`` (``top_k`` 50, ``min_score`` 0: the LoCoMo protocol's search, query
embedding included) for each and their ratio. Machines differ; the ratio is the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import processes
from locomo import DEFAULT_PATH, TOKEN, import_turns, load, settings
from stats import percentiles_ms

HERE = Path(__file__).resolve().parents[1]


def start(checkout: Path, work: Path, name: str) -> tuple[processes.Child, str]:
    port = processes.free_port()
    child = processes.memproxy_child("serve", settings(work / name, port, "onnx", None), work, name)
    child.cwd = checkout
    return child, f"http://127.0.0.1:{port}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--other", type=Path, required=True, help="the other checkout's root")
    parser.add_argument("--locomo", type=Path, default=DEFAULT_PATH)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    conversations = load(args.locomo)
    with tempfile.TemporaryDirectory(prefix="memproxy-latency-") as tmp:
        work = Path(tmp)
        this, this_url = start(HERE, work, "this")
        other, other_url = start(args.other.resolve(), work, "other")
        with processes.running([this, other]):
            clients = {name: httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
                       for name, url in (("this", this_url), ("other", other_url))}  # fmt: skip
            for http in clients.values():
                import_turns(http, conversations)
            seconds: dict[str, list[float]] = {"this": [], "other": []}
            for round_ in range(args.rounds):
                order = ["this", "other"] if round_ % 2 == 0 else ["other", "this"]
                for conv in conversations:
                    for q in conv["questions"]:
                        body = {"query": q["question"], "user_id": conv["id"], "top_k": 50, "min_score": 0}
                        for name in order:
                            started = time.perf_counter()
                            clients[name].post("/v1/memories/search", json=body).raise_for_status()
                            seconds[name].append(time.perf_counter() - started)
            for http in clients.values():
                http.close()
    latency = {name: percentiles_ms(values, (50, 99)) for name, values in seconds.items()}
    result: dict[str, object] = {**latency, "loadavg": round(os.getloadavg()[0], 1),
                                 "ratio_p50": round(latency["this"]["p50_ms"] / latency["other"]["p50_ms"], 3)}  # fmt: skip
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
