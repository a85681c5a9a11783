"""An Anthropic Messages turn as recall and capture read it: the query, the new input, the reply.

tests/proxy/test_anthropic_chat.py checks the accumulator on a translated stream; here the
module's own rules, one by one.
"""

from __future__ import annotations

from typing import Any

from memproxy.proxy.anthropic_turn import (
    AnthropicStreamAccumulator,
    content_text,
    new_input,
    query_text,
    reply_from_message,
)
from memproxy.proxy.recall import QUERY_MAX_CHARS

TOOL_TURN: dict[str, Any] = {
    "system": "You are a helper. <memories>User lives in Porto.</memories>",
    "messages": [
        {"role": "user", "content": "Old question, already captured"},
        {"role": "assistant", "content": "Old answer"},
        {"role": "user", "content": [{"type": "text", "text": "What's the weather where I live?"},
                                     {"type": "image", "source": {"type": "base64", "data": "AAAA"}}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "weather",
                                           "input": {"city": "Porto"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "Sunny, 24C"}]}]},
    ],
}  # fmt: skip


def test_content_text_keeps_text_and_marks_attachments_but_not_tool_or_thinking_blocks() -> None:
    blocks = [
        {"type": "text", "text": "a"},
        {"type": "document", "source": {}},
        {"type": "thinking", "thinking": "secret reasoning"},
        {"type": "redacted_thinking", "data": "x"},
        {"type": "tool_use", "id": "t", "name": "n", "input": {}},
        {"type": "tool_result", "tool_use_id": "t", "content": "r"},
        {"text": "no type"},
        "not a block",
    ]
    assert content_text(blocks) == "a\n[document]\n[attachment]"
    assert content_text("plain") == "plain" and content_text(None) == "" and content_text([]) == ""


def test_a_tool_result_turn_recalls_with_the_user_message_before_it() -> None:
    assert query_text(TOOL_TURN) == "What's the weather where I live?\n[image]"
    assert query_text({"messages": [{"role": "user", "content": "  hi  "}]}) == "hi"
    assert query_text({"messages": []}) == "" and query_text({}) == ""
    long = "Q" + "x" * (3 * QUERY_MAX_CHARS) + "?"
    clipped = query_text({"messages": [{"role": "user", "content": long}]})
    assert clipped.startswith("Qx") and clipped.endswith("x?") and len(clipped) < len(long)


def test_only_what_follows_the_last_assistant_message_is_new_and_system_never_is() -> None:
    assert new_input(TOOL_TURN) == [{"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny, 24C"}]
    first_turn = {"system": "sys", "messages": [{"role": "user", "content": "I moved to Porto"}]}
    assert new_input(first_turn) == [{"role": "user", "content": "I moved to Porto"}]
    assert "sys" not in str(new_input(first_turn))


def test_a_user_message_with_results_and_text_gives_the_tool_messages_then_the_text() -> None:
    body = {"messages": [
        {"role": "assistant", "content": "calling"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "one"},
                                     {"type": "tool_result", "tool_use_id": "b", "content": "two"},
                                     {"type": "text", "text": "thanks"}]},
        {"role": "user", "content": "and another thing"},
        "garbage",
    ]}  # fmt: skip
    assert new_input(body) == [
        {"role": "tool", "tool_call_id": "a", "content": "one"},
        {"role": "tool", "tool_call_id": "b", "content": "two"},
        {"role": "user", "content": "thanks"},
        {"role": "user", "content": "and another thing"},
    ]
    assert new_input({"messages": [{"role": "assistant", "content": "only me"}]}) == []


def test_the_reply_is_one_chat_style_assistant_message() -> None:
    message = {"content": [
        {"type": "thinking", "thinking": "hidden"},
        {"type": "text", "text": "Let me "},
        {"type": "text", "text": "check."},
        {"type": "tool_use", "id": "toolu_9", "name": "weather", "input": {"city": "Porto"}},
        {"type": "tool_use", "id": "toolu_10", "name": "clock"},
    ]}  # fmt: skip
    assert reply_from_message(message) == {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {
                "id": "toolu_9",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Porto"}'},
            },
            {"id": "toolu_10", "type": "function", "function": {"name": "clock", "arguments": "{}"}},
        ],
    }
    tools_only = reply_from_message({"content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}]})
    assert tools_only is not None and tools_only["content"] is None
    assert reply_from_message({"content": [{"type": "thinking", "thinking": "x"}]}) is None
    assert reply_from_message({"content": "plain text"}) == {"role": "assistant", "content": "plain text"}


def feed(events: list[dict[str, Any]]) -> AnthropicStreamAccumulator:
    accumulator = AnthropicStreamAccumulator()
    for event in events:
        accumulator.feed(event)
    return accumulator


def test_a_stream_is_complete_only_once_a_stop_reason_came() -> None:
    start = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}
    partial = feed([start, delta])
    assert not partial.complete and partial.message() == {"role": "assistant", "content": "Hi"}
    done = feed([start, delta, {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
                 {"type": "message_delta", "delta": {}}])  # fmt: skip
    assert done.complete and done.stop_reason == "end_turn"  # a later delta without one keeps it


def test_blocks_are_rebuilt_in_index_order_and_bad_tool_json_is_kept_raw() -> None:
    events = [
        {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "f"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"a": '}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "1}"}},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "t2", "name": "g"}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"cut'}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "no start event"}},
    ]  # fmt: skip
    message = feed(events).message()
    assert message is not None and message["content"] == "no start event"
    assert [call["function"]["arguments"] for call in message["tool_calls"]] == [
        '{"a": 1}',
        '{"_raw": "{\\"cut"}',
    ]
    assert feed([]).message() is None
