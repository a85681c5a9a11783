"""Shared by the routing suites (issue 24 findings 1-3): each attack goes through a real
memproxy, inside ``sandbox.loopback_only``, and is judged by what the client got and by
what the traps (and the fake provider) received.

Every fixture here is module-scoped and built inside the module's own sandbox (never the
session servers of ``tests/conftest.py``, which live on the machine's network).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from memproxy.testing.background_server import BackgroundServer
from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.security.sandbox import Trap

OPENAI_ERROR_KEYS = {"message", "type", "param", "code"}
OPERATOR_KEY = "sk-operator-secret-do-not-leak-0001"
CALLER_KEY = "sk-callers-own-key-0002"
MESSAGES = [{"role": "user", "content": "hello"}]


@contextmanager
def fake_upstream() -> Iterator[tuple[ScriptedUpstream, str]]:
    """The scripted provider, on a free loopback port of the current namespace."""
    fake = ScriptedUpstream()
    with BackgroundServer(fake.app) as server:
        yield fake, server.url + "/v1"


def attack(http: httpx.Client, surface: str, model: str) -> httpx.Response:
    """``model`` sent the way ``surface`` takes one (a ``-stream`` surface asks for a stream)."""
    stream = surface.endswith("-stream")
    kind = surface.removesuffix("-stream")
    body: dict[str, Any]
    if kind == "chat":
        body = {"model": model, "messages": MESSAGES, "stream": stream}
        return http.post("/v1/chat/completions", json=body)
    if kind == "responses":
        return http.post("/v1/responses", json={"model": model, "input": "hello", "stream": stream})
    if kind == "messages":
        body = {"model": model, "max_tokens": 16, "messages": MESSAGES, "stream": stream}
        return http.post("/v1/messages", json=body)
    if kind == "completions":
        return http.post("/v1/completions", json={"model": model, "prompt": "hello", "stream": stream})
    if kind == "embeddings":
        return http.post("/v1/embeddings", json={"model": model, "input": "hello"})
    if kind == "model":
        return http.get(f"/v1/models/{model}")
    raise AssertionError(f"unknown surface {surface}")


def assert_refused(response: httpx.Response, surface: str, code: str = "model_not_found") -> str:
    """A 400 in the surface's error shape (Anthropic's on ``/v1/messages``, OpenAI's elsewhere)."""
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    if surface.startswith("messages"):
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
        return str(body["error"]["message"])
    error = body["error"]
    assert set(error) == OPENAI_ERROR_KEYS, body
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", "model", code), body
    assert isinstance(error["message"], str) and error["message"]
    return error["message"]


def received(traps: list[Trap], fake: ScriptedUpstream | None = None) -> list[str]:
    """Everything the traps (and ``fake``) were sent, as ``trap port: METHOD path``."""
    seen = [f"{trap.name or trap.port}: {s.method} {s.path}" for trap in traps for s in trap.seen()]
    if fake is not None:
        seen += [f"fake provider: {r.path}" for r in fake.requests]
    return seen


def carried(traps: list[Trap], key: str) -> bool:
    return any(key in " ".join(s.headers.values()) for trap in traps for s in trap.seen())
