"""Finding 3 (issue 24): ``llamafile/`` defaults to 127.0.0.1:8080, memproxy itself in the
default configuration, so each such request called memproxy again; 25 stacked prefixes gave
25 nested self-calls (bounded only by the body limit) and filled the relay's pool.

Now memproxy's own address is refused whatever the configuration (even with ``llamafile``
in ``upstream.allow_providers``, where the allow-list lets it through), and an unconfigured
local default is refused anyway. The server under test listens on 127.0.0.1:8080 inside a
loopback-only namespace; its own request counter shows whether it called itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from memproxy.api.app import create_app
from memproxy.api.uvicorn_server import capped_http_protocol
from memproxy.testing.background_server import BackgroundServer
from tests.security.routing import CALLER_KEY, OPERATOR_KEY, assert_refused, attack
from tests.security.sandbox import loopback_only
from tests.support.memory_flow import wait_until
from tests.support.proxy import KEYS, http_client, http_get, proxy_settings

STACKED = "llamafile/" * 25 + "x"
SURFACES = ["chat", "chat-stream", "responses", "messages", "completions", "embeddings"]
CONFIGS: dict[str, dict[str, Any]] = {
    "passthrough, llamafile allowed": {"auth": {"mode": "passthrough"},
                                       "upstream": {"api_base": None, "allow_providers": ["llamafile"]}},
    "keys, llamafile allowed": {"auth": {"mode": "keys", "keys": KEYS},
                                "upstream": {"api_base": None, "allow_providers": ["llamafile"],
                                             "api_key": OPERATOR_KEY}},
    "passthrough, nothing configured": {"auth": {"mode": "passthrough"}, "upstream": {"api_base": None}},
}  # fmt: skip
_REQUESTS = re.compile(r"^memproxy_requests_total\{([^}]*)\} ([0-9.e+]+)$", re.MULTILINE)


@pytest.fixture(scope="module", params=list(CONFIGS))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """memproxy on 127.0.0.1:8080, as ``memproxy serve`` binds it by default."""
    config = CONFIGS[request.param]
    with loopback_only(), ExitStack() as stack, pytest.MonkeyPatch.context() as env:
        env.delenv("LLAMAFILE_API_BASE", raising=False)
        settings = proxy_settings(
            "http://127.0.0.1:9/v1", tmp_path_factory.mktemp("self-call"),
            server={"host": "127.0.0.1", "port": 8080}, **config,
        )  # fmt: skip
        protocol = capped_http_protocol(settings.server.max_header_bytes)
        background = BackgroundServer(create_app(settings), port=8080, http=protocol).start()
        stack.callback(background.stop)
        token = KEYS[0]["key"] if config["auth"]["mode"] == "keys" else CALLER_KEY
        yield background.url, token


def proxied_requests(url: str) -> float:
    """Requests memproxy has answered on the proxy surfaces (its ``/metrics``)."""
    text = http_get(url + "/metrics", timeout=10).text
    return sum(float(n) for labels, n in _REQUESTS.findall(text) if 'route="/v1/' in labels)


@pytest.mark.parametrize("surface", SURFACES)
def test_a_model_routed_to_memproxy_itself_is_refused_without_a_call(
    server: tuple[str, str], surface: str
) -> None:
    url, token = server
    before = proxied_requests(url)
    with http_client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        response = attack(http, surface, STACKED)
    message = assert_refused(response, surface)
    assert "itself" in message or "machine or network" in message, message
    # This request is counted once it is logged; a self-call would have been counted first.
    wait_until(lambda: proxied_requests(url) >= before + 1, timeout=10)
    assert proxied_requests(url) == before + 1
