"""``/v1/responses``: the real OpenAI SDK → memproxy → (relay | LiteLLM's Responses support) → scripted upstream."""

from __future__ import annotations

import json
import time
from typing import Any

import openai
import pytest

from memproxy.testing.scripted_upstream import TOOL_ARGUMENTS, ScriptedUpstream
from tests.support.memory_flow import captured, unique
from tests.support.paths import on_both_paths
from tests.support.proxy import Proxy
from tests.support.surfaces import forwarded, memory_texts, remember, sse_events, stream_natively

# Every test runs relayed byte for byte (``fast``: the fake serves the Responses API itself)
# and through LiteLLM's Responses support (``litellm``).
proxy = on_both_paths("proxy")

TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}]


@pytest.fixture(autouse=True, scope="module")
def _native_streams() -> None:
    stream_natively()


def test_plain_response_with_memory_headers_and_capture(proxy: Proxy, fake: ScriptedUpstream) -> None:
    user, text = unique("u"), unique("I keep bees")
    client = proxy.client(**{"X-Memproxy-User-Id": user, "X-Memproxy-Session-Id": "s9"})
    raw = client.responses.with_raw_response.create(model="gpt-4o-mini", input=text, instructions="Be brief.")
    response = raw.parse()
    assert response.output_text == f"You said: {text}"
    assert response.status == "completed" and response.usage is not None
    assert raw.headers["x-memproxy-recalled"] == "0"
    job_id = raw.headers["x-memproxy-capture"]
    assert captured(proxy.data_dir, job_id) == [
        {"role": "user", "content": text},
        {"role": "assistant", "content": response.output_text},
    ]
    sent = forwarded(fake, text, "/responses").body
    assert sent["input"] == text and sent["instructions"] == "Be brief."


def test_stream_relays_typed_events_and_captures_at_completion(proxy: Proxy) -> None:
    user, text = unique("u"), unique("stream me please")
    client = proxy.client(**{"X-Memproxy-User-Id": user})
    with client.responses.with_streaming_response.create(model="gpt-4o-mini", input=text, stream=True) as raw:
        job_id = raw.headers["x-memproxy-capture"]
        events = list(raw.parse())
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert types.count("response.output_text.delta") >= 4
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")  # type: ignore[union-attr]
    assert deltas == f"You said: {text}"
    assert [e.sequence_number for e in events] == sorted(e.sequence_number for e in events)
    assert captured(proxy.data_dir, job_id)[-1] == {"role": "assistant", "content": deltas}


def test_recall_injects_memories_as_their_own_developer_item(proxy: Proxy, fake: ScriptedUpstream) -> None:
    user = unique("u")
    remember(proxy, "User owns a red bicycle", user)
    client = proxy.client(**{"X-Memproxy-User-Id": user})
    raw = client.responses.with_raw_response.create(model="gpt-4o-mini", input="What bicycle do I own?")
    assert raw.headers["x-memproxy-recalled"] == "1"
    assert "red bicycle" in raw.parse().output_text
    sent = forwarded(fake, "What bicycle do I own?", "/responses").body
    items = sent["input"]
    blocks = [i for i in items if memory_texts(i)]
    assert len(blocks) == 1 and blocks[0]["role"] == "developer"
    assert {"role": "user", "content": "What bicycle do I own?"} in items  # the user's own text, untouched
    assert captured(proxy.data_dir, raw.headers["x-memproxy-capture"])[0] == {
        "role": "user", "content": "What bicycle do I own?"
    }  # fmt: skip


def test_get_and_delete_are_proxied(proxy: Proxy) -> None:
    client = proxy.client()
    created = client.responses.create(model="gpt-4o-mini", input="keep this one")
    fetched = client.responses.retrieve(created.id)
    assert fetched.id == created.id and fetched.output_text == "You said: keep this one"
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_and_the_tool_result_turn_recalls(
    proxy: Proxy, fake: ScriptedUpstream, stream: bool
) -> None:
    user, ask = unique("u"), unique("What is the weather where I live")
    remember(proxy, "User lives in Porto and asks about the weather", user)
    client = proxy.client(**{"X-Memproxy-User-Id": user})
    final: Any
    if stream:
        events = list(client.responses.create(model="tools", input=ask, tools=TOOLS, stream=True))  # type: ignore[arg-type]
        final = events[-1].response  # type: ignore[union-attr]
    else:
        final = client.responses.create(model="tools", input=ask, tools=TOOLS)  # type: ignore[arg-type]
    call: Any = final.output[0]
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == json.loads(TOOL_ARGUMENTS)
    history = [
        {"role": "user", "content": ask},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21C"},
    ]
    raw = client.responses.with_raw_response.create(model="gpt-4o-mini", input=history)  # type: ignore[arg-type]
    assert raw.headers["x-memproxy-recalled"] == "1"  # the query is the user's message before the tool result
    assert memory_texts(forwarded(fake, "Sunny, 21C", "/responses").body)
    assert captured(proxy.data_dir, raw.headers["x-memproxy-capture"]) == [
        {"role": "tool", "tool_call_id": call.call_id, "content": "Sunny, 21C"},
        {"role": "assistant", "content": raw.parse().output_text},
    ]


def test_previous_response_id_captures_only_the_new_input(proxy: Proxy) -> None:
    user = unique("u")
    client = proxy.client(**{"X-Memproxy-User-Id": user})
    first = client.responses.create(model="gpt-4o-mini", input="first message here")
    raw = client.responses.with_raw_response.create(
        model="gpt-4o-mini", input="second message here", previous_response_id=first.id
    )
    assert captured(proxy.data_dir, raw.headers["x-memproxy-capture"]) == [
        {"role": "user", "content": "second message here"},
        {"role": "assistant", "content": raw.parse().output_text},
    ]


def test_provider_error_before_the_stream_keeps_status_and_openai_shape(proxy: Proxy) -> None:
    with proxy.http() as http:
        response = http.post("/v1/responses", json={"model": "fail-429", "input": "x", "stream": True})
    assert response.status_code == 429
    assert response.json()["error"]["message"] == "scripted failure 429"
    assert response.json()["error"]["code"] == "scripted_429"


def test_error_after_the_stream_began_ends_with_an_error_event(proxy: Proxy) -> None:
    user = unique("u")
    with proxy.http() as http:
        response = http.post("/v1/responses", headers={"X-Memproxy-User-Id": user},
                             json={"model": "drop", "input": "cut me off", "stream": True})  # fmt: skip
    assert response.status_code == 200
    events = sse_events(response)
    assert events[0][0] == "response.created"
    name, data = events[-1]
    assert name == "error" and data["type"] == "error" and data["message"]
    assert data["sequence_number"] > events[-2][1]["sequence_number"]
    assert captured(proxy.data_dir, response.headers["x-memproxy-capture"]) == []


def test_bad_input_is_a_400(proxy: Proxy) -> None:
    with proxy.http() as http:
        response = http.post("/v1/responses", json={"model": "gpt-4o-mini", "input": 5})
    assert response.status_code == 400 and response.json()["error"]["param"] == "input"


def test_client_disconnect_cancels_the_upstream_stream(proxy: Proxy, fake: ScriptedUpstream) -> None:
    before = fake.cancelled_streams
    words = " ".join(f"w{i}" for i in range(60))
    with (
        proxy.http() as http,
        http.stream(
            "POST", "/v1/responses", json={"model": "slow", "input": words, "stream": True}
        ) as response,
    ):
        for seen, _ in enumerate(response.iter_lines()):
            if seen == 4:
                break  # leaving the block closes the connection mid-stream
    deadline = time.monotonic() + 10
    while fake.cancelled_streams == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.cancelled_streams == before + 1


def test_recall_and_capture_switches(proxy: Proxy, fake: ScriptedUpstream) -> None:
    user = unique("u")
    remember(proxy, "User owns a red bicycle", user)
    headers = {"X-Memproxy-User-Id": user, "X-Memproxy-Recall": "off", "X-Memproxy-Capture": "off"}
    raw = proxy.client(**headers).responses.with_raw_response.create(model="gpt-4o-mini", input="my bicycle?")
    assert raw.headers["x-memproxy-recalled"] == "0" and raw.headers["x-memproxy-capture"] == "off"
    assert not memory_texts(fake.requests_to("/responses")[-1].body)
    anonymous = proxy.client().responses.with_raw_response.create(model="gpt-4o-mini", input="who am I?")
    assert anonymous.headers["x-memproxy-capture"] == "off"  # no user or agent: memory is off


def test_a_conversation_begun_through_litellm_continues_on_the_fast_path(
    litellm_proxy: Proxy, fast_proxy: Proxy
) -> None:
    """``upstream.fast_path`` switched on (or a model moved to the fast path) mid-conversation:
    a LiteLLM response id still works as ``previous_response_id``, for GET and for DELETE."""
    first = litellm_proxy.client().responses.create(model="gpt-4o-mini", input="started through LiteLLM")
    fast = fast_proxy.client()
    later = fast.responses.create(model="gpt-4o-mini", input="and continued", previous_response_id=first.id)
    assert later.output_text == "You said: and continued"
    assert fast.responses.retrieve(first.id).output_text == "You said: started through LiteLLM"
    fast.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        fast.responses.retrieve(first.id)
