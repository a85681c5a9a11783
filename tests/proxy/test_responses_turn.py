"""A Responses API turn as recall and capture read it: the query, the new input, the reply."""

from __future__ import annotations

from typing import Any

from memproxy.proxy.recall import QUERY_MAX_CHARS
from memproxy.proxy.responses_turn import (
    ResponsesStreamAccumulator,
    content_text,
    new_input,
    query_text,
    reply_from_response,
)

HISTORY: dict[str, Any] = {
    "input": [
        {"role": "developer", "content": "Be brief. <memories>User lives in Porto.</memories>"},
        {"role": "user", "content": "Old question"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Old answer"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Weather where I live?"},
                                     {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city": "Porto"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 24C"},
        "garbage",
    ]
}  # fmt: skip


def test_content_text_keeps_text_parts_and_marks_the_rest() -> None:
    parts = [
        {"type": "input_text", "text": "a"},
        {"type": "output_text", "text": "b"},
        {"type": "text", "text": "c"},
        {"type": "input_file", "file_id": "f"},
        {"type": "refusal", "text": "not a text part"},
        {"no": "type"},
        "skipped",
    ]
    assert content_text(parts) == "a\nb\nc\n[input_file]\n[refusal]\n[attachment]"
    assert content_text("plain") == "plain" and content_text(None) == ""


def test_the_query_is_the_newest_user_message_even_behind_tool_results() -> None:
    assert query_text(HISTORY) == "Weather where I live?\n[input_image]"
    assert query_text({"input": "  just a string  "}) == "just a string"
    assert query_text({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}) == ""
    assert query_text({}) == ""
    clipped = query_text({"input": "S" + "x" * (3 * QUERY_MAX_CHARS) + "E"})
    assert clipped.startswith("Sx") and clipped.endswith("xE") and " … " in clipped


def test_only_what_follows_the_models_last_item_is_new_and_developer_items_never_are() -> None:
    assert new_input(HISTORY) == [{"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24C"}]
    assert new_input({"input": "I moved to Porto"}) == [{"role": "user", "content": "I moved to Porto"}]
    first = {"input": [{"role": "system", "content": "sys"}, {"role": "developer", "content": "dev"},
                       {"role": "user", "content": [{"type": "input_text", "text": "hello"}]}]}  # fmt: skip
    assert new_input(first) == [{"role": "user", "content": "hello"}]


def test_every_model_item_type_ends_the_old_history() -> None:
    for produced in (
        {"type": "reasoning", "id": "r"},
        {"type": "web_search_call", "id": "w"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"role": "assistant", "content": "text"},
    ):
        body = {
            "input": [{"role": "user", "content": "before"}, produced, {"role": "user", "content": "after"}]
        }
        assert new_input(body) == [{"role": "user", "content": "after"}], produced


def test_a_structured_tool_output_is_read_as_text() -> None:
    body = {"input": [{"type": "function_call_output", "call_id": "c",
                       "output": [{"type": "input_text", "text": "42"}, {"type": "input_image"}]}]}  # fmt: skip
    assert new_input(body) == [{"role": "tool", "tool_call_id": "c", "content": "42\n[input_image]"}]


def test_the_reply_is_the_assistant_text_and_function_calls() -> None:
    response = {"output": [
        {"type": "reasoning", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking"}]},
        {"type": "function_call", "call_id": "call_7", "name": "weather", "arguments": '{"city": "Porto"}'},
        {"type": "function_call", "call_id": "call_8", "name": "clock"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "now."}]},
        "garbage",
    ]}  # fmt: skip
    assert reply_from_response(response) == {
        "role": "assistant",
        "content": "Checking\nnow.",
        "tool_calls": [
            {
                "id": "call_7",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Porto"}'},
            },
            {"id": "call_8", "type": "function", "function": {"name": "clock", "arguments": ""}},
        ],
    }
    calls_only = reply_from_response({"output": [{"type": "function_call", "call_id": "c", "name": "f"}]})
    assert calls_only is not None and calls_only["content"] is None
    assert reply_from_response({"output": [{"type": "reasoning"}]}) is None
    assert reply_from_response({}) is None


def test_the_stream_reply_comes_from_the_final_event_only() -> None:
    accumulator = ResponsesStreamAccumulator()
    accumulator.feed({"type": "response.created", "response": {"id": "resp_1", "output": []}})
    accumulator.feed({"type": "response.output_text.delta", "delta": "Hel"})
    assert accumulator.response_id == "resp_1" and not accumulator.complete and accumulator.message() is None
    final = {"id": "resp_1", "output": [{"type": "message", "role": "assistant",
                                         "content": [{"type": "output_text", "text": "Hello"}]}]}  # fmt: skip
    accumulator.feed({"type": "response.completed", "response": final})
    assert accumulator.complete and accumulator.message() == {"role": "assistant", "content": "Hello"}
    cut_short = ResponsesStreamAccumulator()
    cut_short.feed({"type": "response.incomplete", "response": {"id": "resp_2", "output": []}})
    assert cut_short.complete and cut_short.response_id == "resp_2" and cut_short.message() is None
    failed = ResponsesStreamAccumulator()
    failed.feed({"type": "response.failed", "response": {"id": "resp_3", "output": []}})
    assert not failed.complete and failed.response_id == "resp_3"
