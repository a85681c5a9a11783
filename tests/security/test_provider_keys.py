"""Finding 1 (issue 24): the server's provider key went wherever the client's model prefix
pointed (``llamafile/x`` sent the operator's key to 127.0.0.1:8080, ``ollama/x`` to :11434, …)
on every surface.

Now routing is an allow-list (``Upstream.route``): with the server's credentials a request
reaches only ``upstream.api_base``, ``upstream.models`` aliases and ``upstream.allow_providers``;
a caller's own key reaches any provider except a local default the operator did not configure.
Every attack here is answered 400 before a byte leaves memproxy: the traps standing on the
local providers' default ports (and the fake provider) receive nothing. The servers run in
a loopback-only network namespace, so a public provider's host cannot be reached either.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from memproxy.testing.background_server import BackgroundServer
from memproxy.testing.scripted_upstream import ScriptedUpstream
from memproxy.upstream.egress import LOCAL_DEFAULTS
from memproxy.upstream.provider import import_litellm
from tests.security.routing import (
    CALLER_KEY,
    OPERATOR_KEY,
    assert_refused,
    attack,
    carried,
    fake_upstream,
    received,
)
from tests.security.sandbox import Trap, loopback_only
from tests.support.proxy import KEYS, Proxy, proxy_settings, start_proxy, stop_together

# Model → the port LiteLLM's default for its provider connects to (all on 127.0.0.1/localhost).
LOCAL = {
    "llamafile/x": 8080, "ollama/x": 11434, "ollama_chat/x": 11434, "lemonade/x": 8000,
    "xinference/x": 9997, "langgraph/x": 2024, "docker_model_runner/x": 22088, "langflow/x": 7860,
}  # fmt: skip
# Public providers: in the sandbox they are unreachable; the answer must still be a refusal.
PUBLIC = ["groq/x", "openrouter/x", "hosted_vllm/x", "together_ai/x", "mistral/x", "gpt-4o-mini"]
SURFACES = ["chat", "chat-stream", "responses", "responses-stream", "messages", "messages-stream",
            "completions", "completions-stream", "embeddings", "model"]  # fmt: skip
ENV_BASES = [name for _, names in LOCAL_DEFAULTS.values() for name in names] + ["HOSTED_VLLM_API_BASE"]


@dataclass
class World:
    traps: list[Trap]
    fake: ScriptedUpstream
    servers: dict[str, Proxy]

    def clear(self) -> None:
        for trap in self.traps:
            trap.clear()
        self.fake.requests.clear()

    def http(self, server: str) -> httpx.Client:
        token = KEYS[0]["key"] if server.startswith("keys") else CALLER_KEY
        return self.servers[server].http(token)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with loopback_only(), ExitStack() as stack, pytest.MonkeyPatch.context() as env:
        for name in ENV_BASES:  # LiteLLM's defaults, not an operator's choice, are under test
            env.delenv(name, raising=False)
        traps = [Trap(port, f"trap :{port}") for port in sorted(set(LOCAL.values()))]
        for trap in traps:
            stack.callback(trap.close)
        fake, fake_url = stack.enter_context(fake_upstream())
        aliases = [
            {"name": "smart", "litellm_params": {"model": "openai/aliased-model", "api_base": fake_url}},
            # A configured route to a local default: the control that the traps are live.
            {"name": "local-llamafile", "litellm_params": {"model": "llamafile/x"}},
        ]
        servers = {}
        started: list[BackgroundServer] = []
        stack.callback(stop_together, started)
        configs: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
            # allow_providers []: the strictest list, so even OpenAI's bare names must be refused.
            ("keys-fast", {"mode": "keys", "keys": KEYS}, {"api_key": OPERATOR_KEY, "allow_providers": []}),
            (
                "keys-litellm",
                {"mode": "keys", "keys": KEYS},
                {"api_key": OPERATOR_KEY, "fast_path": "off", "allow_providers": []},
            ),
            ("passthrough-fast", {"mode": "passthrough"}, {}),
            ("passthrough-litellm", {"mode": "passthrough"}, {"fast_path": "off"}),
        ]
        for name, auth, upstream in configs:
            # server.port 0: the in-process server's real port is a free one, never 8080 (the
            # llamafile trap's), so memproxy's own-address rule stays out of these tests.
            settings = proxy_settings(
                fake_url, tmp_path_factory.mktemp(name), auth=auth, server={"port": 0},
                upstream={"api_base": None, "models": aliases, **upstream},
            )  # fmt: skip
            server, handle = start_proxy(settings)
            started.append(server)
            servers[name] = handle
        yield World(traps, fake, servers)


@pytest.mark.parametrize("model", [*LOCAL, *PUBLIC])
@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("server", ["keys-fast", "keys-litellm"])
def test_the_servers_key_goes_to_no_provider_the_operator_did_not_configure(
    world: World, server: str, surface: str, model: str
) -> None:
    world.clear()
    with world.http(server) as http:
        response = attack(http, surface, model)
    message = assert_refused(response, surface)
    assert "not available" in message and OPERATOR_KEY not in message
    assert received(world.traps, world.fake) == []


@pytest.mark.parametrize("model", list(LOCAL))
@pytest.mark.parametrize("surface", [s for s in SURFACES if s != "model"])  # /models/{id} asks OpenAI
@pytest.mark.parametrize("server", ["passthrough-fast", "passthrough-litellm"])
def test_a_callers_own_key_goes_to_no_local_default_the_operator_did_not_configure(
    world: World, server: str, surface: str, model: str
) -> None:
    world.clear()
    with world.http(server) as http:
        response = attack(http, surface, model)
    assert "machine or network" in assert_refused(response, surface)
    assert received(world.traps, world.fake) == []


@pytest.mark.parametrize("server", ["keys-fast", "keys-litellm"])
def test_configured_routes_still_carry_the_servers_key(world: World, server: str) -> None:
    """The control: the refusals above are the allow-list's, not a dead trap's or server's."""
    world.clear()
    with world.http(server) as http:
        assert attack(http, "chat", "smart").status_code == 200
        assert world.fake.last_chat().headers["authorization"] == f"Bearer {OPERATOR_KEY}"
        attack(http, "chat", "local-llamafile")  # the trap's answer is no completion: any status
    llamafile = next(trap for trap in world.traps if trap.port == LOCAL["llamafile/x"])
    assert [s.path for s in llamafile.seen()] == ["/v1/chat/completions"]
    assert carried([llamafile], OPERATOR_KEY)


def test_a_callers_own_key_still_reaches_public_providers(world: World) -> None:
    """Passthrough keeps its freedom: not refused (the sandbox has no route out, hence 502)."""
    world.clear()
    with world.http("passthrough-fast") as http:
        response = attack(http, "chat", "groq/x")
    assert response.status_code == 502, response.text
    assert response.json()["error"]["code"] == "upstream_unavailable"
    assert received(world.traps, world.fake) == []


def test_every_local_default_litellm_knows_is_refused() -> None:
    """LiteLLM's source is the authority on its defaults: every provider whose code names a
    loopback URL is in ``egress.LOCAL_DEFAULTS`` (so a LiteLLM upgrade cannot add a hole)."""
    litellm = import_litellm()
    providers = {str(getattr(p, "value", p)) for p in litellm.provider_list}
    local_url = re.compile(r"https?://(localhost|127\.0\.0\.1|0\.0\.0\.0)[:/\"]")
    found = set()
    for source in (Path(litellm.__file__).parent / "llms").rglob("*.py"):
        provider = source.relative_to(Path(litellm.__file__).parent / "llms").parts[0]
        if provider in providers and local_url.search(source.read_text(errors="replace")):
            found.add(provider)
    assert found, "the scan found nothing: LiteLLM's layout changed"
    assert found - set(LOCAL_DEFAULTS) == set()
