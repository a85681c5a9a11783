"""Session-wide servers: the scripted upstream and memproxy, both on loopback.

``import litellm`` is slow, so each server starts once per session; tests choose
behaviour per request (model names, scope headers, tokens) instead of per server.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections.abc import Iterator

import pytest

from memproxy.testing.background_server import BackgroundServer
from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.support.proxy import KEYS, Proxy, proxy_settings, start_proxy


@pytest.fixture(scope="session")
def upstream() -> Iterator[tuple[ScriptedUpstream, str]]:
    fake = ScriptedUpstream()
    with BackgroundServer(fake.app) as server:
        yield fake, server.url + "/v1"


@pytest.fixture(scope="session")
def fake(upstream: tuple[ScriptedUpstream, str]) -> ScriptedUpstream:
    return upstream[0]


@pytest.fixture(scope="session")
def proxy(
    upstream: tuple[ScriptedUpstream, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    settings = proxy_settings(upstream[1], tmp_path_factory.mktemp("passthrough"))
    server, handle = start_proxy(settings)
    yield handle
    server.stop()


@pytest.fixture(scope="session")
def keys_proxy(
    upstream: tuple[ScriptedUpstream, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    settings = proxy_settings(
        upstream[1],
        tmp_path_factory.mktemp("keys"),
        auth={"mode": "keys", "keys": KEYS},
        upstream={"api_key": "sk-server-provider-key"},
    )
    server, handle = start_proxy(settings)
    yield handle
    server.stop()
