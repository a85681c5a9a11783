"""The transparent proxy: real OpenAI SDK → memproxy (uvicorn) → LiteLLM → scripted upstream."""

from __future__ import annotations

import asyncio
import json
import time
import tomllib
from pathlib import Path

import httpx
import openai
import pytest

from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.support.paths import on_both_paths
from tests.support.proxy import Proxy

# Every test here runs on the fast path and on the LiteLLM path.
proxy_on_both_paths = on_both_paths("proxy")
keys_proxy_on_both_paths = on_both_paths("keys_proxy")


def test_plain_answer_equals_upstream(proxy: Proxy, fake: ScriptedUpstream) -> None:
    client = proxy.client()
    result = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello there"}]
    )
    assert result.choices[0].message.content == "You said: hello there"
    assert result.choices[0].finish_reason == "stop"
    assert result.usage is not None and result.usage.completion_tokens == 4
    assert fake.last_chat().body["messages"] == [{"role": "user", "content": "hello there"}]


def test_stream_reassembles_to_upstream_answer(proxy: Proxy) -> None:
    client = proxy.client()
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "stream me please"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "You said: stream me please"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) >= 4
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5


def test_stream_ends_with_done_marker(proxy: Proxy) -> None:
    with proxy.http() as http:
        response = http.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        )
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [line for line in response.text.split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_pass_through(proxy: Proxy, stream: bool) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    client = proxy.client()
    kwargs = {
        "model": "tools",
        "messages": [{"role": "user", "content": "weather?"}],
        "tools": tools,
        "tool_choice": "auto",
    }
    if stream:
        name, args, finish = "", "", None
        for chunk in client.chat.completions.create(stream=True, **kwargs):  # type: ignore[call-overload]
            if not chunk.choices:
                continue
            for call in chunk.choices[0].delta.tool_calls or []:
                name += call.function.name or "" if call.function else ""
                args += call.function.arguments or "" if call.function else ""
            finish = chunk.choices[0].finish_reason or finish
    else:
        result = client.chat.completions.create(**kwargs)  # type: ignore[call-overload]
        call = result.choices[0].message.tool_calls[0]
        name, args, finish = call.function.name, call.function.arguments, result.choices[0].finish_reason
    assert name == "get_weather"
    assert json.loads(args) == {"query": "weather in Paris"}
    assert finish == "tool_calls"


def test_every_field_reaches_upstream_unchanged(proxy: Proxy, fake: ScriptedUpstream) -> None:
    body = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "fields"}],
        "temperature": 0.3,
        "top_p": 0.9,
        "n": 2,
        "seed": 7,
        "logprobs": True,
        "top_logprobs": 2,
        "max_tokens": 50,
        "stop": ["END"],
        "presence_penalty": 0.1,
        "frequency_penalty": 0.2,
        "response_format": {"type": "json_object"},
        "logit_bias": {"50256": -100},
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "none",
        "parallel_tool_calls": False,
        "user": "someone",
        "metadata": {"k": "v"},
        "store": False,
        "reasoning_effort": "low",
        "service_tier": "auto",
        "some_future_field": {"nested": [1, 2]},
        "api_base": "http://evil.example",
        "mock_response": "no",
    }
    with proxy.http() as http:
        response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert len(response.json()["choices"]) == 2
    received = fake.find_chat("fields").body
    for key, value in body.items():
        assert received.get(key) == value, key


def test_unknown_model_alias_and_routing(proxy: Proxy, fake: ScriptedUpstream) -> None:
    proxy.client().chat.completions.create(
        model="claude-3-5-sonnet", messages=[{"role": "user", "content": "routed"}]
    )
    assert fake.find_chat("routed").body["model"] == "claude-3-5-sonnet"


def test_model_alias_brings_its_own_model_and_key(proxy: Proxy, fake: ScriptedUpstream) -> None:
    result = proxy.client(token="sk-caller").chat.completions.create(
        model="smart", messages=[{"role": "user", "content": "aliased call"}]
    )
    assert result.choices[0].message.content == "You said: aliased call"
    received = fake.find_chat("aliased call")
    assert received.body["model"] == "aliased-model"
    assert received.headers["authorization"] == "Bearer sk-alias-own-key"
    assert "smart" in {m.id for m in proxy.client().models.list()}


def test_passthrough_forwards_caller_token(proxy: Proxy, fake: ScriptedUpstream) -> None:
    proxy.client(token="sk-caller-secret").chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "whose key"}]
    )
    assert fake.find_chat("whose key").headers["authorization"] == "Bearer sk-caller-secret"


def test_keys_mode_uses_server_key_and_rejects_unknown(keys_proxy: Proxy, fake: ScriptedUpstream) -> None:
    keys_proxy.client(token="mp-key-alpha-000000000001").chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "keys mode"}]
    )
    assert fake.find_chat("keys mode").headers["authorization"] == "Bearer sk-server-provider-key"
    with pytest.raises(openai.AuthenticationError) as err:
        keys_proxy.client(token="mp-key-wrong-000000000000").chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "nope"}]
        )
    assert err.value.status_code == 401
    assert err.value.body["code"] == "invalid_api_key"  # type: ignore[index]


def test_missing_credentials_is_401(proxy: Proxy) -> None:
    with proxy.http(token=None) as http:
        response = http.post(
            "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}
        )
    assert response.status_code == 401
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert response.json()["error"]["type"] == "authentication_error"


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (json.dumps({"model": "m"}).encode(), "messages"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(), "model"),
        (json.dumps({"model": "m", "messages": "hello"}).encode(), "messages"),
        (json.dumps({"model": 5, "messages": [{"role": "user", "content": "x"}]}).encode(), "model"),
        (json.dumps({"model": "m", "messages": [{"role": "user"}], "stream": "yes"}).encode(), "stream"),
    ],
)
def test_malformed_input_is_400_in_openai_shape(proxy: Proxy, payload: bytes, param: str | None) -> None:
    with proxy.http() as http:
        response = http.post(
            "/v1/chat/completions", content=payload, headers={"content-type": "application/json"}
        )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"]


def test_oversized_body_is_413(proxy: Proxy) -> None:
    big = "x" * (proxy.settings.server.max_body_bytes + 10)
    with proxy.http() as http:
        response = http.post(
            "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": big}]}
        )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


@pytest.mark.parametrize(
    ("status", "exc"),
    [
        (500, openai.InternalServerError),
        (429, openai.RateLimitError),
        (401, openai.AuthenticationError),
        (403, openai.PermissionDeniedError),
        (404, openai.NotFoundError),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_errors_pass_through(proxy: Proxy, status: int, exc: type[Exception], stream: bool) -> None:
    with pytest.raises(exc) as err:
        result = proxy.client().chat.completions.create(
            model=f"fail-{status}", messages=[{"role": "user", "content": "x"}], stream=stream
        )
        if stream:
            list(result)  # type: ignore[arg-type]
    assert err.value.status_code == status  # type: ignore[attr-defined]
    assert err.value.body["message"] == f"scripted failure {status}"  # type: ignore[attr-defined]
    assert err.value.body["code"] == f"scripted_{status}"  # type: ignore[attr-defined]


# Slow tier: each variant waits out the session server's upstream.timeout_s (3 s).
@pytest.mark.slow
def test_upstream_timeout_is_504(proxy: Proxy) -> None:
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as err:
        proxy.client().chat.completions.create(model="hang", messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == 504
    assert err.value.body["type"] == "timeout_error"  # type: ignore[index]
    assert time.monotonic() - started < proxy.settings.upstream.timeout_s + 5


def test_drop_mid_stream_ends_with_error_event(proxy: Proxy) -> None:
    with proxy.http() as http:
        response = http.post(
            "/v1/chat/completions",
            json={"model": "drop", "stream": True, "messages": [{"role": "user", "content": "a b c d e f"}]},
        )
    events = [e for e in response.text.split("\n\n") if e]
    assert response.status_code == 200
    last = json.loads(events[-1].removeprefix("data: "))
    assert "error" in last and last["error"]["message"]
    assert "data: [DONE]" not in events


def test_client_disconnect_cancels_upstream(proxy: Proxy, fake: ScriptedUpstream) -> None:
    before = fake.cancelled_streams
    words = " ".join(f"w{i}" for i in range(60))

    async def read_two_chunks_then_leave() -> None:
        client = proxy.async_client()
        stream = await client.chat.completions.create(
            model="slow", stream=True, messages=[{"role": "user", "content": words}]
        )
        seen = 0
        async for _ in stream:
            seen += 1
            if seen == 2:
                break
        await stream.close()
        await client.close()

    asyncio.run(read_two_chunks_then_leave())
    deadline = time.monotonic() + 5
    while fake.cancelled_streams == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.cancelled_streams == before + 1


@pytest.mark.parametrize(
    ("headers", "param"),
    [
        ({"X-Memproxy-User-Id": "u" * 257}, "X-Memproxy-User-Id"),
        ({"X-Memproxy-Agent-Id": "bad\tvalue"}, "X-Memproxy-Agent-Id"),
        ({"X-Memproxy-Session-Id": "s" * 300}, "X-Memproxy-Session-Id"),
        ({"X-Memproxy-Recall": "maybe"}, "X-Memproxy-Recall"),
    ],
)
def test_bad_scope_headers_are_400(proxy: Proxy, headers: dict[str, str], param: str) -> None:
    with proxy.http() as http:
        response = http.post(
            "/v1/chat/completions",
            headers=headers,
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


def test_bad_user_field_is_400(proxy: Proxy) -> None:
    with proxy.http() as http:
        response = http.post(
            "/v1/chat/completions",
            json={
                "model": "m",
                "user": ["not", "a", "string"],
                "messages": [{"role": "user", "content": "x"}],
            },
        )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "user"


def test_async_client_and_alias_route(proxy: Proxy) -> None:
    async def run() -> str | None:
        async with proxy.async_client() as client:
            result = await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "async hello"}]
            )
            return result.choices[0].message.content

    assert asyncio.run(run()) == "You said: async hello"
    with proxy.http() as http:
        response = http.post(
            "/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "alias"}]}
        )
    assert response.json()["choices"][0]["message"]["content"] == "You said: alias"


def test_models_and_embeddings(proxy: Proxy) -> None:
    client = proxy.client()
    assert "gpt-4o-mini" in {m.id for m in client.models.list()}
    result = client.embeddings.create(model="text-embedding-3-small", input=["a cat", "a dog"])
    assert len(result.data) == 2 and len(result.data[0].embedding) == 64


def test_request_id_is_echoed_or_made(proxy: Proxy) -> None:
    with proxy.http() as http:
        given = http.get("/healthz", headers={"X-Request-Id": "req-123"})
        made = http.get("/healthz")
    assert given.headers["x-request-id"] == "req-123"
    assert len(made.headers["x-request-id"]) == 32


def project_version() -> str:
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    return str(tomllib.loads(pyproject.read_text())["project"]["version"])


def test_health_and_readiness(proxy: Proxy) -> None:
    with httpx.Client(base_url=proxy.url) as http:
        assert http.get("/healthz").json() == {"status": "ok", "version": project_version()}
        assert http.get("/readyz").status_code == 200


def test_unknown_route_is_openai_shaped_404(proxy: Proxy) -> None:
    with proxy.http() as http:
        response = http.get("/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"
