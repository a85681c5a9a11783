"""The extraction prompt's remaining promises (tests/outbox/test_extractor.py checks dates, local ids,
placeholders and feedback): how messages are briefed, the template's formatting, the strict schema."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from memproxy.memory.rows import Memory
from memproxy.outbox.prompt import (
    PLACEHOLDERS,
    RESPONSE_SCHEMA,
    SYSTEM_PROMPT,
    ExtractionInput,
    build_messages,
    day_label,
    local_ids,
)


def memory(memory_id: str, text: str) -> Memory:
    return Memory(num=1, id=memory_id, tenant="t", scope_key="k", user_id="u", agent_id="", session_id="",
                  text=text, source="extracted", metadata={}, created_at=0.0, updated_at=0.0,
                  expires_at=None)  # fmt: skip


def payload(data: ExtractionInput) -> dict[str, object]:
    messages = build_messages(data)
    assert [m["role"] for m in messages] == ["system", "user"]
    result: dict[str, object] = json.loads(messages[1]["content"])
    return result


def test_messages_are_briefed_to_role_content_and_the_calls_names_and_arguments() -> None:
    assistant = {
        "role": "assistant", "content": None, "refusal": None, "audio": {"id": "a"},
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Porto"}'}}, "garbage"],
    }  # fmt: skip
    tool = {"role": "tool", "tool_call_id": "call_1", "name": "weather", "content": "Sunny"}
    briefed = payload(ExtractionInput([assistant, tool], [], []))["new_messages"]
    assert briefed == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"name": "weather", "arguments": '{"city": "Porto"}'}],
        },
        {"role": "tool", "content": "Sunny", "name": "weather"},
    ]


def test_without_capture_times_there_is_no_today_and_no_dates() -> None:
    data = payload(ExtractionInput([{"role": "user", "content": "hi"}], [], []))
    assert data["today"] is None and data["new_messages"] == [{"role": "user", "content": "hi"}]


def test_text_stays_readable_and_local_ids_follow_relevance_order() -> None:
    memories = [memory("uuid-b", "User lives in Zürich"), memory("uuid-a", "User likes 寿司")]
    assert local_ids(memories) == {"m1": "uuid-b", "m2": "uuid-a"}
    content = build_messages(ExtractionInput([{"role": "user", "content": "Grüße"}], [], memories))[1][
        "content"
    ]
    assert "Zürich" in content and "寿司" in content and "Grüße" in content  # not \u-escaped


def test_the_template_formats_cleanly_and_blank_instructions_add_nothing() -> None:
    system = build_messages(ExtractionInput([], [], []), instructions="  \n ", max_chars=123)[0]["content"]
    assert "{" + "max_chars" + "}" not in system and "{{" not in system and "at most 123 characters" in system
    assert '{"operations": [...]}' in system and "Operator instructions" not in system
    assert system == SYSTEM_PROMPT.format(max_chars=123)
    assert "<angle brackets>" not in PLACEHOLDERS and all(p.startswith("<") for p in PLACEHOLDERS)


def test_day_label_is_the_utc_day() -> None:
    late = datetime(2026, 12, 31, 23, 30, tzinfo=UTC).timestamp()
    assert day_label(late) == "2026-12-31 (Thursday)"
    assert day_label(late + 3600) == "2027-01-01 (Friday)"


def test_the_strict_schema_requires_every_property_and_allows_no_other() -> None:
    schema = RESPONSE_SCHEMA["json_schema"]
    assert schema["strict"] is True
    stack = [schema["schema"]]
    while stack:  # strict structured outputs: every object lists all its properties as required
        node = stack.pop()
        if node.get("type") == "object":
            assert (
                sorted(node["required"]) == sorted(node["properties"])
                and node["additionalProperties"] is False
            )
            stack.extend(node["properties"].values())
        elif node.get("type") == "array":
            stack.append(node["items"])
    item = schema["schema"]["properties"]["operations"]["items"]["properties"]
    assert item["op"]["enum"] == ["ADD", "UPDATE", "DELETE", "NONE"]
