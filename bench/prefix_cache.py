"""Prompt-cache friendliness of each ``recall.placement``, and the cost of the other API surfaces.

1. Prefix share: a 20-turn conversation (a chat app's short system prompt and two tools, and
   an agent's long prompt and twelve tools; the client resends its whole history each turn) while the user's memory set grows by one memory per turn, so the
   recalled block changes along the way. For every forwarded request (as the provider
   received it) the share of its tokens (the model's tokenizer) that equals the previous
   request's prefix is computed — what a provider's prefix cache could serve. Per profile,
   placement and surface (chat completions, Responses, Anthropic Messages); ``no_memory``
   (recall off) is the ceiling: the newest exchange is new whatever memproxy does.
2. Latency: p50 / p95 of non-streamed requests through memproxy (memory on, c=1) for
   ``/v1/chat/completions``, ``/v1/responses`` and ``/v1/messages`` (``messages``: an
   OpenAI-wire model, translated to chat by memproxy; ``messages_native``: an Anthropic model,
   relayed to the provider's own ``/v1/messages``), next to the same calls made straight
   to the scripted upstream, so the added cost of each surface over chat is memproxy's own.

Run: ``python bench/prefix_cache.py`` (``--quick`` for fewer latency samples). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import processes
from stats import percentiles_ms

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import itertools

from memproxy.proxy.budget import use_bundled_tokenizers
from memproxy.testing.background_server import BackgroundServer
from memproxy.testing.scripted_upstream import Recorded, ScriptedUpstream

# "-terse": the scripted upstream's answer does not echo the memories it was given, so the
# history a client resends has the same length whatever was recalled, as a model's answers
# would (an echo of 4 memories added ~60 tokens to every answer of the memory runs only).
MODEL = "gpt-4o-mini-terse"
# An alias to Anthropic's wire (the scripted upstream's /v1/messages): what an Anthropic SDK
# app with a Claude model sends. Plain MODEL on /v1/messages is translated to chat by memproxy.
NATIVE = "claude-native"
NATIVE_MODEL = "claude-sonnet-4-5-terse"
SURFACES = ("chat", "responses", "messages", "messages_native")
TOKEN = "sk-bench-prefix"
TURNS = 20
PLACEMENTS = ("after_system", "end")
POLICY = (
    "You are Atlas, the travel assistant of Northwind Travel. Answer in the user's language, "
    "briefly and concretely. Use the tools when the user asks about weather or bookings; never "
    "invent a booking reference. Prices are in EUR unless the user says otherwise. If the user "
    "mentions a preference (seat, diet, budget, companions), take it into account in every "
    "suggestion. Escalate to a human agent when the user is unhappy twice in a row. "
)
TOOL = {"name": "get_weather", "description": "Weather forecast for a city and a date",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "date": {"type": "string"}}}}  # fmt: skip
# (system prompt, tools): a chat app (~250-token prompt, 2 tools) and an agent (~2,400-token
# prompt, 12 tools: what coding and support agents send).
PROFILES: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "chat_app": (POLICY * 3, [{**TOOL, "name": f"tool_{i}"} for i in range(2)]),
    "agent": (POLICY * 30, [{**TOOL, "name": f"tool_{i}"} for i in range(12)]),
}
TOPICS = ["Lisbon", "Porto", "Madeira", "Seville", "Granada", "Valencia", "Bilbao", "Malaga", "Faro",
          "Coimbra", "Braga", "Toledo", "Cordoba", "Evora", "Sintra", "Cadiz", "Girona", "Zaragoza",
          "Salamanca", "Aveiro"]  # fmt: skip


def user_text(turn: int) -> str:
    city = TOPICS[turn % len(TOPICS)]
    return f"Turn {turn}: I am thinking about a trip to {city} with my family; what should I plan for the weather and food there?"


def memory_text(turn: int) -> str:
    city = TOPICS[turn % len(TOPICS)]
    return f"User plans a family trip to {city} and cares about weather and food"


# -- what the provider received, in prompt order ------------------------------------------


def segments(surface: str, body: dict[str, Any]) -> list[Any]:
    """The forwarded request's prompt parts in the order a provider renders them."""
    if surface == "chat":
        return [body.get("tools"), *body.get("messages", [])]
    if surface == "messages_native":
        messages = [{**m, "content": _blocks(m.get("content"))} for m in body.get("messages", [])]
        return [body.get("tools"), _blocks(body.get("system")), *messages]
    items = body.get("input")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else items or []
    return [body.get("tools"), body.get("instructions"), *items]


def _blocks(content: Any) -> Any:
    """Anthropic's canonical form of a ``content`` or ``system``: its API documents a string as
    shorthand for an array of one text block (the two are the same prompt), so both are
    compared as blocks. Otherwise appending the memory block to a string turn, which makes
    it a block list, would count that turn as changed when the history resends it."""
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def prompt_tokens(encoding: Any, surface: str, body: dict[str, Any]) -> list[int]:
    text = "".join(json.dumps(part, sort_keys=True) + "\n" for part in segments(surface, body))
    return list(encoding.encode(text, disallowed_special=()))


def prefix_shares(encoding: Any, surface: str, bodies: list[dict[str, Any]]) -> list[float]:
    shares = []
    for before, after in itertools.pairwise(bodies):
        a, b = prompt_tokens(encoding, surface, before), prompt_tokens(encoding, surface, after)
        common = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            common += 1
        shares.append(common / len(b))
    return shares


# -- one conversation per surface --------------------------------------------------------


def converse(http: httpx.Client, surface: str, user: str, profile: str) -> list[str]:
    """20 turns, the whole history resent each time; one new memory per turn. Returns the
    marker of every turn so the forwarded requests can be found."""
    history: list[dict[str, Any]] = []
    markers = []
    for turn in range(TURNS):
        ok = http.post("/v1/memories", json={"text": memory_text(turn), "user_id": user})
        assert ok.status_code == 201, ok.text
        text = user_text(turn) + f" [{user}]"
        markers.append(text)
        history.append({"role": "user", "content": text})
        history.append({"role": "assistant", "content": ask(http, surface, history, *PROFILES[profile])})
    return markers


def ask(http: httpx.Client, surface: str, history: list[dict[str, Any]], system: str,
        functions: list[dict[str, Any]]) -> str:  # fmt: skip
    body: dict[str, Any]
    if surface == "chat":
        tools = [{"type": "function", "function": t} for t in functions]
        body = {"model": MODEL, "messages": [{"role": "system", "content": system}, *history], "tools": tools}
        return str(post(http, "/v1/chat/completions", body)["choices"][0]["message"]["content"])
    if surface == "responses":
        tools = [{"type": "function", **t} for t in functions]
        body = {"model": MODEL, "instructions": system, "input": history, "tools": tools, "store": False}
        answer = post(http, "/v1/responses", body)
        return "".join(c["text"] for item in answer["output"] for c in item.get("content", []))
    tools = [
        {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
        for t in functions
    ]
    model = NATIVE if surface == "messages_native" else MODEL
    body = {"model": model, "max_tokens": 200, "system": system, "messages": history, "tools": tools}
    return "".join(b.get("text", "") for b in post(http, "/v1/messages", body)["content"])


def post(http: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = http.post(path, json=body)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def forwarded(fake: ScriptedUpstream, markers: list[str]) -> list[dict[str, Any]]:
    """Turn k's forwarded request: the first one whose body holds turn k's marker (later
    turns hold it too, in their history)."""
    out = []
    for marker in markers:
        found: Recorded = next(r for r in fake.requests if marker in json.dumps(r.body))
        out.append(found.body)
    return out


# -- latency ------------------------------------------------------------------------------


def latency(
    url: str, samples: int, headers: dict[str, str], surfaces: tuple[str, ...], native_model: str = NATIVE
) -> dict[str, dict[str, float]]:
    """p50/p95 ms per surface, requests interleaved so all see the same machine load."""
    bodies = {
        "chat": ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}]}),
        "responses": ("/v1/responses", {"model": MODEL, "input": "hello there", "store": False}),
        "messages": ("/v1/messages", {"model": MODEL, "max_tokens": 50,
                                      "messages": [{"role": "user", "content": "hello there"}]}),
        "messages_native": ("/v1/messages", {"model": native_model, "max_tokens": 50,
                                             "messages": [{"role": "user", "content": "hello there"}]}),
    }  # fmt: skip
    bodies = {name: bodies[name] for name in surfaces}
    times: dict[str, list[float]] = {name: [] for name in bodies}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        for i in range(samples + 5):
            for name, (path, body) in bodies.items():
                started = time.perf_counter()
                response = http.post(path, json=body)
                elapsed = time.perf_counter() - started
                assert response.status_code == 200, response.text
                if i >= 5:  # warm-up
                    times[name].append(elapsed)
    return {name: percentiles_ms(values, (50, 95), digits=2) for name, values in times.items() if values}


def settings(fake_v1: str, data_dir: Path, port: int, placement: str) -> dict[str, Any]:
    return {
        "server": {"port": port},
        "storage": {"data_dir": str(data_dir)},
        "upstream": {
            "api_base": fake_v1,
            "models": [
                {
                    "name": NATIVE,
                    "litellm_params": {
                        "model": "anthropic/" + NATIVE_MODEL,
                        "api_base": fake_v1.removesuffix("/v1"),
                        "api_key": "sk-ant-bench",
                    },
                }
            ],
        },
        "recall": {"placement": placement, "top_k": 4, "max_tokens": 200},
        "extraction": {"worker_enabled": False},
    }


def run(quick: bool) -> dict[str, Any]:
    use_bundled_tokenizers()
    import tiktoken

    encoding = tiktoken.get_encoding("o200k_base")
    fake = ScriptedUpstream()
    report: dict[str, Any] = {"turns": TURNS, "tokenizer": "o200k_base", "prefix_share": {}}
    with tempfile.TemporaryDirectory() as tmp, BackgroundServer(fake.app) as upstream:
        work = Path(tmp)
        fake_v1 = upstream.url + "/v1"
        ports = {p: processes.free_port() for p in PLACEMENTS}
        children = [processes.memproxy_child("serve", settings(fake_v1, work / p, ports[p], p), work, p)
                    for p in PLACEMENTS]  # fmt: skip
        with processes.running(children):
            for profile in PROFILES:
                for placement in (*PLACEMENTS, "no_memory"):
                    # "no_memory": recall off, the best any placement could do.
                    port = ports["end" if placement == "no_memory" else placement]
                    rows = report["prefix_share"].setdefault(profile, {}).setdefault(placement, {})
                    for surface in SURFACES:
                        user = f"{profile}-{placement}-{surface}"
                        headers = {"Authorization": f"Bearer {TOKEN}", "X-Memproxy-User-Id": user,
                                   "X-Memproxy-Recall": "off" if placement == "no_memory" else "on"}  # fmt: skip
                        with httpx.Client(
                            base_url=f"http://127.0.0.1:{port}", timeout=60, headers=headers
                        ) as http:
                            bodies = forwarded(fake, converse(http, surface, user, profile))
                        # /v1/messages with MODEL reaches the scripted upstream translated to chat
                        # (memproxy's fast path); with the Anthropic alias, as Anthropic's own request.
                        kind = {"messages": "chat"}.get(surface, surface)
                        shares = prefix_shares(encoding, kind, bodies)
                        rows[surface] = {"mean": round(statistics.mean(shares), 4), "min": round(min(shares), 4),
                                         "last": round(shares[-1], 4)}  # fmt: skip
            samples = 40 if quick else 300
            headers = {"Authorization": f"Bearer {TOKEN}", "X-Memproxy-User-Id": "latency-user"}
            via = latency(f"http://127.0.0.1:{ports['end']}", samples, headers, SURFACES)
            direct = latency(upstream.url, samples, {"Authorization": f"Bearer {TOKEN}"},
                             ("chat", "responses", "messages_native"), native_model=NATIVE_MODEL)  # fmt: skip
    direct["messages"] = direct["chat"]  # memproxy translates /v1/messages for this model to chat
    added = {name: round(via[name]["p50_ms"] - direct[name]["p50_ms"], 2) for name in via}
    report["latency_ms"] = {
        "through_memproxy": via,
        "direct_to_upstream": direct,
        "memproxy_added_p50": added,
        "vs_chat_p50": {name: round(added[name] - added["chat"], 2) for name in added},
        "samples": samples,
    }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer latency samples")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.quick), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
