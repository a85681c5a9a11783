"""The offline stand-in judged as a newcomer judges memory (issue 27 finding 9).

Its requests are refused as OpenAI refuses them (a client bug must not hide until production),
asked through memproxy with the real OpenAI SDK on both paths (byte relay and LiteLLM); and
its extractor writes first-person statements as "User …" facts and never a question as one,
seen through the real worker.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from memproxy.testing.scripted_extractor import rule_extractor, third_person
from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.support.memory_flow import memories, say, unique, wait_job
from tests.support.proxy import Proxy, http_client

USER_SAYS: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
# (request fields, param OpenAI names, code)
REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role", "invalid_value"),
    ({"messages": [{"role": "user", "content": 42}]}, "messages[0].content", "invalid_type"),
    ({"messages": USER_SAYS, "temperature": "hot"}, "temperature", "invalid_type"),
    ({"messages": USER_SAYS, "temperature": 3}, "temperature", "decimal_above_maximum_value"),
    ({"messages": USER_SAYS, "n": 1.5}, "n", "invalid_type"),
    ({"messages": USER_SAYS, "stream": "yes"}, "stream", "invalid_type"),
    ({"messages": []}, "messages", "empty_array"),
    ({}, "messages", "missing_required_parameter"),
    ({"messages": [{"content": "no role"}]}, "messages[0].role", "missing_required_parameter"),
    ({"messages": [{"role": "tool", "content": "42"}]}, "messages[0].tool_call_id", "missing_required_parameter"),
    ({"messages": [{"role": "user", "content": [{"text": "untyped part"}]}]}, "messages[0].content[0].type",
     "missing_required_parameter"),
]  # fmt: skip


def _openai_error(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    return dict(error)


@pytest.mark.parametrize(("fields", "param", "code"), REFUSED)
def test_the_stand_in_refuses_what_openai_refuses(
    upstream: tuple[ScriptedUpstream, str], fields: dict[str, Any], param: str, code: str
) -> None:
    with http_client(base_url=upstream[1], timeout=10) as http:
        error = _openai_error(http.post("/chat/completions", json={"model": "gpt-4o-mini", **fields}))
    assert (error["param"], error["code"]) == (param, code)


def test_openais_wording_for_the_three_a_newcomer_meets(upstream: tuple[ScriptedUpstream, str]) -> None:
    with http_client(base_url=upstream[1], timeout=10) as http:
        role, content, temperature = (
            _openai_error(http.post("/chat/completions", json={"model": "gpt-4o-mini", **fields}))["message"]
            for fields, _, _ in REFUSED[:3]
        )
    assert role == ("Invalid value: 'wizard'. Supported values are: 'system', 'assistant', 'user', 'function', "
                    "'tool', and 'developer'.")  # fmt: skip
    assert content == ("Invalid type for 'messages[0].content': expected one of a string or array of objects, "
                       "but got an integer instead.")  # fmt: skip
    assert temperature == "Invalid type for 'temperature': expected a decimal, but got a string instead."


def test_what_openai_accepts_the_stand_in_accepts(upstream: tuple[ScriptedUpstream, str]) -> None:
    """Nulls for optional parameters, parts arrays, tool turns, unknown fields: all a 200."""
    body = {
        "model": "gpt-4o-mini", "temperature": None, "top_p": 0.5, "n": 2, "stop": ["\n"], "seed": 7,
        "reasoning_effort": "low",  # a field the stand-in does not know is the provider's to judge
        "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
    }  # fmt: skip
    with http_client(base_url=upstream[1], timeout=10) as http:
        answer = http.post("/chat/completions", json=body)
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["choices"]) == 2


@pytest.mark.parametrize("path", ["fast", "litellm"])
def test_a_client_bug_surfaces_through_memproxy_as_openais_400(
    proxy: Proxy, litellm_proxy: Proxy, path: str
) -> None:
    server = proxy if path == "fast" else litellm_proxy
    client = server.client(**{"X-Memproxy-User-Id": unique("wizard")})
    # Typed as Any: the SDK's types would catch these bugs; a JavaScript or untyped client would not.
    wizard: Any = [{"role": "wizard", "content": "hi"}]
    hot_value: Any = "hot"
    plain: Any = USER_SAYS
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="gpt-4o-mini", messages=wizard)
    assert refused.value.status_code == 400
    assert "wizard" in refused.value.message
    with pytest.raises(openai.BadRequestError) as hot:
        client.chat.completions.create(model="gpt-4o-mini", messages=plain, temperature=hot_value)
    assert "temperature" in hot.value.message


def _extracted(text: str, existing: list[dict[str, str]] | None = None) -> list[str]:
    payload = {"new_messages": [{"role": "user", "content": text}], "existing_memories": existing or []}
    body = {
        "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": json.dumps(payload)}]
    }
    return [op.get("text", op["op"]) for op in json.loads(rule_extractor(body))["operations"]]


@pytest.mark.parametrize(
    ("said", "stored"),
    [
        ("Remember that my cat is called Miso", ["User's cat is called Miso"]),
        ("I work at Acme Corp", ["User works at Acme Corp"]),
        ("Remember that I walk to work on Mondays.", ["User walks to work on Mondays"]),
        ("Remember that I'm flying to Oslo", ["User is flying to Oslo"]),
        ("Remember that the codeword is blue", ["the codeword is blue"]),  # not about the user: as said
        ("What do I like doing?", ["NONE"]),
        ("what do I like doing", ["NONE"]),
        ("Do you know that I like jazz?", ["NONE"]),
        ("Where do I live? I live in Rome.", ["User lives in Rome"]),  # the statement still counts
        ("When I was young I lived by the sea", ["NONE"]),  # a statement, not a question; no shape of ours
    ],
)
def test_the_extractor_writes_user_facts_and_never_questions(said: str, stored: list[str]) -> None:
    assert _extracted(said) == stored


def test_third_person_forms() -> None:
    assert third_person("my sister calls me Bea") == "User's sister calls User Bea"
    assert third_person("I watch films and I fly kites") == "User watches films and User flies kites"
    assert third_person("I can swim") == "User can swim"


def test_through_the_worker_a_remembered_fact_is_a_user_fact_and_a_question_is_nothing(proxy: Proxy) -> None:
    user = unique("miso")
    wait_job(proxy.url, say(proxy, "What do I like doing?", user=user).job_id)
    assert memories(proxy.url, user) == []
    wait_job(proxy.url, say(proxy, "Remember that my cat is called Miso", user=user).job_id)
    assert [m["text"] for m in memories(proxy.url, user)] == ["User's cat is called Miso"]
