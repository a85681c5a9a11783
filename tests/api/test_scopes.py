"""``GET /v1/scopes``, ``GET /v1/jobs/{id}/messages``, history ``job_ids`` and the list filters the
console uses, over real HTTP against the session's memproxy (data created by chat + worker)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.memory_flow import say, unique, wait_job
from tests.support.proxy import Proxy


@pytest.fixture
def proxy(engine_proxy: Proxy) -> Proxy:
    """Every test of this suite runs on both engines (SQLite and Postgres)."""
    return engine_proxy


@pytest.fixture
def token() -> str:
    return f"sk-scopes-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def http(proxy: Proxy, token: str) -> Iterator[httpx.Client]:
    with proxy.http(token) as client:
        yield client


def scopes(http: httpx.Client, **params: Any) -> dict[str, Any]:
    response = http.get("/v1/scopes", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def add(http: httpx.Client, user: str, text: str, **fields: Any) -> dict[str, Any]:
    response = http.post("/v1/memories", json={"user_id": user, "text": text, **fields})
    assert response.status_code == 201, response.text
    memory: dict[str, Any] = response.json()
    return memory


def test_scopes_lists_counts_and_last_activity_of_the_tenant_only(proxy: Proxy, http: httpx.Client,
                                                                   token: str) -> None:  # fmt: skip
    user = unique("scoped")
    before = time.time()
    turn = say(proxy, "I live in Oslo. I like skiing.", user=user, token=token)
    wait_job(proxy.url, turn.job_id, token=token)
    add(http, user, "Temporary fact", expires_at=time.time() + 3600)
    add(http, user, "Bot-only fact", agent_id="bot")

    body = scopes(http)
    listed = {(s["user_id"], s["agent_id"]): s for s in body["data"]}
    assert set(listed) == {(user, ""), (user, "bot")}
    mine = listed[(user, "")]
    assert mine["memories"] == 3 and mine["expired_memories"] == 0
    assert mine["jobs"] == {"pending": 0, "running": 0, "done": 1, "dead": 0}
    assert mine["last_activity_at"] >= time.strftime("%Y-%m-%dT%H:%M", time.gmtime(before))
    assert listed[(user, "bot")]["memories"] == 1 and listed[(user, "bot")]["jobs"]["done"] == 0

    with proxy.http("sk-someone-else-entirely") as other:
        assert all(s["user_id"] != user for s in scopes(other)["data"])
        assert scopes(other, user_id=user)["data"] == []


def test_scopes_page_by_cursor_and_search_by_substring(http: httpx.Client) -> None:
    users = [f"pager-{i:02d}-{uuid.uuid4().hex[:4]}" for i in range(7)]
    for user in users:
        add(http, user, f"fact of {user}")
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        body = scopes(http, limit=3, **({"cursor": cursor} if cursor else {}))
        assert len(body["data"]) <= 3
        seen += [s["user_id"] for s in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(users)

    found = scopes(http, q=users[3][-8:].upper())["data"]  # substring, case-insensitive
    assert [s["user_id"] for s in found] == [users[3]]
    assert scopes(http, q="pager-0")["data"][0]["user_id"] == users[0]  # prefix
    assert scopes(http, q="%")["data"] == []  # LIKE wildcards are literal
    exact = scopes(http, user_id=users[2], agent_id="")["data"]
    assert [(s["user_id"], s["memories"]) for s in exact] == [(users[2], 1)]


@pytest.mark.parametrize(
    ("params", "param"),
    [({"limit": "0"}, "limit"), ({"cursor": "nope"}, "cursor"), ({"colour": "red"}, "colour"),
     ({"user_id": "x" * 300}, "user_id")],
)  # fmt: skip
def test_scopes_rejects_bad_parameters(http: httpx.Client, params: dict[str, str], param: str) -> None:
    response = http.get("/v1/scopes", params=params)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_scopes_needs_credentials(proxy: Proxy) -> None:
    with proxy.http(None) as anonymous:
        assert anonymous.get("/v1/scopes").status_code == 401


def test_history_names_the_jobs_an_extracted_change_came_from(proxy: Proxy, http: httpx.Client,
                                                              token: str) -> None:  # fmt: skip
    user = unique("hist")
    first = say(proxy, "I live in Rome.", user=user, token=token)
    wait_job(proxy.url, first.job_id, token=token)
    second = say(proxy, "I moved to Milan.", user=user, token=token)
    wait_job(proxy.url, second.job_id, token=token)
    (memory,) = http.get("/v1/memories", params={"user_id": user}).json()["data"]
    events = http.get(f"/v1/memories/{memory['id']}/history").json()["data"]
    assert [(e["event"], e["job_ids"]) for e in events] == [("ADD", [first.job_id]),
                                                            ("UPDATE", [second.job_id])]  # fmt: skip
    assert events[1]["old_text"] == "User lives in Rome" and events[1]["new_text"] == "User lives in Milan"

    patched = http.patch(f"/v1/memories/{memory['id']}", json={"text": "User lives in Turin"})
    assert patched.status_code == 200
    assert http.get(f"/v1/memories/{memory['id']}/history").json()["data"][-1]["job_ids"] == []


def test_job_messages_show_the_captured_turn_to_its_tenant_only(proxy: Proxy, http: httpx.Client,
                                                                token: str) -> None:  # fmt: skip
    user = unique("msgs")
    turn = say(proxy, "I like <b>tea</b>.", user=user, token=token)
    wait_job(proxy.url, turn.job_id, token=token)
    body = http.get(f"/v1/jobs/{turn.job_id}/messages").json()
    assert [m["role"] for m in body["data"]] == ["user", "assistant"]
    assert body["data"][0]["message"]["content"] == "I like <b>tea</b>."
    assert body["data"][1]["message"]["content"] == turn.text
    with proxy.http("sk-another-tenant-msgs") as other:
        assert other.get(f"/v1/jobs/{turn.job_id}/messages").status_code == 404
    assert http.get("/v1/jobs/job_missing/messages").status_code == 404


def test_jobs_filter_by_scope_and_page_both_ways(proxy: Proxy, http: httpx.Client, token: str) -> None:
    user = unique("jobs")
    ids = [say(proxy, f"Hello number {i}", user=user, token=token).job_id for i in range(3)]
    say(proxy, "Someone else", user=unique("other"), token=token)
    got: list[str] = []
    cursor = None
    for _ in range(5):
        params: dict[str, str | int] = {"user_id": user, "agent_id": "", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        body = http.get("/v1/jobs", params=params).json()
        got += [j["id"] for j in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert got == ids
    newest: list[str] = []
    cursor = None
    for _ in range(5):
        params = {
            "user_id": user,
            "agent_id": "",
            "limit": 2,
            "order": "desc",
            **({"cursor": cursor} if cursor else {}),
        }
        body = http.get("/v1/jobs", params=params).json()
        newest += [j["id"] for j in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert newest == ids[::-1]
    assert http.get("/v1/jobs", params={"order": "sideways"}).status_code == 400
    assert http.get("/v1/jobs", params={"bogus": "1"}).status_code == 400


def test_memory_list_filters_by_source_and_expiry(proxy: Proxy, http: httpx.Client, token: str) -> None:
    user = unique("filters")
    wait_job(proxy.url, say(proxy, "I work at Acme.", user=user, token=token).job_id, token=token)
    add(http, user, "Manual forever")
    add(http, user, "Manual for now", expires_at=time.time() + 600)

    def texts(**params: str) -> list[str]:
        response = http.get("/v1/memories", params={"user_id": user, **params})
        assert response.status_code == 200, response.text
        return [m["text"] for m in response.json()["data"]]

    assert texts(source="extracted") == ["User works at Acme"]
    assert texts(source="manual") == ["Manual forever", "Manual for now"]
    assert texts(has_expiry="true") == ["Manual for now"]
    assert texts(source="manual", has_expiry="false") == ["Manual forever"]
    assert http.get("/v1/memories", params={"source": "robot"}).status_code == 400
    assert http.get("/v1/memories", params={"has_expiry": "maybe"}).status_code == 400
