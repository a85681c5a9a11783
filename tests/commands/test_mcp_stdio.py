"""``memproxy mcp`` (stdio) as a host launches it (docs/mcp.md's Claude Desktop / Cursor entry:
``memproxy mcp --url http://127.0.0.1:PORT/mcp --user-id …`` with ``MEMPROXY_API_KEY``), driven by
the official MCP stdio client and by raw pipes, against the session's memproxy on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.support.proxy import Proxy

pytestmark = pytest.mark.slow  # starts `memproxy mcp` processes
MEMPROXY = str(Path(sys.executable).parent / "memproxy")
TOKEN = "sk-mcp-stdio-tenant"


def uid() -> str:
    return f"u-{uuid.uuid4().hex[:10]}"


def host_entry(proxy: Proxy, user: str, token: str = TOKEN) -> StdioServerParameters:
    """docs/mcp.md's ``mcpServers`` entry, as a host would run it."""
    return StdioServerParameters(
        command=MEMPROXY,
        args=["mcp", "--url", f"{proxy.url}/mcp", "--user-id", user],
        env={"MEMPROXY_API_KEY": token},
    )


def rest_texts(proxy: Proxy, user: str) -> list[str]:
    with proxy.http(TOKEN) as http:
        response = http.get("/v1/memories", params={"user_id": user})
    assert response.status_code == 200
    return [m["text"] for m in response.json()["data"]]


def test_the_stdio_bridge_serves_the_tools_of_the_running_server(proxy: Proxy) -> None:
    user = uid()

    async def run() -> tuple[types.InitializeResult, list[str], types.CallToolResult, types.CallToolResult]:
        async with (
            stdio_client(host_entry(proxy, user)) as (read, write),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            tools = [tool.name for tool in (await session.list_tools()).tools]
            added = await session.call_tool("add_memory", {"text": "Grows tomatoes on the balcony"})
            found = await session.call_tool("search_memories", {"query": "tomatoes"})
            return init, tools, added, found

    init, tools, added, found = asyncio.run(run())
    assert init.server_info.name == "memproxy"
    assert "search_memories" in tools and "forget_scope" in tools
    assert not added.is_error and added.structured_content is not None
    assert added.structured_content["user_id"] == user
    assert found.structured_content is not None
    assert [m["text"] for m in found.structured_content["data"]] == ["Grows tomatoes on the balcony"]
    # One store: the running server holds what the bridge added.
    assert rest_texts(proxy, user) == ["Grows tomatoes on the balcony"]


def jsonrpc(message_id: int | None, method: str, params: dict[str, Any] | None = None) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if message_id is not None:
        message["id"] = message_id
    if params is not None:
        message["params"] = params
    return json.dumps(message) + "\n"


def test_stdout_carries_protocol_only_and_the_bridge_ends_with_stdin(proxy: Proxy) -> None:
    user = uid()
    lines = [
        jsonrpc(
            1,
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "pipe", "version": "0"},
            },
        ),
        jsonrpc(None, "notifications/initialized"),
        jsonrpc(2, "tools/call", {"name": "add_memory", "arguments": {"text": "password: hunter2hunter2"}}),
        jsonrpc(3, "tools/list"),
    ]
    env = {**os.environ, "MEMPROXY_API_KEY": TOKEN, "MEMPROXY_USER_ID": user}
    with subprocess.Popen([MEMPROXY, "mcp", "--url", proxy.url], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True) as process:  # fmt: skip
        assert process.stdin is not None and process.stdout is not None
        answers: dict[int, dict[str, Any]] = {}
        for line in lines:
            process.stdin.write(line)
            process.stdin.flush()
            if '"id"' in line:
                answer = json.loads(process.stdout.readline())  # every stdout line is a JSON-RPC message
                assert answer["jsonrpc"] == "2.0"
                answers[answer["id"]] = answer
        process.stdin.close()
        rest = process.stdout.read()
        assert process.wait(timeout=30) == 0
    assert rest == ""
    assert answers[1]["result"]["serverInfo"]["name"] == "memproxy"
    assert answers[2]["result"]["isError"] is True
    assert "secret" in answers[2]["result"]["content"][0]["text"]
    assert len(answers[3]["result"]["tools"]) == 9
    assert rest_texts(proxy, user) == []


def test_without_a_key_it_says_so_on_stderr_and_writes_nothing_to_stdout(proxy: Proxy) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MEMPROXY_API_KEY"}
    done = subprocess.run([MEMPROXY, "mcp", "--url", f"{proxy.url}/mcp"], input="", capture_output=True,
                          text=True, env=env, timeout=30)  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    assert "MEMPROXY_API_KEY" in done.stderr


def test_a_wrong_key_is_an_error_answer_not_a_crash(keys_proxy: Proxy) -> None:
    async def run() -> Exception:
        params = host_entry(keys_proxy, uid(), token="mp-not-a-configured-key-0001")
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            with pytest.raises(Exception) as caught:
                await session.initialize()
            return caught.value

    error = asyncio.run(run())
    assert "error" in str(error).lower()
    with httpx.Client(base_url=keys_proxy.url, timeout=10) as http:
        assert http.post("/mcp", json={}).status_code == 401
