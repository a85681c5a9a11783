"""Memories as JSON Lines: what an import line may hold, and how a file with bad lines is refused.

tests/api/test_memories.py checks an export/import round trip over HTTP and that one bad line is
named; here the line rules themselves, line numbering, and the error that lists every bad line.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from memproxy.errors import ApiError
from memproxy.memory.transfer import (
    ImportRefused,
    LineProblem,
    optional_object,
    optional_text,
    parse_jsonl,
    read_jsonl,
    to_jsonl,
)

EXPORTED: dict[str, Any] = {
    "id": "mem_1",
    "text": "User plays the cello",
    "user_id": "alice",
    "agent_id": "",
    "session_id": "s1",
    "metadata": {"k": [1, 2]},
    "source": "extracted",
    "created_at": "2024-03-01T12:00:00.000000Z",
    "updated_at": "2024-03-02T12:00:00.000000Z",
    "expires_at": None,
}


def jsonl(*lines: object) -> bytes:
    return "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines).encode()


def test_an_exported_line_imports_with_its_fields_and_line_number() -> None:
    assert parse_jsonl(to_jsonl([EXPORTED])) == [{**EXPORTED, "line": 1}]


def test_the_tenant_and_unknown_fields_are_dropped() -> None:
    [item] = parse_jsonl(jsonl({**EXPORTED, "tenant": "someone-else", "num": 7, "scope_key": "k"}))
    assert "tenant" not in item and "num" not in item and "scope_key" not in item


def test_defaults_for_what_a_minimal_line_leaves_out() -> None:
    [item] = parse_jsonl(jsonl({"text": "User likes tea", "agent_id": "bot"}))
    assert item == {"text": "User likes tea", "metadata": {}, "user_id": "", "agent_id": "bot",
                    "session_id": "", "source": "manual", "created_at": None, "updated_at": None,
                    "expires_at": None, "line": 1}  # fmt: skip


def test_line_numbers_count_blank_lines_and_only_newline_ends_a_line() -> None:
    tricky = {"text": "User wrote a\u2028line\u0085separator\rand a carriage return", "user_id": "u"}
    raw = (
        to_jsonl([EXPORTED])
        + b"\n  \n"
        + to_jsonl([tricky])
        + b"\xef\xbb\xbf"
        + jsonl({"text": "x", "user_id": "u"})
    )
    assert "\u2028".encode() in raw  # written raw, as an export does
    items = parse_jsonl(raw)
    assert [item["line"] for item in items] == [1, 4, 5]
    assert items[1]["text"] == tricky["text"]


@pytest.mark.parametrize(
    ("line", "message", "code"),
    [
        ("{broken", "not valid JSON: ", "invalid_json"),
        ('"just a string"', "not a JSON object", "invalid_json"),
        ('{"text": "t", "user_id": "\\ud800"}', "lone UTF-16 surrogate", "invalid_json"),
        ({"user_id": "u"}, "'text' is required", "missing_required_parameter"),
        ({"text": "   ", "user_id": "u"}, "'text' must be a non-empty string.", "invalid_type"),
        ({"text": 5, "user_id": "u"}, "'text' must be a non-empty string.", "invalid_type"),
        ({"text": "t"}, "a user_id or an agent_id is required", "missing_required_parameter"),
        ({"text": "t", "user_id": "a\nb"}, "user_id must be printable text", "invalid_scope"),
        ({"text": "t", "user_id": "u", "metadata": [1]}, "'metadata' must be a JSON object.", "invalid_type"),
        ({"text": "t", "user_id": "u", "id": "x" * 129}, "at most 128 characters", "invalid_type"),
        ({"text": "t", "user_id": "u", "id": 12}, "'id' must be a non-empty string", "invalid_type"),
        ({"text": "t", "user_id": "u", "source": "imported"}, "'source' must be one of extracted, manual",
         "invalid_value"),
        ({"text": "t", "user_id": "u", "expires_at": "soon"}, "expires_at must be an ISO-8601 time",
         "invalid_value"),
        ({"text": "t", "user_id": "u", "created_at": -5}, "created_at must be between", "invalid_value"),
    ],
)  # fmt: skip
def test_a_bad_line_is_refused_saying_why(line: object, message: str, code: str) -> None:
    raw = jsonl({"text": "fine", "user_id": "u"}, line)
    items, problems = read_jsonl(raw)
    assert [item["line"] for item in items] == [1]
    [(number, text, problem_code)] = problems
    assert number == 2 and message in text and problem_code == code
    with pytest.raises(ImportRefused) as err:
        parse_jsonl(raw)
    assert err.value.status == 400 and err.value.param == "line 2" and err.value.code == code
    assert err.value.message.startswith("line 2: ")


def test_not_utf8_is_a_bad_line_naming_the_byte() -> None:
    _, problems = read_jsonl(b'{"text": "ok", "user_id": "u"}\n{"text": "caf\xe9"}')
    assert problems == [(2, "not UTF-8 text (byte 13)", "invalid_json")]


def test_every_bad_line_is_listed_in_order_and_nothing_is_imported() -> None:
    raw = jsonl("{", {"text": "good", "user_id": "u"}, {"text": "no scope"}, "[]")
    with pytest.raises(ImportRefused) as err:
        parse_jsonl(raw)
    assert [number for number, _, _ in err.value.problems] == [1, 3, 4]
    assert err.value.message.startswith("3 bad lines, nothing imported: line 1: not valid JSON")
    assert "; line 3: a user_id or an agent_id is required; line 4: not a JSON object" in err.value.message
    assert err.value.param == "line 1" and err.value.code == "invalid_json"


def test_a_long_list_of_bad_lines_is_cut_after_twenty() -> None:
    problems: list[LineProblem] = [(n, f"problem {n}", None) for n in range(30, 0, -1)]
    error = ImportRefused(problems)
    assert error.message.startswith("30 bad lines, nothing imported: line 1: problem 1; line 2:")
    assert "line 20: problem 20; and 10 more" in error.message and "line 21" not in error.message
    assert error.code == "invalid_line"  # no code of its own


def test_optional_fields() -> None:
    assert optional_text({}, "text") is None and optional_text({"text": "a"}, "text") == "a"
    assert optional_object({}, "metadata") is None and optional_object({"metadata": {}}, "metadata") == {}
    for body, check in (({"text": ""}, optional_text), ({"metadata": "x"}, optional_object)):
        with pytest.raises(ApiError) as err:
            check(body, next(iter(body)))
        assert err.value.param == next(iter(body))
