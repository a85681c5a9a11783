"""``api.pipeline``: what every surface's turn shares, seen through real HTTP (the surfaces' own
suites cover each shape; ``test_cross_surface.py`` the memory shared between them)."""

from __future__ import annotations

import httpx

from tests.support.memory_flow import unique
from tests.support.proxy import Proxy
from tests.support.surfaces import remember


def test_a_scope_header_sent_twice_counts_its_first_value(proxy: Proxy) -> None:
    """As on the memory routes: a gateway that appends a second value cannot widen or move the scope."""
    first, second = unique("u"), unique("u")
    remember(proxy, "User grows tomatoes on the balcony", first)
    body = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "What do I grow on the balcony?"}],
    }
    for order, expected in (((first, second), "1"), ((second, first), "0")):
        headers = httpx.Headers(
            [("Authorization", "Bearer sk-test-user-a"), *[("X-Memproxy-User-Id", u) for u in order]]
        )
        with httpx.Client(base_url=proxy.url, timeout=30) as http:
            response = http.post("/v1/chat/completions", json=body, headers=headers)
        assert response.status_code == 200
        assert response.headers["x-memproxy-recalled"] == expected


def test_each_surfaces_operation_id_is_stable(proxy: Proxy) -> None:
    """Generated clients name their methods after these; they are the ids the routes had before the redesign."""
    with proxy.http() as http:
        paths = http.get("/openapi.json").json()["paths"]
    ids = {path: paths[path]["post"]["operationId"] for path in
           ("/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/completions")}  # fmt: skip
    assert ids == {
        "/v1/chat/completions": "chat_completions_v1_chat_completions_post",
        "/v1/responses": "create_response_v1_responses_post",
        "/v1/messages": "create_message_v1_messages_post",
        "/v1/completions": "create_completion_v1_completions_post",
    }


def test_before_start_up_every_surface_answers_not_ready() -> None:
    from fastapi.testclient import TestClient

    from memproxy.api.app import create_app
    from memproxy.config import settings_from_dict

    app = create_app(settings_from_dict({"storage": {"data_dir": "/nonexistent-not-started"}}))
    client = TestClient(app)  # no ``with``: the lifespan never runs
    for path in ("/v1/chat/completions", "/v1/responses", "/v1/completions"):
        response = client.post(path, json={}, headers={"Authorization": "Bearer sk-a"})
        assert response.status_code == 503 and response.json()["error"]["code"] == "not_ready", path
    response = client.post("/v1/messages", json={}, headers={"x-api-key": "sk-a"})
    assert response.status_code == 503  # in Anthropic's shape, as every error on that route
    assert response.json() == {
        "type": "error",
        "error": {"type": "api_error", "message": "memproxy is starting up"},
    }
