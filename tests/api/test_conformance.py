"""Conformance: the same requests through both upstream paths to canned provider bytes.

The fake upstream answers each model name below with exact bytes (``RawReply``), written
the way a provider might (no spaces, unusual key order, provider-only fields, escaped
unicode, ``finish_reason: null`` chunks, an SSE event split across two TCP writes) so
that any re-encoding would show. The fast path must hand back those bytes unchanged, with
the provider's status and rate-limit headers; the LiteLLM path must answer the same content.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from memproxy.testing.scripted_upstream import RawReply, ScriptedUpstream
from tests.support.proxy import Proxy

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "conformance"}]
_HEAD = b'{"id":"chatcmpl-conf","object":"chat.completion","created":1700000000,"model":"m",'
_TAIL = b',"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},"system_fingerprint":"fp_c","x_provider_extra":{"k":[1,2]}}'


def _choices(*choices: bytes) -> bytes:
    return _HEAD + b'"choices":[' + b",".join(choices) + b"]" + _TAIL


PLAIN = _choices(
    b'{"index":0,"message":{"role":"assistant","content":"Ol\\u00e1, \\u00e9t\\u00e9!","refusal":null},'
    b'"logprobs":null,"finish_reason":"stop"}'
)
TOOLS = _choices(
    b'{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",'
    b'"function":{"name":"get_weather","arguments":"{\\"city\\":\\"Paris\\"}"}}]},"logprobs":null,'
    b'"finish_reason":"tool_calls"}'
)
TWO = _choices(
    b'{"index":0,"message":{"role":"assistant","content":"first"},"logprobs":null,"finish_reason":"stop"}',
    b'{"index":1,"message":{"role":"assistant","content":"second"},"logprobs":null,"finish_reason":"length"}',
)
LOGPROBS = _choices(
    b'{"index":0,"message":{"role":"assistant","content":"Hi"},"logprobs":{"content":[{"token":"Hi",'
    b'"logprob":-0.25,"bytes":[72,105],"top_logprobs":[{"token":"Hi","logprob":-0.25,"bytes":[72,105]},'
    b'{"token":"Hey","logprob":-1.5,"bytes":[72,101,121]}]}],"refusal":null},"finish_reason":"stop"}'
)
JSON_FORMAT = _choices(
    b'{"index":0,"message":{"role":"assistant","content":"{\\"answer\\": 42}"},"logprobs":null,'
    b'"finish_reason":"stop"}'
)
_CHUNK = b'data: {"id":"chatcmpl-s","object":"chat.completion.chunk","created":1700000000,"model":"m","system_fingerprint":"fp_c","choices":[{"index":0,"delta":'
STREAM = [
    _CHUNK + b'{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n',
    _CHUNK + b'{"content":"Ol\\u00e1"},"logprobs":null,"finish_reason":null}]}\n\n' + _CHUNK[:40],
    _CHUNK[40:] + b'{"content":" there"},"logprobs":null,"finish_reason":null}]}\n\n',
    _CHUNK + b'{},"logprobs":null,"finish_reason":"stop"}]}\n\n',
    b'data: {"id":"chatcmpl-s","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n',
    b"data: [DONE]\n\n",
]
RATE_LIMITED = (
    b'{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,'
    b'"code":"rate_limit_exceeded"}}'
)
BAD_REQUEST = (
    b'{"error":{"message":"This model\'s maximum context length is 8192 tokens.","type":'
    b'"invalid_request_error","param":"messages","code":"context_length_exceeded"}}'
)


@dataclass
class Case:
    name: str
    reply: RawReply
    extra: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case("plain", RawReply(PLAIN)),
    Case(
        "stream",
        RawReply(STREAM, media_type="text/event-stream"),
        {"stream": True, "stream_options": {"include_usage": True}},
    ),
    Case("tools", RawReply(TOOLS), {"tools": [{"type": "function", "function": {"name": "get_weather"}}]}),
    Case("n2", RawReply(TWO), {"n": 2}),
    Case("logprobs", RawReply(LOGPROBS), {"logprobs": True, "top_logprobs": 2}),
    Case("json", RawReply(JSON_FORMAT), {"response_format": {"type": "json_object"}}),
    Case("unknown-field", RawReply(PLAIN), {"some_future_field": {"nested": [1, "x"]}}),
    Case("429", RawReply(RATE_LIMITED, 429, {"retry-after": "7", "x-ratelimit-remaining-requests": "0"})),
    Case("400", RawReply(BAD_REQUEST, 400)),
]


@pytest.fixture(scope="module")
def models(fake: ScriptedUpstream) -> dict[str, str]:
    """A unique model name per case, answered by the fake with the case's bytes."""
    names = {case.name: f"raw-{case.name}-{uuid.uuid4().hex[:6]}" for case in CASES}
    for case in CASES:
        fake.raw[names[case.name]] = case.reply
    return names


def send(proxy: Proxy, model: str, case: Case) -> httpx.Response:
    body = {"model": model, "messages": MESSAGES, **case.extra}
    with proxy.http() as http:
        return http.post("/v1/chat/completions", json=body, headers={"X-Memproxy-User-Id": "conf-user"})


def last_request(fake: ScriptedUpstream, model: str) -> dict[str, Any]:
    return next(r.body for r in reversed(fake.chat_requests()) if r.body.get("model") == model)


def canned(case: Case) -> bytes:
    return b"".join(case.reply.body) if isinstance(case.reply.body, list) else case.reply.body


def events(raw: bytes) -> list[Any]:
    out = []
    for event in raw.decode().split("\n\n"):
        if event.startswith("data: ") and event != "data: [DONE]":
            out.append(json.loads(event.removeprefix("data: ")))
    return out


def content_of(case: Case, raw: bytes) -> Any:
    """What a client reads from the answer, whatever its encoding."""
    if case.name == "stream":
        chunks = events(raw)
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        finish = [c["choices"][0].get("finish_reason") for c in chunks if c["choices"]][-1]
        return text, finish, _set(chunks[-1]["usage"])
    data = json.loads(raw)
    if "error" in data:
        return {k: data["error"][k] for k in ("message", "type", "param", "code")}
    return [
        (c["index"], c["message"].get("content"), c["message"].get("tool_calls"), c["finish_reason"],
         c.get("logprobs"))
        for c in data["choices"]
    ], _set(data["usage"])  # fmt: skip


def _set(usage: dict[str, Any]) -> dict[str, Any]:
    """The provider's counts (LiteLLM adds ``*_details`` of its own making to usage)."""
    return {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fast_path_relays_the_providers_bytes(
    fast_proxy: Proxy, fake: ScriptedUpstream, models: dict[str, str], case: Case
) -> None:
    response = send(fast_proxy, models[case.name], case)
    assert response.status_code == case.reply.status
    assert response.content == canned(case)
    assert response.headers["content-type"].startswith(case.reply.media_type)
    for name, value in case.reply.headers.items():
        assert response.headers[name] == value
    received = last_request(fake, models[case.name])
    assert received == {"model": models[case.name], "messages": MESSAGES, **case.extra}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_litellm_path_answers_the_same_content(
    fast_proxy: Proxy, litellm_proxy: Proxy, fake: ScriptedUpstream, models: dict[str, str], case: Case
) -> None:
    response = send(litellm_proxy, models[case.name], case)
    assert response.status_code == case.reply.status
    assert content_of(case, response.content) == content_of(case, canned(case))
    if case.name == "429":
        assert response.headers["retry-after"] == "7"
    received = last_request(fake, models[case.name])
    for key, value in case.extra.items():  # every field reached the provider on this path too
        assert received[key] == value, key


@pytest.mark.parametrize("path", ["fast", "litellm"])
def test_sdk_reads_both_paths_alike(
    fast_proxy: Proxy, litellm_proxy: Proxy, models: dict[str, str], path: str
) -> None:
    client = (fast_proxy if path == "fast" else litellm_proxy).client()
    plain = client.chat.completions.create(model=models["plain"], messages=MESSAGES)
    assert plain.choices[0].message.content == "Olá, été!"
    stream = client.chat.completions.create(model=models["stream"], messages=MESSAGES, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "Olá there"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=models["400"], messages=MESSAGES)
    assert err.value.code == "context_length_exceeded"
