"""Small error-shape gaps (issue 27 finding 7): every error carries a code, is written the same
way byte for byte, and the missing-key message on /v1/messages names the header Anthropic's
SDKs send."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from tests.support.proxy import Proxy


def _compact(body: bytes) -> bytes:
    """``body`` re-rendered as every error body is (errors.render_error / JSONResponse)."""
    return json.dumps(json.loads(body), ensure_ascii=False, separators=(",", ":")).encode()


def test_messages_without_a_key_say_how_to_send_x_api_key(proxy: Proxy) -> None:
    response = httpx.post(proxy.url + "/v1/messages", timeout=10,
                          json={"model": "claude-3-5-haiku-latest", "max_tokens": 8,
                                "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert response.status_code == 401
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
    assert "x-api-key" in body["error"]["message"] and "Authorization: Bearer" in body["error"]["message"]
    # Chat keeps OpenAI's wording (its SDK sends Authorization).
    chat = httpx.post(proxy.url + "/v1/chat/completions", json={}, timeout=10).json()["error"]
    assert chat["code"] == "missing_api_key" and "x-api-key" not in chat["message"]


def test_a_405_and_a_404_carry_a_code_and_the_405_says_what_is_allowed(proxy: Proxy) -> None:
    with proxy.http() as http:
        wrong = http.put("/v1/memories", json={})
        unknown = http.get("/v1/nothing-here")
    assert wrong.status_code == 405
    error = wrong.json()["error"]
    assert error["code"] == "method_not_allowed" and error["type"] == "invalid_request_error"
    assert wrong.headers["allow"] == "GET, POST, DELETE" and "GET, POST, DELETE" in error["message"]
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_route"


@pytest.mark.parametrize("expires_at", ["next tuesday", True, [2030], 1e300])
def test_a_bad_expires_at_carries_a_code(proxy: Proxy, expires_at: object) -> None:
    with proxy.http(f"sk-shape-{uuid.uuid4().hex}") as http:
        response = http.post(
            "/v1/memories", json={"user_id": "u", "text": "a fact", "expires_at": expires_at}
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "expires_at" and error["code"] in ("invalid_value", "invalid_type")


def test_the_431_body_is_written_like_every_other_error_body(proxy: Proxy) -> None:
    with proxy.http() as http:
        too_big = http.get("/healthz", headers={"X-Big": "b" * proxy.settings.server.max_header_bytes})
    with proxy.http() as http:
        unknown = http.get("/v1/nothing-here")
    assert too_big.status_code == 431 and unknown.status_code == 404
    for response in (too_big, unknown):
        assert response.content == _compact(response.content)  # compact separators, UTF-8, no NaN
        assert list(response.json()["error"]) == ["message", "type", "param", "code"]
    assert too_big.headers["content-type"] == unknown.headers["content-type"] == "application/json"
