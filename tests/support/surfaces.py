"""Helpers for the Responses and Anthropic Messages tests: SDK clients, memories, forwarded bodies."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx

from memproxy.testing.scripted_upstream import MEMORY_MARKER, Recorded, ScriptedUpstream, is_extraction
from tests.support.proxy import TLS, Proxy

TOKEN = "sk-test-user-a"
# The scripted upstream's behaviour models. LiteLLM fakes the stream of a Responses call to a
# model it has no info on (one non-streamed call, then synthesized events), so a test that
# needs real streaming (events as they arrive, a connection cut mid-stream) registers them.
SCRIPTED_MODELS = ("drop", "slow", "tools", "hang")


def stream_natively(models: tuple[str, ...] = SCRIPTED_MODELS) -> None:
    from memproxy.upstream.provider import import_litellm

    litellm = import_litellm()
    info = {"litellm_provider": "openai", "mode": "chat", "supports_native_streaming": True}
    litellm.register_model({name: dict(info) for name in models})


def anthropic_client(proxy: Proxy, token: str = TOKEN, **headers: str) -> anthropic.Anthropic:
    """The real Anthropic SDK pointed at memproxy; it sends ``token`` as ``x-api-key``."""
    return anthropic.Anthropic(
        base_url=proxy.url,
        api_key=token,
        default_headers=headers,
        max_retries=0,
        http_client=anthropic.DefaultHttpxClient(verify=TLS),
    )


def remember(proxy: Proxy, text: str, user_id: str, token: str = TOKEN) -> None:
    with proxy.http(token) as http:
        response = http.post("/v1/memories", json={"text": text, "user_id": user_id})
    assert response.status_code == 201, response.text


def forwarded(fake: ScriptedUpstream, needle: str, suffix: str) -> Recorded:
    """The latest request to the fake's ``suffix`` route whose body mentions ``needle`` (the
    worker's extraction calls, which quote captured turns, are not forwarded requests)."""
    for rec in reversed(fake.requests_to(suffix)):
        if needle in json.dumps(rec.body) and not is_extraction(rec.body):
            return rec
    raise LookupError(needle)


def memory_texts(body: Any) -> list[str]:
    """Every string in a forwarded body that holds a memory block."""
    if isinstance(body, str):
        return [body] if MEMORY_MARKER in body else []
    if isinstance(body, dict):
        return [t for v in body.values() for t in memory_texts(v)]
    if isinstance(body, list):
        return [t for v in body for t in memory_texts(v)]
    return []


def sse_events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """``(event name, data)`` of every frame of a typed SSE body."""
    events = []
    for raw in response.text.split("\n\n"):
        lines = raw.strip().splitlines()
        name = next((ln[6:].strip() for ln in lines if ln.startswith("event:")), "")
        data = "".join(ln[5:].strip() for ln in lines if ln.startswith("data:"))
        if data:
            events.append((name, json.loads(data)))
    return events
