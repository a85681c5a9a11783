"""Extraction prompt and strict validation of the extractor's answer (no network)."""

from __future__ import annotations

import json

import pytest

from memproxy.memory.rows import Memory
from memproxy.outbox.extractor import (
    EXTRACTOR_MARKER,
    ExtractionError,
    ExtractionInput,
    Operation,
    build_messages,
    local_ids,
    parse_operations,
    today,
)
from memproxy.testing.scripted_extractor import rule_extractor
from memproxy.testing.scripted_upstream import is_extraction


def memory(memory_id: str, text: str) -> Memory:
    return Memory(num=1, id=memory_id, tenant="t", scope_key="k", user_id="u", agent_id="", session_id="",
                  text=text, source="extracted", metadata={}, created_at=0.0, updated_at=0.0,
                  expires_at=None)  # fmt: skip


PARIS = memory("5f0c7d1e9a2b4c6d8e0f1a2b3c4d5e6f", "User lives in Paris")
JAZZ = memory("0a1b2c3d4e5f60718293a4b5c6d7e8f9", "User likes jazz")
IDS = local_ids([PARIS, JAZZ])


def test_prompt_carries_marker_date_context_instructions_and_local_ids_only() -> None:
    data = ExtractionInput(
        new_messages=[{"role": "user", "content": "I moved there yesterday"}],
        earlier_messages=[{"role": "user", "content": "Berlin is lovely"}],
        memories=[PARIS, JAZZ],
        today=today(1_700_000_000),
    )
    messages = build_messages(data, instructions="Never store health data.")
    assert is_extraction({"messages": messages}) and EXTRACTOR_MARKER in messages[0]["content"]
    assert "Never store health data." in messages[0]["content"]
    payload = json.loads(messages[1]["content"])
    assert payload["today"].startswith("2023-11-14")
    assert payload["existing_memories"] == [{"id": "m1", "text": "User lives in Paris"},
                                            {"id": "m2", "text": "User likes jazz"}]  # fmt: skip
    assert payload["earlier_messages"][0]["content"] == "Berlin is lovely"
    assert payload["new_messages"][0]["content"] == "I moved there yesterday"
    assert PARIS.id not in json.dumps(messages) and JAZZ.id not in json.dumps(messages)


def test_valid_operations_map_local_ids_to_memory_ids() -> None:
    raw = json.dumps({"operations": [
        {"op": "ADD", "text": " User's name is Ana "},
        {"op": "UPDATE", "id": "m1", "text": "User lives in Berlin"},
        {"op": "DELETE", "id": "m2"},
        {"op": "NONE"},
    ]})  # fmt: skip
    assert parse_operations(raw, IDS) == [
        Operation("ADD", text="User's name is Ana"),
        Operation("UPDATE", text="User lives in Berlin", memory_id=PARIS.id),
        Operation("DELETE", memory_id=JAZZ.id),
    ]
    assert parse_operations('```json\n{"operations": []}\n```', IDS) == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("I think the user lives in Berlin", "not JSON"),
        ("", "not JSON"),
        ('{"memories": []}', "operations"),
        ('{"operations": {"op": "ADD"}}', "operations"),
        ('{"operations": ["ADD"]}', "not an object"),
        ('{"operations": [{"op": "ADD", "text": "  "}]}', "non-empty text"),
        ('{"operations": [{"op": "ADD"}]}', "non-empty text"),
        ('{"operations": [{"op": "UPDATE", "id": "m9", "text": "x"}]}', "unknown memory id"),
        (f'{{"operations": [{{"op": "DELETE", "id": "{PARIS.id}"}}]}}', "unknown memory id"),
        (
            '{"operations": [{"op": "DELETE", "id": "m1"}, {"op": "UPDATE", "id": "m1", "text": "x"}]}',
            "twice",
        ),
        ('{"operations": [{"op": "MERGE", "id": "m1"}]}', "unknown op"),
    ],
)
def test_invalid_answers_are_errors_not_empty_results(raw: str, message: str) -> None:
    with pytest.raises(ExtractionError, match=message):
        parse_operations(raw, IDS)


def _rule_answer(new: str, memories: list[Memory]) -> list[dict[str, str]]:
    data = ExtractionInput([{"role": "user", "content": new}], [], memories, "2024-01-01")
    answer = json.loads(rule_extractor({"messages": build_messages(data)}))
    operations: list[dict[str, str]] = answer["operations"]
    parse_operations(json.dumps(answer), local_ids(memories))  # the fake always answers validly
    return operations


def test_scripted_rule_extractor_adds_updates_and_deletes() -> None:
    assert _rule_answer("Hi! I live in Paris.", []) == [{"op": "ADD", "text": "User lives in Paris"}]
    assert _rule_answer("I moved to Berlin", [PARIS]) == [
        {"op": "UPDATE", "id": "m1", "text": "User lives in Berlin"}
    ]
    assert _rule_answer("I don't like jazz anymore", [PARIS, JAZZ]) == [{"op": "DELETE", "id": "m2"}]
    assert _rule_answer("What's the weather?", []) == [{"op": "NONE"}]
