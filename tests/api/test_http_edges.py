"""Edges of the HTTP surface: model retrieval, trailing slashes, oversized headers, metadata-only
PATCH history."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import openai
import pytest

from tests.support.proxy import Proxy


def test_models_retrieve_is_proxied(proxy: Proxy) -> None:
    client = proxy.client()
    model = client.models.retrieve("gpt-4o-mini")
    assert model.id == "gpt-4o-mini" and model.owned_by == "scripted"
    alias = client.models.retrieve("smart")  # an upstream.models alias answers itself
    assert alias.id == "smart" and alias.owned_by == "memproxy"
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("no-such-model")
    assert caught.value.status_code == 404
    assert caught.value.body["code"] == "model_not_found"  # type: ignore[index]  # the provider's own error


def test_a_trailing_slash_is_served_not_redirected(proxy: Proxy) -> None:
    body: dict[str, Any] = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "slash?"}]}
    with proxy.http() as http:
        chat = http.post("/v1/chat/completions/", json=body)
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["content"] == "You said: slash?"
        listed = http.get("/v1/memories/", params={"user_id": "nobody"})
        assert listed.status_code == 200 and listed.json()["data"] == []
        unknown = http.get("/v1/nothing-here/")
        assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"
    sdk = openai.OpenAI(base_url=proxy.v1 + "/", api_key="sk-test-user-a", max_retries=0)
    assert sdk.chat.completions.create(**body).choices[0].message.content == "You said: slash?"


def test_a_one_megabyte_header_gets_431(proxy: Proxy) -> None:
    with proxy.http() as http:
        response = http.get("/v1/models", headers={"X-Big": "a" * 1_000_000})
        assert response.status_code == 431
        error = response.json()["error"]
        assert error["code"] == "request_headers_too_large" and "max_header_bytes" in error["message"]
        # just over the cap in one small request (parsed in one piece): 431 as well
        limit = proxy.settings.server.max_header_bytes
        assert http.get("/healthz", headers={"X-Big": "b" * limit}).status_code == 431
    with proxy.http() as http:  # a fresh connection is served normally; big bodies are not headers
        assert http.get("/healthz", headers={"X-Fine": "c" * 8000}).status_code == 200
        big_body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "d" * 600_000}]}
        assert http.post("/v1/chat/completions", json=big_body).status_code == 200


def test_a_metadata_only_patch_records_no_text_update(proxy: Proxy) -> None:
    with proxy.http(f"sk-edges-{uuid.uuid4().hex[:8]}") as http:
        memory = http.post("/v1/memories", json={"user_id": "u", "text": "Owns a bike"}).json()
        patched = http.patch(f"/v1/memories/{memory['id']}", json={"metadata": {"verified": True}})
        assert patched.status_code == 200 and patched.json()["metadata"] == {"verified": True}
        assert patched.json()["updated_at"] >= memory["updated_at"]
        http.patch(f"/v1/memories/{memory['id']}", json={"text": "Owns two bikes"})
        history = http.get(f"/v1/memories/{memory['id']}/history").json()["data"]
    assert [(h["event"], h["old_text"], h["new_text"]) for h in history] == [
        ("ADD", None, "Owns a bike"),
        ("UPDATE", "Owns a bike", "Owns two bikes"),
    ]


def test_search_still_finds_a_memory_after_a_metadata_patch(proxy: Proxy) -> None:
    with proxy.http(f"sk-edges-{uuid.uuid4().hex[:8]}") as http:
        memory = http.post("/v1/memories", json={"user_id": "u", "text": "Speaks Finnish"}).json()
        http.patch(f"/v1/memories/{memory['id']}", json={"metadata": {"lang": "fi"}})
        found = http.post("/v1/memories/search", json={"query": "Finnish", "user_id": "u"}).json()["data"]
    assert [(m["id"], m["metadata"]) for m in found] == [(memory["id"], {"lang": "fi"})]


def test_the_431_arrives_while_the_client_is_still_sending(proxy: Proxy) -> None:
    """The 431 arrives even while the client is still sending (the server half-closes)."""
    with httpx.Client(base_url=proxy.url, timeout=30) as http:
        response = http.post("/v1/embeddings", headers={"X-Big": "e" * 4_000_000}, content=b"{}")
    assert response.status_code == 431
