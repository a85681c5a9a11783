"""Capture: completed chat turns land in the outbox (messages + job), and nothing else does.

Real HTTP → memproxy (uvicorn) → LiteLLM → scripted upstream; the outbox is read straight
from the proxy's SQLite file.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator

import psycopg
import pytest

from memproxy.testing.scripted_upstream import MEMORY_MARKER, ScriptedUpstream
from tests.support.memory_flow import (
    DB_NAME,
    TOKEN,
    captured,
    chat,
    job,
    query,
    request_ended,
    say,
    unique,
    wait_until,
)
from tests.support.proxy import Proxy, http_client

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


# Both engines on the default (fast) upstream path, and SQLite on the LiteLLM path; Postgres
# is slow tier, as ENGINES in tests/conftest.py.
_PROXIES = {"sqlite": "sqlite_proxy", "postgres": "pg_proxy", "litellm-path": "litellm_proxy"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow), "litellm-path"])
def proxy(request: pytest.FixtureRequest) -> Proxy:
    """Every test of this suite runs on both engines (SQLite and Postgres) and both upstream paths."""
    handle: Proxy = request.getfixturevalue(_PROXIES[request.param])
    return handle


def rows_mentioning(proxy: Proxy, needle: str) -> list[tuple[object, ...]]:
    return query(proxy, "SELECT job_id, role FROM messages WHERE content LIKE ?", (f"%{needle}%",))


@pytest.mark.parametrize("stream", [False, True])
def test_turn_is_captured_with_the_reply(proxy: Proxy, stream: bool) -> None:
    text = unique("I live in Lisbon")
    turn = say(proxy, text, user=unique("u"), session="s1", stream=stream)
    assert turn.status == 200 and turn.job_id.startswith("job_")
    assert turn.text == f"You said: {text}"
    assert captured(proxy, turn.job_id) == [
        {"role": "user", "content": text},
        {"role": "assistant", "content": turn.text},
    ]
    found = job(proxy.url, turn.job_id)
    assert found is not None and found["session_id"] == "s1"


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_and_tool_results_are_captured(proxy: Proxy, stream: bool) -> None:
    user, ask = unique("u"), unique("What is the weather")
    first = chat(
        proxy.url, [{"role": "user", "content": ask}], user=user, model="tools", tools=TOOLS, stream=stream
    )
    call = {"id": "call_scripted_1", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"query": "weather in Paris"})}}  # fmt: skip
    assert captured(proxy, first.job_id) == [
        {"role": "user", "content": ask},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    history = [
        {"role": "user", "content": ask},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_scripted_1", "content": "Sunny, 21C"},
    ]
    second = chat(proxy.url, history, user=user, stream=stream)
    assert [m["role"] for m in captured(proxy, second.job_id)] == ["tool", "assistant"]
    assert captured(proxy, second.job_id)[0] == {
        "role": "tool", "tool_call_id": "call_scripted_1", "content": "Sunny, 21C"}  # fmt: skip


def test_resent_history_is_not_captured_again(proxy: Proxy) -> None:
    user, old, new = unique("u"), unique("first question"), unique("second question")
    first = say(proxy, old, user=user)
    history = [{"role": "user", "content": old}, {"role": "assistant", "content": first.text},
               {"role": "user", "content": new}]  # fmt: skip
    second = chat(proxy.url, history, user=user)
    assert captured(proxy, second.job_id) == [
        {"role": "user", "content": new}, {"role": "assistant", "content": second.text}]  # fmt: skip
    assert len(rows_mentioning(proxy, old)) == 2  # the first turn's user message and its reply only


def test_system_messages_and_injected_memories_are_never_captured(
    proxy: Proxy, fake: ScriptedUpstream
) -> None:
    user, fact, system = unique("u"), unique("User collects stamps"), unique("You are terse")
    with proxy.http() as http:
        assert http.post("/v1/memories", json={"text": fact, "user_id": user}).status_code == 201
    ask = unique("stamps question")
    turn = chat(
        proxy.url, [{"role": "system", "content": system}, {"role": "user", "content": ask}], user=user
    )
    forwarded = fake.find_chat(ask).body["messages"]
    assert any(
        m["role"] == "system" and MEMORY_MARKER in m["content"] and fact in m["content"] for m in forwarded
    )
    stored = captured(proxy, turn.job_id)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert fact in (turn.text or "")  # the reply mentions the memory, so it is in the reply only
    assert not any(MEMORY_MARKER in json.dumps(m) or system in json.dumps(m) for m in stored)
    assert rows_mentioning(proxy, system) == []


@pytest.mark.parametrize(("model", "stream"), [("fail-500", False), ("fail-500", True), ("drop", True)])
def test_failed_completions_are_not_captured(
    proxy: Proxy, model: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memproxy.access")
    text, rid = unique("doomed"), unique("req")
    turn = say(proxy, text, user=unique("u"), model=model, stream=stream, headers={"X-Request-Id": rid})
    assert turn.status == (200 if model == "drop" else 500)
    request_ended(caplog.records, rid)  # the request is over: a capture would be written by now
    assert rows_mentioning(proxy, text) == []
    if turn.job_id:
        assert job(proxy.url, turn.job_id) is None


def test_client_abort_mid_stream_is_not_captured(
    proxy: Proxy, fake: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memproxy.access")
    text, rid = unique("abandoned"), unique("req")
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Memproxy-User-Id": unique("u"), "X-Request-Id": rid}
    body = {
        "model": "slow",
        "stream": True,
        "messages": [{"role": "user", "content": text + " " + "word " * 40}],
    }
    with http_client(base_url=proxy.url, timeout=30) as http:
        with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
            job_id = response.headers["x-memproxy-capture"]
            lines = response.iter_lines()
            next(lines)
            next(lines)
    request_ended(caplog.records, rid)  # the server saw the client go and ended the request
    assert job_id.startswith("job_")
    assert rows_mentioning(proxy, text) == [] and job(proxy.url, job_id) is None


@pytest.mark.parametrize("stream", [False, True])
def test_capture_off_and_memory_off_capture_nothing(proxy: Proxy, stream: bool) -> None:
    off = unique("not for memory")
    turn = say(proxy, off, user=unique("u"), stream=stream, headers={"X-Memproxy-Capture": "off"})
    assert turn.status == 200 and turn.headers["x-memproxy-capture"] == "off"
    anonymous = unique("anonymous")
    turn = say(proxy, anonymous, user=None, stream=stream)
    assert turn.status == 200 and turn.headers["x-memproxy-capture"] == "off"
    assert rows_mentioning(proxy, off) == [] and rows_mentioning(proxy, anonymous) == []


@pytest.fixture
def failing_outbox(proxy: Proxy) -> Iterator[str]:
    """A real write failure: a trigger makes the database refuse this user's job rows."""
    user = unique("broken-disk")
    url = proxy.settings.storage.url
    if url:
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute("CREATE FUNCTION refuse_capture() RETURNS trigger LANGUAGE plpgsql AS "
                       "$$ BEGIN RAISE EXCEPTION 'disk says no'; END $$")  # fmt: skip
            pg.execute(f"CREATE TRIGGER refuse_capture BEFORE INSERT ON jobs FOR EACH ROW "
                       f"WHEN (NEW.user_id = '{user}') EXECUTE FUNCTION refuse_capture()")  # fmt: skip
        try:
            yield user
        finally:
            with psycopg.connect(url, autocommit=True) as pg:
                pg.execute("DROP TRIGGER refuse_capture ON jobs")
                pg.execute("DROP FUNCTION refuse_capture()")
        return
    conn = sqlite3.connect(proxy.data_dir / DB_NAME, timeout=5)
    conn.execute(f"CREATE TRIGGER refuse_capture BEFORE INSERT ON jobs WHEN NEW.user_id = '{user}' "
                 "BEGIN SELECT RAISE(ABORT, 'disk says no'); END")  # fmt: skip
    conn.commit()
    try:
        yield user
    finally:
        conn.execute("DROP TRIGGER refuse_capture")
        conn.commit()
        conn.close()


def _capture_failures(proxy: Proxy) -> float:
    with proxy.http() as http:
        text = http.get("/metrics").text
    values = [
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("memproxy_capture_failures_total")
    ]
    return values[0] if values else 0.0


def test_capture_failure_never_breaks_the_answer(proxy: Proxy, failing_outbox: str) -> None:
    before = _capture_failures(proxy)
    text = unique("still answered")
    plain = say(proxy, text, user=failing_outbox)
    assert plain.status == 200 and plain.text == f"You said: {text}"
    assert plain.headers["x-memproxy-capture"] == "failed"
    streamed = say(proxy, text, user=failing_outbox, stream=True)
    assert streamed.status == 200 and streamed.text == f"You said: {text}"
    assert rows_mentioning(proxy, text) == []  # the messages rolled back with the job
    assert wait_until(lambda: _capture_failures(proxy) >= before + 2)
