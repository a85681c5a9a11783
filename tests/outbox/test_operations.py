"""Reading extractor answers: tolerant per operation, strict per answer (recorded samples + edge cases)."""

from __future__ import annotations

import json

import pytest

from memproxy.outbox.operations import ExtractionError, Operation, Rejected, parse_answer
from tests.outbox.samples import sample

IDS = {"m1": "id-paris", "m2": "id-jazz"}


def test_valid_operations_map_local_ids_to_memory_ids() -> None:
    raw = json.dumps({"operations": [
        {"op": "ADD", "text": " User's name is Ana "},
        {"op": "UPDATE", "id": "m1", "text": "User lives in Berlin"},
        {"op": "DELETE", "id": "m2"},
        {"op": "NONE"},
    ]})  # fmt: skip
    parsed = parse_answer(raw, IDS)
    assert parsed.operations == [
        Operation("ADD", text="User's name is Ana"),
        Operation("UPDATE", text="User lives in Berlin", memory_id="id-paris", local_id="m1"),
        Operation("DELETE", memory_id="id-jazz", local_id="m2"),
    ]
    assert parsed.rejected == []
    assert parse_answer('```json\n{"operations": []}\n```', IDS).operations == []


def test_invalid_operations_are_reported_next_to_the_valid_ones() -> None:
    raw = json.dumps({"operations": [
        {"op": "ADD", "text": "User likes tea"},
        {"op": "UPDATE", "id": "m9", "text": "x"},
        {"op": "MERGE", "id": "m1"},
        {"op": "DELETE", "id": "m2"},
        {"op": "UPDATE", "id": "m2", "text": "User likes blues"},
        {"op": "ADD", "text": "  "},
        "ADD",
    ]})  # fmt: skip
    parsed = parse_answer(raw, IDS)
    assert [op.op for op in parsed.operations] == ["ADD", "DELETE"]
    assert [(r.index, r.op, r.reason) for r in parsed.rejected] == [
        (1, "UPDATE", "invalid"), (2, "MERGE", "invalid"), (4, "UPDATE", "invalid"), (5, "ADD", "invalid"),
        (6, "?", "invalid"),
    ]  # fmt: skip
    assert "unknown memory id 'm9'" in parsed.rejected[0].detail and "twice" in parsed.rejected[2].detail
    assert Rejected(1, "UPDATE", "invalid", "d", "m9").to_api() == {
        "index": 1, "op": "UPDATE", "reason": "invalid", "detail": "d", "id": "m9"}  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("I think the user lives in Berlin", "not JSON"),
        ("", "not JSON"),
        ('{"memories": []}', "operations"),
        ('{"operations": {"op": "ADD"}}', "operations"),
        (
            '{"operations": [{"op": "UPDATE", "id": "m1", "text": "User lives in Rome"}]}',
            "none: existing_memories is empty",
        ),
    ],
)
def test_unusable_answers_are_failed_attempts_not_empty_results(raw: str, message: str) -> None:
    with pytest.raises(ExtractionError, match=message):
        parse_answer(raw, {})


def test_the_recorded_cut_off_answer_says_it_was_cut_off() -> None:
    raw = sample(32)["raw_answer"]  # a repetition loop that hit the token limit mid-string
    with pytest.raises(ExtractionError, match="cut off at the token limit"):
        parse_answer(raw, IDS, cut_off=True)
    with pytest.raises(ExtractionError, match="not JSON"):
        parse_answer(raw, IDS)


def test_recorded_small_model_answers_keep_their_valid_operations() -> None:
    """From the samples: a tolerant reading keeps what an all-or-nothing one would throw away."""
    copied = sample(1)  # 0.5B: ADD of the existing memory's text + UPDATE of it to the same text
    ids = {m["id"]: f"id-{m['id']}" for m in copied["existing_memories"]}
    parsed = parse_answer(copied["raw_answer"], ids)
    assert [op.op for op in parsed.operations] == ["ADD", "UPDATE"] and parsed.rejected == []
    parsed_all = [parse_answer(s["raw_answer"], {m["id"]: m["id"] for m in s["existing_memories"]})
                  for s in map(sample, [0, 5, 11, 18, 19, 26, 30])]  # fmt: skip
    assert all(p.operations for p in parsed_all)
