"""The guards through the real worker: recorded small-model answers replayed by the scripted upstream.

Each test installs an extractor on the session's scripted upstream that answers with a recorded
answer (tests/data/small-models.jsonl) or a shape taken from one, then follows the captured turn
over HTTP: the job's report, the stored memories, their history and /metrics.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from memproxy.outbox.dates import resolve
from memproxy.testing.scripted_extractor import rule_extractor
from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.outbox.samples import sample
from tests.support.memory_flow import memories, say, unique, wait_job
from tests.support.proxy import Proxy, http_get


@pytest.fixture
def scripted(fake: ScriptedUpstream) -> Iterator[ScriptedUpstream]:
    yield fake
    fake.extractor = None


def payload(body: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(body["messages"][1]["content"])
    return data


def by_text(body: dict[str, Any]) -> dict[str, str]:
    """Existing memory text → the local id this request gave it."""
    return {m["text"]: m["id"] for m in payload(body)["existing_memories"]}


def answering(marker: str, answer: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], str]:
    """Answer requests about ``marker`` with ``answer``, others with the default rules."""
    return lambda body: (
        answer(body) if marker in json.dumps(body, ensure_ascii=False) else rule_extractor(body)
    )


def refusals(proxy: Proxy, reason: str, source: str = "extracted") -> float:
    text = http_get(proxy.url + "/metrics", timeout=10).text
    line = f'memproxy_memory_refusals_total{{reason="{reason}",source="{source}"}}'
    return sum(float(row.split()[-1]) for row in text.splitlines() if row.startswith(line))


def counter(proxy: Proxy, name: str) -> float:
    text = http_get(proxy.url + "/metrics", timeout=10).text
    return sum(float(row.split()[-1]) for row in text.splitlines() if row.startswith(name + " "))


def add_memory(proxy: Proxy, user: str, text: str) -> dict[str, Any]:
    with proxy.http() as http:
        response = http.post("/v1/memories", json={"user_id": user, "text": text})
    assert response.status_code == 201, response.text
    memory: dict[str, Any] = response.json()
    return memory


def test_the_recorded_password_is_refused_counted_and_never_recalled(
    proxy: Proxy, scripted: ScriptedUpstream
) -> None:
    recorded = sample(26)  # 1.5B: UPDATE m1 → its text + "The password for the hospital portal is hunter2."
    nurse = recorded["existing_memories"][0]["text"]
    user, before = unique("u"), refusals(proxy, "secret")
    add_memory(proxy, user, nurse)

    def answer(body: dict[str, Any]) -> str:
        operations = json.loads(recorded["raw_answer"])["operations"]
        operations[0]["id"] = by_text(body)[nurse]
        operations.append({"op": "ADD", "text": "The password for the hospital portal is hunter2."})
        return json.dumps({"operations": operations})

    scripted.extractor = answering(recorded["user"], answer)
    done = wait_job(proxy.url, say(proxy, recorded["user"], user=user).job_id)
    assert [(r["op"], r["reason"]) for r in done["report"]["rejected"]] == [
        ("UPDATE", "secret"),
        ("ADD", "secret"),
    ]
    assert "hunter2" not in json.dumps(done)  # the report says why, never what
    assert [m["text"] for m in memories(proxy.url, user)] == [nurse]
    assert refusals(proxy, "secret") == before + 2
    ask = unique("What's my hospital portal password?")
    say(proxy, ask, user=user)
    assert "hunter2" not in json.dumps(scripted.find_chat(ask).body)


def test_the_recorded_colliding_update_deletes_nothing(proxy: Proxy, scripted: ScriptedUpstream) -> None:
    recorded = sample(12)  # 0.5B: ADD of m1's text, and UPDATE m1 → m2's exact text
    name, moved = (m["text"] for m in recorded["existing_memories"])
    user = unique("u")
    kept = [add_memory(proxy, user, name), add_memory(proxy, user, moved)]

    def answer(body: dict[str, Any]) -> str:
        local = by_text(body)
        return str(recorded["raw_answer"]).replace('"m1"', json.dumps(local[name]))

    scripted.extractor = answering(recorded["user"], answer)
    done = wait_job(proxy.url, say(proxy, recorded["user"], user=user).job_id)
    assert sorted(r["reason"] for r in done["report"]["rejected"]) == ["collision", "duplicate"], done[
        "report"
    ]
    assert done["report"]["applied"] == {"ADD": 0, "UPDATE": 0, "DELETE": 0}
    assert sorted(m["text"] for m in memories(proxy.url, user)) == sorted([name, moved])
    with proxy.http() as http:
        history = http.get(f"/v1/memories/{kept[0]['id']}/history").json()["data"]
    assert [h["event"] for h in history] == ["ADD"]  # no silent delete of the user's name


def test_the_cut_off_answer_is_bounded_then_retried_with_feedback_and_temperature(
    proxy: Proxy, scripted: ScriptedUpstream
) -> None:
    marker = unique("streak")
    loop = (
        str(sample(32)["raw_answer"])[:-30] + " I'm on a 40-day streak." * 900
    )  # the recorded repetition loop

    def answer(body: dict[str, Any]) -> str:
        if "previous_answer_rejected" not in payload(body):  # a first attempt: no feedback
            return loop
        return json.dumps({"operations": [{"op": "ADD", "text": f"User is on a {marker} in Japanese"}]})

    scripted.extractor = answering(marker, answer)
    user = unique("u")
    done = wait_job(proxy.url, say(proxy, f"I'm learning Japanese, {marker}", user=user).job_id)
    first, retry = [r.body for r in scripted.chat_requests(extraction=True) if marker in json.dumps(r.body)][
        :2
    ]
    assert first["max_tokens"] == retry["max_tokens"] == proxy.settings.extraction.max_tokens
    assert "temperature" not in first and retry["temperature"] == proxy.settings.extraction.retry_temperature
    assert "cut off at the token limit" in payload(retry)["previous_answer_rejected"]
    assert done["attempts"] == 2 and [m["text"] for m in memories(proxy.url, user)] == [
        f"User is on a {marker} in Japanese"
    ]


def test_an_empty_answer_for_a_turn_that_states_facts_is_flagged(
    proxy: Proxy, scripted: ScriptedUpstream
) -> None:
    stated, small_talk = sample(19)["user"], sample(37)["user"]  # the dog; "Ok, thanks!"
    scripted.extractor = answering(stated, lambda body: '{"operations": []}')
    before, user = counter(proxy, "memproxy_extraction_empty_answers_total"), unique("u")
    flagged = wait_job(proxy.url, say(proxy, stated, user=user).job_id)
    assert flagged["status"] == "done" and flagged["report"]["empty_answer"] is True
    assert counter(proxy, "memproxy_extraction_empty_answers_total") == before + 1
    quiet = wait_job(proxy.url, say(proxy, small_talk, user=user).job_id)  # rules answer NONE
    assert quiet["report"]["empty_answer"] is False


def test_a_run_on_is_stored_as_sentences_and_a_near_duplicate_is_not_added_twice(
    proxy: Proxy, scripted: ScriptedUpstream
) -> None:
    run_on = json.loads(sample(31)["raw_answer"])["operations"][0]["text"]  # 598 characters
    user, marker = unique("u"), unique("run-on")

    def answer(body: dict[str, Any]) -> str:
        if "again" in json.dumps(payload(body)["new_messages"]):
            near = "User lives in Porto and has a golden retriever called Biscuit who is three years old"
            return json.dumps({"operations": [{"op": "ADD", "text": near}]})
        return json.dumps({"operations": [{"op": "ADD", "text": run_on}]})

    scripted.extractor = answering(marker, answer)
    done = wait_job(proxy.url, say(proxy, f"Here is everything about me ({marker})", user=user).job_id)
    stored = [m["text"] for m in memories(proxy.url, user)]
    assert len(stored) >= 10 and all(len(t) <= proxy.settings.memory.max_chars for t in stored)
    assert "User lives in Porto and has a golden retriever called Biscuit, who is three years old." in stored
    assert not any(t.endswith("?") for t in stored)  # "The weather is lovely today, isn't it?"
    assert {r["reason"] for r in done["report"]["rejected"]} == {"question"}
    again = wait_job(proxy.url, say(proxy, f"Once again ({marker})", user=user).job_id)
    assert [r["reason"] for r in again["report"]["rejected"]] == ["duplicate"]
    assert len(memories(proxy.url, user)) == len(stored)


def test_relative_dates_are_stored_against_the_turn_date(proxy: Proxy, scripted: ScriptedUpstream) -> None:
    said = sample(5)["user"]  # "Next Friday I'm flying to Tokyo with my sister Inês for a week."
    scripted.extractor = answering(said, lambda body: json.dumps(
        {"operations": [{"op": "ADD", "text": "User is flying to Tokyo next Friday with sister Inês"}]}))  # fmt: skip
    user = unique("u")
    turn = say(proxy, said, user=user)
    at = time.time()
    wait_job(proxy.url, turn.job_id)
    (stored,) = [m["text"] for m in memories(proxy.url, user)]
    assert stored == resolve("User is flying to Tokyo next Friday with sister Inês", [(at, said)])
    assert "next Friday" not in stored and "(Friday)" in stored
