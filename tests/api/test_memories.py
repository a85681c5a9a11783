"""The memory management API over real HTTP: memproxy under uvicorn, SQLite on disk, real FAISS."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memproxy.api.app import create_app
from memproxy.auth import passthrough_tenant
from memproxy.scope import Scope
from memproxy.testing.background_server import BackgroundServer
from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.support.memory_flow import query as db_query
from tests.support.proxy import KEYS, Proxy, proxy_settings, start_proxy

ALPHA, BETA = KEYS[0]["key"], KEYS[1]["key"]
FACTS = [
    "Prefers window seats on long flights",
    "Her sister Maria lives in Lisbon",
    "Allergic to peanuts",
    "Runs every Tuesday morning before work",
    "Favourite programming language is Rust",
    "Drives a blue hatchback",
    "Works as a nurse at the city hospital",
    "Wants to learn Japanese next year",
    "The cat is named Pixel",
    "Dislikes horror movies",
]


@pytest.fixture
def proxy(engine_proxy: Proxy) -> Proxy:
    """Every test of this suite runs on both engines (SQLite and Postgres)."""
    return engine_proxy


def uid(prefix: str = "u") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def add(http: httpx.Client, text: str, **fields: Any) -> dict[str, Any]:
    response = http.post("/v1/memories", json={"text": text, **fields})
    assert response.status_code == 201, response.text
    memory: dict[str, Any] = response.json()
    return memory


def search(http: httpx.Client, query: str, **fields: Any) -> list[dict[str, Any]]:
    response = http.post("/v1/memories/search", json={"query": query, **fields})
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


def list_all(http: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    response = http.get("/v1/memories", params=params)
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


def export(http: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    response = http.get("/v1/memories/export", params=params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines() if line]


def assert_error(response: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if param is not None:
        assert error["param"] == param, error
    return error


@pytest.fixture
def http(proxy: Proxy) -> Iterator[httpx.Client]:
    with proxy.http(f"sk-memories-{uuid.uuid4().hex[:8]}") as client:
        yield client


# --- create / get ------------------------------------------------------------------------


def test_create_returns_the_stored_memory_and_get_reads_it(http: httpx.Client) -> None:
    user = uid()
    memory = add(http, "  Likes green tea  ", user_id=user, agent_id="coach", session_id="s-1",
                 metadata={"origin": "test", "n": 1})  # fmt: skip
    assert memory["text"] == "Likes green tea"
    assert (memory["user_id"], memory["agent_id"], memory["session_id"]) == (user, "coach", "s-1")
    assert memory["source"] == "manual" and memory["metadata"] == {"origin": "test", "n": 1}
    assert memory["expires_at"] is None and memory["created_at"].endswith("Z")
    assert set(memory) == {"id", "text", "user_id", "agent_id", "session_id", "source", "metadata",
                           "created_at", "updated_at", "expires_at"}  # fmt: skip
    got = http.get(f"/v1/memories/{memory['id']}")
    assert got.status_code == 200 and got.json() == memory


def test_scope_ids_fall_back_to_the_memproxy_headers(http: httpx.Client) -> None:
    user = uid()
    response = http.post("/v1/memories", json={"text": "Plays the cello"},
                         headers={"X-Memproxy-User-Id": user, "X-Memproxy-Agent-Id": "tutor",
                                  "X-Memproxy-Session-Id": "conv-9"})  # fmt: skip
    assert response.status_code == 201
    assert (response.json()["user_id"], response.json()["agent_id"], response.json()["session_id"]) == (
        user, "tutor", "conv-9")  # fmt: skip
    # The body wins over the header.
    other = http.post(
        "/v1/memories",
        json={"text": "Plays the violin", "user_id": "body-user"},
        headers={"X-Memproxy-User-Id": user},
    )
    assert other.json()["user_id"] == "body-user"
    listed = http.get("/v1/memories", headers={"X-Memproxy-User-Id": user}).json()["data"]
    assert [m["text"] for m in listed] == ["Plays the cello"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"user_id": "u1"}, "text"),
        ({"user_id": "u1", "text": ""}, "text"),
        ({"user_id": "u1", "text": 42}, "text"),
        ({"user_id": "u1", "text": "x", "metadata": [1, 2]}, "metadata"),
        ({"user_id": "u1", "text": "x", "expires_at": "next tuesday"}, "expires_at"),
        ({"user_id": "u1", "text": "x", "expires_at": True}, "expires_at"),
        ({"user_id": 7, "text": "x"}, "user_id"),
        ({"user_id": "u1", "agent_id": ["a"], "text": "x"}, "agent_id"),
        ({"user_id": "x" * 257, "text": "x"}, "user_id"),
        ({"user_id": "bad\nid", "text": "x"}, "user_id"),
        ({"text": "no scope at all"}, "user_id"),
        ({"user_id": "u1", "text": "x", "colour": "red"}, "colour"),
        ({"user_id": "u1", "text": "x", "messages": [{"role": "user", "content": "x"}]}, "messages"),
        ({"user_id": "u1", "messages": []}, "messages"),
        ({"user_id": "u1", "messages": [{"content": "no role"}]}, "messages[0]"),
        ({"user_id": "u1", "messages": [{"role": "system", "content": "only system"}]}, "messages"),
    ],
)
def test_create_rejects_bad_input_naming_the_param(
    http: httpx.Client, body: dict[str, Any], param: str
) -> None:
    assert_error(http.post("/v1/memories", json=body), 400, param)


def test_bad_json_and_non_object_bodies_are_400(http: httpx.Client) -> None:
    for path in ("/v1/memories", "/v1/memories/search"):
        assert_error(http.post(path, content=b"{not json", headers={"content-type": "application/json"}), 400)
        assert_error(http.post(path, json=[1, 2]), 400)


def test_oversized_body_is_413(http: httpx.Client, proxy: Proxy) -> None:
    big = "x" * (proxy.settings.server.max_body_bytes + 10)
    assert_error(http.post("/v1/memories", json={"user_id": "u", "text": big}), 413)
    assert_error(http.post("/v1/memories/import", content=big.encode()), 413)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/memories"), ("GET", "/v1/memories"), ("DELETE", "/v1/memories?user_id=u"),
        ("POST", "/v1/memories/search"), ("GET", "/v1/memories/export"), ("POST", "/v1/memories/import"),
        ("GET", "/v1/memories/abc"), ("PATCH", "/v1/memories/abc"), ("DELETE", "/v1/memories/abc"),
        ("GET", "/v1/memories/abc/history"),
    ],
)  # fmt: skip
def test_every_route_needs_credentials(proxy: Proxy, method: str, path: str) -> None:
    with proxy.http(token=None) as anonymous:
        assert_error(anonymous.request(method, path, json={}), 401)


def test_messages_instead_of_text_queue_a_job(http: httpx.Client, proxy: Proxy) -> None:
    user = uid()
    response = http.post("/v1/memories", json={"user_id": user, "session_id": "s-7", "messages": [
        {"role": "system", "content": "be nice"},
        {"role": "user", "content": "I moved to Porto last month"},
        {"role": "assistant", "content": "Nice, Porto is lovely."},
    ]})  # fmt: skip
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    token = http.headers["authorization"].split()[1]
    (job,) = db_query(proxy, "SELECT tenant, user_id, session_id FROM jobs WHERE id = ?", (job_id,))
    roles = [
        r[0] for r in db_query(proxy, "SELECT role FROM messages WHERE job_id = ? ORDER BY num", (job_id,))
    ]
    assert job == (passthrough_tenant(token), user, "s-7")
    assert roles == ["user", "assistant"]  # system prompts are not captured
    # The worker extracts it like a captured chat turn.
    _wait_for(lambda: _job_status(proxy, job_id) == "done", timeout=10)
    extracted = list_all(http, user_id=user)
    assert [(m["source"], m["session_id"]) for m in extracted] == [("extracted", "s-7")]
    assert extracted[0]["text"].startswith("User lives in Porto")


def _job_status(proxy: Proxy, job_id: str) -> str:
    rows = db_query(proxy, "SELECT status FROM jobs WHERE id = ?", (job_id,))
    return str(rows[0][0]) if rows else "missing"


# --- duplicates ---------------------------------------------------------------------------


def test_exact_duplicates_are_409_with_the_existing_id(http: httpx.Client) -> None:
    user = uid()
    first = add(http, "I live in Berlin.", user_id=user)
    for variant in ("i live in berlin", "I  LIVE in Berlin!", " I live in\tBerlin? "):
        response = http.post("/v1/memories", json={"text": variant, "user_id": user})
        error = assert_error(response, 409, "text")
        assert error["code"] == "duplicate_memory" and first["id"] in error["message"]
        assert response.headers["x-memproxy-existing-id"] == first["id"]
    add(http, "I live in Berlin.", user_id=user, agent_id="other-agent")  # another scope: fine
    second = add(http, "Likes trains", user_id=user)
    assert_error(http.patch(f"/v1/memories/{second['id']}", json={"text": "I live in berlin"}), 409, "text")
    assert len(list_all(http, user_id=user, agent_id="")) == 2


# --- list ---------------------------------------------------------------------------------


def test_list_paginates_with_a_cursor(http: httpx.Client) -> None:
    user = uid()
    created = [add(http, f"Numbered fact {i} about {user}", user_id=user)["id"] for i in range(25)]
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"user_id": user, "limit": 10, **({"cursor": cursor} if cursor else {})}
        body = http.get("/v1/memories", params=params).json()
        assert len(body["data"]) <= 10
        seen += [m["id"] for m in body["data"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert pages == 3 and seen == created
    assert [m["id"] for m in list_all(http, user_id=user)] == created  # default limit 100


@pytest.mark.parametrize(("params", "param"), [
    ({"limit": "0"}, "limit"), ({"limit": "1001"}, "limit"), ({"limit": "ten"}, "limit"),
    ({"cursor": "not-a-cursor!"}, "cursor"), ({"user_id": "x" * 300}, "user_id"),
])  # fmt: skip
def test_list_rejects_bad_parameters(http: httpx.Client, params: dict[str, str], param: str) -> None:
    assert_error(http.get("/v1/memories", params=params), 400, param)


def test_list_absent_id_means_any_and_empty_means_none(http: httpx.Client) -> None:
    user = uid()
    add(http, "Scope without agent", user_id=user)
    add(http, "Scope with agent", user_id=user, agent_id="helper")
    assert {m["text"] for m in list_all(http, user_id=user)} == {"Scope without agent", "Scope with agent"}
    assert [m["text"] for m in list_all(http, user_id=user, agent_id="")] == ["Scope without agent"]
    assert [m["text"] for m in list_all(http, user_id=user, agent_id="helper")] == ["Scope with agent"]


# --- search -------------------------------------------------------------------------------


def test_keyword_only_match_is_found_by_hybrid_search(http: httpx.Client) -> None:
    user = uid()
    for fact in FACTS:
        add(http, fact, user_id=user)
    target = add(http, "Ordered replacement part ZX-4471 for the dishwasher", user_id=user)
    results = search(http, "ZX-4471", user_id=user)
    assert results[0]["id"] == target["id"]
    assert 0 < results[0]["score"] <= 1
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    assert (
        search(http, "what is my cat called?", user_id=user, top_k=1)[0]["text"] == "The cat is named Pixel"
    )
    assert len(search(http, "peanuts", user_id=user, top_k=3)) <= 3


def test_search_is_within_the_exact_scope(http: httpx.Client) -> None:
    user = uid()
    add(http, "Speaks fluent Icelandic", user_id=user, agent_id="travel")
    assert search(http, "Icelandic", user_id=user) == []
    assert [r["text"] for r in search(http, "Icelandic", user_id=user, agent_id="travel")] == [
        "Speaks fluent Icelandic"]  # fmt: skip


@pytest.mark.parametrize(("body", "param"), [
    ({"user_id": "u"}, "query"), ({"user_id": "u", "query": ""}, "query"), ({"user_id": "u", "query": 3}, "query"),
    ({"query": "x"}, "user_id"), ({"user_id": "u", "query": "x", "top_k": "5"}, "top_k"),
    ({"user_id": "u", "query": "x", "top_k": 0}, "top_k"), ({"user_id": "u", "query": "x", "top_k": 101}, "top_k"),
    ({"user_id": "u", "query": "x", "min_score": "high"}, "min_score"), ({"user_id": "u", "query": "x", "k": 1}, "k"),
])  # fmt: skip
def test_search_rejects_bad_input(http: httpx.Client, body: dict[str, Any], param: str) -> None:
    assert_error(http.post("/v1/memories/search", json=body), 400, param)


def test_fixed_routes_are_not_captured_by_the_id_route(http: httpx.Client) -> None:
    user = uid()
    add(http, "Route order matters", user_id=user)
    assert export(http, user_id=user)[0]["text"] == "Route order matters"
    assert search(http, "route order", user_id=user)[0]["text"] == "Route order matters"


# --- expiry -------------------------------------------------------------------------------


def test_expired_memory_is_invisible_to_every_reader(
    upstream: tuple[ScriptedUpstream, str], tmp_path: Path
) -> None:
    """Time moves on the store's clock (a server of its own), not the real one: no waiting."""
    settings = proxy_settings(upstream[1], tmp_path, extraction={"worker_enabled": False})
    app = create_app(settings)
    server = BackgroundServer(app).start()
    try:
        now = [time.time()]
        app.state.services.store.clock = lambda: now[0]
        with Proxy(server.url, settings, tmp_path).http(f"sk-expiry-{uuid.uuid4().hex[:8]}") as http:
            _expired_memories_are_invisible(http, now)
    finally:
        server.stop()


def _expired_memories_are_invisible(http: httpx.Client, now: list[float]) -> None:
    user = uid()
    add(http, "Keeps a pet iguana called Rex", user_id=user)
    past = add(http, "Temporary code QW-9981 for the gate", user_id=user, expires_at=now[0] - 5)
    soon = add(http, "Hotel room 1207 this week", user_id=user,
               expires_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now[0] + 60)))  # fmt: skip
    assert soon["expires_at"] is not None
    assert [r["id"] for r in search(http, "hotel room 1207", user_id=user)][:1] == [soon["id"]]
    now[0] += 120  # past the hotel room's expiry
    for gone in (past, soon):
        assert_error(http.get(f"/v1/memories/{gone['id']}"), 404)
        assert_error(http.patch(f"/v1/memories/{gone['id']}", json={"text": "revived"}), 404)
        assert_error(http.delete(f"/v1/memories/{gone['id']}"), 404)
    found = search(http, "QW-9981 gate code", user_id=user) + search(http, "hotel room 1207", user_id=user)
    assert found == []  # expired: not found (and the iguana shares no word or meaning with either query)
    assert [r["text"] for r in search(http, "pet iguana", user_id=user)] == ["Keeps a pet iguana called Rex"]
    assert [m["text"] for m in list_all(http, user_id=user)] == ["Keeps a pet iguana called Rex"]
    assert [m["text"] for m in export(http, user_id=user)] == ["Keeps a pet iguana called Rex"]
    # An expired memory does not block re-adding the same fact.
    assert add(http, "Temporary code QW-9981 for the gate", user_id=user)["id"] != past["id"]


# --- patch / delete / history -------------------------------------------------------------


def test_patch_writes_history_and_the_old_text_is_no_longer_found(http: httpx.Client) -> None:
    user = uid()
    for fact in FACTS[:5]:
        add(http, fact, user_id=user)
    memory = add(http, "Lives in Grenoble", user_id=user, metadata={"v": 1})
    assert search(http, "Grenoble", user_id=user)[0]["id"] == memory["id"]
    patched = http.patch(
        f"/v1/memories/{memory['id']}", json={"text": "Lives in Valparaiso", "metadata": {"v": 2}}
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["text"] == "Lives in Valparaiso" and patched.json()["metadata"] == {"v": 2}
    assert patched.json()["created_at"] == memory["created_at"]
    assert patched.json()["updated_at"] > memory["updated_at"]
    assert all("Grenoble" not in r["text"] for r in search(http, "Grenoble", user_id=user))
    assert search(http, "Valparaiso", user_id=user)[0]["id"] == memory["id"]
    history = http.get(f"/v1/memories/{memory['id']}/history").json()["data"]
    assert [(h["event"], h["old_text"], h["new_text"], h["source"]) for h in history] == [
        ("ADD", None, "Lives in Grenoble", "manual"),
        ("UPDATE", "Lives in Grenoble", "Lives in Valparaiso", "manual"),
    ]
    assert all(h["created_at"].endswith("Z") for h in history)


def test_patch_metadata_and_expiry_only(http: httpx.Client) -> None:
    memory = add(http, "Collects vinyl records", user_id=uid(), expires_at=time.time() + 3600)
    cleared = http.patch(f"/v1/memories/{memory['id']}", json={"expires_at": None}).json()
    assert cleared["expires_at"] is None and cleared["text"] == memory["text"]
    meta = http.patch(f"/v1/memories/{memory['id']}", json={"metadata": {"genre": "jazz"}}).json()
    assert meta["metadata"] == {"genre": "jazz"} and meta["expires_at"] is None


@pytest.mark.parametrize(("body", "param"), [
    ({}, "text"), ({"text": None}, "text"), ({"text": ""}, "text"), ({"text": 5}, "text"),
    ({"metadata": None}, "metadata"), ({"metadata": "x"}, "metadata"), ({"expires_at": "soon"}, "expires_at"),
    ({"user_id": "someone-else"}, "user_id"),
])  # fmt: skip
def test_patch_rejects_bad_input(http: httpx.Client, body: dict[str, Any], param: str) -> None:
    memory = add(http, "Patch target", user_id=uid())
    assert_error(http.patch(f"/v1/memories/{memory['id']}", json=body), 400, param)
    assert http.get(f"/v1/memories/{memory['id']}").json() == memory


def test_delete_removes_from_every_reader_and_keeps_history(http: httpx.Client) -> None:
    user = uid()
    memory = add(http, "Owns a canoe named Drifter", user_id=user)
    deleted = http.delete(f"/v1/memories/{memory['id']}")
    assert deleted.status_code == 200 and deleted.json() == {"id": memory["id"], "object": "memory.deleted",
                                                              "deleted": True}  # fmt: skip
    assert_error(http.get(f"/v1/memories/{memory['id']}"), 404)
    assert_error(http.delete(f"/v1/memories/{memory['id']}"), 404)
    assert search(http, "canoe Drifter", user_id=user) == []
    assert list_all(http, user_id=user) == []
    events = http.get(f"/v1/memories/{memory['id']}/history").json()["data"]
    assert [e["event"] for e in events] == ["ADD", "DELETE"] and events[1]["old_text"] == memory["text"]


def test_unknown_ids_are_404_everywhere(http: httpx.Client) -> None:
    missing = uuid.uuid4().hex
    for method, path in (("GET", ""), ("PATCH", ""), ("DELETE", ""), ("GET", "/history")):
        error = assert_error(http.request(method, f"/v1/memories/{missing}{path}", json={"text": "x"}), 404)
        assert error["type"] == "not_found_error"


# --- forget / export / import -------------------------------------------------------------


def test_forget_erases_one_scope_and_returns_counts(http: httpx.Client, proxy: Proxy) -> None:
    user = uid()
    kept = add(http, "Other scope survives", user_id=user, agent_id="keep")
    first = add(http, "Forget me one", user_id=user)
    add(http, "Forget me two", user_id=user)
    http.patch(f"/v1/memories/{first['id']}", json={"text": "Forget me uno"})
    queued = http.post(
        "/v1/memories", json={"user_id": user, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert queued.status_code == 202
    _wait_for(lambda: _job_status(proxy, queued.json()["job_id"]) == "done", timeout=10)
    search(http, "forget", user_id=user)  # loads the scope's index
    assert_error(http.delete("/v1/memories"), 400, "user_id")
    response = http.delete("/v1/memories", params={"user_id": user})
    assert response.status_code == 200, response.text
    deleted = response.json()["deleted"]
    assert deleted["memories"] == 2 and deleted["history"] == 3 and deleted["index_entries"] == 2
    assert deleted["messages"] == 1 and deleted["jobs"] == 1
    assert list_all(http, user_id=user, agent_id="") == [] and search(http, "forget", user_id=user) == []
    assert_error(http.get(f"/v1/memories/{first['id']}/history"), 404)
    assert [m["id"] for m in list_all(http, user_id=user)] == [kept["id"]]
    again = http.delete("/v1/memories", params={"user_id": user}).json()["deleted"]
    assert again["memories"] == 0 and again["history"] == 0


def test_export_import_round_trip_preserves_ids_text_metadata_and_times(http: httpx.Client) -> None:
    user = uid()
    originals = [
        add(http, f"Round trip fact {i}", user_id=user, session_id="s", metadata={"i": i}) for i in range(3)
    ]
    lines = export(http, user_id=user)
    assert lines == originals
    http.delete("/v1/memories", params={"user_id": user})
    assert list_all(http, user_id=user) == []
    body = "\n".join(json.dumps(line) for line in lines) + "\n\n"
    response = http.post(
        "/v1/memories/import", content=body.encode(), headers={"content-type": "application/x-ndjson"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["imported"] == 3 and response.json()["skipped"] == 0
    assert list_all(http, user_id=user) == originals
    assert search(http, "round trip fact 2", user_id=user)[0]["id"] == originals[2]["id"]
    again = http.post("/v1/memories/import", content=body.encode()).json()
    assert (again["imported"], again["skipped"]) == (0, 3)


@pytest.mark.parametrize(("lines", "bad_line"), [
    ([{"text": "ok", "user_id": "u"}, "{broken"], 2),
    ([{"text": "ok", "user_id": "u"}, {"text": "fine", "user_id": "u"}, [1, 2]], 3),
    ([{"user_id": "u"}], 1),
    ([{"text": "ok", "user_id": "u"}, {"text": "no scope"}], 2),
    ([{"text": "ok", "user_id": "u", "metadata": "x"}], 1),
    ([{"text": "ok", "user_id": "u", "source": "invented"}], 1),
    ([{"text": "ok", "user_id": "u", "created_at": "yesterday"}], 1),
])  # fmt: skip
def test_import_rejects_a_bad_line_naming_it(http: httpx.Client, lines: list[Any], bad_line: int) -> None:
    body = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    error = assert_error(http.post("/v1/memories/import", content=body.encode()), 400)
    assert error["message"].startswith(f"line {bad_line}:") and error["param"] == f"line {bad_line}"
    assert list_all(http, user_id="u") == []  # nothing of a rejected import is stored


# --- tenant isolation ---------------------------------------------------------------------


@pytest.fixture(params=["keys", "passthrough-sqlite", "passthrough-postgres"])
def two_tenants(request: pytest.FixtureRequest) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    if request.param == "keys":
        server: Proxy = request.getfixturevalue("keys_proxy")
        tokens = (ALPHA, BETA)
    else:
        server = request.getfixturevalue("sqlite_proxy" if request.param.endswith("sqlite") else "pg_proxy")
        tokens = (f"sk-owner-{uuid.uuid4().hex[:8]}", f"sk-intruder-{uuid.uuid4().hex[:8]}")
    with server.http(tokens[0]) as owner, server.http(tokens[1]) as intruder:
        yield owner, intruder


def test_another_tenant_sees_changes_and_deletes_nothing(
    two_tenants: tuple[httpx.Client, httpx.Client],
) -> None:
    owner, intruder = two_tenants
    user = uid("shared-user")  # both tenants use the same user id on purpose
    memory = add(owner, "Secret project codename BLUEFINCH-77", user_id=user, metadata={"s": 1})
    add(owner, "Second secret: vault combination 31-07-19", user_id=user)
    before = export(owner, user_id=user)
    missing = f"/v1/memories/{uuid.uuid4().hex}"
    own = f"/v1/memories/{memory['id']}"
    for method, suffix, body in (("GET", "", None), ("PATCH", "", {"text": "hijacked"}), ("DELETE", "", None),
                                 ("GET", "/history", None)):  # fmt: skip
        guessed = intruder.request(method, own + suffix, json=body)
        unknown = intruder.request(method, missing + suffix, json=body)
        assert guessed.status_code == unknown.status_code == 404
        assert guessed.json() == unknown.json()
    assert list_all(intruder, user_id=user) == [] and list_all(intruder) == []
    assert search(intruder, "BLUEFINCH-77 codename", user_id=user) == []
    assert export(intruder, user_id=user) == [] and export(intruder) == []
    forgot = intruder.delete("/v1/memories", params={"user_id": user}).json()["deleted"]
    assert forgot["memories"] == 0 and forgot["history"] == 0
    # Importing the owner's export (ids and all) lands in the intruder's own tenant, with fresh ids.
    imported = intruder.post("/v1/memories/import", content="\n".join(
        json.dumps({**line, "tenant": "alpha"}) for line in before).encode())  # fmt: skip
    assert imported.json()["imported"] == 2
    theirs = list_all(intruder, user_id=user)
    assert {m["text"] for m in theirs} == {m["text"] for m in before}
    assert not {m["id"] for m in theirs} & {m["id"] for m in before}
    intruder.patch(f"/v1/memories/{theirs[0]['id']}", json={"text": "changed by the intruder"})
    intruder.delete(f"/v1/memories/{theirs[1]['id']}")
    add(intruder, "Secret project codename BLUEFINCH-77", user_id=user)  # no cross-tenant duplicate
    # The owner's data is exactly as it was.
    assert export(owner, user_id=user) == before
    assert search(owner, "BLUEFINCH-77", user_id=user)[0]["id"] == memory["id"]
    assert [e["event"] for e in owner.get(own + "/history").json()["data"]] == ["ADD"]


# --- dedicated servers: erasure on disk, snapshots across restarts ------------------------


def test_forget_leaves_no_trace_of_the_text_under_the_data_dir(
    upstream: tuple[ScriptedUpstream, str], tmp_path: Path
) -> None:
    marker = "zebracorn" + uuid.uuid4().hex[:12]
    survivor = "okapilion" + uuid.uuid4().hex[:12]
    settings = proxy_settings(upstream[1], tmp_path, index={"snapshot_interval_s": 0.1},
                              extraction={"worker_enabled": False})  # fmt: skip
    server, proxy = start_proxy(settings)
    try:
        with proxy.http("sk-forget-test") as http:
            user = "forget-" + marker
            for i in range(12):
                add(http, f"Fact {i}: {marker} likes item {i}", user_id=user, session_id=marker,
                    metadata={"note": marker})  # fmt: skip
            first = list_all(http, user_id=user)[0]
            http.patch(f"/v1/memories/{first['id']}", json={"text": f"Changed {marker} fact"})
            http.delete(f"/v1/memories/{list_all(http, user_id=user)[1]['id']}")
            queued = http.post("/v1/memories", json={"user_id": user, "messages": [
                {"role": "user", "content": f"remember {marker}"}]})  # fmt: skip
            assert queued.status_code == 202
            add(http, f"Unrelated {survivor}", user_id="someone-else")
            assert search(http, marker, user_id=user) and search(http, survivor, user_id="someone-else")
            snapshot = tmp_path / "index" / f"{Scope(passthrough_tenant('sk-forget-test'), user).key}.faiss"
            _wait_for(snapshot.exists)
            assert _files_containing(tmp_path, marker.encode())  # the check below can fail
            deleted = http.delete("/v1/memories", params={"user_id": user}).json()["deleted"]
            assert deleted["memories"] == 11 and deleted["snapshots"] == 1 and deleted["jobs"] == 1
            assert not snapshot.exists()
            time.sleep(0.3)  # a periodic snapshot must not bring the scope back
            assert _files_containing(tmp_path, marker.encode()) == []
            assert _files_containing(tmp_path, survivor.encode())
    finally:
        server.stop()
    assert _files_containing(tmp_path, marker.encode()) == []


def _files_containing(root: Path, needle: bytes) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file() and needle in path.read_bytes()]


def _wait_for(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


QUERIES = ["window seat flights", "sister in Lisbon", "allergy", "programming language", "pet cat name",
           "job hospital", "ZX-4471", "Japanese"]  # fmt: skip


def _results(proxy: Proxy, token: str, users: list[str]) -> list[list[tuple[str, float]]]:
    with proxy.http(token) as http:
        return [
            [(r["id"], r["score"]) for r in search(http, q, user_id=u, top_k=5)]
            for u in users
            for q in QUERIES
        ]


def test_restart_restores_search_from_snapshots_and_rebuilds_a_corrupt_one(
    upstream: tuple[ScriptedUpstream, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token, users = "sk-restart-test", ["restart-user-one", "restart-user-two"]
    settings = proxy_settings(upstream[1], tmp_path, extraction={"worker_enabled": False})
    server, proxy = start_proxy(settings)
    try:
        with proxy.http(token) as http:
            for user in users:
                for fact in [*FACTS, "Ordered part ZX-4471"]:
                    add(http, f"{fact} ({user})", user_id=user)
        before = _results(proxy, token, users)
    finally:
        server.stop()  # the lifespan writes the snapshots
    snapshots = sorted(path.name for path in (tmp_path / "index").iterdir())
    assert snapshots == sorted(f"{Scope(passthrough_tenant(token), u).key}.faiss" for u in users)
    assert all(user not in name for name in snapshots for user in users)
    assert any(before) and all(rows for rows in before)

    caplog.set_level(logging.INFO, logger="memproxy.index.manager")
    server, proxy = start_proxy(settings)
    try:
        assert _results(proxy, token, users) == before
    finally:
        server.stop()
    assert "rebuilt index" not in caplog.text  # loaded from the snapshots, not rebuilt

    damaged = tmp_path / "index" / snapshots[0]
    data = bytearray(damaged.read_bytes())
    for offset in range(len(data) // 2, len(data) // 2 + 16):
        data[offset] ^= 0xFF
    damaged.write_bytes(bytes(data))
    caplog.clear()
    server, proxy = start_proxy(settings)
    try:
        assert _results(proxy, token, users) == before
    finally:
        server.stop()
    assert "unusable snapshot" in caplog.text and caplog.text.count("rebuilt index") == 1
    assert damaged.read_bytes() != bytes(data)  # rewritten with a sound snapshot


# --- guards on manual writes --------------------------------------------------------------


def _refusals(proxy: Proxy, reason: str) -> float:
    text = httpx.get(proxy.url + "/metrics", timeout=10).text
    line = f'memproxy_memory_refusals_total{{reason="{reason}",source="manual"}}'
    return sum(float(row.split()[-1]) for row in text.splitlines() if row.startswith(line))


def test_secrets_and_over_long_texts_are_refused_on_every_manual_write_path(
    proxy: Proxy, http: httpx.Client
) -> None:
    user = uid()
    before = _refusals(proxy, "secret")
    error = assert_error(
        http.post("/v1/memories", json={"user_id": user, "text": "My bank PIN is 4921"}), 400, "text"
    )
    assert error["code"] == "secret_refused" and "4921" not in error["message"]
    kept = add(http, "Banks with a local credit union", user_id=user)
    patched = http.patch(
        f"/v1/memories/{kept['id']}", json={"text": "API key sk-proj-abcdefghijklmnopqrstuvwx1234"}
    )
    assert assert_error(patched, 400, "text")["code"] == "secret_refused"
    line = json.dumps({"text": "Card 4111 1111 1111 1111", "user_id": user})
    imported = assert_error(http.post("/v1/memories/import", content=line.encode()), 400, "line 1")
    assert imported["code"] == "secret_refused"
    too_long = http.post("/v1/memories", json={"user_id": user, "text": "a fact " * 60})
    assert assert_error(too_long, 400, "text")["code"] == "memory_too_long"
    assert [m["text"] for m in list_all(http, user_id=user)] == ["Banks with a local credit union"]
    assert _refusals(proxy, "secret") == before + 3
