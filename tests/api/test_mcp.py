"""/mcp through the official MCP client (Streamable HTTP + ClientSession) against memproxy under
uvicorn on 127.0.0.1: the tools, their refusals, the other door (REST and chat) onto the same
store, tenant isolation, and the HTTP-level refusals (credential, Origin, malformed JSON-RPC)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from memproxy.api.mcp_server import origin_allowed
from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.support.memory_flow import wait_job
from tests.support.proxy import Proxy

T = TypeVar("T")
TOKEN = "sk-mcp-tenant-a"
OTHER_TOKEN = "sk-mcp-tenant-b"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "raw", "version": "0"}}}  # fmt: skip


def uid(prefix: str = "u") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def headers_for(user: str | None, token: str | None = TOKEN, **extra: str) -> dict[str, str]:
    """What a host's MCP server config sends (docs/mcp.md: Authorization + X-Memproxy-User-Id)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if user is not None:
        headers["X-Memproxy-User-Id"] = user
    return {**headers, **extra}


@asynccontextmanager
async def session(proxy: Proxy, headers: dict[str, str]) -> AsyncIterator[ClientSession]:
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(proxy.url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


def with_session(proxy: Proxy, headers: dict[str, str], work: Callable[[ClientSession], Awaitable[T]]) -> T:
    async def run() -> T:
        async with session(proxy, headers) as client:
            return await work(client)

    return asyncio.run(run())


def call(
    proxy: Proxy, user: str | None, name: str, args: dict[str, Any], token: str = TOKEN
) -> types.CallToolResult:
    return with_session(proxy, headers_for(user, token), lambda c: c.call_tool(name, args))


def body(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    # The text content is the same JSON, for hosts that show only text.
    assert json.loads(text(result)) == result.structured_content
    content: dict[str, Any] = result.structured_content
    return content


def text(result: types.CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, types.TextContent)
    return first.text


def refused(result: types.CallToolResult, code: str) -> str:
    assert result.is_error, result
    assert result.structured_content is not None
    assert result.structured_content["error"]["code"] == code, result.structured_content
    return text(result)


def rest(proxy: Proxy, token: str = TOKEN) -> httpx.Client:
    return proxy.http(token)


def rest_memories(proxy: Proxy, user: str, token: str = TOKEN) -> list[dict[str, Any]]:
    with rest(proxy, token) as http:
        response = http.get("/v1/memories", params={"user_id": user})
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


# --- the handshake and the tool list ------------------------------------------------------


def test_initialize_and_tools_list_with_schemas_and_honest_hints(proxy: Proxy) -> None:
    async def work(client: ClientSession) -> tuple[types.InitializeResult, types.ListToolsResult]:
        return await client.initialize(), await client.list_tools()

    init, listed = with_session(proxy, headers_for(uid()), work)
    assert init.server_info.name == "memproxy"
    assert init.capabilities.tools is not None
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == {"search_memories", "add_memory", "remember_conversation", "list_memories",
                          "get_memory", "update_memory", "delete_memory", "memory_history", "forget_scope"}  # fmt: skip
    for tool in tools.values():
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False
        assert tool.description
        assert tool.annotations is not None and tool.annotations.open_world_hint is False
    assert tools["search_memories"].input_schema["required"] == ["query"]
    assert (
        tools["add_memory"].input_schema["properties"]["text"]["maxLength"] == proxy.settings.memory.max_chars
    )
    hints = {name: (t.annotations.read_only_hint, t.annotations.destructive_hint)  # type: ignore[union-attr]
             for name, t in tools.items()}  # fmt: skip
    for name in ("search_memories", "list_memories", "get_memory", "memory_history"):
        assert hints[name] == (True, False), name
    for name in ("add_memory", "remember_conversation"):
        assert hints[name] == (False, False), name
    for name in ("update_memory", "delete_memory", "forget_scope"):
        assert hints[name] == (False, True), name


# --- every tool's happy path --------------------------------------------------------------


def test_every_tool_on_one_memory_and_its_scope(proxy: Proxy) -> None:
    user = uid()

    async def work(c: ClientSession) -> dict[str, Any]:
        added = body(await c.call_tool("add_memory", {"text": "Plays the cello in an orchestra",
                                                      "metadata": {"from": "mcp"}}))  # fmt: skip
        second = body(await c.call_tool("add_memory", {"text": "Keeps bees on the roof",
                                                       "expires_at": "2099-01-01T00:00:00Z"}))  # fmt: skip
        got = body(await c.call_tool("get_memory", {"id": added["id"]}))
        updated = body(await c.call_tool("update_memory", {"id": added["id"], "text": "Plays the viola now"}))
        history = body(await c.call_tool("memory_history", {"id": added["id"]}))
        found = body(await c.call_tool("search_memories", {"query": "viola", "top_k": 5, "min_score": 0}))
        page1 = body(await c.call_tool("list_memories", {"limit": 1}))
        page2 = body(await c.call_tool("list_memories", {"limit": 1, "cursor": page1["next_cursor"]}))
        job = body(await c.call_tool("remember_conversation", {"messages": [
            {"role": "system", "content": "be nice"},
            {"role": "user", "content": "I moved to Porto last month"},
            {"role": "assistant", "content": "Nice, enjoy Porto!"}]}))  # fmt: skip
        deleted = body(await c.call_tool("delete_memory", {"id": second["id"]}))
        gone = await c.call_tool("get_memory", {"id": second["id"]})
        return {"added": added, "second": second, "got": got, "updated": updated, "history": history,
                "found": found, "pages": (page1, page2), "job": job, "deleted": deleted, "gone": gone}  # fmt: skip

    r = with_session(proxy, headers_for(user), work)
    assert r["added"]["user_id"] == user and r["added"]["source"] == "manual"
    assert r["added"]["metadata"] == {"from": "mcp"}
    assert r["second"]["expires_at"].startswith("2099-01-01T00:00:00")
    assert r["got"] == r["added"]
    assert r["updated"]["text"] == "Plays the viola now"
    events = r["history"]["data"]
    assert [e["event"] for e in events] == ["ADD", "UPDATE"], events
    assert events[1]["old_text"] == "Plays the cello in an orchestra"
    assert events[1]["new_text"] == "Plays the viola now"
    assert r["found"]["data"][0]["id"] == r["added"]["id"]
    assert 0 <= r["found"]["data"][0]["score"] <= 1
    page1, page2 = r["pages"]
    assert len(page1["data"]) == 1 and len(page2["data"]) == 1
    assert {page1["data"][0]["id"], page2["data"][0]["id"]} == {r["added"]["id"], r["second"]["id"]}
    assert r["job"]["object"] == "memproxy.job" and r["job"]["status"] == "pending"
    with rest(proxy) as http:
        job = http.get(f"/v1/jobs/{r['job']['job_id']}")
    assert job.status_code == 200, job.text
    assert r["deleted"] == {"id": r["second"]["id"], "object": "memory.deleted", "deleted": True}
    refused(r["gone"], "not_found")
    # The queued conversation is extracted as a captured turn would be, into the same scope.
    wait_job(proxy.url, r["job"]["job_id"], token=TOKEN)
    # The other door sees the same store: the updated memory and what extraction added.
    left = rest_memories(proxy, user)
    assert {m["source"]: m["text"] for m in left if m["source"] == "manual"} == {
        "manual": "Plays the viola now"
    }
    assert any(m["source"] == "extracted" and "Porto" in m["text"] for m in left), left

    forgot = body(call(proxy, user, "forget_scope", {"confirm": True}))
    assert forgot["object"] == "memproxy.forget" and forgot["user_id"] == user
    assert forgot["deleted"]["memories"] == len(left)
    assert forgot["deleted"]["jobs"] == 1
    assert rest_memories(proxy, user) == []


# --- refusals -----------------------------------------------------------------------------


def test_a_secret_is_refused_with_a_reason_and_nothing_is_stored(proxy: Proxy) -> None:
    user = uid()
    result = call(proxy, user, "add_memory", {"text": "My password is Tr0ub4dor&3xyz"})
    message = refused(result, "secret_refused")
    assert "secret" in message and "Tr0ub4dor" not in message
    assert rest_memories(proxy, user) == []


def test_bad_arguments_are_refused_by_the_input_schema(proxy: Proxy) -> None:
    user = uid()
    too_long = "word " * proxy.settings.memory.max_chars

    async def work(c: ClientSession) -> list[types.CallToolResult]:
        return [
            await c.call_tool("add_memory", {"text": too_long}),
            await c.call_tool("add_memory", {"text": 42}),
            await c.call_tool("add_memory", {"text": "ok", "colour": "red"}),
            await c.call_tool("search_memories", {"query": "x", "top_k": "ten"}),
            await c.call_tool("search_memories", {"query": "x", "top_k": 1000}),
            await c.call_tool("search_memories", {}),
            await c.call_tool("list_memories", {"limit": 0}),
            await c.call_tool("remember_conversation", {"messages": []}),
            await c.call_tool("forget_scope", {}),
            await c.call_tool("forget_scope", {"confirm": False}),
        ]

    results = with_session(proxy, headers_for(user), work)
    for result in results:
        message = refused(result, "invalid_arguments")
        assert message.startswith("Invalid arguments for "), message
    assert "text" in text(results[0]) and "too long" in text(results[0])
    assert "'colour'" in text(results[2])
    assert "top_k" in text(results[3])
    assert "'query' is a required property" in text(results[5])
    assert rest_memories(proxy, user) == []


def test_an_unknown_tool_is_a_protocol_error_and_the_session_goes_on(proxy: Proxy) -> None:
    async def work(c: ClientSession) -> tuple[MCPError, types.ListToolsResult]:
        with pytest.raises(MCPError) as caught:
            await c.call_tool("delete_all_memories", {})
        return caught.value, await c.list_tools()

    error, listed = with_session(proxy, headers_for(uid()), work)
    assert error.error.code == types.INVALID_PARAMS
    assert "Unknown tool: 'delete_all_memories'" in error.error.message
    assert len(listed.tools) == 9


def test_operation_refusals_say_what_to_do(proxy: Proxy) -> None:
    user = uid()

    async def work(c: ClientSession) -> list[types.CallToolResult]:
        first = body(await c.call_tool("add_memory", {"text": "Owns a red kayak"}))
        return [
            await c.call_tool("add_memory", {"text": "Owns a red kayak"}),
            await c.call_tool("get_memory", {"id": "0" * 32}),
            await c.call_tool("update_memory", {"id": first["id"]}),
            await c.call_tool("add_memory", {"text": "x y z", "expires_at": "next tuesday"}),
        ]

    duplicate, missing, nothing, when = with_session(proxy, headers_for(user), work)
    assert "update_memory" in refused(duplicate, "duplicate_memory")
    assert "search_memories or list_memories" in refused(missing, "not_found")
    assert "Nothing to update" in refused(nothing, "invalid_value")
    assert "ISO-8601" in refused(when, "invalid_value")
    # Without a user header and without user_id, the message names the header to configure.
    message = refused(call(proxy, None, "add_memory", {"text": "Likes chess"}), "missing_required_parameter")
    assert "X-Memproxy-User-Id" in message


def test_a_tool_argument_narrows_the_scope_but_never_replaces_the_pinned_one(proxy: Proxy) -> None:
    pinned, other = uid(), uid()
    # No user header: user_id picks the scope (inside the caller's tenant).
    added = body(call(proxy, None, "add_memory", {"text": "Collects stamps", "user_id": other}))
    assert added["user_id"] == other
    # A header pins the scope: another user_id is refused, and that user's memory is out of reach.
    message = refused(call(proxy, pinned, "search_memories", {"query": "stamps", "user_id": other}),
                      "scope_pinned")  # fmt: skip
    assert pinned in message and "X-Memproxy-User-Id" in message
    refused(call(proxy, pinned, "get_memory", {"id": added["id"]}), "not_found")
    refused(call(proxy, pinned, "delete_memory", {"id": added["id"]}), "not_found")
    assert [m["id"] for m in rest_memories(proxy, other)] == [added["id"]]
    # The same value as the header is accepted, and so is an agent id the headers leave open.
    added = body(
        call(proxy, pinned, "add_memory", {"text": "Reads sci-fi", "user_id": pinned, "agent_id": "bot"})
    )
    assert (added["user_id"], added["agent_id"]) == (pinned, "bot")


# --- the other door -----------------------------------------------------------------------


def test_a_memory_added_through_mcp_is_recalled_in_the_users_next_chat(
    proxy: Proxy, fake: ScriptedUpstream
) -> None:
    user, marker = uid(), uid("oolong")
    body(call(proxy, user, "add_memory", {"text": f"Favourite tea is {marker} oolong"}))
    with rest(proxy) as http:
        response = http.post("/v1/chat/completions", headers={"X-Memproxy-User-Id": user},
                             json={"model": "gpt-4o-mini", "messages": [
                                 {"role": "user", "content": "Which oolong tea is my favourite?"}]})  # fmt: skip
    assert response.status_code == 200, response.text
    assert response.headers["x-memproxy-recalled"] == "1"
    assert marker in json.dumps(fake.find_chat("Which oolong tea is my favourite?").body["messages"])


def test_a_fact_added_through_rest_is_found_by_mcp_search(proxy: Proxy) -> None:
    user = uid()
    with rest(proxy) as http:
        created = http.post("/v1/memories", json={"text": "Allergic to shellfish", "user_id": user})
    assert created.status_code == 201, created.text
    found = body(call(proxy, user, "search_memories", {"query": "shellfish allergy"}))
    assert [m["id"] for m in found["data"]] == [created.json()["id"]]


def test_a_delete_through_mcp_is_gone_from_rest_and_from_recall(proxy: Proxy, fake: ScriptedUpstream) -> None:
    user, marker = uid(), uid("paddle")
    added = body(call(proxy, user, "add_memory", {"text": f"Paddles a {marker} canoe"}))
    body(call(proxy, user, "delete_memory", {"id": added["id"]}))
    assert rest_memories(proxy, user) == []
    with rest(proxy) as http:
        response = http.get(f"/v1/memories/{added['id']}")
        assert response.status_code == 404
        chat = http.post("/v1/chat/completions", headers={"X-Memproxy-User-Id": user},
                         json={"model": "gpt-4o-mini", "messages": [
                             {"role": "user", "content": f"What canoe do I paddle? {marker}"}]})  # fmt: skip
    assert chat.status_code == 200
    assert chat.headers["x-memproxy-recalled"] == "0"


# --- isolation ----------------------------------------------------------------------------


def test_another_tenant_cannot_reach_a_memory_by_id_through_any_tool(proxy: Proxy) -> None:
    user = uid()
    added = body(call(proxy, user, "add_memory", {"text": "Speaks fluent Finnish"}))
    missing = "f" * 32

    async def attempts(c: ClientSession, memory_id: str) -> list[str]:
        results = [
            await c.call_tool("get_memory", {"id": memory_id}),
            await c.call_tool("update_memory", {"id": memory_id, "text": "Speaks no Finnish"}),
            await c.call_tool("delete_memory", {"id": memory_id}),
            await c.call_tool("memory_history", {"id": memory_id}),
        ]
        return [refused(result, "not_found") for result in results]

    # The same user id under another credential: another tenant, the same answers as a missing id.
    theirs = with_session(proxy, headers_for(user, OTHER_TOKEN), lambda c: attempts(c, added["id"]))
    nobody = with_session(proxy, headers_for(user, OTHER_TOKEN), lambda c: attempts(c, missing))
    assert theirs == nobody
    found = body(call(proxy, user, "search_memories", {"query": "Finnish"}, token=OTHER_TOKEN))
    assert found["data"] == []
    # Untouched.
    assert [m["text"] for m in rest_memories(proxy, user)] == ["Speaks fluent Finnish"]


def test_a_session_cannot_be_used_with_another_tenants_credential(proxy: Proxy) -> None:
    with httpx.Client(base_url=proxy.url, timeout=10) as http:
        opened = http.post("/mcp", json=INITIALIZE, headers={**ACCEPT, **headers_for(uid())})
        assert opened.status_code == 200, opened.text
        session_id = opened.headers["mcp-session-id"]
        listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        other = http.post("/mcp", json=listed, headers={**ACCEPT, **headers_for(uid(), OTHER_TOKEN),
                                                       "Mcp-Session-Id": session_id,
                                                       "Mcp-Protocol-Version": "2025-11-25"})  # fmt: skip
    assert other.status_code == 404


# --- refused before MCP -------------------------------------------------------------------


def add_request(user: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "add_memory", "arguments": {"text": "Should never be stored", "user_id": user}}}  # fmt: skip


@pytest.mark.parametrize("authorization", [None, "Basic abc", "Bearer"])
def test_no_credential_is_a_401_before_any_message_and_the_store_is_unchanged(
    proxy: Proxy, authorization: str | None
) -> None:
    user = uid()
    sent = {**ACCEPT, "X-Memproxy-User-Id": user}
    if authorization is not None:
        sent["Authorization"] = authorization
    with httpx.Client(base_url=proxy.url, timeout=10) as http:
        for message in (INITIALIZE, add_request(user)):
            response = http.post("/mcp", json=message, headers=sent)
            assert response.status_code == 401, response.text
            assert response.json()["error"]["type"] == "authentication_error"
            assert "mcp-session-id" not in response.headers
    assert rest_memories(proxy, user) == []


def test_a_foreign_origin_is_a_403_and_the_store_is_unchanged(proxy: Proxy) -> None:
    user = uid()
    with httpx.Client(base_url=proxy.url, timeout=10) as http:
        for message in (INITIALIZE, add_request(user)):
            response = http.post("/mcp", json=message,
                                 headers={**ACCEPT, **headers_for(user), "Origin": "https://evil.example"})  # fmt: skip
            assert response.status_code == 403, response.text
            assert response.json()["error"]["code"] == "origin_not_allowed"
            assert "mcp.allowed_origins" in response.json()["error"]["message"]
        local = http.post("/mcp", json=INITIALIZE,
                          headers={**ACCEPT, **headers_for(user), "Origin": "http://localhost:5173"})  # fmt: skip
    assert local.status_code == 200, local.text
    assert rest_memories(proxy, user) == []


def test_origin_allow_list() -> None:
    allowed = ["https://app.example.com"]
    assert origin_allowed(None, allowed)
    assert origin_allowed("https://app.example.com", allowed)
    assert origin_allowed("http://127.0.0.1:3000", allowed)
    assert origin_allowed("http://[::1]:8080", allowed)
    assert not origin_allowed("https://app.example.com.evil.net", allowed)
    assert not origin_allowed("https://localhost.evil.net", allowed)
    assert not origin_allowed("null", allowed)
    assert not origin_allowed("file://localhost", allowed)


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b'{"jsonrpc": "2.0", "id": 1}',
        b'{"jsonrpc": "1.0", "id": 1, "method": "initialize"}',
        b"[]",
        json.dumps([INITIALIZE] + [{**add_request("batch-user"), "id": n} for n in range(2, 60)]).encode(),
        b'"just a string"',
    ],
)
def test_malformed_json_rpc_is_a_client_error_never_a_5xx(proxy: Proxy, raw: bytes) -> None:
    with httpx.Client(base_url=proxy.url, timeout=10) as http:
        response = http.post("/mcp", content=raw, headers={**ACCEPT, **headers_for("batch-user")})
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert rest_memories(proxy, "batch-user") == []


def test_tool_calls_are_counted_per_tool_in_metrics(proxy: Proxy) -> None:
    user = uid()

    async def work(c: ClientSession) -> None:
        await c.call_tool("list_memories", {})
        await c.call_tool("get_memory", {"id": "nope"})

    with_session(proxy, headers_for(user), work)
    with httpx.Client(base_url=proxy.url, timeout=10) as http:
        metrics = http.get("/metrics").text
    assert 'memproxy_mcp_tool_calls_total{outcome="ok",tool="list_memories"}' in metrics
    assert 'memproxy_mcp_tool_calls_total{outcome="error",tool="get_memory"}' in metrics
    assert 'memproxy_mcp_tool_duration_seconds_count{tool="list_memories"}' in metrics
    # The HTTP requests themselves are counted under their route, as every other route's are.
    assert 'memproxy_requests_total{method="POST",route="/mcp",status="200",streamed="false"}' in metrics
