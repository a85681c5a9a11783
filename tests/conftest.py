"""Session-wide servers: the scripted upstream and memproxy, both on loopback.

``import litellm`` is slow, so each server starts once per session; tests choose
behaviour per request (model names, scope headers, tokens) instead of per server.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections.abc import Iterator
from pathlib import Path

import pytest

from memproxy.config import Settings
from memproxy.testing.background_server import BackgroundServer
from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.support.postgres import PostgresServer, start_server
from tests.support.proxy import KEYS, Proxy, proxy_settings, start_proxy, stop_together
from tests.support.storage_env import Storage

# The Postgres variant of an engine-parametrized test is slow tier (CI runs every one): the quick
# tier runs on SQLite, but for one real-HTTP test on Postgres (tests/api/test_memories.py:
# forget leaves no trace), which keeps the Postgres store in the inner loop.
ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One Postgres server for the session (skips locally without one; fails in CI)."""
    yield from start_server()


@pytest.fixture(params=ENGINES)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    """A fresh, empty store location on each engine: a temp data dir, plus a new schema on Postgres."""
    if request.param == "sqlite":
        return Storage(tmp_path)
    server: PostgresServer = request.getfixturevalue("pg_server")
    return Storage(tmp_path, server.fresh_url())


@pytest.fixture(scope="session")
def upstream() -> Iterator[tuple[ScriptedUpstream, str]]:
    fake = ScriptedUpstream()
    with BackgroundServer(fake.app) as server:
        yield fake, server.url + "/v1"


@pytest.fixture(scope="session")
def fake(upstream: tuple[ScriptedUpstream, str]) -> ScriptedUpstream:
    return upstream[0]


@pytest.fixture(scope="session")
def session_servers(upstream: tuple[ScriptedUpstream, str]) -> Iterator[list[BackgroundServer]]:
    """The session's memproxy servers on SQLite, stopped together at the end (before the
    upstream they use): each stop takes uvicorn's ~0.2 s shutdown."""
    servers: list[BackgroundServer] = []
    yield servers
    stop_together(servers)


def session_proxy(servers: list[BackgroundServer], settings: Settings) -> Proxy:
    server, handle = start_proxy(settings)
    servers.append(server)
    return handle


@pytest.fixture(scope="session")
def sqlite_proxy(
    session_servers: list[BackgroundServer],
    upstream: tuple[ScriptedUpstream, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Proxy:
    return session_proxy(session_servers, proxy_settings(upstream[1], tmp_path_factory.mktemp("passthrough")))


@pytest.fixture(scope="session")
def proxy(sqlite_proxy: Proxy) -> Proxy:
    """The session's memproxy (passthrough auth, SQLite); see ``engine_proxy`` for both engines."""
    return sqlite_proxy


@pytest.fixture(scope="session")
def keys_proxy(fast_keys_proxy: Proxy) -> Proxy:
    """``auth.mode: keys`` (a suite may override ``keys_proxy``: this one stays reachable as
    ``fast_keys_proxy``)."""
    return fast_keys_proxy


@pytest.fixture(scope="session")
def fast_keys_proxy(
    session_servers: list[BackgroundServer],
    upstream: tuple[ScriptedUpstream, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Proxy:
    settings = proxy_settings(
        upstream[1],
        tmp_path_factory.mktemp("keys"),
        auth={"mode": "keys", "keys": KEYS},
        upstream={"api_key": "sk-server-provider-key"},
    )
    return session_proxy(session_servers, settings)


@pytest.fixture(scope="session")
def pg_proxy(
    upstream: tuple[ScriptedUpstream, str],
    tmp_path_factory: pytest.TempPathFactory,
    pg_server: PostgresServer,
) -> Iterator[Proxy]:
    """Like ``proxy``, with Postgres as its database."""
    settings = proxy_settings(
        upstream[1],
        tmp_path_factory.mktemp("pg-passthrough"),
        storage={"url": pg_server.fresh_url("proxy")},
    )
    server, handle = start_proxy(settings)
    yield handle
    server.stop()


@pytest.fixture(scope="session", params=ENGINES)
def engine_proxy(request: pytest.FixtureRequest) -> Proxy:
    """The session's ``proxy`` on each engine; suites that must hold on both use it as ``proxy``."""
    name = "sqlite_proxy" if request.param == "sqlite" else "pg_proxy"
    handle: Proxy = request.getfixturevalue(name)
    return handle


# The two upstream paths (``tests.support.paths.on_both_paths``): the default settings take
# the fast path (the fake is an OpenAI-compatible endpoint); ``fast_path: off`` takes LiteLLM.
@pytest.fixture(scope="session")
def fast_proxy(sqlite_proxy: Proxy) -> Proxy:
    return sqlite_proxy


@pytest.fixture(scope="session")
def litellm_proxy(
    session_servers: list[BackgroundServer],
    upstream: tuple[ScriptedUpstream, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Proxy:
    """``upstream.fast_path: off``: every chat request goes through LiteLLM."""
    settings = proxy_settings(upstream[1], tmp_path_factory.mktemp("litellm"), upstream={"fast_path": "off"})
    return session_proxy(session_servers, settings)


@pytest.fixture(scope="session")
def litellm_keys_proxy(
    session_servers: list[BackgroundServer],
    upstream: tuple[ScriptedUpstream, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Proxy:
    settings = proxy_settings(
        upstream[1],
        tmp_path_factory.mktemp("keys-litellm"),
        auth={"mode": "keys", "keys": KEYS},
        upstream={"api_key": "sk-server-provider-key", "fast_path": "off"},
    )
    return session_proxy(session_servers, settings)
