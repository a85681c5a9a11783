"""Anthropic Messages ⇄ OpenAI chat completions, the translation of ``/v1/messages`` to an OpenAI-wire provider."""

from __future__ import annotations

import json
from typing import Any

from memproxy.api.surfaces.messages import for_provider
from memproxy.proxy.anthropic_chat import ChatStreamToEvents, to_chat, to_message
from memproxy.proxy.anthropic_turn import AnthropicStreamAccumulator
from memproxy.upstream.fastpath import FastRoute

TOOL = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {}}}


def test_request_blocks_tools_and_options_become_chat() -> None:
    body: dict[str, Any] = {
        "model": "gpt-4o-mini", "max_tokens": 50, "temperature": 0.2, "top_k": 5, "stop_sequences": ["END"],
        "metadata": {"user_id": "u-1"}, "tools": [TOOL], "tool_choice": {"type": "tool", "name": "get_weather"},
        "system": [{"type": "text", "text": "Be kind.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Porto"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "Sunny"}]},
                {"type": "text", "text": "Thanks, and tomorrow?"}]},
        ],
    }  # fmt: skip
    before = json.dumps(body, sort_keys=True)
    chat = to_chat(body)
    assert json.dumps(body, sort_keys=True) == before  # the caller's body is not touched
    assert chat["messages"] == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": [{"type": "text", "text": "Look:"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Porto"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"},  # right after the call, before the text
        {"role": "user", "content": "Thanks, and tomorrow?"},
    ]  # fmt: skip
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "parameters": TOOL["input_schema"], "description": "Weather"}}]  # fmt: skip
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert (chat["max_tokens"], chat["temperature"], chat["stop"], chat["user"]) == (50, 0.2, ["END"], "u-1")
    assert "top_k" not in chat and "stream" not in chat
    streamed = to_chat({**body, "stream": True, "tool_choice": {"type": "any"}})
    assert streamed["stream"] is True and streamed["stream_options"] == {"include_usage": True}
    assert streamed["tool_choice"] == "required"


def test_a_completion_becomes_a_message() -> None:
    chat = {"id": "chatcmpl-9", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Porto"}'}}]}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7}}  # fmt: skip
    message = to_message(chat, "gpt-4o-mini")
    assert message == {
        "id": "msg_chatcmpl-9", "type": "message", "role": "assistant", "model": "gpt-4o-mini",
        "content": [{"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Porto"}}],
        "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 7},
    }  # fmt: skip
    cut = to_message({"choices": [{"finish_reason": "length", "message": {"content": "abc"}}]}, "m")
    assert cut["stop_reason"] == "max_tokens" and cut["usage"] == {"input_tokens": 0, "output_tokens": 0}


def test_a_chunk_stream_becomes_anthropic_events_in_order() -> None:
    chunks: list[dict[str, Any]] = [
        {"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hello"}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"content": " there"}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": '{"city":'}}]}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": '"Porto"}'}}]}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}},
    ]  # fmt: skip
    translator = ChatStreamToEvents("gpt-4o-mini")
    events = [event for chunk in chunks for event in translator.feed(chunk)]
    assert translator.finished
    events += translator.finish()
    names = [name for name, _ in events]
    assert names == ["message_start", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_stop", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_stop", "message_delta", "message_stop"]  # fmt: skip
    assert [data.get("index") for name, data in events if name.startswith("content_block")] == [
        0,
        0,
        0,
        0,
        1,
        1,
        1,
        1,
    ]
    assert events[-2][1] == {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                             "usage": {"output_tokens": 4}}  # fmt: skip
    # What capture rebuilds from the translated events is the reply.
    accumulator = AnthropicStreamAccumulator()
    for _, data in events:
        accumulator.feed(data)
    assert accumulator.complete
    assert accumulator.message() == {"role": "assistant", "content": "Hello there", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Porto"}'}}]}  # fmt: skip


def test_a_stream_without_a_finish_reason_is_not_whole() -> None:
    translator = ChatStreamToEvents("m")
    translator.feed({"id": "c", "choices": [{"index": 0, "delta": {"content": "Hel"}}]})
    assert not translator.finished


def test_openais_own_api_gets_max_completion_tokens() -> None:
    chat = to_chat({"model": "o3", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]})
    official = FastRoute("openai", "https://api.openai.com/v1", "o3", None, 600.0)
    compatible = FastRoute("openai", "http://127.0.0.1:8000/v1", "qwen", None, 600.0)
    assert for_provider(chat, official) == {
        "model": "o3",
        "messages": chat["messages"],
        "max_completion_tokens": 64,
    }
    assert for_provider(chat, compatible) is chat  # vLLM, llama.cpp, …: max_tokens, as sent
