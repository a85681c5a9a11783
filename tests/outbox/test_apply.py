"""``plan``: the guards between the model's operations and the store (pure; recorded samples)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from memproxy.memory.rows import Memory
from memproxy.outbox.apply import Context, Planned, plan, states_facts
from memproxy.outbox.operations import parse_answer
from tests.outbox.samples import sample

MONDAY = datetime(2026, 11, 30, 10, tzinfo=UTC).timestamp()


def memory(memory_id: str, text: str) -> Memory:
    return Memory(num=1, id=memory_id, tenant="t", scope_key="k", user_id="u", agent_id="", session_id="",
                  text=text, source="extracted", metadata={}, created_at=0.0, updated_at=0.0,
                  expires_at=None)  # fmt: skip


def planned_for(line: int, max_chars: int = 300) -> tuple[list[Planned], list[tuple[int, str]]]:
    """Guard a recorded answer against the memories its model was shown."""
    recorded = sample(line)
    shown = {m["id"]: memory(m["id"], m["text"]) for m in recorded["existing_memories"]}
    parsed = parse_answer(recorded["raw_answer"], {local: local for local in shown})
    ctx = Context([(MONDAY, recorded["user"]), (MONDAY, recorded["assistant"])], shown, max_chars)
    planned, rejected = plan(parsed.operations, ctx)
    return planned, [(r.index, r.reason) for r in rejected]


def test_the_password_update_is_refused_whole() -> None:
    planned, rejected = planned_for(26)  # UPDATE m1 → "... The password for the hospital portal is hunter2."
    assert planned == [] and rejected == [(0, "secret")]


def test_the_run_on_update_that_appends_becomes_adds_of_its_new_sentences() -> None:
    planned, rejected = planned_for(30)  # UPDATE m2 (540-char run-on) + "I'm not vegetarian anymore ..."
    assert [(p.op, p.text) for p in planned] == [
        ("ADD", "I'm not vegetarian anymore, I eat chicken and fish again.")
    ]
    # Operation 0 restates m1 with its password; operation 1's run-on holds a question.
    assert rejected == [(0, "secret"), (1, "question")]


def test_a_run_on_that_rewrites_a_one_sentence_memory_updates_it_and_adds_the_rest() -> None:
    shown = {"m1": memory("m1", "User lives in Lisbon.")}
    raw = (
        '{"operations": [{"op": "UPDATE", "id": "m1", "text": "User lives in Porto. User eats fish again."}]}'
    )
    planned, rejected = plan(parse_answer(raw, {"m1": "m1"}).operations, Context([(MONDAY, "")], shown, 24))
    assert [(p.op, p.text, p.memory_id) for p in planned] == [
        ("UPDATE", "User lives in Porto.", "m1"), ("ADD", "User eats fish again.", None)]  # fmt: skip
    assert rejected == []
    _, refused = planned_for(29)  # rewrites "Paris" to "Porto" inside a 17-sentence memory
    assert (0, "too_long") in refused


def test_a_run_on_that_rewrites_its_memory_is_refused_and_questions_never_stored() -> None:
    planned, rejected = planned_for(24, max_chars=120)  # rewrites "Lisbon" to the prompt's "Paris"
    texts = [p.text or "" for p in planned]
    assert all(len(t) <= 120 for t in texts) and not any("Paris" in t for t in texts)
    assert (0, "too_long") in rejected
    _, rejected = planned_for(25, max_chars=120)
    assert (0, "question") in rejected  # "The weather is lovely today, isn't it?"


def test_the_prompt_example_that_leaked_into_a_memory_is_refused() -> None:
    recorded = sample(24)  # the model rewrote "User lives in Lisbon" into the prompt's "User lives in Paris"
    leaked = json.loads(recorded["raw_answer"])["operations"][0]["text"].split(". ")[0] + "."
    assert leaked.startswith("User lives in Paris and has a golden retriever")
    ops = parse_answer(json.dumps({"operations": [{"op": "ADD", "text": leaked}]}), {})
    planned, rejected = plan(ops.operations, Context([(MONDAY, recorded["user"])], {}, 300))
    assert planned == [] and [r.reason for r in rejected] == ["prompt_example"]


def test_relative_dates_are_resolved_before_storing() -> None:
    ops = parse_answer('{"operations": [{"op": "ADD", "text": "User is flying to Tokyo next Friday"}]}', {})
    planned, _ = plan(ops.operations, Context([(MONDAY, "Next Friday I'm flying to Tokyo")], {}, 300))
    assert [p.text for p in planned] == ["User is flying to Tokyo on 2026-12-04 (Friday)"]


def test_plainly_stated_facts_are_told_from_small_talk() -> None:
    assert states_facts(sample(19)["user"])  # "I have a golden retriever called Biscuit ..."
    assert states_facts("Please keep in mind I'm severely allergic to shellfish.")
    for line in (20, 25, 32, 37, 38, 39):  # a quiz question, weather, a request, thanks, questions
        assert not states_facts(sample(line)["user"]), sample(line)["user"]
