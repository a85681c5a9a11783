"""``/v1/messages``: the real Anthropic SDK → memproxy → scripted upstream.

An OpenAI-wire model goes translated to chat completions by memproxy (``fast``) or to the
Responses API by LiteLLM's Anthropic-messages interface (``litellm``): every test using
``proxy`` runs on both. The ``native`` alias is Anthropic's own wire (the fake's ``/v1/messages``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.support.memory_flow import captured, unique
from tests.support.paths import on_both_paths
from tests.support.proxy import KEYS, Proxy, proxy_settings, start_proxy
from tests.support.surfaces import (
    anthropic_client,
    forwarded,
    memory_texts,
    remember,
    sse_events,
    stream_natively,
)

TOOLS = [
    {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {}}}
]
NATIVE = "claude-native"

proxy = on_both_paths("proxy")


def translated_to(proxy: Proxy) -> str:
    """The fake's route an OpenAI-wire model's /v1/messages request arrives at."""
    return "/chat/completions" if proxy.settings.upstream.fast_path == "auto" else "/responses"


@pytest.fixture(autouse=True, scope="module")
def _native_streams() -> None:
    stream_natively()


@pytest.fixture(scope="module", params=["fast", "litellm"])
def native(
    upstream: tuple[ScriptedUpstream, str],
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Proxy]:
    """A memproxy whose ``claude-native`` alias is Anthropic's (the fake's ``/v1/messages``):
    relayed byte for byte (``fast``) or through LiteLLM's native Anthropic route (``litellm``)."""
    root = upstream[1].removesuffix("/v1")
    settings = proxy_settings(
        upstream[1],
        tmp_path_factory.mktemp("native"),
        recall={"placement": "end", "timeout_ms": 10_000},
        upstream={"fast_path": "auto" if request.param == "fast" else "off"},
    )
    alias_type = type(settings.upstream.models[0])
    for suffix in ("", "-fail-429", "-drop", "-tools"):  # the fake's scripted behaviours, by model name
        settings.upstream.models.append(alias_type(name=NATIVE + suffix, litellm_params={
            "model": "anthropic/claude-sonnet-4-5" + suffix, "api_base": root, "api_key": "sk-ant-scripted"}))  # fmt: skip
    server, handle = start_proxy(settings)
    yield handle
    server.stop()


def test_plain_message_with_x_api_key_headers_and_capture(proxy: Proxy) -> None:
    user, text = unique("u"), unique("I keep bees")
    client = anthropic_client(proxy, **{"X-Memproxy-User-Id": user})
    raw = client.messages.with_raw_response.create(
        model="gpt-4o-mini", max_tokens=100, system="Be brief.", messages=[{"role": "user", "content": text}]
    )
    message = raw.parse()
    assert message.content[0].type == "text" and message.content[0].text == f"You said: {text}"
    assert message.stop_reason == "end_turn"
    assert raw.headers["x-memproxy-recalled"] == "0"
    assert captured(proxy.data_dir, raw.headers["x-memproxy-capture"]) == [
        {"role": "user", "content": text},
        {"role": "assistant", "content": f"You said: {text}"},
    ]


def test_stream_relays_events_and_captures(proxy: Proxy) -> None:
    user, text = unique("u"), unique("stream me please")
    client = anthropic_client(proxy, **{"X-Memproxy-User-Id": user})
    with client.messages.with_streaming_response.create(
        model="gpt-4o-mini", max_tokens=100, messages=[{"role": "user", "content": text}], stream=True
    ) as raw:
        job_id = raw.headers["x-memproxy-capture"]
        events = list(raw.parse())
    types = [e.type for e in events]
    assert types[0] == "message_start" and types[-1] == "message_stop"
    assert types.count("content_block_delta") >= 4
    text_out = "".join(e.delta.text for e in events if e.type == "content_block_delta")  # type: ignore[union-attr]
    assert text_out == f"You said: {text}"
    assert captured(proxy.data_dir, job_id)[-1] == {"role": "assistant", "content": text_out}


def test_metadata_user_id_is_the_user_and_recall_is_its_own_block(
    proxy: Proxy, fake: ScriptedUpstream
) -> None:
    user = unique("u")
    remember(proxy, "User owns a red bicycle", user)
    client = anthropic_client(proxy)
    ask = unique("What bicycle do I own")
    raw = client.messages.with_raw_response.create(
        model="gpt-4o-mini",
        max_tokens=100,
        metadata={"user_id": user},
        messages=[{"role": "user", "content": ask}],
    )
    assert raw.headers["x-memproxy-recalled"] == "1"
    assert "red bicycle" in raw.parse().content[0].text  # type: ignore[union-attr]
    sent = forwarded(fake, ask, translated_to(proxy)).body
    assert len(memory_texts(sent)) == 1
    if translated_to(proxy) == "/chat/completions":  # memory as a system message, as on chat
        assert sent["messages"][0] == {"role": "user", "content": ask}
        assert sent["messages"][1]["role"] == "system" and memory_texts(sent["messages"][1])
    assert captured(proxy.data_dir, raw.headers["x-memproxy-capture"])[0] == {"role": "user", "content": ask}


@pytest.mark.parametrize("stream", [False, True])
def test_tool_use_and_the_tool_result_turn_recalls(
    proxy: Proxy, fake: ScriptedUpstream, stream: bool
) -> None:
    user, ask = unique("u"), unique("What is the weather where I live")
    remember(proxy, "User lives in Porto and asks about the weather", user)
    client = anthropic_client(proxy, **{"X-Memproxy-User-Id": user})
    kwargs: dict[str, Any] = {"model": "tools", "max_tokens": 100, "tools": TOOLS,
                              "messages": [{"role": "user", "content": ask}]}  # fmt: skip
    if stream:
        with client.messages.stream(**kwargs) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**kwargs)
    use = message.content[0]
    assert use.type == "tool_use" and use.name == "get_weather" and use.input == {"query": "weather in Paris"}
    assert message.stop_reason == "tool_use"
    history = [
        {"role": "user", "content": ask},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21C"}],
        },
    ]
    raw = client.messages.with_raw_response.create(model="gpt-4o-mini", max_tokens=100, messages=history)  # type: ignore[arg-type]
    assert raw.headers["x-memproxy-recalled"] == "1"
    assert memory_texts(forwarded(fake, "Sunny, 21C", translated_to(proxy)).body)
    assert captured(proxy.data_dir, raw.headers["x-memproxy-capture"]) == [
        {"role": "tool", "tool_call_id": use.id, "content": "Sunny, 21C"},
        {"role": "assistant", "content": raw.parse().content[0].text},  # type: ignore[union-attr]
    ]


def test_errors_are_anthropic_shaped(proxy: Proxy) -> None:
    with httpx.Client(base_url=proxy.url, timeout=30) as http:
        missing = http.post("/v1/messages", json={"model": "m", "max_tokens": 5, "messages": []})
        bad = http.post("/v1/messages", headers={"x-api-key": "sk-x"}, json={"model": "m", "messages": []})
    assert missing.status_code == 401
    assert missing.json() == {"type": "error", "error": {"type": "authentication_error",
                                                         "message": missing.json()["error"]["message"]}}  # fmt: skip
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    client = anthropic_client(proxy)
    with pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(model="fail-429", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert caught.value.body == {"type": "error", "error": {"type": "rate_limit_error",
                                                            "message": "scripted failure 429"}}  # fmt: skip


def test_error_after_the_stream_began_ends_with_an_anthropic_error_event(proxy: Proxy) -> None:
    with proxy.http() as http:
        response = http.post("/v1/messages", headers={"X-Memproxy-User-Id": unique("u")},
                             json={"model": "drop", "max_tokens": 50, "stream": True,
                                   "messages": [{"role": "user", "content": "cut me off"}]})  # fmt: skip
    assert response.status_code == 200
    events = sse_events(response)
    assert events[0][0] == "message_start"
    name, data = events[-1]
    assert name == "error" and data["type"] == "error" and data["error"]["message"]
    assert captured(proxy.data_dir, response.headers["x-memproxy-capture"]) == []


@pytest.mark.parametrize("stream", [False, True])
def test_native_anthropic_keeps_cache_control_and_appends_the_block(
    native: Proxy, fake: ScriptedUpstream, stream: bool
) -> None:
    user, ask = unique("u"), unique("Which city do I live in")
    remember(native, "User lives in Porto, the city of bridges", user)
    system = [{"type": "text", "text": "You are kind.", "cache_control": {"type": "ephemeral"}}]
    last = [{"type": "text", "text": ask, "cache_control": {"type": "ephemeral"}}]
    messages = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
                {"role": "user", "content": last}]  # fmt: skip
    client = anthropic_client(native, **{"X-Memproxy-User-Id": user})
    kwargs: dict[str, Any] = {"model": NATIVE, "max_tokens": 50, "system": system, "messages": messages}
    if stream:
        with client.messages.stream(**kwargs) as events:
            reply = events.get_final_message()
    else:
        reply = client.messages.create(**kwargs)
    assert "Porto" in reply.content[0].text  # type: ignore[union-attr]
    sent = forwarded(fake, ask, "/v1/messages").body
    assert sent["system"] == system and sent["messages"][:2] == messages[:2]
    assert sent["messages"][2]["content"][0] == last[0]  # the breakpoint stays where the caller put it
    block = sent["messages"][2]["content"][1]
    assert block["type"] == "text" and memory_texts(block) and "cache_control" not in block


def test_x_api_key_follows_keys_mode_tenants(keys_proxy: Proxy) -> None:
    user = unique("u")
    remember(keys_proxy, "User owns a red bicycle", user, token=KEYS[0]["key"])
    ask: Any = [{"role": "user", "content": "What bicycle do I own?"}]
    own = anthropic_client(keys_proxy, KEYS[0]["key"], **{"X-Memproxy-User-Id": user})
    other = anthropic_client(keys_proxy, KEYS[1]["key"], **{"X-Memproxy-User-Id": user})
    assert own.messages.with_raw_response.create(model="gpt-4o-mini", max_tokens=50, messages=ask).headers[
        "x-memproxy-recalled"
    ] == "1"  # fmt: skip
    assert other.messages.with_raw_response.create(model="gpt-4o-mini", max_tokens=50, messages=ask).headers[
        "x-memproxy-recalled"
    ] == "0"  # another tenant's memory is out of reach  # fmt: skip
    with pytest.raises(anthropic.AuthenticationError) as caught:
        anthropic_client(keys_proxy, "mp-key-unknown-0000000000").messages.create(
            model="gpt-4o-mini", max_tokens=5, messages=ask
        )
    assert caught.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


def test_client_disconnect_cancels_the_upstream_stream(proxy: Proxy, fake: ScriptedUpstream) -> None:
    before = fake.cancelled_streams
    words = " ".join(f"w{i}" for i in range(60))
    body = {
        "model": "slow",
        "max_tokens": 500,
        "stream": True,
        "messages": [{"role": "user", "content": words}],
    }
    with proxy.http() as http, http.stream("POST", "/v1/messages", json=body) as response:
        for seen, _ in enumerate(response.iter_lines()):
            if seen == 6:
                break  # leaving the block closes the connection mid-stream
    deadline = time.monotonic() + 10
    while fake.cancelled_streams == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.cancelled_streams == before + 1


def test_native_route_forwards_every_field_and_the_anthropic_headers(
    native: Proxy, fake: ScriptedUpstream
) -> None:
    ask = unique("Tell me a short story")
    client = anthropic_client(native, **{"anthropic-beta": "prompt-caching-2024-07-31"})
    client.messages.create(model=NATIVE, max_tokens=20, messages=[{"role": "user", "content": ask}],
                           extra_body={"some_new_field": {"kept": True}})  # fmt: skip
    sent = forwarded(fake, ask, "/v1/messages")
    assert sent.body["model"] == "claude-sonnet-4-5"  # the alias resolved, the prefix gone
    assert sent.headers["x-api-key"] == "sk-ant-scripted" and "authorization" not in sent.headers
    assert sent.headers["anthropic-beta"] == "prompt-caching-2024-07-31"
    if native.settings.upstream.fast_path == "auto":  # relayed: even a field LiteLLM does not know
        assert sent.body["some_new_field"] == {"kept": True}
        assert sent.headers["anthropic-version"] == client.default_headers["anthropic-version"]
    else:  # LiteLLM forwards the Anthropic parameters it knows, with the version it speaks
        assert "some_new_field" not in sent.body
        assert sent.headers["anthropic-version"] == "2023-06-01"


def test_native_route_errors_tools_and_a_cut_stream(native: Proxy) -> None:
    user = unique("u")
    client = anthropic_client(native, **{"X-Memproxy-User-Id": user})
    with pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(
            model=NATIVE + "-fail-429", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.body == {"type": "error", "error": {"type": "rate_limit_error",
                                                            "message": "scripted failure 429"}}  # fmt: skip
    raw = client.messages.with_raw_response.create(
        model=NATIVE + "-tools",
        max_tokens=50,
        tools=TOOLS,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "What's the weather?"}],
    )
    use = raw.parse().content[0]
    assert use.type == "tool_use" and use.name == "get_weather"
    reply = captured(native.data_dir, raw.headers["x-memproxy-capture"])[-1]
    assert reply["role"] == "assistant" and reply["tool_calls"][0]["function"]["name"] == "get_weather"
    with native.http() as http:
        response = http.post("/v1/messages", headers={"X-Memproxy-User-Id": user},
                             json={"model": NATIVE + "-drop", "max_tokens": 50, "stream": True,
                                   "messages": [{"role": "user", "content": "cut me off"}]})  # fmt: skip
    events = sse_events(response)
    assert response.status_code == 200 and events[0][0] == "message_start"
    assert events[-1][0] == "error" and events[-1][1]["type"] == "error" and events[-1][1]["error"]["message"]
    assert captured(native.data_dir, response.headers["x-memproxy-capture"]) == []
