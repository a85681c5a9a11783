"""The extraction prompt and request: dates, placeholders, feedback, bounds, response format (no network)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from memproxy.config import ExtractionSettings, UpstreamSettings
from memproxy.memory.rows import Memory
from memproxy.outbox.extractor import Extractor, choose_response_format
from memproxy.outbox.operations import parse_answer
from memproxy.outbox.prompt import (
    EXTRACTOR_MARKER,
    PROMPT_EXAMPLES,
    RESPONSE_SCHEMA,
    ExtractionInput,
    build_messages,
    local_ids,
)
from memproxy.testing.scripted_extractor import rule_extractor
from memproxy.testing.scripted_upstream import is_extraction
from memproxy.upstream.provider import Upstream


def memory(memory_id: str, text: str) -> Memory:
    return Memory(num=1, id=memory_id, tenant="t", scope_key="k", user_id="u", agent_id="", session_id="",
                  text=text, source="extracted", metadata={}, created_at=0.0, updated_at=0.0,
                  expires_at=None)  # fmt: skip


PARIS = memory("5f0c7d1e9a2b4c6d8e0f1a2b3c4d5e6f", "User lives in Paris")
JAZZ = memory("0a1b2c3d4e5f60718293a4b5c6d7e8f9", "User likes jazz")
MONDAY = datetime(2026, 11, 30, 9, tzinfo=UTC).timestamp()
WEDNESDAY = datetime(2026, 12, 2, 18, tzinfo=UTC).timestamp()


def test_prompt_carries_marker_dates_context_instructions_and_local_ids_only() -> None:
    data = ExtractionInput(
        new_messages=[{"role": "user", "content": "I moved there yesterday"},
                      {"role": "user", "content": "Next Friday I fly to Tokyo"}],
        earlier_messages=[{"role": "user", "content": "Berlin is lovely"}],
        memories=[PARIS, JAZZ],
        times=[MONDAY, WEDNESDAY],
    )  # fmt: skip
    messages = build_messages(data, instructions="Never store health data.", max_chars=280)
    system = messages[0]["content"]
    assert is_extraction({"messages": messages}) and EXTRACTOR_MARKER in system
    assert "Never store health data." in system and "at most 280 characters" in system
    payload = json.loads(messages[1]["content"])
    assert payload["today"] == "2026-12-02 (Wednesday)"  # the latest turn's date, not the worker's
    assert [m["date"] for m in payload["new_messages"]] == ["2026-11-30 (Monday)", "2026-12-02 (Wednesday)"]
    assert payload["existing_memories"] == [{"id": "m1", "text": "User lives in Paris"},
                                            {"id": "m2", "text": "User likes jazz"}]  # fmt: skip
    assert payload["earlier_messages"] == [{"role": "user", "content": "Berlin is lovely"}]
    assert PARIS.id not in json.dumps(messages) and JAZZ.id not in json.dumps(messages)
    assert len(messages) == 2 and "previous_answer_rejected" not in payload  # a first attempt


def test_prompt_examples_are_placeholders_not_facts() -> None:
    system = build_messages(ExtractionInput([], [], []))[0]["content"]
    for example in PROMPT_EXAMPLES:  # facts an earlier prompt showed, which models copied
        assert example not in system
    assert '"text": "<fact>"' in system and "never copy them" in system


def test_a_retry_tells_the_model_what_was_wrong() -> None:
    data = ExtractionInput(
        [{"role": "user", "content": "hi"}], [], [], [MONDAY], feedback="answer is not JSON"
    )
    messages = build_messages(data)
    assert len(messages) == 2 and "previous_answer_rejected" in messages[0]["content"]
    rejected = json.loads(messages[1]["content"])["previous_answer_rejected"]
    assert "rejected: answer is not JSON" in rejected


def _extractor(**settings: object) -> Extractor:
    upstream = UpstreamSettings(api_base="http://127.0.0.1:9/v1")
    return Extractor(Upstream(upstream), ExtractionSettings.model_validate(settings), upstream)


def test_every_call_is_bounded_and_only_retries_change_temperature() -> None:
    extractor = _extractor(model="extractor", max_tokens=512, retry_temperature=0.4)
    first = extractor.request_body(ExtractionInput([{"role": "user", "content": "hi"}], [], [], [MONDAY]))
    assert first["max_tokens"] == 512 and "temperature" not in first
    retry = extractor.request_body(ExtractionInput([{"role": "user", "content": "hi"}], [], [], [MONDAY],
                                                   feedback="cut off", attempt=2))  # fmt: skip
    assert retry["max_tokens"] == 512 and retry["temperature"] == 0.4
    never = _extractor(model="extractor", retry_temperature=None)
    assert "temperature" not in never.request_body(ExtractionInput([], [], [], [], attempt=3))


def test_response_format_follows_what_the_model_supports_or_the_switch() -> None:
    assert (
        choose_response_format("auto", {"model": "gpt-4o-mini", "custom_llm_provider": "openai"})
        == RESPONSE_SCHEMA
    )
    assert choose_response_format(
        "auto", {"model": "qwen2.5-coder-1.5b", "custom_llm_provider": "openai"}
    ) == {"type": "json_object"}
    assert choose_response_format("json_object", {"model": "gpt-4o-mini"}) == {"type": "json_object"}
    assert choose_response_format("json_schema", {"model": "local"}) == RESPONSE_SCHEMA
    assert choose_response_format("none", {"model": "gpt-4o-mini"}) is None
    assert _extractor(model="extractor").request_body(ExtractionInput([], [], []))["response_format"] == {
        "type": "json_object"
    }
    assert "response_format" not in _extractor(model="x", response_format="none").request_body(
        ExtractionInput([], [], [])
    )


def _rule_answer(new: str, memories: list[Memory]) -> list[dict[str, str]]:
    data = ExtractionInput([{"role": "user", "content": new}], [], memories, [MONDAY])
    answer = json.loads(rule_extractor({"messages": build_messages(data)}))
    operations: list[dict[str, str]] = answer["operations"]
    assert not parse_answer(json.dumps(answer), local_ids(memories)).rejected  # the fake answers validly
    return operations


def test_scripted_rule_extractor_adds_updates_and_deletes() -> None:
    assert _rule_answer("Hi! I live in Paris.", []) == [{"op": "ADD", "text": "User lives in Paris"}]
    assert _rule_answer("I moved to Berlin", [PARIS]) == [
        {"op": "UPDATE", "id": "m1", "text": "User lives in Berlin"}
    ]
    assert _rule_answer("I don't like jazz anymore", [PARIS, JAZZ]) == [{"op": "DELETE", "id": "m2"}]
    assert _rule_answer("What's the weather?", []) == [{"op": "NONE"}]


def test_the_prompt_placeholders_are_refused_as_memories() -> None:
    from memproxy.outbox.prompt import PLACEHOLDERS

    assert {"<fact>", "<id from existing_memories>", "<YYYY-MM-DD>"} <= set(PLACEHOLDERS)
