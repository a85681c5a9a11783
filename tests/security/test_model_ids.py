"""Finding 2 (issue 24): ``GET /v1/models/{id}`` pasted the id into the provider's URL, so
``..%2F..%2Fanything`` became a GET of ``/anything`` on the provider's host with the
operator's key (``a%2F..%2F..%2F..%2Fadmin`` → ``/admin``, ``%2e%2e%2fx`` → ``/v1/x``).

Now an id with a ``.``/``..`` segment, a ``%`` (a percent-encoded separator, double
encoding), a backslash, ``?`` or ``#`` is a 400 ``invalid_model_id`` and reaches no URL; the
relay refuses a dot segment in any path (stored Responses), and a LiteLLM response id whose
inner id would move the path is refused too. Requests are sent with ``http.client``, which
sends the path as written (httpx would normalise dot segments before memproxy saw them).
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from tests.security.routing import OPENAI_ERROR_KEYS, OPERATOR_KEY, received
from tests.security.sandbox import Trap, loopback_only
from tests.support.proxy import KEYS, Proxy, proxy_settings, start_proxy

TRAVERSALS = [
    "/v1/models/..%2F..%2Fanything",
    "/v1/models/a%2F..%2F..%2F..%2Fadmin",
    "/v1/models/%2e%2e%2fx",
    "/v1/models/%2E%2E/%2E%2E/admin",
    "/v1/models/..%5C..%5Cadmin",
    "/v1/models/%252e%252e%252fadmin",  # double-encoded: decoded once it still holds '%'
    "/v1/models/x%2F.%2Fy",
    "/v1/models/gpt-4o%3F.%2F..",
    "/models/..%2F..%2Fanything",
]


@dataclass
class World:
    provider: Trap
    proxy: Proxy

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        host, port = self.proxy.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            connection.request("GET", path, headers={"Authorization": f"Bearer {KEYS[0]['key']}"})
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with loopback_only(), ExitStack() as stack:
        provider = Trap(name="provider")  # upstream.api_base: where the key legitimately goes
        stack.callback(provider.close)
        settings = proxy_settings(
            provider.url + "/v1", tmp_path_factory.mktemp("model-ids"), server={"port": 0},
            auth={"mode": "keys", "keys": KEYS}, upstream={"api_key": OPERATOR_KEY},
        )  # fmt: skip
        server, handle = start_proxy(settings)
        stack.callback(server.stop)
        yield World(provider, handle)


def assert_invalid(status: int, body: dict[str, Any], param: str | None, code: str) -> None:
    assert status == 400, body
    error = body["error"]
    assert set(error) == OPENAI_ERROR_KEYS, body
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code), body


@pytest.mark.parametrize("path", TRAVERSALS)
def test_a_model_id_cannot_move_the_providers_path(world: World, path: str) -> None:
    world.provider.clear()
    status, body = world.get(path)
    assert_invalid(status, body, "model", "invalid_model_id")
    assert received([world.provider]) == []


def test_ordinary_ids_still_reach_the_provider_with_its_key(world: World) -> None:
    """The control: the same server forwards a plain id (with '/' and '.') as it always did."""
    world.provider.clear()
    assert world.get("/v1/models/gpt-4o")[0] == 200
    assert world.get("/v1/models/org/model-1.5:q4")[0] == 200
    seen = world.provider.seen()
    assert [s.path for s in seen] == ["/v1/models/gpt-4o", "/v1/models/org/model-1.5:q4"]
    assert {s.headers["authorization"] for s in seen} == {f"Bearer {OPERATOR_KEY}"}


def test_a_stored_response_id_cannot_move_the_providers_path(world: World) -> None:
    world.provider.clear()
    assert_invalid(*world.get("/v1/responses/%2E%2E"), None, "invalid_id")  # the relay's guard
    inner = b"litellm:custom_llm_provider:openai;model_id:x;response_id:../../admin"
    crafted = "resp_" + base64.b64encode(inner).decode()  # LiteLLM decodes it and trusts it
    assert_invalid(*world.get(f"/v1/responses/{crafted}"), "response_id", "invalid_response_id")
    assert received([world.provider]) == []
