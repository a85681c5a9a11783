"""The table of what LiteLLM's relay changes (docs/api.md) in an answer, checked against LiteLLM.

A provider with fixed ``id``/``created``/``model`` answers through memproxy with
``upstream.fast_path: off``; each difference docs/api.md lists is asserted, so a LiteLLM
upgrade that changes them makes that claim fail here instead of going stale.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from memproxy.testing.background_server import BackgroundServer
from tests.support.proxy import Proxy, proxy_settings, start_proxy

BASE = {"id": "chatcmpl-fixed", "created": 123, "model": "provider-model-2024", "system_fingerprint": "fp_1",
        "x_vendor": "kept"}  # fmt: skip
USAGE = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}


async def _chat(request: Request) -> Response:
    body = await request.json()
    if not body.get("stream"):
        choice = {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "logprobs": None,
                  "finish_reason": "stop"}  # fmt: skip
        return JSONResponse({**BASE, "object": "chat.completion", "choices": [choice], "usage": USAGE})

    async def events() -> AsyncIterator[str]:
        chunk = {**BASE, "object": "chat.completion.chunk"}
        yield "data: " + json.dumps({**chunk, "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "logprobs": None, "finish_reason": None}]}
        ) + "\n\n"  # fmt: skip
        yield "data: " + json.dumps({**chunk, "choices": [
            {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]}) + "\n\n"  # fmt: skip
        yield "data: " + json.dumps({**chunk, "choices": [], "usage": USAGE}) + "\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def litellm_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    provider = Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"])])
    with BackgroundServer(provider) as upstream:
        settings = proxy_settings(upstream.url + "/v1", Path(tmp_path_factory.mktemp("relay")),
                                  upstream={"fast_path": "off"}, extraction={"worker_enabled": False})  # fmt: skip
        server, proxy = start_proxy(settings)
        yield proxy
        server.stop()


def _ask(proxy: Proxy, stream: bool) -> httpx.Response:
    body: dict[str, Any] = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    with proxy.http() as http:
        response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response


def test_streamed_answers_through_litellm_differ_as_the_readme_says(litellm_path: Proxy) -> None:
    raw = _ask(litellm_path, stream=True).text
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    assert raw.rstrip().endswith("data: [DONE]")
    content, finish, usage = chunks[0], chunks[-2], chunks[-1]
    # kept
    assert all(c["id"] == "chatcmpl-fixed" and c["system_fingerprint"] == "fp_1" for c in chunks)
    assert content["choices"][0]["delta"]["content"] == "Hi" and content["x_vendor"] == "kept"
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert {k: usage["usage"][k] for k in USAGE} == USAGE
    # changed: null fields left out, LiteLLM's created, the requested model, cost added
    assert "finish_reason" not in content["choices"][0] and "logprobs" not in content["choices"][0]
    assert '"finish_reason": null' not in raw
    assert all(c["created"] != 123 for c in chunks)
    assert all(c["model"] == "gpt-4o-mini" for c in chunks)
    assert "cost" in usage["usage"] and "completion_tokens_details" in usage["usage"]
    assert "x_vendor" not in usage


def test_non_streamed_answers_through_litellm_differ_as_the_readme_says(litellm_path: Proxy) -> None:
    answer = _ask(litellm_path, stream=False).json()
    assert (answer["id"], answer["created"], answer["model"]) == (
        "chatcmpl-fixed",
        123,
        "provider-model-2024",
    )
    assert answer["x_vendor"] == "kept" and answer["choices"][0]["message"]["content"] == "Hi"
    message = answer["choices"][0]["message"]
    assert message["tool_calls"] is None and message["function_call"] is None  # gained as nulls
    assert (
        answer["usage"]["completion_tokens_details"] is None
        and answer["usage"]["prompt_tokens_details"] is None
    )
